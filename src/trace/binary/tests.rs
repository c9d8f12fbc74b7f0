//! Binary encoding tests: the round trip of every op through the writer and the reader, the
//! exact bytes of small records, line numbers across gaps, the newer-minor rules, conversion
//! both ways, and corrupt input (truncation at every byte, flipped bytes, hostile lengths), which
//! must give clean errors naming the file, the line and the byte.

use std::io::{BufReader, Read};

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::encode::{Encoder, frame};
use super::*;
use crate::trace::arbitrary::any_record;
use crate::trace::reader::{Entry, SkippedRecord};
use crate::trace::record::{Access, MemSpace, Op, OpKind, Pool, Record, StreamFlags, StreamKind};
use crate::trace::{Encoding, MAX_LINE_BYTES, TraceError, TraceReader, TraceWriter};

fn record(op: Op) -> Record {
    Record {
        line: 0,
        thread: 0,
        at: None,
        name: None,
        op,
    }
}

fn launch(name: &str, stream: u64, reads: Vec<Access>, writes: Vec<Access>) -> Record {
    Record {
        name: Some(name.into()),
        ..record(Op::Launch {
            stream,
            reads,
            writes,
            atomics: Vec::new(),
        })
    }
}

/// `records` written as a finished binary trace.
fn encoded(records: &[Record]) -> Vec<u8> {
    let mut w = BinaryWriter::new(Vec::new(), Map::new()).unwrap();
    for r in records {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    w.into_inner()
}

/// Reads a whole trace: all records, or the first error.
fn read_all(bytes: &[u8]) -> Result<Vec<Record>, TraceError> {
    TraceReader::new(bytes, "t.sstb")?.collect()
}

/// The error a whole trace gives, displayed.
fn err_all(bytes: &[u8]) -> String {
    match read_all(bytes) {
        Ok(records) => panic!("expected an error, got {records:?}"),
        Err(e) => e.to_string(),
    }
}

/// The bytes of a trace up to its first frame (magic, version, header), with `header`.
fn preamble(header: &str) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.push(LAYOUT_VERSION);
    varint::put(&mut out, header.len() as u64);
    out.extend_from_slice(header.as_bytes());
    out
}

/// A trace of hand-made frames after a header, with or without the end frame.
fn framed(header: &str, frames: &[(u8, &[u8])], end: bool) -> Vec<u8> {
    let mut out = preamble(header);
    for (t, body) in frames {
        frame(&mut out, *t, body);
    }
    if end {
        frame(&mut out, tag::END, &[]);
    }
    out
}

const V1: &str = r#"{"streamsan_trace":1}"#;
const V1_MINOR_9: &str = r#"{"streamsan_trace":1,"minor":9}"#;

/// A small trace with every kind of frame: strings, records of several ops, a gap.
fn small_trace() -> Vec<u8> {
    let mut w = BinaryWriter::new(Vec::new(), Map::new()).unwrap();
    w.write(&Record {
        name: Some("side".into()),
        ..record(Op::Stream {
            id: 1,
            device: 0,
            kind: StreamKind::Created,
            flags: StreamFlags::NonBlocking,
        })
    })
    .unwrap();
    w.write(&record(Op::Alloc {
        buf: 1,
        bytes: 4096,
        device: 0,
        space: MemSpace::Device,
        stream: None,
        addr: Some(1 << 40),
        pool: Pool::Driver,
    }))
    .unwrap();
    w.skip_lines(2).unwrap();
    w.write(&Record {
        at: Some("a.rs:1:2".into()),
        ..launch(
            "sum",
            1,
            vec![Access::bytes(1, 0, 64).arg("x")],
            vec![Access::whole(1)],
        )
    })
    .unwrap();
    w.write(&record(Op::StreamSync { stream: 1 })).unwrap();
    w.finish().unwrap();
    w.into_inner()
}

// ---------------------------------------------------------------------------------------------
// Well-formed input

#[test]
fn the_reader_picks_the_encoding_by_the_first_byte() {
    let bytes = small_trace();
    let reader = TraceReader::new(&bytes[..], "t.sstb").unwrap();
    assert_eq!(reader.encoding(), Encoding::Binary);
    assert_eq!(reader.minor(), crate::trace::FORMAT_MINOR);
    let text = "{\"streamsan_trace\":1}\n";
    let reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
    assert_eq!(reader.encoding(), Encoding::JsonLines);
    assert!(looks_binary(&MAGIC) && !looks_binary(b"{") && !looks_binary(b""));
    // Nothing a JSON Lines trace may start with (a header, a byte order mark, UTF-16's marks,
    // whitespace) is the magic's first byte, and that byte never starts UTF-8 text.
    for start in [
        &b"{"[..],
        b" ",
        b"\t",
        b"\r",
        b"\n",
        b"\xef\xbb\xbf",
        b"\xff\xfe",
        b"\xfe\xff",
    ] {
        assert!(!looks_binary(start));
    }
    assert!(std::str::from_utf8(&MAGIC[..1]).is_err());
}

#[test]
fn line_numbers_survive_gaps() {
    let records = read_all(&small_trace()).unwrap();
    let lines: Vec<u64> = records.iter().map(|r| r.line).collect();
    assert_eq!(lines, [2, 3, 6, 7]);
    assert_eq!(records[2].at.as_deref(), Some("a.rs:1:2"));
    assert_eq!(records[2].name.as_deref(), Some("sum"));
}

#[test]
fn exact_bytes_of_a_launch_and_repeated_names_cost_one_byte() {
    let r = launch("gemm", 3, vec![Access::whole(5)], vec![Access::whole(40)]);
    let mut w = BinaryWriter::new(Vec::new(), Map::new()).unwrap();
    let start = w.get_ref().len();
    w.write(&r).unwrap();
    let first = w.get_ref()[start..].to_vec();
    let mid = w.get_ref().len();
    w.write(&r).unwrap();
    let second = w.get_ref()[mid..].to_vec();
    let record_frame = [
        op_tag(OpKind::Launch),
        8,          // body length
        flag::NAME, // flags: a name follows
        1,          // name: string 0 (index + 1)
        3,          // stream
        1,          // one read:
        5 << 2,     //   buffer 5, whole, no argument
        1,          // one write:
        (8 << 2) | access_bit::MORE,
        1, //   buffer 40: low five bits 8, then 40 >> 5 = 1
    ];
    // The first use defines "gemm" in a string frame, ahead of the record.
    let mut expected = vec![tag::STRING, 4];
    expected.extend_from_slice(b"gemm");
    expected.extend_from_slice(&record_frame);
    assert_eq!(first, expected);
    // The second only refers to it: ten bytes for a launch with two accesses.
    assert_eq!(second, record_frame);
}

/// Tags follow [`OpKind::ALL`], and from `0x26` on (the ops of minor 3 and later) the body
/// starts with the op's name.
#[test]
fn op_tags_follow_the_op_table_and_later_ops_are_named() {
    for (i, &kind) in OpKind::ALL.iter().enumerate() {
        let t = op_tag(kind);
        assert_eq!(usize::from(t), usize::from(tag::FIRST_OP) + i, "{kind:?}");
        assert_eq!(tag_op(t), Some(kind));
        assert_eq!(named(t), kind.minor() >= 3, "{kind:?}");
    }
    assert_eq!(op_tag(OpKind::GraphDestroy), 0x25);
    assert_eq!(op_tag(OpKind::StreamDestroy), 0x26);
}

#[test]
fn exact_bytes_of_a_stream_destroy() {
    let r = Record {
        thread: 2,
        ..record(Op::StreamDestroy { id: 5 })
    };
    let mut w = BinaryWriter::new(Vec::new(), Map::new()).unwrap();
    let start = w.get_ref().len();
    w.write(&r).unwrap();
    let first = w.get_ref()[start..].to_vec();
    let mid = w.get_ref().len();
    w.write(&r).unwrap();
    let second = w.get_ref()[mid..].to_vec();
    let record_frame = [
        0x26,         // stream_destroy
        4,            // body length
        1,            // its name: string 0 (index + 1)
        flag::THREAD, // flags: a thread follows
        2,            // thread
        5,            // id
    ];
    let mut expected = vec![tag::STRING, 14];
    expected.extend_from_slice(b"stream_destroy");
    expected.extend_from_slice(&record_frame);
    assert_eq!(first, expected);
    assert_eq!(second, record_frame);
}

/// A reader of minor 2 does not know tag `0x26`: it reads the name that starts the body and
/// skips the record, as this reader does with a tag it does not know.
#[test]
fn a_stream_destroy_is_skipped_by_name_where_its_tag_is_unknown() {
    let frames = encoded(&[record(Op::StreamDestroy { id: 5 })]);
    let header = format!(
        r#"{{"streamsan_trace":1,"minor":{}}}"#,
        crate::trace::FORMAT_MINOR
    );
    let at = preamble(&header).len();
    let body = &frames[at..];
    // The string frame of its name, then the record frame, then the end.
    let (def, rest) = body.split_at(2 + 14);
    assert_eq!(rest[0], op_tag(OpKind::StreamDestroy));
    let record_body = &rest[2..2 + usize::from(rest[1])];
    let bytes = framed(
        V1_MINOR_9,
        &[(tag::STRING, &def[2..]), (LATER_TAG, record_body)],
        true,
    );
    let mut reader = TraceReader::new(&bytes[..], "t.sstb").unwrap();
    assert_eq!(reader.by_ref().count(), 0);
    assert_eq!(reader.skipped(), [(2, "stream_destroy".to_string())]);

    // Under its own tag the name must be its own.
    let mut wrong = vec![0, 5];
    wrong.extend_from_slice(b"event");
    wrong.extend_from_slice(&[0, 5]);
    let bytes = framed(V1, &[(op_tag(OpKind::StreamDestroy), &wrong)], true);
    assert_eq!(
        err_all(&bytes),
        format!(
            "t.sstb:2: at byte {}: `stream_destroy` record: `op`: expected \"stream_destroy\" \
             (the op of tag 0x26), found \"event\"",
            preamble(V1).len() + 2
        )
    );
    // And a flag bit it does not have is placed at the flags, after the name.
    let bytes = framed(
        V1,
        &[
            (tag::STRING, b"stream_destroy"),
            (op_tag(OpKind::StreamDestroy), &[1, 0x08, 5]),
        ],
        true,
    );
    assert!(
        err_all(&bytes).starts_with(&format!(
            "t.sstb:2: at byte {}: `stream_destroy` record: unknown flag bits 0x08",
            preamble(V1).len() + 2 + 14 + 2 + 1
        )),
        "{}",
        err_all(&bytes)
    );
}

/// The worked example of `docs/trace-format.md` ("An example"), byte for byte.
#[test]
fn the_spec_s_example_bytes() {
    let text = "{\"streamsan_trace\":1,\"minor\":1}\n\
                {\"op\":\"stream\",\"id\":3,\"kind\":\"created\"}\n\
                \n\
                {\"op\":\"launch\",\"name\":\"gemm\",\"stream\":3,\"reads\":[5],\"writes\":[{\"buf\":40,\"off\":64,\"len\":128,\"arg\":\"out\"}]}\n\
                {\"op\":\"launch\",\"name\":\"gemm\",\"stream\":3,\"reads\":[5],\"writes\":[40]}\n";
    let mut expected = MAGIC.to_vec();
    expected.push(0x01);
    expected.push(0x1f);
    expected.extend_from_slice(br#"{"streamsan_trace":1,"minor":1}"#);
    #[rustfmt::skip]
    expected.extend_from_slice(&[
        0x10, 0x03, 0x00, 0x03, 0x02,
        0x01, 0x01, 0x01,
        0x03, 0x04, b'g', b'e', b'm', b'm',
        0x03, 0x03, b'o', b'u', b't',
        0x15, 0x0c, 0x02, 0x01, 0x03, 0x01, 0x14, 0x01, 0xa3, 0x01, 0x40, 0x80, 0x01, 0x02,
        0x15, 0x08, 0x02, 0x01, 0x03, 0x01, 0x14, 0x01, 0xa0, 0x01,
        0x00, 0x00,
    ]);
    assert_eq!(expected.len(), 86);
    assert_eq!(text.len(), 246);
    assert_eq!(convert_to(text.as_bytes(), Encoding::Binary), expected);
}

#[test]
fn extreme_values_round_trip() {
    let records = vec![
        Record {
            thread: u64::MAX,
            name: Some("ß \" \n \u{0}".into()),
            at: Some(String::new()),
            ..record(Op::Stream {
                id: u64::MAX,
                device: u32::MAX,
                kind: StreamKind::PerThreadDefault,
                flags: StreamFlags::NonBlocking,
            })
        },
        record(Op::Alloc {
            buf: u64::MAX,
            bytes: u64::MAX,
            device: 1,
            space: MemSpace::Host,
            stream: Some(0),
            addr: Some(u64::MAX),
            pool: Pool::Caching,
        }),
        record(Op::Memcpy {
            stream: 2,
            src: Access::bytes(u64::MAX, u64::MAX - 1, 1).arg("ß"),
            dst: Access::whole(31).arg(""),
            blocking: true,
        }),
        record(Op::Memset {
            stream: 0,
            dst: Access::bytes(32, 0, 0),
            blocking: false,
        }),
        launch("k", 0, vec![], vec![]),
        record(Op::DeviceSync { device: u32::MAX }),
        record(Op::StreamQuery {
            stream: 1,
            done: true,
        }),
        record(Op::EventQuery {
            event: 1,
            done: false,
        }),
    ];
    let back = read_all(&encoded(&records)).unwrap();
    assert_eq!(back.len(), records.len());
    for (i, (mut original, read)) in records.into_iter().zip(back).enumerate() {
        original.line = i as u64 + 2;
        assert_eq!(original, read);
    }
}

/// Every record example of the spec reads the same from its binary encoding.
#[test]
fn the_spec_s_examples_round_trip() {
    let spec =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/trace-format.md"))
            .unwrap();
    let mut text = String::from("{\"streamsan_trace\":1,\"minor\":1}\n");
    let mut in_json = false;
    for line in spec.lines() {
        match line.trim() {
            "```json" => in_json = true,
            "```" => in_json = false,
            l if in_json && l.starts_with("{\"op\"") => {
                text.push_str(l);
                text.push('\n');
            }
            _ => {}
        }
    }
    let records: Vec<Record> = TraceReader::new(text.as_bytes(), "spec.jsonl")
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let kinds: std::collections::BTreeSet<OpKind> = records.iter().map(|r| r.op.kind()).collect();
    assert_eq!(kinds.len(), OpKind::ALL.len());
    assert_eq!(read_all(&encoded(&records)).unwrap(), records);
}

#[test]
fn the_header_is_kept_and_the_newest_minor_declared() {
    let mut extra = Map::new();
    extra.insert("producer".into(), "test".into());
    extra.insert("minor".into(), 0.into());
    let w = BinaryWriter::new(Vec::new(), extra).unwrap();
    let bytes = w.into_inner();
    let mut bytes = bytes.clone();
    frame(&mut bytes, tag::END, &[]);
    let reader = TraceReader::new(&bytes[..], "t.sstb").unwrap();
    assert_eq!(reader.minor(), crate::trace::FORMAT_MINOR);
    assert_eq!(reader.header()["producer"], "test");

    // `with_header` keeps the minor as given, or leaves it out.
    let header: Map<String, Value> =
        serde_json::from_str(r#"{"streamsan_trace":1,"minor":7,"devices":[{"name":"H200"}]}"#)
            .unwrap();
    let mut w = BinaryWriter::with_header(Vec::new(), &header).unwrap();
    w.finish().unwrap();
    let bytes = w.into_inner();
    let reader = TraceReader::new(&bytes[..], "t.sstb").unwrap();
    assert_eq!(reader.header(), &header);
    let mut w = BinaryWriter::with_header(Vec::new(), &Map::new()).unwrap();
    w.finish().unwrap();
    let bytes = w.into_inner();
    let reader = TraceReader::new(&bytes[..], "t.sstb").unwrap();
    assert_eq!(reader.minor(), 0);
    assert!(!reader.header().contains_key("minor"));
}

#[test]
fn small_buffers_read_the_same() {
    let bytes = small_trace();
    let expected = read_all(&bytes).unwrap();
    for capacity in [1, 2, 3, 7, 16] {
        let reader =
            TraceReader::new(BufReader::with_capacity(capacity, &bytes[..]), "t.sstb").unwrap();
        let back: Vec<Record> = reader.collect::<Result<_, _>>().unwrap();
        assert_eq!(back, expected, "capacity {capacity}");
    }
}

#[test]
fn bytes_read_reaches_the_file_size_and_progress_follows() {
    let bytes = small_trace();
    let mut reader = TraceReader::new(&bytes[..], "t.sstb").unwrap();
    let progress = reader.progress();
    assert!(progress.bytes() > 0 && progress.bytes() < bytes.len() as u64);
    let n = reader.by_ref().count();
    assert_eq!(n, 4);
    assert_eq!(reader.bytes_read(), bytes.len() as u64);
    assert_eq!(progress.bytes(), bytes.len() as u64);
    assert_eq!(progress.records(), 4);

    let text = "{\"streamsan_trace\":1}\n\n{\"op\":\"device_sync\"}\r\n";
    let mut reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
    let progress = reader.progress();
    assert_eq!(progress.bytes(), 22);
    assert_eq!(reader.by_ref().count(), 1);
    assert_eq!(progress.bytes(), text.len() as u64);
    assert_eq!(progress.records(), 1);
}

// ---------------------------------------------------------------------------------------------
// Newer minor versions

/// An op frame of a later minor's op: tag after the known ones, its name first.
fn later_op(name: &str) -> Vec<u8> {
    let mut body = vec![0];
    varint::put(&mut body, name.len() as u64);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(&[1, 2, 3]); // its own fields
    body
}

const LATER_TAG: u8 = tag::FIRST_OP + OpKind::ALL.len() as u8;

#[test]
fn later_ops_are_skipped_under_a_newer_minor_and_named() {
    let sync = {
        let mut f = Vec::new();
        Encoder::default()
            .record(&record(Op::DeviceSync { device: 0 }), &mut f)
            .unwrap();
        f
    };
    let prefetch = later_op("mem_prefetch");
    let mut bytes = preamble(V1_MINOR_9);
    bytes.extend_from_slice(&sync);
    frame(&mut bytes, LATER_TAG, &prefetch);
    frame(&mut bytes, LATER_TAG + 7, &later_op("graph_update"));
    frame(&mut bytes, LATER_TAG, &prefetch);
    bytes.extend_from_slice(&sync);
    frame(&mut bytes, tag::END, &[]);
    let mut reader = TraceReader::new(&bytes[..], "t.sstb").unwrap();
    let lines: Vec<u64> = reader.by_ref().map(|r| r.unwrap().line).collect();
    assert_eq!(lines, [2, 6]);
    assert_eq!(reader.skipped_count(), 3);
    assert_eq!(
        reader.skipped(),
        [
            (3, "mem_prefetch".to_string()),
            (4, "graph_update".to_string()),
            (5, "mem_prefetch".to_string())
        ]
    );
    assert_eq!(reader.skipped_ops(), ["mem_prefetch", "graph_update"]);

    // Under a minor this reader knows, the same frame is an unknown op.
    let mut bytes = preamble(V1);
    frame(&mut bytes, LATER_TAG, &prefetch);
    let e = err_all(&bytes);
    assert!(
        e.starts_with(&format!(
            "t.sstb:2: at byte {}: unknown op \"mem_prefetch\" (tag 0x{LATER_TAG:02x}; the header \
             declares no minor version newer than this reader's, so every op must be one it \
             knows: stream, event,",
            preamble(V1).len()
        )),
        "{e}"
    );
}

#[test]
fn newer_fields_and_flags_are_ignored_only_under_a_newer_minor() {
    // device_sync with an unknown flag bit and a trailing field.
    let body = [flag::BIT3 | 0x80, 4, 0x2a];
    for (header, ok) in [(V1, false), (V1_MINOR_9, true)] {
        let bytes = framed(header, &[(op_tag(OpKind::DeviceSync), &body)], true);
        match read_all(&bytes) {
            Ok(records) => {
                assert!(ok);
                assert_eq!(records[0].op, Op::DeviceSync { device: 4 });
            }
            Err(e) => {
                assert!(!ok, "{e}");
                assert!(e.to_string().contains("unknown flag bits 0x80"), "{e}");
            }
        }
    }
    let body = [flag::BIT3, 4, 0x2a];
    let bytes = framed(V1, &[(op_tag(OpKind::DeviceSync), &body)], true);
    let at = preamble(V1).len() + 4;
    assert_eq!(
        err_all(&bytes),
        format!(
            "t.sstb:2: at byte {at}: `device_sync` record: 1 bytes after the last field (fields \
             this reader does not know belong to a newer minor version, which the header does \
             not declare)"
        )
    );
}

#[test]
fn records_kept_as_json_read_as_json_lines_lines() {
    let known = br#"{"op":"event","id":4,"thread":2}"#;
    let unknown = br#"{"op":"mem_prefetch","buf":1}"#;
    let bytes = framed(
        V1_MINOR_9,
        &[(tag::JSON, known), (tag::GAP, &[3]), (tag::JSON, unknown)],
        true,
    );
    let mut reader = TraceReader::new(&bytes[..], "t.sstb").unwrap();
    let first = reader.next_entry().unwrap().unwrap();
    assert_eq!(
        first,
        Entry::Record(Record {
            line: 2,
            thread: 2,
            ..record(Op::Event { id: 4 })
        })
    );
    assert_eq!(
        reader.next_entry().unwrap().unwrap(),
        Entry::Skipped(SkippedRecord {
            line: 6,
            op: "mem_prefetch".into(),
            json: Some(String::from_utf8(unknown.to_vec()).unwrap()),
        })
    );
    assert!(reader.next_entry().is_none());

    // A bad JSON record names the line, the byte of the problem and what was expected.
    let bytes = framed(V1, &[(tag::JSON, br#"{"op":"event","id":-4}"#)], true);
    let at = preamble(V1).len() + 2 + 20;
    assert_eq!(
        err_all(&bytes),
        format!(
            "t.sstb:2: at byte {at}: JSON record: `id`: expected an id (unsigned integer), found -4"
        )
    );
}

// ---------------------------------------------------------------------------------------------
// Conversion

/// Converts `input` (either encoding) to `to`, returning the output's bytes.
fn convert_to(input: &[u8], to: Encoding) -> Vec<u8> {
    let mut reader = TraceReader::new(input, "in").unwrap();
    let mut out = Vec::new();
    match to {
        Encoding::JsonLines => {
            let mut w = TraceWriter::with_header(&mut out, reader.header()).unwrap();
            convert(&mut reader, &mut w).unwrap();
        }
        Encoding::Binary => {
            let mut w = BinaryWriter::with_header(&mut out, reader.header()).unwrap();
            convert(&mut reader, &mut w).unwrap();
        }
    }
    out
}

#[test]
fn conversion_keeps_records_lines_skipped_records_and_the_header() {
    let text = "{\"streamsan_trace\":1,\"minor\":9,\"producer\":\"p\"}\n\
                {\"op\":\"stream\",\"name\":\"s\",\"id\":1,\"kind\":\"created\"}\n\
                \n  \n\
                {\"op\":\"mem_prefetch\",\"buf\":1,\"stream\":1}\n\
                {\"op\":\"launch\",\"name\":\"k\",\"stream\":1,\"reads\":[{\"buf\":1,\"off\":0,\"len\":4,\"arg\":\"x\"}]}\n";
    let binary = convert_to(text.as_bytes(), Encoding::Binary);
    assert!(binary.len() < text.len());
    let back = convert_to(&binary, Encoding::JsonLines);
    // The canonical form of the same trace: blank lines become empty lines, unknown-op records
    // keep their text.
    assert_eq!(
        String::from_utf8(back.clone()).unwrap(),
        "{\"streamsan_trace\":1,\"minor\":9,\"producer\":\"p\"}\n\
         {\"op\":\"stream\",\"name\":\"s\",\"id\":1,\"kind\":\"created\"}\n\
         \n\n\
         {\"op\":\"mem_prefetch\",\"buf\":1,\"stream\":1}\n\
         {\"op\":\"launch\",\"name\":\"k\",\"stream\":1,\"reads\":[{\"buf\":1,\"off\":0,\"len\":4,\"arg\":\"x\"}]}\n"
    );
    for bytes in [text.as_bytes(), &binary, &back] {
        let mut reader = TraceReader::new(bytes, "t").unwrap();
        let records: Vec<Record> = reader.by_ref().collect::<Result<_, _>>().unwrap();
        assert_eq!(records.iter().map(|r| r.line).collect::<Vec<_>>(), [2, 6]);
        assert_eq!(reader.skipped(), [(5, "mem_prefetch".to_string())]);
        assert_eq!(reader.header()["producer"], "p");
    }
    // Binary to binary and JSON Lines to JSON Lines are copies.
    assert_eq!(convert_to(&binary, Encoding::Binary), binary);
    assert_eq!(convert_to(&back, Encoding::JsonLines), back);
}

#[test]
fn a_later_op_in_binary_cannot_become_json() {
    let bytes = framed(V1_MINOR_9, &[(LATER_TAG, &later_op("mem_prefetch"))], true);
    let mut reader = TraceReader::new(&bytes[..], "t.sstb").unwrap();
    let mut w = TraceWriter::with_header(Vec::new(), reader.header()).unwrap();
    let e = convert(&mut reader, &mut w).unwrap_err();
    assert_eq!(
        e.to_string(),
        "t.sstb:2: cannot convert the record of op \"mem_prefetch\": this streamsan does not know \
         the op, and the binary trace holds its fields in binary (convert with the streamsan \
         that wrote the trace)"
    );
}

#[test]
fn the_example_traces_convert_back_to_the_same_bytes() {
    for name in ["sum_before_randn.jsonl", "sum_before_randn_fixed.jsonl"] {
        let path = format!("{}/examples/traces/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read(&path).unwrap();
        let binary = convert_to(&text, Encoding::Binary);
        assert_eq!(convert_to(&binary, Encoding::JsonLines), text, "{name}");
        // Source locations differ on every line here; repeated names would shrink it more.
        assert!(
            binary.len() * 3 < text.len() * 2,
            "{name}: {} bytes of binary for {} of JSON Lines",
            binary.len(),
            text.len()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Writing then reading gives the same records, numbered by line across gaps.
    #[test]
    fn round_trip(records in proptest::collection::vec((0u64..3, any_record()), 0..8)) {
        let mut w = BinaryWriter::new(Vec::new(), Map::new()).unwrap();
        let mut expected = Vec::new();
        for (gap, r) in &records {
            w.skip_lines(*gap).unwrap();
            let mut r = r.clone();
            r.line = w.next_line();
            w.write(&r).unwrap();
            expected.push(r);
        }
        w.finish().unwrap();
        let bytes = w.into_inner();
        prop_assert_eq!(read_all(&bytes).unwrap(), expected);
    }
}

// ---------------------------------------------------------------------------------------------
// Corrupt input

#[test]
fn exact_messages() {
    let at_frames = preamble(V1).len();
    let cases: Vec<(Vec<u8>, String)> = vec![
        (
            b"\x93SSTX\r\n\x1a".to_vec(),
            "t.sstb:1: at byte 4: expected the binary trace magic \"\\x93SSTB\\r\\n\\x1a\" (or a \
             JSON Lines trace), found \"\\x93SSTX\\r\\n\\x1a\""
                .into(),
        ),
        (
            b"\x93SS".to_vec(),
            "t.sstb:1: at byte 3: truncated binary trace: expected the magic \
             \"\\x93SSTB\\r\\n\\x1a\", found the end of the file"
                .into(),
        ),
        (
            [&MAGIC[..], &[2]].concat(),
            "t.sstb:1: at byte 8: unsupported binary layout version 2 (this reader reads layout \
             version 1)"
                .into(),
        ),
        (
            [&MAGIC[..], &[1, 0xff]].concat(),
            "t.sstb:1: at byte 9: truncated binary trace: expected the header's length (a \
             varint), found the end of the file"
                .into(),
        ),
        (
            [&MAGIC[..], &[1, 0x80, 0x80, 0x80, 0x80, 0x01]].concat(),
            format!(
                "t.sstb:1: at byte 9: the header is 268435456 bytes long, more than the \
                 {MAX_LINE_BYTES} a header may hold"
            ),
        ),
        (
            [&MAGIC[..], &[1, 40], b"{\"streamsan_trace\":1}"].concat(),
            "t.sstb:1: at byte 10: truncated binary trace: expected a header of 40 bytes, found \
             the end of the file after 21"
                .into(),
        ),
        (
            preamble("[1]"),
            "t.sstb:1: expected a header object {\"streamsan_trace\": 1, ...}, found an array"
                .into(),
        ),
        (
            preamble(r#"{"streamsan_trace":2}"#),
            "t.sstb:1: unsupported trace format version 2 (this reader reads version 1)".into(),
        ),
        (
            preamble("{"),
            "t.sstb:1: at byte 10: expected the header object as JSON text: EOF while parsing an \
             object at line 1 column 1"
                .into(),
        ),
        (
            preamble(V1),
            format!(
                "t.sstb:2: at byte {at_frames}: truncated binary trace: the file ends without \
                 the end frame (expected a frame tag)"
            ),
        ),
        (
            [framed(V1, &[], true), vec![0]].concat(),
            format!(
                "t.sstb:2: at byte {}: unexpected data after the end frame (a binary trace ends \
                 with its end frame)",
                at_frames + 2
            ),
        ),
        (
            framed(V1, &[(0x07, b"")], true),
            format!(
                "t.sstb:2: at byte {at_frames}: unknown frame tag 0x07 (expected an op, or \
                 0x00-0x03: end, gap, JSON record, string)"
            ),
        ),
        (
            framed(V1, &[(op_tag(OpKind::Event), &[0, 9])], true)[..at_frames + 3].to_vec(),
            format!(
                "t.sstb:2: at byte {at_frames}: truncated binary trace: an `event` record needs 2 \
                 bytes, the file ends after 1"
            ),
        ),
        (
            [
                preamble(V1),
                vec![op_tag(OpKind::Event), 0xff, 0xff, 0xff, 0xff, 0x0f],
            ]
            .concat(),
            format!(
                "t.sstb:2: at byte {at_frames}: an `event` record: the frame is 4294967295 bytes \
                 long, more than the {MAX_LINE_BYTES} a frame may hold"
            ),
        ),
        (
            framed(V1, &[(op_tag(OpKind::Event), &[0])], true),
            format!(
                "t.sstb:2: at byte {}: `event` record: `id`: expected a varint, found the end of \
                 the record",
                at_frames + 3
            ),
        ),
        (
            framed(V1, &[(op_tag(OpKind::Launch), &[flag::NAME, 5])], true),
            format!(
                "t.sstb:2: at byte {}: `launch` record: `name`: string 4 is not defined \
                 (expected an index below 0, or 0 and the text)",
                at_frames + 3
            ),
        ),
        (
            framed(V1, &[(op_tag(OpKind::Launch), &[0, 1, 0, 0])], true),
            format!(
                "t.sstb:2: at byte {}: `launch` record: missing field `name` (a `launch` record \
                 needs the kernel's name)",
                at_frames + 2
            ),
        ),
        (
            framed(
                V1,
                &[(op_tag(OpKind::Launch), &[flag::NAME, 0, 1, b'k', 1, 100])],
                true,
            ),
            format!(
                "t.sstb:2: at byte {}: `launch` record: `reads`: expected 100 accesses, but the \
                 record has only 0 bytes left",
                at_frames + 7
            ),
        ),
        (
            framed(
                V1,
                &[(
                    op_tag(OpKind::Memset),
                    &[
                        0,
                        1,
                        access_bit::RANGE,
                        0xff,
                        0xff,
                        0xff,
                        0xff,
                        0xff,
                        0xff,
                        0xff,
                        0xff,
                        0xff,
                        0x01,
                        1,
                    ],
                )],
                true,
            ),
            format!(
                "t.sstb:2: at byte {}: `memset` record: `dst`: expected off + len to fit in an \
                 unsigned 64-bit integer, found off 18446744073709551615 + len 1",
                at_frames + 15
            ),
        ),
        (
            framed(V1, &[(op_tag(OpKind::Stream), &[0, 1, 3])], true),
            format!(
                "t.sstb:2: at byte {}: `stream` record: `kind`: expected a stream kind: 0 \
                 (legacy_default), 1 (per_thread_default) or 2 (created), found 3",
                at_frames + 4
            ),
        ),
        (
            framed(
                V1,
                &[(
                    op_tag(OpKind::DeviceSync),
                    &[flag::BIT3, 0x80, 0x80, 0x80, 0x80, 0x10],
                )],
                true,
            ),
            format!(
                "t.sstb:2: at byte {}: `device_sync` record: `device`: expected a device ordinal \
                 (unsigned 32-bit integer), found 4294967296",
                at_frames + 3
            ),
        ),
        (
            framed(
                V1,
                &[(op_tag(OpKind::Alloc), &[flag::CACHING, 1, 1, 0])],
                true,
            ),
            format!(
                "t.sstb:2: at byte {}: `alloc` record: missing field `addr` (a `caching` alloc \
                 needs the block's device address: its bytes keep their history by address)",
                at_frames + 2
            ),
        ),
        (
            framed(V1, &[(tag::STRING, b"a\xffb")], true),
            format!(
                "t.sstb:2: at byte {}: string frame: expected UTF-8 text, found the invalid byte \
                 0xff",
                at_frames + 3
            ),
        ),
        (
            framed(V1, &[(tag::GAP, &[0])], true),
            format!(
                "t.sstb:2: at byte {}: gap frame: expected a number of lines (a varint, at least \
                 1, the whole body) that keeps line numbers below 2^64",
                at_frames + 2
            ),
        ),
        (
            framed(V1, &[(tag::END, &[0])], false),
            format!(
                "t.sstb:2: at byte {}: end frame: expected an empty body, found 1 bytes",
                at_frames + 2
            ),
        ),
    ];
    for (bytes, expected) in cases {
        assert_eq!(err_all(&bytes), expected);
    }
}

/// Every strict prefix of a valid trace is an error (the end frame is missing, at least), with
/// the file named; none panics.
#[test]
fn truncation_at_every_byte_is_a_clean_error() {
    let bytes = small_trace();
    for cut in 0..bytes.len() {
        let prefix = &bytes[..cut];
        let result = read_all(prefix);
        if cut == 0 {
            // Nothing at all reads as an empty JSON Lines trace.
            assert_eq!(
                result.unwrap_err().to_string(),
                "t.sstb:1: empty trace: expected line 1 to be the header {\"streamsan_trace\": 1, ...}"
            );
            continue;
        }
        let e = result.expect_err("a truncated trace must not read as complete");
        assert!(e.to_string().starts_with("t.sstb:"), "{e}");
        assert!(
            e.message.contains("truncated") || e.line == 1,
            "cut at {cut}: {e}"
        );
        // Read slowly too: the frame-by-frame path must agree.
        let slow = TraceReader::new(BufReader::with_capacity(1, prefix), "t.sstb")
            .and_then(|r| r.collect::<Result<Vec<_>, _>>());
        assert_eq!(slow.unwrap_err(), e, "cut at {cut}");
    }
    assert_eq!(read_all(&bytes).unwrap().len(), 4);
}

/// Every byte flipped in every way: a clean error or a trace, never a panic; and when it reads,
/// it reads the same fast and slow.
#[test]
fn flipped_bytes_give_clean_errors() {
    let bytes = small_trace();
    for i in 0..bytes.len() {
        for mask in [0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xff] {
            let mut mangled = bytes.clone();
            mangled[i] ^= mask;
            let fast = read_all(&mangled);
            let slow = TraceReader::new(BufReader::with_capacity(3, &mangled[..]), "t.sstb")
                .and_then(|r| r.collect::<Result<Vec<_>, _>>());
            assert_eq!(fast, slow, "byte {i} ^ {mask:#x}");
            if let Err(e) = fast {
                assert!(e.to_string().starts_with("t.sstb:"), "{e}");
                assert!(e.line >= 1);
            }
        }
    }
}

/// A length field claims far more than the input holds: an error, and the reader does not
/// allocate what the field claims.
#[test]
fn lengths_cannot_make_the_reader_allocate() {
    // A frame of 16 MiB with 3 bytes present, read through a one-byte buffer (the copying path).
    let mut bytes = preamble(V1);
    bytes.push(tag::JSON);
    varint::put(&mut bytes, MAX_LINE_BYTES as u64);
    bytes.extend_from_slice(b"{\"o");
    let reader = TraceReader::new(BufReader::with_capacity(1, &bytes[..]), "t.sstb").unwrap();
    let e = reader.collect::<Result<Vec<_>, _>>().unwrap_err();
    assert!(
        e.message.contains(
            "truncated binary trace: a JSON record needs 16777216 bytes, the file ends after 3"
        ),
        "{e}"
    );
    // A list count far beyond the body.
    let body = [flag::NAME, 0, 1, b'k', 0, 0xff, 0xff, 0xff, 0xff, 0x0f];
    let e = err_all(&framed(V1, &[(op_tag(OpKind::Launch), &body)], true));
    assert!(e.contains("`reads`: expected 4294967295 accesses"), "{e}");
    // A literal string longer than the body.
    let body = [flag::NAME, 0, 0xff, 0xff, 0x03];
    let e = err_all(&framed(V1, &[(op_tag(OpKind::Launch), &body)], true));
    assert!(
        e.contains(
            "`name`: expected 65535 bytes of a literal string, found the end of the record after 0"
        ),
        "{e}"
    );
}

/// An input that fails to read names the file and the line it was reading.
#[test]
fn io_errors_name_the_line() {
    struct Failing<'a> {
        ok: &'a [u8],
    }
    impl Read for Failing<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.ok.is_empty() {
                return Err(std::io::Error::other("disk on fire"));
            }
            let n = self.ok.len().min(buf.len());
            buf[..n].copy_from_slice(&self.ok[..n]);
            self.ok = &self.ok[n..];
            Ok(n)
        }
    }
    let bytes = small_trace();
    let header_end = preamble(r#"{"streamsan_trace":1,"minor":1}"#).len();
    let failing = Failing {
        ok: &bytes[..header_end + 5],
    };
    let reader = TraceReader::new(BufReader::with_capacity(8, failing), "t.sstb").unwrap();
    let e = reader.collect::<Result<Vec<_>, _>>().unwrap_err();
    assert_eq!(e.to_string(), "t.sstb:2: cannot read: disk on fire");
    let failing = Failing {
        ok: &bytes[..header_end - 5],
    };
    let e = TraceReader::new(BufReader::with_capacity(8, failing), "t.sstb").unwrap_err();
    assert_eq!(e.to_string(), "t.sstb:1: cannot read: disk on fire");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary bytes after the magic: no panic, and the same verdict fast and slow.
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut bytes = preamble(V1_MINOR_9);
        bytes.extend_from_slice(&body);
        let fast = read_all(&bytes);
        let slow = TraceReader::new(BufReader::with_capacity(5, &bytes[..]), "t.sstb")
            .and_then(|r| r.collect::<Result<Vec<_>, _>>());
        prop_assert_eq!(fast, slow);
        let _ = read_all(&[&MAGIC[..], &body].concat());
    }

    /// Any record's frames with a byte replaced, dropped or inserted: no panic.
    #[test]
    fn mangled_records_never_panic(r in any_record(), at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let bytes = encoded(std::slice::from_ref(&r));
        let start = preamble(r#"{"streamsan_trace":1,"minor":1}"#).len();
        let i = start + at.index(bytes.len() - start);
        for variant in 0..3 {
            let mut mangled = bytes.clone();
            match variant {
                0 => { mangled.remove(i); }
                1 => mangled[i] = byte,
                _ => mangled.insert(i, byte),
            }
            let _ = read_all(&mangled);
        }
    }
}

/// Not a timed test: prints the binary decoder's records/s on the benchmark's synthetic
/// workload (best of 3, on-CPU time, as the JSON Lines reader's own measurement does). Run with
/// `cargo test --release --lib trace::binary::tests::throughput -- --ignored --nocapture`.
#[test]
#[ignore = "throughput measurement, run in release by hand"]
fn throughput() {
    const RECORDS: u64 = 2_000_000;
    let cpu = crate::trace::reader::tests::thread_cpu_secs;
    // Launches with a kernel name, two reads, a write, byte ranges on some; a sync in 20.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut w = BinaryWriter::new(Vec::new(), Map::new()).unwrap();
    for i in 0..RECORDS {
        let stream = rand() % 8;
        let r = if i % 20 == 19 {
            record(Op::StreamSync { stream })
        } else {
            launch(
                ["gemm", "axpy", "reduce", "softmax"][(rand() % 4) as usize],
                stream,
                vec![
                    Access::bytes(rand() % 10_000, 0, 4096),
                    Access::whole(rand() % 10_000),
                ],
                vec![Access::whole(rand() % 10_000)],
            )
        };
        w.write(&r).unwrap();
    }
    w.finish().unwrap();
    let bytes = w.into_inner();
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = cpu().unwrap_or(0.0);
        let t = std::time::Instant::now();
        let reader =
            TraceReader::new(BufReader::with_capacity(1 << 16, &bytes[..]), "t.sstb").unwrap();
        let mut n = 0u64;
        for r in reader {
            std::hint::black_box(r.unwrap());
            n += 1;
        }
        assert_eq!(n, RECORDS);
        let secs = cpu().map_or(t.elapsed().as_secs_f64(), |end| end - start);
        best = best.min(secs);
    }
    println!(
        "{:.1} bytes/record: {:.2} M records/s on-CPU",
        bytes.len() as f64 / RECORDS as f64,
        RECORDS as f64 / best / 1e6
    );
}
