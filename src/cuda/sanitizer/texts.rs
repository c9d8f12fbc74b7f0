//! A record's texts: its name from the step's [`Label`], its location as `file:line:col`,
//! written into strings that are reused from record to record. Used where a record is made
//! whole: by the calling thread for inline checking, and by the checker thread for the records
//! whose texts the engine reads; a trace line is written from the same parts without them.

use std::panic::Location;

use rustc_hash::FxHashMap;

use crate::cuda::step::Label;
use crate::trace::record::{Op, Record, ThreadId};
#[cfg(doc)]
use crate::trace::writer::encode;
use crate::trace::writer::{AtText, LineBuf, json_string};

/// Spare strings and the formatted call sites.
#[derive(Default)]
pub(super) struct Texts {
    /// Spare strings for `rec.name` and `rec.at` while those are `None`.
    spare_name: String,
    spare_at: String,
    /// Every call site seen, by the address of its `Location`.
    pub(super) sites: Sites,
}

/// The call sites seen, and the last one found: a call's records share their site.
#[derive(Default)]
pub(super) struct Sites {
    /// Index into `list` by the address of a `Location`.
    index: FxHashMap<usize, usize>,
    list: Vec<Site>,
    /// The address and index of the last site found.
    last: (usize, usize),
}

impl Sites {
    fn get(&mut self, l: &'static Location<'static>) -> &Site {
        let key = l as *const Location<'static> as usize;
        if self.last.0 != key {
            let list = &mut self.list;
            let i = *self.index.entry(key).or_insert_with(|| {
                list.push(Site::of(l));
                list.len() - 1
            });
            self.last = (key, i);
        }
        &self.list[self.last.1]
    }

    /// How many call sites are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.list.len()
    }
}

/// A call site's `file:line:col`, as text and as a JSON string for trace lines.
pub(super) struct Site {
    text: Box<str>,
    json: Box<[u8]>,
}

impl Site {
    fn of(l: &'static Location<'static>) -> Site {
        let text = format!("{}:{}:{}", clean_path(l.file()), l.line(), l.column());
        Site {
            json: json_string(&text).into(),
            text: text.into(),
        }
    }
}

impl Texts {
    /// Sets `rec`'s line, thread, name and location.
    pub(super) fn fill(
        &mut self,
        rec: &mut Record,
        line: u64,
        thread: ThreadId,
        name: &Label,
        at: Option<&'static Location<'static>>,
    ) {
        rec.line = line;
        rec.thread = thread;
        set_label(&mut rec.name, &mut self.spare_name, name);
        let at = at.map(|l| &*self.sites.get(l).text);
        set_text(&mut rec.at, &mut self.spare_at, at);
    }

    /// Sets `rec`'s line and thread, and no name or location: for a record whose reader does
    /// not read them ([`crate::engine::Engine::reads_texts`]), such as cudarc's waits and
    /// records of events, most of the records a tracked launch makes.
    pub(super) fn fill_bare(&mut self, rec: &mut Record, line: u64, thread: ThreadId) {
        rec.line = line;
        rec.thread = thread;
        set_text(&mut rec.name, &mut self.spare_name, None);
        set_text(&mut rec.at, &mut self.spare_at, None);
    }

    /// Appends the trace line of a record made of these parts, as [`encode`] writes the
    /// record [`Texts::fill`] makes of them, without making it: the name is written from the
    /// label and the call site's JSON string is kept.
    pub(super) fn encode(
        &mut self,
        op: &Op,
        name: &Label,
        thread: ThreadId,
        at: Option<&'static Location<'static>>,
        out: &mut LineBuf,
    ) -> std::io::Result<()> {
        let at = match at {
            Some(l) => AtText::Json(&self.sites.get(l).json),
            None => AtText::None,
        };
        out.push(op, name.as_name(), thread, at)
    }
}

/// Sets `slot` to `text`, reusing the string in `slot` or `spare`.
fn set_text(slot: &mut Option<String>, spare: &mut String, text: Option<&str>) {
    let mut s = slot.take().unwrap_or_else(|| std::mem::take(spare));
    match text {
        Some(text) => {
            s.clear();
            s.push_str(text);
            *slot = Some(s);
        }
        None => *spare = s,
    }
}

/// Sets `slot` to `label`, reusing the string in `slot` or `spare`.
fn set_label(slot: &mut Option<String>, spare: &mut String, label: &Label) {
    let mut s = slot.take().unwrap_or_else(|| std::mem::take(spare));
    if label.write_into(&mut s) {
        *slot = Some(s);
    } else {
        *spare = s;
    }
}

/// `file` with `dir/..` pairs taken out: a module compiled in through `#[path = "../x.rs"]`
/// is named `tests/../x.rs` by rustc, and reports should say `x.rs`.
fn clean_path(file: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in file.split('/') {
        match part {
            ".." if parts.last().is_some_and(|p| *p != ".." && !p.is_empty()) => {
                parts.pop();
            }
            "." if !parts.is_empty() => {}
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

#[cfg(test)]
#[test]
fn paths_are_cleaned_lexically() {
    assert_eq!(clean_path("tests/../examples/a.rs"), "examples/a.rs");
    assert_eq!(clean_path("src/./lib.rs"), "src/lib.rs");
    assert_eq!(clean_path("../up/a.rs"), "../up/a.rs");
    assert_eq!(clean_path("/abs/x/../y.rs"), "/abs/y.rs");
    assert_eq!(clean_path("a.rs"), "a.rs");
}
