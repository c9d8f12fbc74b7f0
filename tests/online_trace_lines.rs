//! The lines the online layer writes to a trace, in this crate's non-test build, where a
//! record's line is written from its parts (the op, its label, the call site kept as a JSON
//! string) without the record being made whole: every line must be the canonical line of the
//! record it reads back as (what `TraceWriter` writes for it), with the name, thread and call
//! site the call had.

#![cfg(feature = "cuda")]

use std::path::PathBuf;

use streamsan::trace::TraceReader;
use streamsan::trace::record::{Access, ByteRange, Op, Record};
use streamsan::trace::writer::encode;

mod common;

fn temp(ext: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "streamsan-trace-lines-{}.{ext}",
        std::process::id()
    ))
}

/// A launch reading `buf`'s bytes 8..24 as argument `x` and writing buffer 2 whole.
fn launch(stream: u64, buf: u64) -> Op {
    Op::Launch {
        stream,
        reads: vec![Access {
            buf,
            range: Some(ByteRange { off: 8, len: 16 }),
            arg: Some("x".into()),
        }],
        writes: vec![Access::whole(2)],
        atomics: vec![],
    }
}

#[test]
fn online_lines_are_the_canonical_lines_of_their_records() {
    let trace = temp("jsonl");
    let san = common::traced_sanitizer(&trace);
    // (name the line must have, whether its call was on the second thread)
    let mut expected: Vec<(Option<String>, bool)> = Vec::new();
    for id in [1, 2] {
        san.record_op(common::created_stream(id), None);
        expected.push((None, false));
    }
    for buf in [1, 2, 12345] {
        san.record_op(common::device_buffer(buf), Some("buffer"));
        expected.push((Some("buffer".into()), false));
    }
    san.record_op(Op::Event { id: 7 }, None);
    expected.push((None, false));
    for round in 0..3 {
        san.record_op(launch(1, 1), Some("kernel<float>"));
        expected.push((Some("kernel<float>".into()), false));
        san.record_op(launch(2, 12345), Some("needs \"escaping\" \\ \t"));
        expected.push((Some("needs \"escaping\" \\ \t".into()), false));
        san.record_event_op(
            Op::Record {
                event: 7,
                stream: 1,
            },
            12345,
            round % 2 == 0,
        );
        let kind = if round % 2 == 0 { "write" } else { "read" };
        expected.push((Some(format!("cudarc:{kind}-event of b12345")), false));
        san.record_event_op(
            Op::Wait {
                stream: 2,
                event: 7,
            },
            1,
            true,
        );
        expected.push((Some("cudarc:write-event of b1".into()), false));
        // Another host thread: its records carry its thread number.
        std::thread::scope(|s| {
            s.spawn(|| san.record_op(Op::StreamSync { stream: 2 }, None));
        });
        expected.push((None, true));
    }
    drop(san);
    let text = std::fs::read_to_string(&trace).unwrap();
    let records: Vec<Record> = TraceReader::new(text.as_bytes(), "online.jsonl")
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let lines: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(records.len(), expected.len(), "{text}");
    assert_eq!(lines.len(), records.len());
    let here = file!();
    for ((record, line), (name, other_thread)) in records.iter().zip(&lines).zip(&expected) {
        let mut canonical = Vec::new();
        encode(record, &mut canonical).unwrap();
        assert_eq!(format!("{line}\n"), String::from_utf8(canonical).unwrap());
        assert_eq!(&record.name, name, "{line}");
        assert_eq!(record.thread != 0, *other_thread, "{line}");
        let at = record.at.as_deref().expect("every call has its site");
        assert!(at.starts_with(here) && at.matches(':').count() == 2, "{at}");
    }
    let _ = std::fs::remove_file(&trace);
    let _ = std::fs::remove_file(trace.with_extension("report"));
}
