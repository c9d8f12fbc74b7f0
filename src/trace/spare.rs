//! The heap parts of records a reader has filled before, kept for the next ones: a reader that
//! fills the same records over and over ([`super::TraceReader::read_into`], as `check` does)
//! then allocates nothing per record in steady state. Allocating and freeing each record's
//! name and access lists was about a third of the parsing thread's time in `check`.

use super::record::{Access, Op, Record, StreamId};

/// At most this many strings are kept: enough for the records of a few calls, and a bound on
/// what a trace of odd records can leave behind.
const KEPT: usize = 64;
/// Access lists are kept while their room adds up to at most this many accesses (about
/// 900 KiB of accesses, plus the lists' own headers). A bound on room rather than on lists:
/// a reader filling launches in place takes lists only for a launch over another op and keeps
/// them only for another op over a launch, so the number kept wanders with the mix of a
/// batch's records (by hundreds, over `check`'s batches), and a low count would free and
/// allocate lists at its edges.
const KEPT_LIST_ROOM: usize = 16_384;
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
    /// The room of the kept lists, in accesses.
    list_room: usize,
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

    /// Makes `held` (the op of a record about to be overwritten) a launch on `on`, and gives
    /// its access lists, to be written over where they are ([`SpareParts::overwrite`]): a
    /// launch's own lists, so that a reader filling the same records with launches over and
    /// over moves no list; else kept ones (and `held`'s lists, a host function's or a host
    /// access's, are kept). A list with room for more than `KEPT_LIST_ACCESSES` is freed, as
    /// [`SpareParts::keep_list`] would.
    #[inline]
    pub(crate) fn make_launch<'op>(
        &mut self,
        held: &'op mut Op,
        on: StreamId,
    ) -> [&'op mut Vec<Access>; 3] {
        if !matches!(held, Op::Launch { .. }) {
            self.reclaim_lists(held);
            *held = Op::Launch {
                stream: on,
                reads: self.list(),
                writes: self.list(),
                atomics: Vec::new(),
            };
        }
        let Op::Launch {
            stream,
            reads,
            writes,
            atomics,
        } = held
        else {
            unreachable!("made a launch above")
        };
        *stream = on;
        for list in [&mut *reads, &mut *writes, &mut *atomics] {
            if list.capacity() > KEPT_LIST_ACCESSES {
                self.keep_list(std::mem::take(list));
            }
        }
        [reads, writes, atomics]
    }

    /// Writes `access` as the `at`th of `list`, which holds at least `at` accesses: over the
    /// one there (whose argument's name is kept), or after the last.
    #[inline(always)]
    pub(crate) fn overwrite(&mut self, list: &mut Vec<Access>, at: usize, access: Access) {
        debug_assert!(at <= list.len(), "writes {at} of a list of {}", list.len());
        match list.get_mut(at) {
            Some(old) => {
                if let Some(arg) = old.arg.take() {
                    self.keep_string(arg);
                }
                *old = access;
            }
            None => list.push(access),
        }
    }

    /// Shortens `list` to `len` accesses, keeping the argument names of those it drops.
    #[inline(always)]
    pub(crate) fn truncate(&mut self, list: &mut Vec<Access>, len: usize) {
        // In line only the test: most lists are written over with as many accesses.
        if list.len() > len {
            self.truncate_some(list, len);
        }
    }

    fn truncate_some(&mut self, list: &mut Vec<Access>, len: usize) {
        // `pop` rather than `drain`: `Drain`'s setup and guard cost more than this loop.
        while list.len() > len {
            if let Some(Access { arg: Some(arg), .. }) = list.pop() {
                self.keep_string(arg);
            }
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
        let list = self.lists.pop().unwrap_or_default();
        self.list_room -= list.capacity();
        list
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
        if self.list_room + list.capacity() <= KEPT_LIST_ROOM {
            self.list_room += list.capacity();
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
        // Every list (two per launch), but only `KEPT` strings.
        assert_eq!((spare.lists.len(), spare.strings.len()), (6 * KEPT, KEPT));
        // Lists are kept up to their room, however many that makes.
        let room = |spare: &SpareParts| spare.lists.iter().map(Vec::capacity).sum::<usize>();
        assert_eq!(spare.list_room, room(&spare));
        while spare.list_room + 64 <= KEPT_LIST_ROOM {
            spare.keep_list(Vec::with_capacity(64));
        }
        let (lists, full) = (spare.lists.len(), spare.list_room);
        spare.keep_list(Vec::with_capacity(64));
        assert_eq!(
            (spare.lists.len(), spare.list_room),
            (lists, full),
            "not kept"
        );
        assert_eq!(full, room(&spare));
        assert!(full <= KEPT_LIST_ROOM && full + 64 > KEPT_LIST_ROOM);
        let taken = spare.list();
        assert_eq!(spare.list_room, full - taken.capacity(), "room given back");
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

    /// A launch op as a record holds it before a line is read over it
    /// ([`SpareParts::make_launch`]'s `held`).
    fn launch_op(reads: Vec<Access>, writes: Vec<Access>) -> Op {
        Op::Launch {
            stream: 1,
            reads,
            writes,
            atomics: Vec::new(),
        }
    }

    fn named(buf: u64, arg: &str) -> Access {
        Access {
            buf,
            range: None,
            arg: Some(arg.into()),
        }
    }

    #[test]
    fn a_launch_is_written_over_a_launch_in_its_own_lists() {
        let mut spare = SpareParts::default();
        let mut held = launch_op(
            vec![Access::whole(1), named(2, "x")],
            vec![Access::whole(3)],
        );
        let Op::Launch { reads, .. } = &held else {
            unreachable!()
        };
        let reads_at = reads.as_ptr();
        let [reads, writes, atomics] = spare.make_launch(&mut held, 7);
        assert_eq!(reads.as_ptr(), reads_at, "the list is where it was");
        // Two reads written over two: the old argument's name is kept, nothing is dropped.
        spare.overwrite(reads, 0, Access::whole(4));
        spare.overwrite(reads, 1, Access::whole(5));
        spare.truncate(reads, 2);
        // One write over one, then a second after it.
        spare.overwrite(writes, 0, named(6, "y"));
        spare.overwrite(writes, 1, Access::whole(8));
        spare.truncate(writes, 2);
        spare.truncate(atomics, 0);
        assert_eq!(
            held,
            Op::Launch {
                stream: 7,
                reads: vec![Access::whole(4), Access::whole(5)],
                writes: vec![named(6, "y"), Access::whole(8)],
                atomics: Vec::new(),
            }
        );
        assert_eq!(spare.kept(), (1, 0), "the argument name `x`, no list");
        // Fewer accesses than the list held: the rest go, their names kept.
        let [reads, writes, _] = spare.make_launch(&mut held, 7);
        spare.truncate(reads, 0);
        spare.overwrite(writes, 0, Access::whole(9));
        spare.truncate(writes, 1);
        assert_eq!(
            held,
            Op::Launch {
                stream: 7,
                reads: Vec::new(),
                writes: vec![Access::whole(9)],
                atomics: Vec::new(),
            }
        );
        assert_eq!(spare.kept(), (2, 0), "and `y`");
    }

    #[test]
    fn a_launch_over_another_op_takes_kept_lists_and_keeps_the_ops() {
        let mut spare = SpareParts::default();
        let mut held = Op::HostAccess {
            reads: vec![named(1, "x")],
            writes: Vec::with_capacity(3),
        };
        let [reads, writes, atomics] = spare.make_launch(&mut held, 2);
        // The host access's two lists went to `spare`, and came back as the launch's.
        assert!(reads.is_empty() && writes.is_empty() && atomics.is_empty());
        assert_eq!(reads.capacity() + writes.capacity(), 1 + 3);
        assert_eq!(spare.kept(), (1, 0));
        // A list too long to keep is freed rather than written over.
        let mut held = launch_op(vec![Access::whole(1); KEPT_LIST_ACCESSES + 1], Vec::new());
        let [reads, ..] = spare.make_launch(&mut held, 2);
        assert_eq!((reads.len(), reads.capacity()), (0, 0));
    }
}
