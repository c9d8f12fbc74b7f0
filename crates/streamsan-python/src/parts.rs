//! The strings and access lists of records already checked, for the C entry's next records to
//! fill instead of allocating.
//!
//! Why: an operator's launch record carries its kernel name, its call site and an argument
//! label per access, each an owned `String`, and two access lists: six or seven allocations
//! per operator, freed again once the record is checked. Records are made and dropped on the
//! program's thread (`checker.rs`, `spent`), so their parts can come back here instead (under
//! callgrind the C entry's launch call fell from 4,530 to 3,660 instructions per operator,
//! docs/performance.md).

use streamsan::trace::record::{Access, Op, Record};

/// At most this many strings and lists are kept (a burst of records beyond it is freed).
const KEPT: usize = 4096;
/// Strings and lists with more room than this are freed, not kept (a long label, a strided
/// view's thousands of accesses): the pool stays small.
const MAX_STRING: usize = 256;
const MAX_LIST: usize = 64;
/// The least room of a string made here.
const ROOM: usize = 48;

/// Parts of dropped records, emptied, with their capacity.
#[derive(Default)]
pub(crate) struct Parts {
    strings: Vec<String>,
    lists: Vec<Vec<Access>>,
}

impl Parts {
    /// Keeps the strings and lists of `rec`, which is done with.
    pub fn keep(&mut self, rec: Record) {
        let Record { at, name, op, .. } = rec;
        self.keep_string(at);
        self.keep_string(name);
        if let Op::Launch {
            reads,
            writes,
            atomics,
            ..
        } = op
        {
            for list in [reads, writes, atomics] {
                self.keep_list(list);
            }
        }
    }

    /// [`Parts::keep`] for each record of `records`, left empty.
    pub fn keep_all(&mut self, records: &mut Vec<Record>) {
        for rec in records.drain(..) {
            self.keep(rec);
        }
    }

    fn keep_string(&mut self, s: Option<String>) {
        if let Some(mut s) = s.filter(|s| (1..=MAX_STRING).contains(&s.capacity()))
            && self.strings.len() < KEPT
        {
            s.clear();
            self.strings.push(s);
        }
    }

    fn keep_list(&mut self, mut list: Vec<Access>) {
        if !(1..=MAX_LIST).contains(&list.capacity()) {
            return; // its labels go with it
        }
        for access in list.drain(..) {
            self.keep_string(access.arg);
        }
        if self.lists.len() < KEPT {
            self.lists.push(list);
        }
    }

    /// How many strings and lists are kept.
    #[cfg(test)]
    pub fn kept(&self) -> (usize, usize) {
        (self.strings.len(), self.lists.len())
    }

    /// An owned copy of `s`, in a kept string where there is one. Strings get room for
    /// [`ROOM`] bytes at least, so that any kept one can take most names, labels and sites.
    pub fn string(&mut self, s: &str) -> String {
        let mut out = self.strings.pop().unwrap_or_default();
        out.reserve(s.len().max(ROOM));
        out.push_str(s);
        out
    }

    /// An empty list with room for `n` accesses, a kept one where there is one.
    pub fn list(&mut self, n: usize) -> Vec<Access> {
        match self.lists.pop() {
            Some(mut kept) => {
                kept.reserve(n);
                kept
            }
            None => Vec::with_capacity(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamsan::trace::record::ByteRange;

    fn launch(name: &str, args: &[&str]) -> Record {
        let reads = args
            .iter()
            .map(|a| Access {
                buf: 1,
                range: Some(ByteRange { off: 0, len: 4 }),
                arg: Some(a.to_string()),
            })
            .collect();
        Record {
            line: 0,
            thread: 0,
            at: Some("x.py:1".into()),
            name: Some(name.into()),
            op: Op::Launch {
                stream: 0,
                reads,
                writes: Vec::new(),
                atomics: Vec::new(),
            },
        }
    }

    #[test]
    fn a_kept_string_comes_back_empty_and_holds_only_the_new_text() {
        let mut parts = Parts::default();
        parts.keep(launch("a_rather_long_kernel_name", &["self", "other"]));
        // at, name and two labels; the empty lists of writes and atomics are not kept.
        assert_eq!((parts.strings.len(), parts.lists.len()), (4, 1));
        let s = parts.string("out");
        assert_eq!(s, "out");
        assert!(s.capacity() >= "self".len());
        let list = parts.list(3);
        assert!(list.is_empty() && list.capacity() >= 3);
        // Nothing kept: plain allocations.
        let mut empty = Parts::default();
        assert_eq!(empty.string("x"), "x");
        assert!(empty.list(2).capacity() >= 2);
    }

    #[test]
    fn big_strings_and_lists_are_freed_not_kept() {
        let mut parts = Parts::default();
        let label = "x".repeat(MAX_STRING + 1);
        let args: Vec<&str> = std::iter::repeat_n("a", MAX_LIST + 1).collect();
        parts.keep(launch(&label, &args));
        // The call site alone: the name is too long, and the list goes with its labels.
        assert_eq!((parts.strings.len(), parts.lists.len()), (1, 0));
    }

    #[test]
    fn at_most_kept_strings_and_lists_are_kept() {
        let mut parts = Parts::default();
        let mut records: Vec<Record> = (0..KEPT).map(|_| launch("k", &["a"])).collect();
        parts.keep_all(&mut records);
        assert!(records.is_empty());
        assert_eq!((parts.strings.len(), parts.lists.len()), (KEPT, KEPT));
    }
}
