//! The sanitizer's recording path, without CUDA.

use crate::trace::record::Pool;
use std::io::{self, Write};
use std::panic::Location;
use std::sync::{Arc, Mutex};

use super::*;
use crate::cuda::model;
use crate::cuda::options::{Options, ReportFormat};
use crate::cuda::step::{Label, Step};
use crate::trace::record::{Access, ByteRange, Op, Record, StreamFlags, StreamKind};

/// A sanitizer that records without the engine, into memory.
pub(crate) fn recording() -> Arc<Sanitizer> {
    let options = Options {
        check: false,
        ..Options::default()
    };
    Sanitizer::with_outputs(options, None, Box::new(io::sink())).unwrap()
}

pub(crate) fn captured(san: &Sanitizer) -> Vec<Record> {
    san.lock().captured.clone()
}

#[test]
fn lines_count_from_two_and_carry_thread_and_location() {
    let san = recording();
    let here = Location::caller();
    let mut call = san.begin(Some(here));
    call.push(Step::op(Op::DeviceSync { device: 0 }, None));
    call.push(Step::op(Op::DeviceSync { device: 1 }, Some("x".into())));
    call.finish();
    let records = captured(&san);
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].line, 2);
    assert_eq!(records[1].line, 3);
    assert_eq!(records[1].name.as_deref(), Some("x"));
    assert_eq!(records[0].thread, 0);
    let at = records[0].at.as_deref().unwrap();
    assert!(at.starts_with("src/cuda/sanitizer/tests.rs:"), "{at}");
    assert_eq!(san.records(), 2);
}

#[test]
fn a_call_dropped_before_finish_records_nothing() {
    let san = recording();
    let mut call = san.begin(None);
    call.push(Step::op(Op::DeviceSync { device: 0 }, None));
    drop(call);
    assert!(captured(&san).is_empty());
}

#[test]
fn tracked_waits_on_unrecorded_events_are_left_out() {
    let san = recording();
    let ev = model::SliceEvents {
        buf: 1,
        read: 1,
        write: 2,
    };
    let mut call = san.begin(None);
    // A writer: waits on read and write (both unrecorded: left out), records write.
    model::plan_memset(
        &mut call.steps,
        0,
        Some(ev),
        true,
        Step::op(Op::DeviceSync { device: 0 }, None),
    );
    // A second writer: now the write event is recorded, so its wait is kept.
    model::plan_memset(
        &mut call.steps,
        0,
        Some(ev),
        true,
        Step::op(Op::DeviceSync { device: 0 }, None),
    );
    call.finish();
    let ops: Vec<_> = captured(&san).into_iter().map(|r| r.op).collect();
    assert_eq!(
        ops,
        [
            Op::DeviceSync { device: 0 },
            Op::Record {
                event: 2,
                stream: 0
            },
            Op::Wait {
                stream: 0,
                event: 2
            },
            Op::DeviceSync { device: 0 },
            Op::Record {
                event: 2,
                stream: 0
            },
        ]
    );
    // Once destroyed, the event counts as unrecorded again (its id may be reused).
    let mut call = san.begin(None);
    call.push(Step::op(Op::EventDestroy { id: 2 }, None));
    call.push(Step::TrackedSync {
        event: 2,
        name: Label::Static("x"),
    });
    call.finish();
    assert_eq!(captured(&san).len(), 6);
}

#[test]
fn per_thread_streams_are_per_caller_and_declared_once() {
    let san = recording();
    let mut call = san.begin(None);
    let a = call.stream(StreamSlot::PerThread, 0);
    let again = call.stream(StreamSlot::PerThread, 0);
    let other_device = call.stream(StreamSlot::PerThread, 1);
    call.finish();
    assert_eq!(a, again);
    assert_ne!(a, other_device);
    let san2 = san.clone();
    let b = std::thread::spawn(move || {
        let mut call = san2.begin(None);
        let b = call.stream(StreamSlot::PerThread, 0);
        call.finish();
        b
    })
    .join()
    .unwrap();
    assert_ne!(a, b);
    let decls: Vec<_> = captured(&san)
        .into_iter()
        .map(|r| (r.thread, r.op))
        .collect();
    assert_eq!(decls.len(), 3);
    assert_eq!(
        decls[2],
        (
            1,
            Op::Stream {
                id: b,
                device: 0,
                kind: StreamKind::PerThreadDefault,
                flags: StreamFlags::Blocking
            }
        )
    );
}

#[test]
fn legacy_stream_of_device_zero_is_stream_zero() {
    let san = recording();
    let mut call = san.begin(None);
    assert_eq!(call.legacy_stream(0), 0);
    let one = call.legacy_stream(1);
    assert_eq!(call.legacy_stream(1), one);
    call.finish();
    let records = captured(&san);
    assert_eq!(records.len(), 1);
    assert!(matches!(
        records[0].op,
        Op::Stream {
            device: 1,
            kind: StreamKind::LegacyDefault,
            ..
        }
    ));
}

/// A sink that keeps what it is given and counts the `write` calls (each a syscall for
/// an unbuffered `File`).
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<(Vec<u8>, usize)>>);

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let mut inner = self.0.lock().unwrap();
        inner.0.extend_from_slice(b);
        inner.1 += 1;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().0.clone()).unwrap()
    }
    fn writes(&self) -> usize {
        self.0.lock().unwrap().1
    }
}

fn with_trace(check: bool) -> (Arc<Sanitizer>, Shared, Shared) {
    let (trace, report) = (Shared::default(), Shared::default());
    let options = Options {
        check,
        trace: Some("t.jsonl".into()),
        ..Options::default()
    };
    let san = Sanitizer::with_outputs(
        options,
        Some(Box::new(trace.clone())),
        Box::new(report.clone()),
    )
    .unwrap();
    (san, trace, report)
}

/// A launch with timing events and tracked arguments of every kind, planned into `steps`.
fn plan_tracked_launch(steps: &mut impl model::Steps, round: u64) {
    let events = |buf| model::SliceEvents {
        buf,
        read: 2 * buf,
        write: 2 * buf + 1,
    };
    let arg = |events, mutable, managing| model::TrackedArg {
        events,
        mutable,
        managing,
    };
    let args = [
        arg(Some(events(1)), true, true),
        arg(Some(events(2)), false, true),
        arg(None, false, true),
        arg(Some(events(3)), true, false),
    ];
    let launch = Op::Launch {
        stream: 0,
        reads: vec![Access::whole(2)],
        writes: vec![Access::whole(1), Access::whole(3)],
        atomics: vec![],
    };
    let timing = (round != 1).then_some((100 + 2 * round, 101 + 2 * round));
    model::plan_launch(steps, 0, &args, timing, Step::op(launch, Some("k".into())));
}

#[test]
fn steps_emitted_as_planned_are_the_records_and_lines_finish_makes() {
    for check in [false, true] {
        let run = |emit: bool| {
            let (san, trace, _) = with_trace(check);
            for round in 0..3 {
                let mut call = san.begin(None);
                // A step pushed before is recorded first either way.
                call.push(Step::op(Op::DeviceSync { device: 0 }, None));
                if emit {
                    plan_tracked_launch(&mut call.emit(), round);
                } else {
                    plan_tracked_launch(&mut call.steps, round);
                    call.finish();
                }
            }
            let records = captured(&san);
            drop(san);
            (records, trace.text())
        };
        let (finished, finished_text) = run(false);
        let (emitted, emitted_text) = run(true);
        assert!(finished.len() > 3 * 3, "{}", finished.len());
        assert!(finished.iter().any(|r| matches!(r.op, Op::Wait { .. })));
        assert_eq!(emitted, finished);
        assert_eq!(emitted_text, finished_text);
    }
}

#[test]
fn trace_is_written_per_call_in_one_write() {
    let (san, trace, report) = with_trace(false);
    // The header goes out at creation.
    assert_eq!(trace.writes(), 1);
    assert!(
        trace
            .text()
            .starts_with("{\"streamsan_trace\":1,\"minor\":3,\"producer\":")
    );
    let mut call = san.begin(None);
    call.push(Step::op(Op::DeviceSync { device: 0 }, None));
    call.push(Step::op(Op::DeviceSync { device: 1 }, None));
    call.finish();
    assert_eq!(trace.writes(), 2, "one write for the call's two lines");
    san.record_op(Op::DeviceSync { device: 2 }, None);
    assert_eq!(trace.writes(), 3);
    let text = trace.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[1].contains("\"op\":\"device_sync\""));
    assert!(lines[3].contains("\"device\":2"));
    assert!(lines[3].contains("\"at\":\"src/cuda/sanitizer/tests.rs:"));
    // A failed call (dropped before `finish`) writes nothing.
    let mut call = san.begin(None);
    call.push(Step::op(Op::DeviceSync { device: 0 }, None));
    drop(call);
    assert_eq!(trace.writes(), 3);
    drop(san);
    let said = report.text();
    assert!(said.contains("streamsan check t.jsonl"), "{said}");
}

#[test]
fn a_panic_in_a_call_leaves_the_sanitizer_usable_and_the_trace_whole() {
    let (san, trace, _) = with_trace(true);
    san.record_op(Op::DeviceSync { device: 0 }, None);
    let other = san.clone();
    let panicked = std::thread::spawn(move || {
        let mut call = other.begin(None);
        call.push(Step::op(Op::DeviceSync { device: 0 }, None));
        panic!("the cudarc call failed badly");
    })
    .join();
    assert!(panicked.is_err());
    assert!(san.state.is_poisoned());
    san.record_op(Op::DeviceSync { device: 0 }, None);
    assert_eq!(san.records(), 2);
    let text = trace.text();
    let records: Vec<Record> = crate::trace::TraceReader::new(text.as_bytes(), "t")
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(records.iter().map(|r| r.line).collect::<Vec<_>>(), [2, 3]);
    assert_eq!(san.stats().records, 2);
}

/// Two streams, one buffer, written on one and read on the other, `n` times: a
/// read-after-write, then in each later round a write-after-read and a read-after-write
/// too, always from the same two call sites.
fn racy_rounds(san: &Sanitizer, n: usize) {
    for id in [1, 2] {
        san.record_op(
            Op::Stream {
                id,
                device: 0,
                kind: StreamKind::Created,
                flags: StreamFlags::NonBlocking,
            },
            Some(["", "producer", "consumer"][id as usize]),
        );
    }
    san.record_op(
        Op::Alloc {
            buf: 1,
            bytes: 64,
            device: 0,
            space: crate::trace::record::MemSpace::Device,
            stream: None,
            addr: None,
            pool: Pool::Driver,
        },
        Some("x"),
    );
    for _ in 0..n {
        for (stream, write) in [(1, true), (2, false)] {
            let access = vec![Access::whole(1).arg("x")];
            let (reads, writes) = if write {
                (vec![], access)
            } else {
                (access, vec![])
            };
            san.record_op(
                Op::Launch {
                    stream,
                    reads,
                    writes,
                    atomics: Vec::new(),
                },
                Some(if write { "fill" } else { "sum" }),
            );
        }
    }
}

#[test]
fn races_are_printed_once_per_pair_of_sites_and_folded_in_reports() {
    let (san, trace, report) = with_trace(true);
    racy_rounds(&san, 5);
    // A query waits for the checker thread: everything found so far is printed then.
    assert_eq!(san.races().len(), 9);
    let said = report.text();
    assert_eq!(said.matches("RACE ").count(), 2, "{said}");
    assert!(
        said.starts_with("RACE read-after-write on buffer b1 \"x\""),
        "{said}"
    );
    let folded = san.folded_report();
    assert_eq!(folded.races.len(), 2);
    assert_eq!(
        folded
            .races
            .iter()
            .map(|r| r.occurrences)
            .collect::<Vec<_>>(),
        [5, 4]
    );
    let text = san.report();
    assert!(text.contains("(5 occurrences)"), "{text}");
    assert!(
        text.contains(
            "SUMMARY: 2 races (1 read-after-write, 1 write-after-read; 9 occurrences) in 13 records"
        ),
        "{text}"
    );
    assert_eq!(san.report(), text, "asking again changes nothing");
    let json: serde_json::Value = serde_json::from_str(&san.report_json()).unwrap();
    assert_eq!(json["summary"]["races"], 2);
    // The online verdict is the offline one.
    let checked = crate::check::check_reader(
        crate::trace::TraceReader::new(
            Box::new(io::Cursor::new(trace.text().into_bytes())) as Box<dyn io::BufRead + Send>,
            "t.jsonl",
        )
        .unwrap(),
    )
    .unwrap();
    let mut offline = checked.report;
    // The end-of-trace warning (x is never freed) is the offline run's only extra.
    assert_eq!(offline.summary.warnings, 1);
    offline.warnings.clear();
    offline.summary.warnings = 0;
    assert_eq!(folded, offline);
    drop(san);
    let said = report.text();
    assert!(said.contains("warning[leak]"), "{said}");
    assert!(
        said.ends_with(
            "SUMMARY: 2 races (1 read-after-write, 1 write-after-read; 9 occurrences), 1 warning in 13 records, 2 streams, 1 buffer\nreproduce: streamsan check t.jsonl\n"
        ),
        "{said}"
    );
}

#[test]
fn json_format_prints_one_report_at_the_end() {
    let report = Shared::default();
    let options = Options {
        format: ReportFormat::Json,
        ..Options::default()
    };
    let san = Sanitizer::with_outputs(options, None, Box::new(report.clone())).unwrap();
    racy_rounds(&san, 2);
    assert_eq!(report.text(), "");
    drop(san);
    let json: serde_json::Value = serde_json::from_str(&report.text()).unwrap();
    assert_eq!(json["version"], 1);
    assert_eq!(json["races"].as_array().unwrap().len(), 2);
    assert_eq!(json["races"][0]["occurrences"], 2);
    assert_eq!(json["summary"]["records"], 7);
}

#[test]
fn access_lists_are_reused_in_place() {
    let (san, _, _) = with_trace(true);
    let mut call = san.begin(None);
    let mut list = call.access_list();
    list.push(1, None, Some("a"));
    list.push(2, Some(ByteRange { off: 4, len: 4 }), None);
    list.push(3, None, Some("c"));
    let first = list.done();
    call.st.recycle(Op::HostAccess {
        reads: first,
        writes: vec![],
    });
    let mut list = call.access_list();
    list.push(4, None, Some("d"));
    list.push(5, None, Some("e"));
    assert_eq!(
        list.done(),
        [Access::whole(4).arg("d"), Access::whole(5).arg("e")]
    );
}

#[test]
fn call_sites_are_formatted_once_and_threads_numbered_per_sanitizer() {
    let (san, _, _) = with_trace(false);
    let other = recording();
    for _ in 0..3 {
        san.record_op(Op::DeviceSync { device: 0 }, None);
        other.record_op(Op::DeviceSync { device: 0 }, None);
    }
    let records = captured(&san);
    assert!(records.windows(2).all(|w| w[0].at == w[1].at));
    assert_eq!(san.lock().texts.sites.len(), 1);
    let san2 = san.clone();
    std::thread::spawn(move || {
        san2.record_op(Op::DeviceSync { device: 0 }, None);
        san2.record_op(Op::DeviceSync { device: 0 }, None);
    })
    .join()
    .unwrap();
    san.record_op(Op::DeviceSync { device: 0 }, None);
    let threads: Vec<u64> = captured(&san).iter().map(|r| r.thread).collect();
    assert_eq!(threads, [0, 0, 0, 1, 1, 0]);
    assert!(captured(&other).iter().all(|r| r.thread == 0));
}

/// A sanitizer checking on its checker thread (`thread`) or within each call, printing into
/// the returned buffer.
fn checking(thread: bool) -> (Arc<Sanitizer>, Shared) {
    let report = Shared::default();
    let options = Options {
        checker_thread: thread,
        ..Options::default()
    };
    let san = Sanitizer::with_outputs(options, None, Box::new(report.clone())).unwrap();
    (san, report)
}

#[test]
fn the_checker_thread_finds_and_prints_what_checking_within_calls_does() {
    // 12,002 records: batches fill, queue up behind the checker and come back for reuse.
    let run = |thread| {
        let (san, report) = checking(thread);
        racy_rounds(&san, 6000);
        let found = (san.findings(), san.folded_report(), san.stats());
        drop(san);
        (found, report.text())
    };
    let (within, threaded) = (run(false), run(true));
    let occurrences: u64 = within.0.1.races.iter().map(|r| r.occurrences).sum();
    assert_eq!(
        occurrences,
        6000 + 5999,
        "every round races twice but the first"
    );
    assert_eq!(within.0, threaded.0);
    assert!(within.1.contains("SUMMARY"), "{}", within.1);
    assert_eq!(
        within.1, threaded.1,
        "the same text, printed in the same order"
    );
}

#[test]
fn a_race_is_printed_without_a_query_once_the_checker_is_idle() {
    let (san, report) = checking(true);
    racy_rounds(&san, 1);
    // No query and no full batch: the checker takes the batch still filling.
    let start = std::time::Instant::now();
    while !report.text().contains("RACE ") {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "not printed after {:?}",
            start.elapsed()
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(san.races().len(), 1);
}

#[test]
fn halt_on_error_and_checker_thread_0_check_within_the_call() {
    let inline = |options: Options| {
        let san = Sanitizer::with_outputs(options, None, Box::new(io::sink())).unwrap();
        san.lock().checker.is_inline()
    };
    assert!(!inline(Options::default()), "a checker thread by default");
    assert!(inline(Options {
        checker_thread: false,
        ..Options::default()
    }));
    assert!(inline(Options {
        halt_on_error: true,
        ..Options::default()
    }));
    assert!(inline(Options {
        check: false,
        ..Options::default()
    }));
}

#[test]
fn records_queued_at_the_end_are_checked_before_the_summary() {
    let (san, report) = checking(true);
    racy_rounds(&san, 3);
    drop(san);
    let text = report.text();
    assert_eq!(text.matches("RACE ").count(), 2, "{text}");
    assert!(
        text.contains("SUMMARY: 2 races (1 read-after-write, 1 write-after-read; 5 occurrences)"),
        "{text}"
    );
}

/// Waits up to `limit` for `report` to show a race block; true when it did.
fn printed_within(report: &Shared, limit: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if report.text().contains("RACE ") {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    false
}

#[test]
fn a_call_blocked_in_the_driver_does_not_hold_back_earlier_races() {
    let (san, report) = checking(true);
    racy_rounds(&san, 1);
    let (held, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
    std::thread::scope(|s| {
        s.spawn(|| {
            // A synchronization that does not return for a while holds the sanitizer's lock;
            // the checker takes the filling batch under a lock of its own.
            let call = san.begin(None);
            held.wait();
            release.wait();
            drop(call);
        });
        held.wait();
        let printed = printed_within(&report, std::time::Duration::from_secs(10));
        release.wait();
        assert!(printed, "the race was not printed while the call blocked");
    });
}

#[test]
fn a_poisoned_lock_does_not_keep_races_from_being_printed() {
    let (san, report) = checking(true);
    let poisoned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _call = san.begin(None);
        let _filling = san.checker.as_deref().map(|c| c.filling());
        panic!("a panic while the locks are held");
    }));
    assert!(poisoned.is_err());
    racy_rounds(&san, 1);
    // No query: the checker takes the filling batch once idle, poisoned lock or not.
    assert!(printed_within(&report, std::time::Duration::from_secs(10)));
}

#[test]
fn a_record_the_trace_cannot_hold_is_said_without_waiting_for_the_checker() {
    // A launch without a kernel name cannot be written to the trace: the note is printed from
    // within the call, which holds the checker thread's filling batch.
    let (san, _trace, report) = with_trace(true);
    san.record_op(
        Op::Launch {
            stream: 0,
            reads: vec![],
            writes: vec![],
            atomics: Vec::new(),
        },
        None,
    );
    assert!(
        report.text().contains("cannot write record 2 to the trace"),
        "{}",
        report.text()
    );
    assert_eq!(san.records(), 1);
}
