//! Engine unit tests: small programs built in code. The rule-by-rule racy/fixed pairs with
//! their documentation citations live in `tests/corpus/`; these pin the mechanics.

use super::*;
use crate::trace::record::Pool;
use crate::trace::record::{Access, MemSpace, Op, OpKind, Record, StreamFlags, StreamKind};

/// Builds a trace record by record, numbering lines from 2 as a trace file would.
#[derive(Default)]
struct Prog {
    records: Vec<Record>,
    thread: u64,
}

impl Prog {
    fn push(&mut self, op: Op, name: Option<&str>) -> u64 {
        let line = self.records.len() as u64 + 2;
        self.records.push(Record {
            line,
            thread: self.thread,
            at: None,
            name: name.map(str::to_string),
            op,
        });
        line
    }
    fn on_thread(&mut self, t: u64) -> &mut Self {
        self.thread = t;
        self
    }
    fn stream(&mut self, id: u64, kind: StreamKind, flags: StreamFlags) -> u64 {
        self.push(
            Op::Stream {
                id,
                device: 0,
                kind,
                flags,
            },
            None,
        )
    }
    fn created(&mut self, id: u64, flags: StreamFlags) -> u64 {
        self.stream(id, StreamKind::Created, flags)
    }
    fn event(&mut self, id: u64) -> u64 {
        self.push(Op::Event { id }, None)
    }
    fn alloc(&mut self, buf: u64, bytes: u64, space: MemSpace) -> u64 {
        self.push(
            Op::Alloc {
                buf,
                bytes,
                device: 0,
                space,
                stream: None,
                addr: None,
                pool: Pool::Driver,
            },
            None,
        )
    }
    fn alloc_async(&mut self, buf: u64, bytes: u64, stream: u64) -> u64 {
        self.push(
            Op::Alloc {
                buf,
                bytes,
                device: 0,
                space: MemSpace::Device,
                stream: Some(stream),
                addr: None,
                pool: Pool::Driver,
            },
            None,
        )
    }
    fn free(&mut self, buf: u64, stream: Option<u64>) -> u64 {
        self.push(Op::Free { buf, stream }, None)
    }
    fn launch(&mut self, stream: u64, name: &str, reads: &[Access], writes: &[Access]) -> u64 {
        self.push(
            Op::Launch {
                stream,
                reads: reads.to_vec(),
                writes: writes.to_vec(),
                atomics: Vec::new(),
            },
            Some(name),
        )
    }
    fn memcpy(&mut self, stream: u64, src: Access, dst: Access, blocking: bool) -> u64 {
        self.push(
            Op::Memcpy {
                stream,
                src,
                dst,
                blocking,
            },
            None,
        )
    }
    fn host(&mut self, reads: &[Access], writes: &[Access]) -> u64 {
        self.push(
            Op::HostAccess {
                reads: reads.to_vec(),
                writes: writes.to_vec(),
            },
            None,
        )
    }
    fn record(&mut self, event: u64, stream: u64) -> u64 {
        self.push(Op::Record { event, stream }, None)
    }
    fn wait(&mut self, stream: u64, event: u64) -> u64 {
        self.push(Op::Wait { stream, event }, None)
    }
    fn sync(&mut self, stream: u64) -> u64 {
        self.push(Op::StreamSync { stream }, None)
    }
    fn check(&self) -> Vec<Finding> {
        Engine::check_all(&self.records).expect("valid trace")
    }
    /// (current line, previous line, kind) of every race.
    fn races(&self) -> Vec<(u64, u64, RaceKind)> {
        self.check()
            .into_iter()
            .filter_map(|f| match f {
                Finding::Race(r) => Some((r.current.line, r.previous.line, r.kind)),
                _ => None,
            })
            .collect()
    }
    fn warnings(&self) -> Vec<WarningKind> {
        self.check()
            .into_iter()
            .filter_map(|f| match f {
                Finding::Warning(w) => Some(w.kind()),
                _ => None,
            })
            .collect()
    }
}

fn b(buf: u64) -> Access {
    Access::whole(buf)
}

/// randn on the legacy stream, sum on a non-blocking side stream: the motivating bug.
fn sum_before_randn(fixed: bool) -> (Prog, u64, u64) {
    let mut p = Prog::default();
    p.created(1, StreamFlags::NonBlocking);
    p.event(1);
    p.alloc(1, 4096, MemSpace::Device);
    p.alloc(2, 4, MemSpace::Device);
    let randn = p.launch(0, "randn", &[], &[b(1)]);
    if fixed {
        p.record(1, 0);
        p.wait(1, 1);
    }
    let sum = p.launch(1, "sum", &[b(1).arg("x")], &[b(2)]);
    p.sync(1);
    p.sync(0);
    p.free(1, None);
    p.free(2, None);
    (p, randn, sum)
}

#[test]
fn sum_before_randn_races_and_its_fix_does_not() {
    let (p, randn, sum) = sum_before_randn(false);
    assert_eq!(p.races(), vec![(sum, randn, RaceKind::ReadAfterWrite)]);
    let (p, _, _) = sum_before_randn(true);
    assert_eq!(p.races(), vec![]);
}

#[test]
fn the_race_carries_resolved_sites_and_buffer() {
    let (p, _, sum) = sum_before_randn(false);
    let Finding::Race(r) = p.check().remove(0) else {
        panic!("expected a race first")
    };
    assert_eq!(r.range, (0, 4096));
    assert_eq!(r.current.name.as_deref(), Some("sum"));
    assert_eq!(r.current.arg.as_deref(), Some("x"));
    assert_eq!(r.current.line, sum);
    assert_eq!(r.current.stream.as_ref().map(|s| s.ordinal), Some(1));
    assert_eq!(
        r.previous.stream.as_ref().map(|s| s.kind),
        Some(StreamKind::LegacyDefault)
    );
    assert_eq!(r.buffer.ordinal, 1);
    assert_eq!(r.buffer.alloc_line, 4);
    assert_eq!(
        r.why,
        Unordered::NeverSynchronized,
        "the side stream never synchronized with stream 0"
    );
}

#[test]
fn last_sync_names_the_wait_that_covered_older_work() {
    let mut p = Prog::default();
    p.created(1, StreamFlags::NonBlocking);
    p.created(2, StreamFlags::NonBlocking);
    p.event(1);
    p.alloc(1, 16, MemSpace::Device);
    p.launch(1, "a", &[], &[b(1)]);
    p.record(1, 1);
    let wait = p.wait(2, 1);
    let again = p.launch(1, "b", &[], &[b(1)]);
    let read = p.launch(2, "c", &[b(1)], &[]);
    let findings = p.check();
    let Finding::Race(r) = &findings[0] else {
        panic!("expected a race")
    };
    assert_eq!((r.current.line, r.previous.line), (read, again));
    assert_eq!(
        r.why,
        Unordered::SyncBefore(LastSync {
            line: wait,
            op: OpKind::Wait
        })
    );
}

#[test]
fn rerecord_after_wait_does_not_cover_later_work() {
    let mut p = Prog::default();
    p.created(1, StreamFlags::NonBlocking);
    p.created(2, StreamFlags::NonBlocking);
    p.event(1);
    p.alloc(1, 16, MemSpace::Device);
    p.record(1, 1);
    p.wait(2, 1);
    let w = p.launch(1, "w", &[], &[b(1)]);
    p.record(1, 1);
    let r = p.launch(2, "r", &[b(1)], &[]);
    assert_eq!(p.races(), vec![(r, w, RaceKind::ReadAfterWrite)]);
}

#[test]
fn waiting_on_an_unrecorded_event_warns_and_orders_nothing() {
    let mut p = Prog::default();
    p.created(1, StreamFlags::NonBlocking);
    p.event(1);
    p.alloc(1, 16, MemSpace::Device);
    let w = p.launch(0, "w", &[], &[b(1)]);
    p.wait(1, 1);
    let r = p.launch(1, "r", &[b(1)], &[]);
    assert_eq!(p.races(), vec![(r, w, RaceKind::ReadAfterWrite)]);
    assert!(p.warnings().contains(&WarningKind::UnrecordedEvent));
}

#[test]
fn legacy_stream_orders_blocking_streams_but_not_non_blocking_ones() {
    for (flags, racy) in [
        (StreamFlags::Blocking, false),
        (StreamFlags::NonBlocking, true),
    ] {
        let mut p = Prog::default();
        p.created(1, flags);
        p.alloc(1, 16, MemSpace::Device);
        let w = p.launch(1, "w", &[], &[b(1)]);
        let r = p.launch(0, "r", &[b(1)], &[]);
        let w2 = p.launch(1, "w2", &[], &[b(1)]);
        let expected = if racy {
            vec![
                (r, w, RaceKind::ReadAfterWrite),
                (w2, r, RaceKind::WriteAfterRead),
            ]
        } else {
            vec![]
        };
        assert_eq!(p.races(), expected, "{flags:?}");
    }
}

#[test]
fn syncing_the_legacy_stream_covers_blocking_streams() {
    let mut p = Prog::default();
    p.created(1, StreamFlags::Blocking);
    p.created(2, StreamFlags::NonBlocking);
    p.alloc(1, 16, MemSpace::Pinned);
    p.alloc(2, 16, MemSpace::Pinned);
    p.launch(1, "w1", &[], &[b(1)]);
    let w2 = p.launch(2, "w2", &[], &[b(2)]);
    p.sync(0);
    p.host(&[b(1)], &[]);
    let h = p.host(&[b(2)], &[]);
    assert_eq!(p.races(), vec![(h, w2, RaceKind::ReadAfterWrite)]);
}

#[test]
fn host_reading_pinned_memory_after_async_copy_needs_a_sync() {
    for synced in [false, true] {
        let mut p = Prog::default();
        p.created(1, StreamFlags::NonBlocking);
        p.alloc(1, 64, MemSpace::Device);
        p.alloc(2, 64, MemSpace::Pinned);
        p.launch(1, "k", &[], &[b(1)]);
        let copy = p.memcpy(1, b(1), b(2), false);
        if synced {
            p.sync(1);
        }
        let read = p.host(&[b(2)], &[]);
        let expected = if synced {
            vec![]
        } else {
            vec![(read, copy, RaceKind::ReadAfterWrite)]
        };
        assert_eq!(p.races(), expected);
    }
}

#[test]
fn synchronous_device_to_host_copy_joins_the_host() {
    let mut p = Prog::default();
    p.created(1, StreamFlags::NonBlocking);
    p.alloc(1, 64, MemSpace::Device);
    p.alloc(2, 64, MemSpace::Pinned);
    p.memcpy(1, b(1), b(2), true);
    p.host(&[b(2)], &[]);
    assert_eq!(p.races(), vec![]);
}

#[test]
fn pageable_synchronous_upload_leaves_the_device_write_unordered() {
    let mut p = Prog::default();
    p.created(1, StreamFlags::NonBlocking);
    p.created(2, StreamFlags::NonBlocking);
    p.alloc(1, 64, MemSpace::Host);
    p.alloc(2, 64, MemSpace::Device);
    let up = p.memcpy(1, b(1), b(2), true);
    // The host may reuse the source at once ...
    p.host(&[], &[b(1)]);
    // ... but another stream reading the destination is not ordered after the upload.
    let r = p.launch(2, "r", &[b(2)], &[]);
    assert_eq!(p.races(), vec![(r, up, RaceKind::ReadAfterWrite)]);
}

#[test]
fn disjoint_views_do_not_race_and_overlapping_ones_do() {
    let mut p = Prog::default();
    p.created(1, StreamFlags::NonBlocking);
    p.alloc(1, 100, MemSpace::Device);
    p.launch(0, "lo", &[], &[Access::bytes(1, 0, 50)]);
    p.launch(1, "hi", &[], &[Access::bytes(1, 50, 50)]);
    assert_eq!(p.races(), vec![]);
    let mid = p.launch(1, "mid", &[Access::bytes(1, 40, 20)], &[]);
    let findings = p.check();
    let Finding::Race(r) = &findings[0] else {
        panic!()
    };
    assert_eq!(r.current.line, mid);
    assert_eq!(r.range, (40, 50));
    assert_eq!(p.races().len(), 1);
}

#[test]
fn free_while_in_use_and_use_after_free() {
    let mut p = Prog::default();
    p.created(1, StreamFlags::NonBlocking);
    p.alloc(1, 16, MemSpace::Device);
    let k = p.launch(1, "k", &[b(1)], &[]);
    let f = p.free(1, None);
    let late = p.launch(1, "late", &[b(1)], &[]);
    assert_eq!(
        p.races(),
        vec![
            (f, k, RaceKind::FreeWhileInUse),
            (late, f, RaceKind::UseAfterFree)
        ]
    );
}

#[test]
fn stream_ordered_allocation_must_be_ordered_before_use_elsewhere() {
    let mut p = Prog::default();
    p.created(1, StreamFlags::NonBlocking);
    p.created(2, StreamFlags::NonBlocking);
    p.event(1);
    let a = p.alloc_async(1, 16, 1);
    let r = p.launch(2, "r", &[b(1)], &[]);
    assert_eq!(p.races(), vec![(r, a, RaceKind::ReadAfterWrite)]);

    let mut p = Prog::default();
    p.created(1, StreamFlags::NonBlocking);
    p.created(2, StreamFlags::NonBlocking);
    p.event(1);
    p.alloc_async(1, 16, 1);
    p.record(1, 1);
    p.wait(2, 1);
    p.launch(2, "r", &[b(1)], &[]);
    p.free(1, Some(2));
    assert_eq!(p.races(), vec![]);
}

#[test]
fn host_threads_learn_only_from_their_own_syncs() {
    let mut p = Prog::default();
    p.created(1, StreamFlags::NonBlocking);
    p.alloc(1, 16, MemSpace::Pinned);
    let w = p.launch(1, "w", &[], &[b(1)]);
    p.sync(1);
    p.host(&[b(1)], &[]);
    p.on_thread(1);
    let other = p.host(&[b(1)], &[]);
    assert_eq!(p.races(), vec![(other, w, RaceKind::ReadAfterWrite)]);
}

#[test]
fn ids_can_be_reused_after_their_object_ends() {
    let mut p = Prog::default();
    p.event(1);
    p.push(Op::EventDestroy { id: 1 }, None);
    p.event(1);
    p.alloc(1, 8, MemSpace::Device);
    p.free(1, None);
    p.alloc(1, 8, MemSpace::Device);
    p.launch(0, "k", &[b(1)], &[]);
    p.sync(0);
    p.free(1, None);
    assert_eq!(p.races(), vec![]);
    assert_eq!(p.warnings(), vec![]);
}

#[test]
fn leaked_buffers_are_one_warning() {
    let mut p = Prog::default();
    p.alloc(1, 8, MemSpace::Device);
    p.alloc(2, 8, MemSpace::Device);
    p.alloc(3, 8, MemSpace::Host); // ordinary host memory: CUDA does not own its lifetime
    p.alloc(4, 8, MemSpace::Pinned);
    let findings = p.check();
    let w: Vec<_> = findings.iter().filter_map(Finding::as_warning).collect();
    assert_eq!(w.len(), 1);
    let WarningFact::Leak { first, count } = &w[0].fact else {
        panic!("expected a leak, got {:?}", w[0]);
    };
    assert_eq!(*count, 3);
    assert_eq!(
        first.iter().map(|b| b.ordinal).collect::<Vec<_>>(),
        [1, 2, 4]
    );
    assert_eq!(w[0].line, 2, "the first leaked buffer's allocation");
}

#[test]
fn input_errors_name_the_line() {
    let cases: Vec<(Vec<Op>, InputErrorKind)> = vec![
        (
            vec![Op::StreamSync { stream: 9 }],
            InputErrorKind::UndeclaredStream(9),
        ),
        (
            vec![Op::Wait {
                stream: 0,
                event: 3,
            }],
            InputErrorKind::UndeclaredEvent(3),
        ),
        (
            vec![Op::Launch {
                stream: 0,
                reads: vec![b(4)],
                writes: vec![],
                atomics: Vec::new(),
            }],
            InputErrorKind::UndeclaredBuffer(4),
        ),
        (
            vec![
                Op::Alloc {
                    buf: 1,
                    bytes: 8,
                    device: 0,
                    space: MemSpace::Device,
                    stream: None,
                    addr: None,
                    pool: Pool::Driver,
                },
                Op::Launch {
                    stream: 0,
                    reads: vec![Access::bytes(1, 4, 8)],
                    writes: vec![],
                    atomics: Vec::new(),
                },
            ],
            InputErrorKind::OutOfBounds {
                id: 1,
                off: 4,
                len: 8,
                bytes: 8,
            },
        ),
        (
            vec![
                Op::Alloc {
                    buf: 1,
                    bytes: 8,
                    device: 0,
                    space: MemSpace::Device,
                    stream: None,
                    addr: None,
                    pool: Pool::Driver,
                },
                Op::Free {
                    buf: 1,
                    stream: None,
                },
                Op::Free {
                    buf: 1,
                    stream: None,
                },
            ],
            InputErrorKind::DoubleFree { id: 1, first: 3 },
        ),
        (
            vec![Op::Event { id: 1 }, Op::Event { id: 1 }],
            InputErrorKind::EventRedeclared { id: 1, first: 2 },
        ),
    ];
    for (ops, kind) in cases {
        let mut p = Prog::default();
        let n = ops.len() as u64;
        for op in ops {
            p.push(op, None);
        }
        let err = Engine::check_all(&p.records).expect_err("must be rejected");
        assert_eq!(err, InputError { line: n + 1, kind });
    }
}

#[test]
fn out_of_bounds_with_overflowing_range_is_an_error_not_a_panic() {
    let mut p = Prog::default();
    p.alloc(1, 8, MemSpace::Device);
    p.launch(0, "k", &[Access::bytes(1, u64::MAX, 2)], &[]);
    assert!(matches!(
        Engine::check_all(&p.records),
        Err(InputError {
            kind: InputErrorKind::OutOfBounds { .. },
            ..
        })
    ));
}
