//! The heap parts of records a reader has filled before, kept for the next ones: a reader that
//! fills the same records over and over ([`super::TraceReader::read_into`], as `check` does)
//! then allocates nothing per record in steady state. Allocating and freeing each record's
//! name and access lists was about a third of the parsing thread's time in `check`.

use super::record::{Access, Op, Record};

/// At most this many strings and this many access lists are kept: enough for the records of a
/// few calls, and a bound on what a trace of odd records can leave behind.
const KEPT: usize = 64;
/// A string longer than this is freed rather than kept (a call site is tens of bytes).
const KEPT_STRING_BYTES: usize = 4096;
/// A list with room for more accesses than this is freed rather than kept (a launch has a few),
/// so that one huge record does not hold its memory for the rest of the trace.
const KEPT_LIST_ACCESSES: usize = 1024;

/// Strings and access lists, empty, ready to be filled again.
#[derive(Debug, Default)]
pub(crate) struct SpareParts {
    strings: Vec<String>,
    lists: Vec<Vec<Access>>,
}

impl SpareParts {
    /// Takes `record`'s strings and access lists (those of a launch, a host function and a
    /// host access), leaving it without them, to be filled with the next record.
    pub(crate) fn reclaim(&mut self, record: &mut Record) {
        if let Some(name) = record.name.take() {
            self.keep_string(name);
        }
        if let Some(at) = record.at.take() {
            self.keep_string(at);
        }
        self.reclaim_lists(&mut record.op);
    }

    /// Takes the access lists of `op` (a launch's, a host function's, a host access's),
    /// leaving it without them.
    pub(crate) fn reclaim_lists(&mut self, op: &mut Op) {
        match op {
            Op::Launch {
                reads,
                writes,
                atomics,
                ..
            } => {
                self.keep_list(std::mem::take(reads));
                self.keep_list(std::mem::take(writes));
                self.keep_list(std::mem::take(atomics));
            }
            Op::HostFunc { reads, writes, .. } | Op::HostAccess { reads, writes } => {
                self.keep_list(std::mem::take(reads));
                self.keep_list(std::mem::take(writes));
            }
            _ => {}
        }
    }

    /// `text` in a kept string, or a new one.
    pub(crate) fn string(&mut self, text: &str) -> String {
        match self.strings.pop() {
            Some(mut kept) => {
                kept.push_str(text);
                kept
            }
            None => text.to_owned(),
        }
    }

    /// Sets `slot` to `text`: in the string it holds, or a kept one; a string it no longer
    /// needs is kept. (A reader filling the same record over and over then moves no string.)
    pub(crate) fn set_string(&mut self, slot: &mut Option<String>, text: Option<&str>) {
        match (slot.as_mut(), text) {
            // Only a string the pool would keep is filled again: a long one is freed, as
            // `keep_string` frees it, so one long name does not hold its memory for the rest
            // of the trace.
            (Some(s), Some(text)) if s.capacity() <= KEPT_STRING_BYTES => {
                s.clear();
                s.push_str(text);
            }
            (_, Some(text)) => *slot = Some(self.string(text)),
            (_, None) => {
                if let Some(old) = slot.take() {
                    self.keep_string(old);
                }
            }
        }
    }

    /// How many (strings, access lists) are kept.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> (usize, usize) {
        (self.strings.len(), self.lists.len())
    }

    /// An empty access list: a kept one, or a new one (which allocates on its first push).
    pub(crate) fn list(&mut self) -> Vec<Access> {
        self.lists.pop().unwrap_or_default()
    }

    fn keep_string(&mut self, mut text: String) {
        if self.strings.len() < KEPT && text.capacity() <= KEPT_STRING_BYTES {
            text.clear();
            self.strings.push(text);
        }
    }

    /// Keeps `list` and its accesses' argument names for the next records (within the bounds
    /// above).
    pub(crate) fn keep_list(&mut self, mut list: Vec<Access>) {
        if list.capacity() == 0 || list.capacity() > KEPT_LIST_ACCESSES {
            return;
        }
        // One pass: the argument names are kept as the accesses are dropped.
        for access in list.drain(..) {
            if let Some(arg) = access.arg {
                self.keep_string(arg);
            }
        }
        if self.lists.len() < KEPT {
            self.lists.push(list);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::record::ByteRange;

    fn launch() -> Record {
        Record {
            line: 9,
            thread: 2,
            at: Some("k.rs:1:2".into()),
            name: Some("kernel".into()),
            op: Op::Launch {
                stream: 1,
                reads: vec![Access::whole(4), Access::whole(5)],
                writes: vec![Access {
                    buf: 6,
                    range: Some(ByteRange { off: 0, len: 8 }),
                    arg: Some("out".into()),
                }],
                atomics: Vec::new(),
            },
        }
    }

    #[test]
    fn a_reclaimed_records_parts_come_back_empty_and_are_reused() {
        let mut spare = SpareParts::default();
        let mut record = launch();
        let Op::Launch { reads, .. } = &record.op else {
            unreachable!()
        };
        let reads_at = reads.as_ptr();
        spare.reclaim(&mut record);
        assert_eq!((record.name.as_deref(), record.at.as_deref()), (None, None));
        let Op::Launch {
            reads,
            writes,
            atomics,
            ..
        } = &record.op
        else {
            unreachable!()
        };
        assert!(reads.is_empty() && writes.is_empty() && atomics.is_empty());
        // Two lists (the empty atomics list owns nothing and is not kept); three strings
        // (the name, the call site, the argument's name).
        assert_eq!((spare.lists.len(), spare.strings.len()), (2, 3));
        // Last kept, first given: the reads list was kept first.
        let writes_list = spare.list();
        assert!(writes_list.is_empty() && writes_list.capacity() >= 1);
        let reads_list = spare.list();
        assert_eq!(reads_list.as_ptr(), reads_at);
        assert!(reads_list.is_empty());
        assert_eq!(spare.list().capacity(), 0, "none left: a new list");
        assert_eq!(spare.string("softmax"), "softmax");
        assert_eq!(spare.string(""), "");
    }

    #[test]
    fn a_string_is_set_where_it_is_and_kept_when_no_longer_needed() {
        let mut spare = SpareParts::default();
        let mut slot = Some(String::with_capacity(32));
        let at = slot.as_ref().map(|s| s.as_ptr());
        spare.set_string(&mut slot, Some("gemm"));
        assert_eq!(slot.as_deref(), Some("gemm"));
        assert_eq!(slot.as_ref().map(|s| s.as_ptr()), at, "filled in place");
        spare.set_string(&mut slot, None);
        assert_eq!((slot.as_deref(), spare.strings.len()), (None, 1));
        spare.set_string(&mut slot, Some("axpy"));
        assert_eq!(slot.as_deref(), Some("axpy"));
        assert_eq!(
            slot.as_ref().map(|s| s.as_ptr()),
            at,
            "the kept string again"
        );
        assert!(spare.strings.is_empty());
        spare.set_string(&mut slot, Some(""));
        assert_eq!(slot.as_deref(), Some(""));
        // A long string is not filled again, but replaced, and the long one freed.
        let mut long = Some("x".repeat(KEPT_STRING_BYTES + 1));
        spare.set_string(&mut long, Some("k"));
        assert_eq!(long.as_deref(), Some("k"));
        assert!(long.is_some_and(|s| s.capacity() <= KEPT_STRING_BYTES));
    }

    #[test]
    fn what_is_kept_is_bounded() {
        let mut spare = SpareParts::default();
        for _ in 0..3 * KEPT {
            spare.reclaim(&mut launch());
        }
        assert_eq!((spare.lists.len(), spare.strings.len()), (KEPT, KEPT));
        let mut long = launch();
        long.name = Some("x".repeat(KEPT_STRING_BYTES + 1));
        let Op::Launch { reads, .. } = &mut long.op else {
            unreachable!()
        };
        reads.resize(KEPT_LIST_ACCESSES + 1, Access::whole(1));
        let mut spare = SpareParts::default();
        spare.reclaim(&mut long);
        assert_eq!(spare.lists.len(), 1, "the writes, not the long reads");
        assert!(spare.lists[0].capacity() <= KEPT_LIST_ACCESSES);
        assert!(
            spare
                .strings
                .iter()
                .all(|s| s.capacity() <= KEPT_STRING_BYTES)
        );
        assert_eq!(
            spare.strings.len(),
            2,
            "the call site and the argument's name"
        );
    }
}
