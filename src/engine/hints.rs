//! Record hints: `check`'s parsing thread recognizes a record whose name, location, op and
//! thread are those of an earlier one, and tells the engine's thread so with a number, which
//! then neither hashes nor compares the record's strings to find what it made of them
//! ([`super::recent`]). Looking a record up took about a tenth of the engine's time; the
//! parsing thread, which waits on the engine, has that time to spare.
//!
//! A hint names one content (name, location, op, thread) for good: [`RecordHints`] numbers
//! each content it puts in a slot with a new generation, so two records with the same hint
//! have the same content, and the engine may reuse what it made of the first for the second.
//! Hints from two `RecordHints` must not reach one engine.

use super::recent::{SLOTS, hash_of};
use crate::trace::record::{OpKind, Record, ThreadId};

/// A record's hint: its content's generation, and the slot it sits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct RecordHint(u64);

impl RecordHint {
    /// The slot of the engine's cache of hinted records that holds this content.
    pub(super) fn slot(self) -> usize {
        (self.0 % SLOTS as u64) as usize
    }

    /// The hint as one number: equal for equal hints, and never 0.
    pub(super) fn id(self) -> u64 {
        self.0
    }
}

/// What a slot holds: the last content hashed to it, and its generation.
#[derive(Debug, Default)]
struct Seen {
    hash: u64,
    name: Option<String>,
    at: Option<String>,
    op: Option<OpKind>,
    thread: ThreadId,
    generation: u64,
}

/// The parsing thread's side: the contents of recent records, by the slot of their hash.
#[derive(Debug)]
pub(crate) struct RecordHints {
    slots: Box<[Seen]>,
    /// The last generation given.
    generation: u64,
}

impl Default for RecordHints {
    fn default() -> Self {
        RecordHints {
            slots: (0..SLOTS).map(|_| Seen::default()).collect(),
            generation: 0,
        }
    }
}

impl RecordHints {
    /// The hint of `record`: `None` for a record whose name the engine does not look up (one
    /// that accesses no memory).
    pub(crate) fn hint(&mut self, record: &Record) -> Option<RecordHint> {
        let op = record.op.kind();
        if !op.accesses_memory() {
            return None;
        }
        let (hash, slot) = hash_of(record, op);
        let seen = &mut self.slots[slot];
        let same = seen.hash == hash
            && seen.op == Some(op)
            && seen.thread == record.thread
            && seen.name == record.name
            && seen.at == record.at;
        if !same {
            self.generation += 1;
            seen.hash = hash;
            seen.op = Some(op);
            seen.thread = record.thread;
            seen.name.clone_from(&record.name);
            seen.at.clone_from(&record.at);
            seen.generation = self.generation;
        }
        Some(RecordHint(seen.generation * SLOTS as u64 + slot as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::tests_prefetch::alloc;
    use crate::engine::{Engine, Finding};
    use crate::trace::record::{Access, Op, StreamFlags, StreamKind};

    fn launch(name: &str, at: Option<&str>, thread: ThreadId) -> Record {
        Record {
            line: 0,
            thread,
            at: at.map(str::to_owned),
            name: Some(name.into()),
            op: Op::Launch {
                stream: 0,
                reads: vec![Access::whole(1)],
                writes: Vec::new(),
                atomics: Vec::new(),
            },
        }
    }

    #[test]
    fn equal_contents_share_a_hint_and_different_ones_never_do() {
        let mut hints = RecordHints::default();
        let a = hints.hint(&launch("a", None, 0)).unwrap();
        assert_eq!(hints.hint(&launch("a", None, 0)), Some(a));
        let others = [
            launch("b", None, 0),
            launch("a", Some("x.rs:1:1"), 0),
            launch("a", None, 1),
            Record {
                op: Op::HostAccess {
                    reads: Vec::new(),
                    writes: Vec::new(),
                },
                ..launch("a", None, 0)
            },
        ];
        for other in &others {
            assert_ne!(hints.hint(other), Some(a), "{other:?}");
        }
        // Enough names to evict every slot: a content seen again after its slot held another
        // gets a new hint, never one given to something else.
        let mut given = std::collections::HashMap::new();
        for round in 0..3 {
            for i in 0..4 * SLOTS {
                let record = launch(&format!("k{}", i % (2 * SLOTS)), None, round % 2);
                let hint = hints.hint(&record).unwrap();
                assert_ne!(hint.id(), 0);
                let content = (record.name.clone(), record.thread);
                if let Some(earlier) = given.insert(hint, content.clone()) {
                    assert_eq!(earlier, content, "one hint, one content");
                }
            }
        }
        let wait = Record {
            op: Op::Wait {
                stream: 0,
                event: 0,
            },
            ..launch("a", None, 0)
        };
        assert_eq!(hints.hint(&wait), None, "no memory accessed, no lookup");
    }

    /// Races between two streams by kernels of many names, places and threads, far more
    /// contents than slots, each seen again after others took its slot: applied with hints,
    /// the findings (and the names and places their sites resolve to) are those found without.
    #[test]
    fn an_engine_given_hints_finds_what_it_finds_without() {
        let streams = [1, 2].map(|id| Op::Stream {
            id,
            device: 0,
            kind: StreamKind::Created,
            flags: StreamFlags::NonBlocking,
        });
        let mut records: Vec<Record> = streams
            .into_iter()
            .chain((0..64).map(alloc))
            .map(|op| Record {
                op,
                ..Record::default()
            })
            .collect();
        for i in 0..3 * SLOTS as u64 {
            let stream = 1 + i % 2;
            let name = format!("k{}", (i * 7) % (2 * SLOTS as u64));
            let at = (i % 3 == 0).then(|| format!("src/{}.rs:1:1", i % 5));
            let mut r = launch(&name, at.as_deref(), i % 4);
            r.op = Op::Launch {
                stream,
                reads: vec![Access::whole(i % 64)],
                writes: vec![Access::whole((i * 5 + 1) % 64)],
                atomics: Vec::new(),
            };
            records.push(r);
        }
        for (i, r) in records.iter_mut().enumerate() {
            r.line = i as u64 + 2;
        }
        let findings = |hinted: bool| {
            let (mut engine, mut hints) = (Engine::new(), RecordHints::default());
            let mut found: Vec<Finding> = Vec::new();
            for r in &records {
                let hint = hinted.then(|| hints.hint(r)).flatten();
                engine
                    .apply_hinted(r, hint, &mut |f| found.push(f))
                    .expect("a valid trace");
            }
            engine.finish(&mut |f| found.push(f));
            let hits = engine.recent.hinted_in_use();
            (found, hits)
        };
        let (without, none) = findings(false);
        let (with, hinted) = findings(true);
        assert_eq!(none, 0);
        assert!(
            hinted > SLOTS / 2,
            "the engine's hinted slots are in use: {hinted}"
        );
        let races = without
            .iter()
            .filter(|f| matches!(f, Finding::Race(_)))
            .count();
        assert!(races > 100, "{races} races");
        assert_eq!(with, without);
    }

    /// A record whose hint the engine has seen is not looked up: given (wrongly, as no
    /// `RecordHints` would) the hint of another record, it takes that record's name.
    #[test]
    fn a_hint_seen_before_spares_the_lookup() {
        let (mut engine, mut hints) = (Engine::new(), RecordHints::default());
        let mut record = launch("first", None, 0);
        engine
            .apply(
                &Record {
                    op: alloc(1),
                    ..Record::default()
                },
                &mut |_| {},
            )
            .expect("an alloc");
        let hint = hints.hint(&record);
        engine
            .apply_hinted(&record, hint, &mut |_| {})
            .expect("a launch");
        let first = engine.current.name;
        record.name = Some("second".into());
        engine
            .apply_hinted(&record, hint, &mut |_| {})
            .expect("a launch");
        assert_eq!(engine.current.name, first, "the hinted path");
        engine
            .apply_hinted(&record, hints.hint(&record), &mut |_| {})
            .expect("a launch");
        assert_ne!(engine.current.name, first, "its own hint: looked up");
    }
}
