//! [`Engine::prefetch`] is a hint: a trace applied with it finds exactly what it finds without
//! it. The trace has more buffers than [`PREFETCH_FROM`] (so the prefetch runs), races, views
//! that split buffers' states (so shadow states go to the heap), frees, uses after free, ids
//! allocated again, and tombstones let go (so table slots move and ids are forgotten).

use super::*;
use crate::trace::record::{Access, MemSpace, Pool};

/// Buffers in the trace: past the prefetch's threshold.
const BUFFERS: u64 = PREFETCH_FROM as u64 + 1000;

fn rec(line: u64, op: Op) -> Record {
    let name = matches!(op, Op::Launch { .. }).then(|| "k".to_string());
    Record {
        line,
        thread: 0,
        at: None,
        name,
        op,
    }
}

/// A 256-byte device buffer's allocation (also the hint tests').
pub(super) fn alloc(buf: u64) -> Op {
    Op::Alloc {
        buf,
        bytes: 256,
        device: 0,
        space: MemSpace::Device,
        stream: None,
        addr: None,
        pool: Pool::Driver,
    }
}

fn launch(stream: u64, reads: Vec<Access>, writes: Vec<Access>) -> Op {
    Op::Launch {
        stream,
        reads,
        writes,
        atomics: vec![],
    }
}

/// Two non-blocking streams; stream 1 writes every buffer (every third through a view), then
/// stream 2 reads some of them unordered (races), stream 1 frees others and reads them after
/// (uses after free), and those ids are allocated and written again.
pub(crate) fn trace() -> Vec<Record> {
    let mut ops = vec![];
    for id in [1, 2] {
        ops.push(Op::Stream {
            id,
            device: 0,
            kind: crate::trace::record::StreamKind::Created,
            flags: StreamFlags::NonBlocking,
        });
    }
    ops.extend((0..BUFFERS).map(alloc));
    ops.push(Op::DeviceSync { device: 0 });
    for b in 0..BUFFERS {
        let write = if b % 3 == 0 {
            Access::bytes(b, 64, 64)
        } else {
            Access::whole(b)
        };
        ops.push(launch(
            1,
            vec![Access::whole((b + 1) % BUFFERS)],
            vec![write],
        ));
    }
    for b in (0..BUFFERS).step_by(7) {
        ops.push(launch(2, vec![Access::bytes(b, 0, 128)], vec![]));
    }
    for b in (0..BUFFERS).step_by(11) {
        ops.push(Op::Free {
            buf: b,
            stream: None,
        });
        ops.push(launch(1, vec![Access::whole(b)], vec![]));
    }
    for b in (0..BUFFERS).step_by(22) {
        ops.push(alloc(b));
        ops.push(launch(2, vec![], vec![Access::whole(b)]));
    }
    ops.into_iter()
        .enumerate()
        .map(|(i, op)| rec(i as u64 + 2, op))
        .collect()
}

/// Every finding of `records`, as text, applied with or without the prefetch, and how many
/// values the prefetch asked to load.
fn findings(records: &[Record], prefetch: bool) -> (Vec<String>, u64) {
    let mut engine = Engine::new();
    // Few tombstones kept: freed states are let go, and table slots move.
    engine.keep_freed(100);
    let issued = super::prefetch::ISSUED.with(|n| n.get());
    let mut found = vec![];
    let (mut above, mut split) = (0, 0);
    for (i, r) in records.iter().enumerate() {
        if prefetch {
            engine.prefetch(records, i, |r| Some(&r.op));
        }
        above += usize::from(engine.live_buffers >= PREFETCH_FROM);
        engine
            .apply(r, &mut |f| found.push(format!("{f:?}")))
            .expect("a valid trace");
        if i == records.len() / 2 {
            split = engine
                .buffers
                .values()
                .filter(|b| b.shadow.segments() > 1)
                .count();
        }
    }
    engine.finish(&mut |f| found.push(format!("{f:?}")));
    // What the test relies on: the prefetch runs, and meets buffers split by views.
    assert!(
        above > records.len() / 2,
        "{above} records above the threshold"
    );
    assert!(split > 100, "{split} buffers split");
    let issued = super::prefetch::ISSUED.with(|n| n.get()) - issued;
    (found, issued)
}

#[test]
fn a_trace_applied_with_the_prefetch_finds_what_it_finds_without() {
    let records = trace();
    let (without, none) = findings(&records, false);
    let (with, issued) = findings(&records, true);
    assert_eq!(none, 0);
    assert!(issued > 10_000, "{issued} prefetches");
    let between_streams = without
        .iter()
        .filter(|f| f.starts_with("Race") && !f.contains("UseAfterFree"))
        .count();
    let after_free = without
        .iter()
        .filter(|f| f.contains("UseAfterFree"))
        .count();
    assert!(
        between_streams > 100,
        "{between_streams} races between streams"
    );
    assert!(after_free > 0, "and uses of freed buffers");
    assert!(with == without, "the prefetch changed a finding");
}

#[test]
fn below_the_threshold_of_live_buffers_nothing_is_prefetched_however_many_were_freed() {
    // Each buffer id used once, as the online layer numbers them: thousands of tombstones,
    // never more than 100 live buffers, each read again while it lives.
    let mut ops = vec![Op::Stream {
        id: 1,
        device: 0,
        kind: crate::trace::record::StreamKind::Created,
        flags: StreamFlags::NonBlocking,
    }];
    for b in 0..2 * PREFETCH_FROM as u64 {
        ops.push(alloc(b));
        ops.push(launch(
            1,
            vec![Access::whole(b.saturating_sub(50))],
            vec![Access::whole(b)],
        ));
        if b >= 100 {
            ops.push(Op::Free {
                buf: b - 100,
                stream: Some(1),
            });
        }
    }
    let records: Vec<_> = ops
        .into_iter()
        .enumerate()
        .map(|(i, op)| rec(i as u64 + 2, op))
        .collect();
    let mut engine = Engine::new();
    let issued = super::prefetch::ISSUED.with(|n| n.get());
    for (i, r) in records.iter().enumerate() {
        engine.prefetch(&records, i, |r| Some(&r.op));
        engine.apply(r, &mut |_| {}).expect("a valid trace");
    }
    assert!(
        engine.buffers.len() > PREFETCH_FROM,
        "the tombstones are kept"
    );
    assert_eq!(super::prefetch::ISSUED.with(|n| n.get()), issued);
}

#[test]
fn prefetching_ids_that_were_never_allocated_or_are_past_the_batch_is_harmless() {
    let mut records = trace();
    let mut engine = Engine::new();
    for r in &records {
        engine.apply(r, &mut |_| {}).expect("a valid trace");
    }
    assert!(engine.live_buffers >= PREFETCH_FROM, "the prefetch runs");
    records.push(rec(0, launch(1, vec![Access::whole(u64::MAX)], vec![])));
    let last = records.len() - 1;
    for i in last.saturating_sub(PREFETCH_AHEAD)..=last + 1 {
        engine.prefetch(&records, i, |r| Some(&r.op));
    }
    engine.prefetch(&records, usize::MAX, |r| Some(&r.op));
    engine.prefetch(&records, 0, |_| None);
}

/// A record's heap parts are loaded ahead: its name and location when it has them, and a
/// launch's two access lists (empty ones too: a prefetch of any address is harmless); nothing
/// for a record with neither.
#[test]
fn a_records_heap_parts_are_prefetched() {
    let issued = || super::prefetch::ISSUED.with(|n| n.get());
    let cases = [
        (rec(2, launch(1, vec![Access::whole(1)], vec![])), 3),
        (
            Record {
                at: Some("a.rs:1:1".into()),
                ..rec(3, launch(1, vec![], vec![Access::whole(1)]))
            },
            4,
        ),
        (rec(4, Op::StreamSync { stream: 1 }), 0),
    ];
    for (record, want) in cases {
        let before = issued();
        super::prefetch::record_parts(&record);
        assert_eq!(issued() - before, want, "{:?}", record.op.kind());
    }
}
