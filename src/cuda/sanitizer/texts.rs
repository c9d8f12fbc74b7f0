//! A record's texts: its name from the step's [`Label`], its location as `file:line:col`,
//! written into strings that are reused from record to record. Used where a record is made
//! whole: by the calling thread for the trace (and inline checking), and by the checker thread.

use std::panic::Location;

use rustc_hash::FxHashMap;

use crate::cuda::step::Label;
use crate::trace::record::{Record, ThreadId};

/// Spare strings and the formatted call sites.
#[derive(Default)]
pub(super) struct Texts {
    /// Spare strings for `rec.name` and `rec.at` while those are `None`.
    spare_name: String,
    spare_at: String,
    /// `file:line:col` of every call site seen, by the address of its `Location`.
    pub(super) at_cache: FxHashMap<usize, Box<str>>,
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
        let at = at.map(|l| {
            &**self
                .at_cache
                .entry(l as *const Location<'static> as usize)
                .or_insert_with(|| {
                    format!("{}:{}:{}", clean_path(l.file()), l.line(), l.column()).into()
                })
        });
        set_text(&mut rec.at, &mut self.spare_at, at);
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
