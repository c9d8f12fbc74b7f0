//! Writer tests: the exact lines, the round trip through the reader for arbitrary records of
//! every op, one `write` call per record, and the records the format cannot express.

use crate::trace::record::Pool;
use std::io;

use proptest::prelude::*;

use super::*;
use crate::trace::TraceReader;
use crate::trace::arbitrary::any_record;
use crate::trace::record::{MemSpace, StreamKind};

fn record(op: Op) -> Record {
    Record {
        line: 0,
        thread: 0,
        at: None,
        name: None,
        op,
    }
}

/// The lines (header included) `records` are written as.
fn written(records: &[Record]) -> String {
    let mut w = TraceWriter::new(Vec::new(), Map::new()).unwrap();
    for r in records {
        w.write(r).unwrap();
    }
    String::from_utf8(w.into_inner()).unwrap()
}

#[test]
fn lines_leave_defaults_out() {
    let text = written(&[
        record(Op::Stream {
            id: 1,
            device: 0,
            kind: StreamKind::Created,
            flags: StreamFlags::Blocking,
        }),
        Record {
            thread: 2,
            at: Some("a.rs:3:4".into()),
            name: Some("k\"1".into()),
            ..record(Op::Launch {
                stream: 1,
                reads: vec![Access::whole(1), Access::bytes(2, 0, 8).arg("x")],
                writes: vec![],
                atomics: Vec::new(),
            })
        },
        record(Op::Alloc {
            buf: 3,
            bytes: 16,
            device: 1,
            space: MemSpace::Pinned,
            stream: Some(1),
            addr: None,
            pool: Pool::Driver,
        }),
        record(Op::Memcpy {
            stream: 0,
            src: Access::whole(3).arg("src"),
            dst: Access::whole(1),
            blocking: false,
        }),
    ]);
    assert_eq!(
        text,
        "{\"streamsan_trace\":1,\"minor\":3}\n\
         {\"op\":\"stream\",\"id\":1,\"kind\":\"created\"}\n\
         {\"op\":\"launch\",\"name\":\"k\\\"1\",\"stream\":1,\"reads\":[1,{\"buf\":2,\"off\":0,\"len\":8,\"arg\":\"x\"}],\"thread\":2,\"at\":\"a.rs:3:4\"}\n\
         {\"op\":\"alloc\",\"buf\":3,\"bytes\":16,\"device\":1,\"space\":\"pinned\",\"stream\":1}\n\
         {\"op\":\"memcpy\",\"stream\":0,\"src\":{\"buf\":3,\"arg\":\"src\"},\"dst\":1,\"blocking\":false}\n"
    );
}

#[test]
fn header_extra_follows_the_version() {
    let mut extra = Map::new();
    extra.insert("streamsan_trace".into(), Value::from(7));
    extra.insert("producer".into(), Value::from("streamsan 0.1.0"));
    extra.insert("devices".into(), serde_json::json!([{"name": "H200"}]));
    let w = TraceWriter::new(Vec::new(), extra).unwrap();
    assert_eq!(w.next_line(), 2);
    let text = String::from_utf8(w.into_inner()).unwrap();
    assert!(text.starts_with("{\"streamsan_trace\":1,"), "{text}");
    let reader = TraceReader::new(text.as_bytes(), "t").unwrap();
    assert_eq!(reader.header()["producer"], "streamsan 0.1.0");
    assert_eq!(reader.header()["devices"][0]["name"], "H200");
    assert_eq!(reader.header()["streamsan_trace"], 1);
}

#[test]
fn example_traces_are_canonical() {
    for name in ["sum_before_randn", "sum_before_randn_fixed"] {
        let path = format!(
            "{}/examples/traces/{name}.jsonl",
            env!("CARGO_MANIFEST_DIR")
        );
        let original = std::fs::read_to_string(&path).unwrap();
        let mut reader = TraceReader::open(&path).unwrap();
        let mut w = TraceWriter::new(Vec::new(), reader.header().clone()).unwrap();
        for r in reader.by_ref() {
            let r = r.unwrap();
            assert_eq!(r.line, w.next_line());
            w.write(&r).unwrap();
        }
        assert_eq!(
            String::from_utf8(w.into_inner()).unwrap(),
            original,
            "{name}"
        );
    }
}

/// Counts `write` calls; takes every byte at once.
#[derive(Default)]
struct Counting {
    writes: usize,
    bytes: Vec<u8>,
}

impl Write for Counting {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writes += 1;
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn one_write_per_record() {
    let mut w = TraceWriter::new(Counting::default(), Map::new()).unwrap();
    assert_eq!(w.get_ref().writes, 1);
    let r = Record {
        name: Some("k".into()),
        at: Some("a.rs:1:1".into()),
        ..record(Op::Launch {
            stream: 0,
            reads: vec![Access::whole(1); 50],
            writes: vec![Access::bytes(2, 4, 4).arg("out")],
            atomics: Vec::new(),
        })
    };
    for _ in 0..3 {
        w.write(&r).unwrap();
    }
    w.flush().unwrap();
    assert_eq!(w.get_ref().writes, 4);
    assert_eq!(w.get_ref().bytes.iter().filter(|&&b| b == b'\n').count(), 4);
}

#[test]
fn inexpressible_records_are_refused_whole() {
    let mut w = TraceWriter::new(Counting::default(), Map::new()).unwrap();
    let nameless = record(Op::Launch {
        stream: 0,
        reads: vec![],
        writes: vec![],
        atomics: Vec::new(),
    });
    let e = w.write(&nameless).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let overflowing = record(Op::Memset {
        stream: 0,
        dst: Access::bytes(1, u64::MAX, 1),
        blocking: true,
    });
    assert_eq!(
        w.write(&overflowing).unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(w.get_ref().writes, 1);
    assert_eq!(w.next_line(), 2);

    let mut out = b"keep".to_vec();
    assert!(encode(&overflowing, &mut out).is_err());
    assert_eq!(out, b"keep");
}

// ---------------------------------------------------------------------------------------------
// Round trip

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Writing then reading gives the same records, numbered by line.
    #[test]
    fn round_trip(records in proptest::collection::vec(any_record(), 0..8)) {
        let text = written(&records);
        let reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
        let back: Vec<Record> = reader.collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(back.len(), records.len());
        for (i, (mut original, read)) in records.into_iter().zip(back).enumerate() {
            original.line = i as u64 + 2;
            prop_assert_eq!(original, read);
        }
    }
}

/// The byte rule: what JSON lets a string hold as it is (no control character, quote or
/// backslash), and no DEL.
fn plain_byte(b: u8) -> bool {
    b >= 0x20 && b != b'"' && b != b'\\' && b != 0x7f
}

#[test]
fn the_word_at_a_time_check_agrees_with_the_bytes_one() {
    // Every byte value at every position of strings of 1 to 24 bytes (both sides of each
    // eight-byte word, and the tail), among plain bytes and a multi-byte UTF-8 character's.
    for len in 1..=24 {
        for at in 0..len {
            for b in 0..=255u8 {
                let mut s: Vec<u8> = "é".bytes().cycle().take(len).collect();
                s[at] = b;
                let bytewise = s.iter().all(|&c| plain_byte(c));
                assert_eq!(plain(&s), bytewise, "byte {b:#x} at {at} of {len}");
            }
        }
    }
    assert!(plain(b""));
    assert!(plain(
        "kernel<float>(int*, int) at src/main.rs:12:5".as_bytes()
    ));
    assert!(!plain(b"tab\there and more bytes"));
}

#[test]
fn numbers_are_written_as_format_writes_them() {
    let mut samples: Vec<u64> = (0..=1000).collect();
    for p in 1..20 {
        let ten = 10u64.pow(p);
        samples.extend([ten - 1, ten, ten + 1]);
        samples.extend(ten.checked_mul(9).map(|nines| nines + ten / 2));
    }
    samples.extend([u64::MAX, u64::MAX - 1, 1 << 63, 1 << 32]);
    for v in samples {
        let mut digits = [0; 20];
        assert_eq!(decimal(v, &mut digits), v.to_string().as_bytes(), "{v}");
        let text = v.to_string();
        // In any room, from none to more than the eight bytes the digits may be stored as:
        // the length counted whole, the digits that fit written, the bytes past the room's
        // end untouched.
        for room in 0..=text.len() + 9 {
            let mut out = [b'#'; 30];
            let mut line = Line {
                buf: &mut out[..room],
                len: 0,
            };
            line.num(v);
            assert_eq!(line.len, text.len(), "{v} in {room} bytes");
            if room >= text.len() {
                assert_eq!(&out[..text.len()], text.as_bytes(), "{v} in {room} bytes");
            }
            assert!(
                out[room..].iter().all(|&b| b == b'#'),
                "{v} in {room} bytes"
            );
        }
    }
}

#[test]
fn op_names_need_no_escaping() {
    // Lines write the op name as it is.
    for name in crate::trace::record::OpKind::ALL.iter().map(|k| k.as_str()) {
        assert!(plain(name.as_bytes()) && !name.is_empty(), "{name}");
    }
}

#[test]
fn lines_from_parts_are_the_records_lines() {
    let mut r = record(Op::Wait {
        stream: 3,
        event: 12,
    });
    r.name = Some("cudarc:write-event of b45".into());
    r.thread = 2;
    r.at = Some("src/a \"b\".rs:1:2".into());
    let mut whole = Vec::new();
    encode(&r, &mut whole).unwrap();
    let mut parts = Vec::new();
    let at = json_string(r.at.as_deref().unwrap());
    encode_parts(
        &r.op,
        NameText::Numbered("cudarc:write-event of b", 45),
        2,
        AtText::Json(&at),
        &mut parts,
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(parts).unwrap(),
        String::from_utf8(whole).unwrap()
    );
}

#[test]
fn a_line_longer_than_its_first_room_is_written_whole() {
    // Over the 256 bytes set aside at first: written again with the room it needs.
    let mut r = record(Op::Launch {
        stream: 1,
        reads: (0..200).map(Access::whole).collect(),
        writes: vec![],
        atomics: vec![],
    });
    r.name = Some("k".repeat(300) + "\"quoted\"");
    let mut out = b"before\n".to_vec();
    encode(&r, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let line = text.strip_prefix("before\n").unwrap();
    assert!(line.len() > 256 && line.ends_with("}\n"), "{line}");
    let back: Vec<Record> =
        TraceReader::new(format!("{{\"streamsan_trace\":1}}\n{line}").as_bytes(), "t")
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
    r.line = 2;
    assert_eq!(back, vec![r]);
}

/// Pushes `records` into `lines` as the online layer does, from their parts.
fn push_all(lines: &mut LineBuf, records: &[Record]) -> io::Result<()> {
    for r in records {
        let name = r.name.as_deref().map_or(NameText::None, NameText::Text);
        let at = r.at.as_deref().map_or(AtText::None, AtText::Text);
        lines.push(&r.op, name, r.thread, at)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// A line buffer holds the lines `encode` writes, across its growth and reuse.
    #[test]
    fn a_line_buffer_holds_the_lines_encode_writes(
        records in proptest::collection::vec(any_record(), 0..64),
    ) {
        let mut expected = Vec::new();
        for r in &records {
            encode(r, &mut expected).unwrap();
        }
        let mut lines = LineBuf::new();
        for round in 0..2 {
            push_all(&mut lines, &records).unwrap();
            prop_assert_eq!(lines.as_bytes(), &expected[..], "round {}", round);
            lines.clear();
            prop_assert!(lines.is_empty());
        }
    }
}

#[test]
fn a_line_buffer_grows_for_long_lines_and_keeps_nothing_of_a_failed_one() {
    // A launch of 1,000 named accesses is longer than the buffer's first room, twice over.
    let mut long = record(Op::Launch {
        stream: 1,
        reads: (0..1000)
            .map(|b| Access {
                arg: Some(format!("x{b}")),
                ..Access::whole(b)
            })
            .collect(),
        writes: vec![],
        atomics: vec![],
    });
    long.name = Some("k".into());
    let short = record(Op::StreamSync { stream: 2 });
    let records = [short.clone(), long, short];
    let mut expected = Vec::new();
    for r in &records {
        encode(r, &mut expected).unwrap();
    }
    assert!(expected.len() > 2 * 4096, "{}", expected.len());
    let mut lines = LineBuf::new();
    push_all(&mut lines, &records).unwrap();
    assert_eq!(lines.as_bytes(), &expected[..]);
    // A record the format cannot express appends nothing.
    let unnamed = record(Op::Launch {
        stream: 1,
        reads: vec![],
        writes: vec![],
        atomics: vec![],
    });
    assert!(push_all(&mut lines, &[unnamed]).is_err());
    assert_eq!(lines.as_bytes(), &expected[..]);
}

#[test]
fn short_copies_copy_every_length() {
    let src: Vec<u8> = (1..=100).collect();
    for n in 0..=100 {
        let mut dst = vec![0; n];
        copy_short(&mut dst, &src[..n]);
        assert_eq!(dst, &src[..n], "{n}");
    }
}
