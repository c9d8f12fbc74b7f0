//! Differential tests of the two parsers: wherever the fast path (`scan`) answers, the serde
//! path must give the same `Ok`; `parse_line` as a whole must give exactly what the serde path
//! gives, errors included; and the fast path must actually take the lines real traces hold.
//! Lines come from every trace under `tests/` and `examples/`, from the writer, and from
//! proptest (generated field by field, and mutated).

use std::cell::Cell;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// A proptest runner of `cases` cases that keeps no failure files (the tests print the line).
fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

use super::fields::FieldName;
use super::*;
use crate::trace::record::{
    Access, ByteRange, MemSpace, Op, Pool, Record, StreamFlags, StreamKind,
};
use crate::trace::writer::encode;

/// What the parsers made of lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Tally {
    lines: usize,
    /// The serde path read them.
    ok: usize,
    /// The fast path took them (either tier).
    fast: usize,
    /// The writer-layout tier took them.
    written: usize,
    /// The general tier took them (run on every line, whatever the writer-layout tier did).
    any: usize,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.lines += other.lines;
        self.ok += other.ok;
        self.fast += other.fast;
        self.written += other.written;
        self.any += other.any;
    }
}

/// Runs every parser on `line`, with and without unknown ops allowed: each tier of the fast
/// path (`scan_written`, `scan_any`), the serde path, and `parse_line`. Panics where a tier
/// answers and the serde path does not give the same `Ok`, or where `parse_line` differs from
/// the serde path in any way (value, message, column). Counts the run without unknown ops.
fn compare(line: &str) -> Tally {
    let mut tally = Tally {
        lines: 1,
        ..Tally::default()
    };
    for allow_unknown_ops in [false, true] {
        let slow = parse_with_serde(line, allow_unknown_ops);
        let written = scan::scan_written(line);
        let any = scan::scan_any(line, allow_unknown_ops);
        for (tier, fast) in [("writer-layout", &written), ("general", &any)] {
            if let Some(fast) = fast {
                match &slow {
                    Ok(slow) => assert_eq!(fast, slow, "the {tier} tier differs on {line:?}"),
                    Err(e) => panic!("the {tier} tier took {line:?}; serde says {}", e.message),
                }
            }
        }
        let fast = scan::scan_line(line, allow_unknown_ops);
        assert_eq!(
            fast.is_some(),
            written.is_some() || any.is_some(),
            "{line:?}"
        );
        match (parse_line(line, allow_unknown_ops), &slow) {
            (Ok(a), Ok(b)) => assert_eq!(&a, b, "{line:?}"),
            (Err(a), Err(b)) => {
                assert_eq!(
                    (a.column, &a.message, a.incomplete),
                    (b.column, &b.message, b.incomplete),
                    "{line:?}"
                );
            }
            (a, b) => panic!("parse_line gives {a:?} and serde {b:?} on {line:?}"),
        }
        if !allow_unknown_ops {
            tally.ok += usize::from(slow.is_ok());
            tally.fast += usize::from(fast.is_some());
            tally.written += usize::from(written.is_some());
            tally.any += usize::from(any.is_some());
        }
    }
    tally
}

// ---------------------------------------------------------------------------------------------
// Vocabulary

#[test]
fn every_field_name_reads_back() {
    for field in FieldName::ALL {
        let expected = match field {
            FieldName::Other => continue,
            field => field,
        };
        assert_eq!(FieldName::parse(field.name()), expected);
    }
    for other in [
        "",
        "?",
        "o",
        "opx",
        "Op",
        "reads ",
        "stream_",
        "streamsan_trac",
    ] {
        assert_eq!(FieldName::parse(other), FieldName::Other, "{other}");
    }
    // `ALL` is complete: the discriminants are 0.. in order.
    for (i, field) in FieldName::ALL.into_iter().enumerate() {
        assert_eq!(field as usize, i);
    }
}

// ---------------------------------------------------------------------------------------------
// Real traces

/// Every line of every trace in the repository (corpus, fixtures, CLI cases, examples), as the
/// reader hands lines over: split at `\n`, one `\r` before it dropped, invalid UTF-8 left out
/// (the reader rejects it before parsing).
#[test]
fn both_paths_agree_on_every_trace_in_the_repository() {
    let files = crate::trace::repository_traces::repository_traces();
    assert!(files.len() > 100, "found only {} traces", files.len());
    let mut total = Tally::default();
    let mut declined = Vec::new();
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        for raw in bytes.split(|&b| b == b'\n') {
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            let Ok(line) = std::str::from_utf8(raw) else {
                continue;
            };
            let tally = compare(line);
            if tally.ok > tally.fast {
                declined.push(line.to_owned());
            }
            total.add(tally);
        }
    }
    eprintln!(
        "{} files, {} lines: serde reads {} as records, the fast path takes {} \
         (the writer-layout tier {}, the general tier {} on its own)",
        files.len(),
        total.lines,
        total.ok,
        total.fast,
        total.written,
        total.any
    );
    // The fast path leaves valid records to serde only for escapes in strings.
    for line in &declined {
        assert!(line.contains('\\'), "the fast path declined {line:?}");
    }
    assert!(total.fast > 2000, "{total:?}");
    assert!(declined.len() * 100 < total.ok, "{declined:#?}");
}

/// Not run by default: every line of the trace named by `STREAMSAN_PARSE_TRACE`, for a trace
/// too large to keep in the repository, such as the benchmark's synthetic workload
/// (`streamsan_demos::synth` written by `TraceWriter`:
/// `cargo bench --bench throughput -- --write PATH N`).
#[test]
#[ignore = "needs a trace file, run by hand"]
fn both_paths_agree_on_a_trace_file() {
    let Ok(path) = std::env::var("STREAMSAN_PARSE_TRACE") else {
        return;
    };
    let text = std::fs::read_to_string(path).unwrap();
    let mut total = Tally::default();
    for line in text.lines() {
        let tally = compare(line);
        if tally.ok > tally.fast {
            assert!(line.contains('\\'), "the fast path declined {line:?}");
        }
        total.add(tally);
    }
    eprintln!("{total:?}");
}

// ---------------------------------------------------------------------------------------------
// Records as the writer writes them

fn arb_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..20u64,
        2 => any::<u64>(),
        1 => prop::sample::select(vec![
            u64::MAX,
            u64::MAX - 1,
            u64::from(u32::MAX),
            1 << 32,
            10_000_000_000_000_000_000,
        ]),
    ]
}

fn arb_device() -> impl Strategy<Value = u32> {
    prop_oneof![4 => Just(0u32), 2 => 0..4u32, 1 => Just(u32::MAX), 1 => any::<u32>()]
}

/// Names, source locations and argument names: plain, non-ASCII, or needing escapes.
fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z_]{1,10}",
        2 => "[a-z/]{1,8}\\.rs:[0-9]{1,3}:[0-9]{1,2}",
        1 => "\\PC{0,8}",
        1 => any::<String>(),
        1 => prop::sample::select(vec!["", "名前", "é", "a\"b", "a\\b", "tab\t", "\u{1}", "\u{7f}"])
            .prop_map(str::to_owned),
    ]
}

fn arb_access() -> impl Strategy<Value = Access> {
    (
        arb_u64(),
        prop::option::weighted(0.3, (arb_u64(), arb_u64())),
        prop::option::weighted(0.3, arb_text()),
    )
        .prop_map(|(buf, range, arg)| Access {
            buf,
            range: range.map(|(off, len)| ByteRange {
                off,
                len: len.min(u64::MAX - off),
            }),
            arg,
        })
}

fn arb_accesses() -> impl Strategy<Value = Vec<Access>> {
    prop::collection::vec(arb_access(), 0..4)
}

fn arb_op() -> impl Strategy<Value = Op> {
    let u = arb_u64;
    prop_oneof![
        1 => (u(), arb_device(), 0..3usize, any::<bool>()).prop_map(|(id, device, kind, nb)| {
            Op::Stream {
                id,
                device,
                kind: [
                    StreamKind::LegacyDefault,
                    StreamKind::PerThreadDefault,
                    StreamKind::Created,
                ][kind],
                flags: if nb {
                    StreamFlags::NonBlocking
                } else {
                    StreamFlags::Blocking
                },
            }
        }),
        1 => u().prop_map(|id| Op::Event { id }),
        1 => u().prop_map(|id| Op::EventDestroy { id }),
        1 => u().prop_map(|id| Op::StreamDestroy { id }),
        1 => (
            (u(), u(), arb_device(), 0..4usize),
            (prop::option::of(u()), prop::option::of(u()), any::<bool>())
        )
            .prop_map(|((buf, bytes, device, space), (stream, addr, caching))| {
                let space = [
                    MemSpace::Device,
                    MemSpace::Pinned,
                    MemSpace::Managed,
                    MemSpace::Host,
                ][space];
                // A caching block needs its address.
                let pool = if caching && addr.is_some() {
                    Pool::Caching
                } else {
                    Pool::Driver
                };
                Op::Alloc {
                    buf,
                    bytes,
                    device,
                    space,
                    stream,
                    addr,
                    pool,
                }
            }),
        1 => (u(), prop::option::of(u())).prop_map(|(buf, stream)| Op::Free { buf, stream }),
        4 => (u(), arb_accesses(), arb_accesses()).prop_map(|(stream, reads, writes)| {
            Op::Launch {
                stream,
                reads,
                writes, atomics: Vec::new(),
            }
        }),
        1 => (u(), arb_access(), arb_access(), any::<bool>()).prop_map(|(stream, src, dst, b)| {
            Op::Memcpy {
                stream,
                src,
                dst,
                blocking: b,
            }
        }),
        1 => (u(), arb_access(), any::<bool>()).prop_map(|(stream, dst, blocking)| Op::Memset {
            stream,
            dst,
            blocking
        }),
        1 => (u(), arb_accesses(), arb_accesses()).prop_map(|(stream, reads, writes)| {
            Op::HostFunc {
                stream,
                reads,
                writes,
            }
        }),
        1 => (arb_accesses(), arb_accesses())
            .prop_map(|(reads, writes)| Op::HostAccess { reads, writes }),
        1 => (u(), u()).prop_map(|(event, stream)| Op::Record { event, stream }),
        1 => (u(), u()).prop_map(|(stream, event)| Op::Wait { stream, event }),
        1 => u().prop_map(|event| Op::EventSync { event }),
        1 => (u(), any::<bool>()).prop_map(|(event, done)| Op::EventQuery { event, done }),
        1 => u().prop_map(|stream| Op::StreamSync { stream }),
        1 => (u(), any::<bool>()).prop_map(|(stream, done)| Op::StreamQuery { stream, done }),
        1 => arb_device().prop_map(|device| Op::DeviceSync { device }),
        1 => (u(), u()).prop_map(|(buf, stream)| Op::RecordStream { buf, stream }),
        1 => (u(), u()).prop_map(|(graph, stream)| Op::GraphBegin { graph, stream }),
        1 => (u(), u()).prop_map(|(graph, stream)| Op::GraphEnd { graph, stream }),
        1 => (u(), u()).prop_map(|(graph, stream)| Op::GraphLaunch { graph, stream }),
        1 => u().prop_map(|graph| Op::GraphDestroy { graph }),
    ]
}

fn arb_record() -> impl Strategy<Value = Record> {
    (
        prop_oneof![4 => Just(0u64), 1 => arb_u64()],
        prop::option::weighted(0.3, arb_text()),
        prop::option::weighted(0.7, arb_text()),
        arb_op(),
    )
        .prop_map(|(thread, at, name, op)| {
            // A launch needs its kernel name.
            let name = match op {
                Op::Launch { .. } => Some(name.unwrap_or_else(|| "k".into())),
                _ => name,
            };
            Record {
                line: 0,
                thread,
                at,
                name,
                op,
            }
        })
}

/// The writer's line for `record`, without its newline.
fn written(record: &Record) -> String {
    let mut line = Vec::new();
    encode(record, &mut line).unwrap();
    line.pop();
    String::from_utf8(line).unwrap()
}

/// The top-level `"key":value` members of a written line, split at its commas.
fn members(line: &str) -> Vec<&str> {
    let inner = &line[1..line.len() - 1];
    let (mut out, mut start, mut depth, mut in_string, mut escaped) =
        (Vec::new(), 0, 0i32, false, false);
    for (i, b) in inner.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' if in_string => escaped = true,
            b'"' => in_string = !in_string,
            _ if in_string => {}
            b'[' | b'{' => depth += 1,
            b']' | b'}' => depth -= 1,
            b',' if depth == 0 => {
                out.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&inner[start..]);
    out
}

/// `line` with whitespace after every `:` and `,` outside strings (`json.dumps` style) and
/// around the object: `ws` cycles through the whitespace used.
fn spaced(line: &str, ws: &[&str]) -> String {
    let mut out = String::with_capacity(line.len() * 2);
    let mut next_ws = ws.iter().cycle();
    let (mut in_string, mut escaped) = (false, false);
    out.push_str(next_ws.next().copied().unwrap_or(""));
    for c in line.chars() {
        out.push(c);
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            ':' | ',' if !in_string => out.push_str(next_ws.next().copied().unwrap_or(" ")),
            _ => {}
        }
    }
    out.push_str(next_ws.next().copied().unwrap_or(""));
    out
}

fn arb_whitespace() -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(
        prop::sample::select(vec![" ", " ", "", "  ", "\t", "\r", "\n", " \r\n\t"]),
        1..6,
    )
}

/// Every record the writer writes is read by the fast path (unless a string needed an escape),
/// compact, with spaces, and with its fields in any order, to the same record as serde_json.
#[test]
fn fast_path_takes_every_written_record() {
    let taken = Cell::new(0usize);
    let mut runner = runner(3000);
    let strategy = (arb_record(), arb_whitespace()).prop_flat_map(|(record, ws)| {
        let line = written(&record);
        let n = members(&line).len();
        (
            Just(record),
            Just(line),
            Just(ws),
            Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
        )
    });
    runner
        .run(&strategy, |(record, line, ws, order)| {
            let parts = members(&line);
            let shuffled = format!(
                "{{{}}}",
                order
                    .iter()
                    .map(|&i| parts[i])
                    .collect::<Vec<_>>()
                    .join(",")
            );
            for (i, text) in [line.clone(), spaced(&line, &ws), spaced(&shuffled, &ws)]
                .into_iter()
                .enumerate()
            {
                let tally = compare(&text);
                prop_assert_eq!(tally.ok, 1, "{}", text);
                let plain = !text.contains('\\');
                prop_assert_eq!(tally.fast == 1, plain, "{}", text);
                prop_assert_eq!(tally.any == 1, plain, "{}", text);
                // The writer's own line is the writer-layout tier's.
                if i == 0 {
                    prop_assert_eq!(tally.written == 1, plain, "{}", text);
                }
                if let Ok(Parsed::Record(read)) = parse_line(&text, false) {
                    prop_assert_eq!(&read, &record);
                }
                taken.set(taken.get() + tally.fast);
            }
            Ok(())
        })
        .unwrap();
    assert!(
        taken.get() > 3000,
        "the fast path took {} lines",
        taken.get()
    );
}

// ---------------------------------------------------------------------------------------------
// Lines generated field by field: orders, spaces, edge numbers, escapes, duplicates, junk

const NUMBERS: &[&str] = &[
    "0",
    "1",
    "7",
    "4096",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999",
    "-1",
    "-0",
    "0.0",
    "1.0",
    "1.5",
    "1e3",
    "1E3",
    "1e+3",
    "1e-3",
    "01",
    "00",
    "+1",
    "1.",
    ".5",
    "1e",
    "-",
    "0x1",
    "1_0",
];

const STRINGS: &[&str] = &[
    r#""""#,
    r#""gemm""#,
    r#""a.rs:1:2""#,
    r#""名前""#,
    r#""k\u00e9""#,
    r#""a\"b""#,
    r#""a\\b""#,
    r#""\n""#,
    "\"tab\tin\"",
    r#""\x""#,
    r#""\ud800""#,
    r#""unterminated"#,
];

const JUNK: &[&str] = &[
    "true",
    "false",
    "null",
    "tru",
    "nul",
    "fals",
    "[]",
    "{}",
    "[1,2]",
    "[1,]",
    "[,]",
    "{\"a\":1}",
    "{\"a\":[1,{\"b\":null}]}",
    "{\"a\"}",
    "{\"a\":}",
    "{a:1}",
    "[[[[]]]]",
    "]",
    "}",
    ",",
    ":",
    "",
];

fn quoted_set(names: &[&'static str]) -> BoxedStrategy<String> {
    prop::sample::select(names.to_vec())
        .prop_map(|s| format!("\"{s}\""))
        .boxed()
}

fn from(set: &'static [&'static str]) -> BoxedStrategy<String> {
    prop::sample::select(set).prop_map(str::to_owned).boxed()
}

fn number() -> BoxedStrategy<String> {
    prop_oneof![12 => (0..20_000u64).prop_map(|n| n.to_string()), 1 => from(NUMBERS)].boxed()
}

/// Any value: mostly sensible, sometimes not.
fn anything() -> BoxedStrategy<String> {
    prop_oneof![number(), from(STRINGS), from(JUNK)].boxed()
}

/// Whitespace between tokens, usually none.
fn ws() -> BoxedStrategy<&'static str> {
    prop::sample::select(vec!["", "", "", "", " ", "\t", "\r", "\n", "  "]).boxed()
}

fn access_text() -> BoxedStrategy<String> {
    let key = prop::sample::select(vec!["buf", "buf", "off", "len", "arg", "x", "buf"]);
    let member = (key, ws(), ws()).prop_flat_map(|(key, w1, w2)| {
        let value = match key {
            "arg" => prop_oneof![4 => from(STRINGS), 1 => anything()].boxed(),
            "x" => anything(),
            _ => prop_oneof![8 => number(), 1 => Just("null".to_string()), 1 => anything()].boxed(),
        };
        value.prop_map(move |v| format!("\"{key}\"{w1}:{w2}{v}"))
    });
    prop_oneof![
        3 => number(),
        3 => prop::collection::vec(member, 0..5).prop_map(|m| format!("{{{}}}", m.join(","))),
        1 => anything(),
    ]
    .boxed()
}

fn access_list_text() -> BoxedStrategy<String> {
    prop_oneof![
        8 => (prop::collection::vec(access_text(), 0..4), ws())
            .prop_map(|(items, w)| format!("[{w}{}{w}]", items.join(&format!("{w},")))),
        1 => Just("null".to_string()),
        1 => anything(),
    ]
    .boxed()
}

const OPS: &[&str] = &[
    "stream",
    "event",
    "event_destroy",
    "alloc",
    "free",
    "launch",
    "memcpy",
    "memset",
    "host_func",
    "host_access",
    "record",
    "wait",
    "event_sync",
    "event_query",
    "stream_sync",
    "stream_query",
    "device_sync",
    "record_stream",
    "graph_begin",
    "graph_end",
    "graph_launch",
    "graph_destroy",
    "stream_destroy",
];

/// A value for `key`: of the field's type most of the time.
fn value_for(key: &'static str) -> BoxedStrategy<String> {
    let typed = match key {
        "op" => prop_oneof![
            9 => quoted_set(OPS),
            1 => quoted_set(&["lunch", "future_op", "Launch", ""]),
            1 => from(&[r#""laun\u0063h""#]),
        ]
        .boxed(),
        "at" | "name" => prop_oneof![
            4 => "\"[a-z_.:0-9]{0,10}\"".boxed(),
            1 => from(STRINGS),
        ]
        .boxed(),
        "kind" => quoted_set(&["legacy_default", "per_thread_default", "created", "default"]),
        "flags" => quoted_set(&["blocking", "non_blocking", "nonblocking"]),
        "space" => quoted_set(&["device", "pinned", "managed", "host", "Device"]),
        "pool" => quoted_set(&["driver", "caching", "other"]),
        "blocking" | "done" => from(&["true", "false"]),
        "reads" | "writes" => access_list_text(),
        "src" | "dst" => access_text(),
        "streamsan_trace" | "x" | "minor" | "" | "o\\u0070" | "future" => anything(),
        _ => number(),
    };
    prop_oneof![40 => typed, 1 => Just("null".to_string()), 1 => anything()].boxed()
}

const KEYS: &[&str] = &[
    "thread",
    "at",
    "name",
    "id",
    "device",
    "kind",
    "flags",
    "buf",
    "bytes",
    "space",
    "stream",
    "addr",
    "reads",
    "writes",
    "src",
    "dst",
    "blocking",
    "event",
    "done",
    "pool",
    "graph",
    "streamsan_trace",
    "x",
    "minor",
    "",
    "o\\u0070",
    "future",
    "op",
];

fn member(key: &'static str) -> BoxedStrategy<String> {
    (value_for(key), ws(), ws(), ws(), ws())
        .prop_map(move |(v, a, b, c, d)| format!("{a}\"{key}\"{b}:{c}{v}{d}"))
        .boxed()
}

/// The fields an op needs (`raw.rs`), so that most generated lines are valid.
fn required(op: &str) -> &'static [&'static str] {
    match op {
        "stream" => &["id", "kind"],
        "event" | "event_destroy" | "stream_destroy" => &["id"],
        "alloc" => &["buf", "bytes", "space"],
        "free" => &["buf"],
        "launch" => &["stream", "name"],
        "memcpy" => &["stream", "src", "dst", "blocking"],
        "memset" => &["stream", "dst", "blocking"],
        "host_func" | "stream_sync" => &["stream"],
        "record" | "wait" => &["event", "stream"],
        "event_sync" => &["event"],
        "event_query" => &["event", "done"],
        "stream_query" => &["stream", "done"],
        "record_stream" => &["buf", "stream"],
        "graph_begin" | "graph_end" | "graph_launch" => &["graph", "stream"],
        "graph_destroy" => &["graph"],
        _ => &[],
    }
}

fn generated_line() -> BoxedStrategy<String> {
    let op = prop_oneof![
        12 => prop::sample::select(OPS),
        1 => prop::sample::select(&["lunch", "future_op", "Launch", ""][..]),
    ];
    op.prop_flat_map(|op| {
        let op_member = prop_oneof![
            20 => Just(Some(format!("\"op\":\"{op}\""))),
            2 => member("op").prop_map(Some),
            1 => Just(None),
        ];
        let needed: Vec<_> = required(op)
            .iter()
            .map(|&key| prop::option::weighted(0.95, member(key)))
            .collect();
        let others = prop::collection::vec(prop::sample::select(KEYS).prop_flat_map(member), 0..5);
        (op_member, needed, others)
    })
    .prop_flat_map(|(op, needed, mut others)| {
        others.extend(op);
        others.extend(needed.into_iter().flatten());
        (
            Just(others).prop_shuffle(),
            ws(),
            prop_oneof![
                16 => Just(""),
                4 => prop::sample::select(&[" ", "\r", "\t\r"][..]),
                1 => prop::sample::select(&["x", "}", ",", "{}"][..]),
            ],
        )
    })
    .prop_map(|(members, lead, trail)| format!("{lead}{{{}}}{trail}", members.join(",")))
    .boxed()
}

/// Lines built field by field, most of them valid: the fast path never disagrees with the
/// serde path, and takes every valid one but those with escapes.
#[test]
fn both_paths_agree_on_generated_lines() {
    let total = Cell::new(Tally::default());
    let mut runner = runner(6000);
    runner
        .run(&generated_line(), |line| {
            let tally = compare(&line);
            // Valid lines are left to serde only for escapes.
            prop_assert!(tally.ok == tally.fast || line.contains('\\'), "{}", line);
            let mut t = total.get();
            t.add(tally);
            total.set(t);
            Ok(())
        })
        .unwrap();
    let total = total.get();
    eprintln!("generated lines: {total:?}");
    assert!(
        total.ok > 1000,
        "too few valid lines to say much: {total:?}"
    );
    assert!(total.fast * 2 > total.ok, "{total:?}");
}

// ---------------------------------------------------------------------------------------------
// Mutated lines: truncations, insertions, deletions, replacements

const INSERTS: &[&str] = &[
    "\"",
    "\\",
    ",",
    ":",
    "{",
    "}",
    "[",
    "]",
    "0",
    "9",
    "-",
    ".",
    "e",
    " ",
    "\t",
    "\r",
    "n",
    "x",
    "\u{1}",
    "é",
    "null",
    "1e3",
    "\\u0041",
    ",\"x\":1",
    ",\"buf\":1",
];

/// A written or spaced line, mutated once or twice.
#[test]
fn both_paths_agree_on_mutated_lines() {
    let total = Cell::new(Tally::default());
    let mut runner = runner(6000);
    let mutation = (
        0..4usize,
        any::<prop::sample::Index>(),
        any::<prop::sample::Index>(),
        prop::sample::select(INSERTS),
    );
    let strategy = (
        arb_record(),
        arb_whitespace(),
        any::<bool>(),
        prop::collection::vec(mutation, 1..3),
    );
    runner
        .run(&strategy, |(record, ws, space, mutations)| {
            let line = written(&record);
            let mut text = if space { spaced(&line, &ws) } else { line }.into_bytes();
            for (kind, at, len, insert) in mutations {
                let at = at.index(text.len() + 1);
                match kind {
                    0 => text.truncate(at),
                    1 => {
                        let end = (at + 1 + len.index(3)).min(text.len());
                        text.drain(at..end);
                    }
                    2 => {
                        text.splice(at..at, insert.bytes());
                    }
                    _ => {
                        let end = (at + insert.len()).min(text.len());
                        text.splice(at..end, insert.bytes());
                    }
                }
            }
            // The reader hands over only UTF-8 lines.
            if let Ok(text) = String::from_utf8(text) {
                let tally = compare(&text);
                prop_assert!(tally.ok == tally.fast || text.contains('\\'), "{}", text);
                let mut t = total.get();
                t.add(tally);
                total.set(t);
            }
            Ok(())
        })
        .unwrap();
    let total = total.get();
    eprintln!("mutated lines: {total:?}");
    assert!(total.fast > 300, "{total:?}");
}

// ---------------------------------------------------------------------------------------------
// Measurement

/// Parses and drops every line of `lines` (as the checker drops each record after the engine
/// saw it, so the allocator reuses its memory): the code under measurement, kept out of line
/// so that callgrind can count it alone (`--toggle-collect='*parse_every_line*'`). Returns
/// how many lines parsed.
#[inline(never)]
fn parse_every_line(lines: &[&str]) -> usize {
    let mut parsed = 0;
    for line in lines {
        match parse_line(line, false) {
            Ok(record) => {
                std::hint::black_box(record);
                parsed += 1;
            }
            Err(e) => panic!("{line}: {}", e.message),
        }
    }
    parsed
}

/// Not a test: the parse-only workload for callgrind. Parses the records of the trace named by
/// `STREAMSAN_PARSE_TRACE` (write one with `cargo bench --bench throughput -- --write PATH N`).
/// The release build compares nothing: the comparison with serde runs in debug test builds.
#[test]
#[ignore = "a workload for callgrind, run by hand"]
fn parse_only_workload() {
    let Ok(path) = std::env::var("STREAMSAN_PARSE_TRACE") else {
        return;
    };
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(parse_every_line(&lines), lines.len());
    println!("parsed {} records", lines.len());
}
