//! Reader tests: every op, the defaults, and every class of malformed input, each error checked
//! for its line, its column where known, and what it says was expected.

use std::io::{self, BufReader, Read};

use proptest::prelude::*;

use super::*;
use crate::trace::record::{Access, MemSpace, Op, Pool, StreamFlags, StreamKind};
use crate::trace::{MAX_LINE_BYTES, TraceWriter};

const HEADER: &str = "{\"streamsan_trace\": 1}\n";

/// Reads `text` as a whole trace: all records, or the first error.
fn read_all(text: &[u8]) -> Result<Vec<Record>, TraceError> {
    TraceReader::new(text, "t.jsonl")?.collect()
}

/// Reads `body` after a v1 header.
fn read(body: &str) -> Result<Vec<Record>, TraceError> {
    read_all(format!("{HEADER}{body}").as_bytes())
}

/// The one record of `line` (given without header or newline).
fn one(line: &str) -> Record {
    let records = read(&format!("{line}\n")).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(records.len(), 1, "{line}");
    records.into_iter().next().unwrap()
}

/// The op of `line`.
fn op(line: &str) -> Op {
    one(line).op
}

/// The error `body` (after the header) gives, displayed.
fn err(body: &str) -> String {
    match read(body) {
        Ok(records) => panic!("expected an error for {body:?}, got {records:?}"),
        Err(e) => e.to_string(),
    }
}

/// The error a whole trace gives, displayed.
fn err_all(text: &[u8]) -> String {
    match read_all(text) {
        Ok(records) => panic!("expected an error, got {records:?}"),
        Err(e) => e.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Well-formed input

#[test]
fn every_op_with_every_field() {
    let at = Some("a.rs:1:2".to_string());
    let r = one(
        r#"{"op":"stream","id":3,"device":1,"kind":"created","flags":"non_blocking","thread":7,"at":"a.rs:1:2","name":"side"}"#,
    );
    assert_eq!(r.line, 2);
    assert_eq!(r.thread, 7);
    assert_eq!(r.at, at);
    assert_eq!(r.name.as_deref(), Some("side"));
    assert_eq!(
        r.op,
        Op::Stream {
            id: 3,
            device: 1,
            kind: StreamKind::Created,
            flags: StreamFlags::NonBlocking
        }
    );
    assert_eq!(op(r#"{"op":"event","id":4}"#), Op::Event { id: 4 });
    assert_eq!(
        op(r#"{"op":"event_destroy","id":4}"#),
        Op::EventDestroy { id: 4 }
    );
    assert_eq!(
        op(
            r#"{"op":"alloc","buf":5,"bytes":64,"device":2,"space":"managed","stream":3,"addr":140000000}"#
        ),
        Op::Alloc {
            buf: 5,
            bytes: 64,
            device: 2,
            space: MemSpace::Managed,
            stream: Some(3),
            addr: Some(140000000),
            pool: Pool::Driver,
        }
    );
    assert_eq!(
        op(r#"{"op":"free","buf":5,"stream":3}"#),
        Op::Free {
            buf: 5,
            stream: Some(3)
        }
    );
    let r = one(
        r#"{"op":"launch","stream":3,"name":"sum","reads":[1,{"buf":2,"off":8,"len":16,"arg":"x"}],"writes":[{"buf":3,"arg":"out"}]}"#,
    );
    assert_eq!(r.name.as_deref(), Some("sum"));
    assert_eq!(
        r.op,
        Op::Launch {
            stream: 3,
            reads: vec![Access::whole(1), Access::bytes(2, 8, 16).arg("x")],
            writes: vec![Access::whole(3).arg("out")],
            atomics: Vec::new(),
        }
    );
    assert_eq!(
        op(r#"{"op":"memcpy","stream":0,"src":1,"dst":{"buf":2,"off":0,"len":4},"blocking":true}"#),
        Op::Memcpy {
            stream: 0,
            src: Access::whole(1),
            dst: Access::bytes(2, 0, 4),
            blocking: true
        }
    );
    assert_eq!(
        op(r#"{"op":"memset","stream":1,"dst":2,"blocking":false}"#),
        Op::Memset {
            stream: 1,
            dst: Access::whole(2),
            blocking: false
        }
    );
    assert_eq!(
        op(r#"{"op":"host_func","stream":1,"reads":[1],"writes":[2]}"#),
        Op::HostFunc {
            stream: 1,
            reads: vec![Access::whole(1)],
            writes: vec![Access::whole(2)]
        }
    );
    assert_eq!(
        op(r#"{"op":"host_access","reads":[1],"writes":[{"buf":2,"off":4,"len":4}]}"#),
        Op::HostAccess {
            reads: vec![Access::whole(1)],
            writes: vec![Access::bytes(2, 4, 4)]
        }
    );
    assert_eq!(
        op(r#"{"op":"record","event":1,"stream":2}"#),
        Op::Record {
            event: 1,
            stream: 2
        }
    );
    assert_eq!(
        op(r#"{"op":"wait","stream":2,"event":1}"#),
        Op::Wait {
            stream: 2,
            event: 1
        }
    );
    assert_eq!(
        op(r#"{"op":"event_sync","event":1}"#),
        Op::EventSync { event: 1 }
    );
    assert_eq!(
        op(r#"{"op":"event_query","event":1,"done":false}"#),
        Op::EventQuery {
            event: 1,
            done: false
        }
    );
    assert_eq!(
        op(r#"{"op":"stream_sync","stream":2}"#),
        Op::StreamSync { stream: 2 }
    );
    assert_eq!(
        op(r#"{"op":"stream_query","stream":2,"done":true}"#),
        Op::StreamQuery {
            stream: 2,
            done: true
        }
    );
    assert_eq!(
        op(r#"{"op":"device_sync","device":1}"#),
        Op::DeviceSync { device: 1 }
    );
}

#[test]
fn defaults() {
    let r = one(r#"{"op":"stream","id":1,"kind":"per_thread_default"}"#);
    assert_eq!((r.thread, r.at, r.name), (0, None, None));
    assert_eq!(
        r.op,
        Op::Stream {
            id: 1,
            device: 0,
            kind: StreamKind::PerThreadDefault,
            flags: StreamFlags::Blocking
        }
    );
    assert_eq!(
        op(r#"{"op":"alloc","buf":1,"bytes":0,"space":"host"}"#),
        Op::Alloc {
            buf: 1,
            bytes: 0,
            device: 0,
            space: MemSpace::Host,
            stream: None,
            addr: None,
            pool: Pool::Driver,
        }
    );
    assert_eq!(
        op(r#"{"op":"free","buf":1}"#),
        Op::Free {
            buf: 1,
            stream: None
        }
    );
    assert_eq!(
        op(r#"{"op":"launch","stream":0,"name":"k"}"#),
        Op::Launch {
            stream: 0,
            reads: vec![],
            writes: vec![],
            atomics: Vec::new(),
        }
    );
    assert_eq!(
        op(r#"{"op":"host_access"}"#),
        Op::HostAccess {
            reads: vec![],
            writes: vec![]
        }
    );
    assert_eq!(op(r#"{"op":"device_sync"}"#), Op::DeviceSync { device: 0 });
}

#[test]
fn unknown_fields_are_ignored_and_null_is_absent() {
    let r = one(
        r#"{"future":{"a":[1,{"b":null}]},"op":"free","buf":1,"stream":null,"thread":null,"x":-1.5}"#,
    );
    assert_eq!(
        r.op,
        Op::Free {
            buf: 1,
            stream: None
        }
    );
    assert_eq!(r.thread, 0);
    // Fields of other ops are ignored, but typed by name.
    assert_eq!(
        op(r#"{"op":"event","id":1,"done":true,"bytes":5}"#),
        Op::Event { id: 1 }
    );
    // Access objects ignore unknown keys too.
    assert_eq!(
        op(r#"{"op":"host_access","reads":[{"buf":1,"note":"x"}],"writes":null}"#),
        Op::HostAccess {
            reads: vec![Access::whole(1)],
            writes: vec![]
        }
    );
}

#[test]
fn escaped_strings_and_unicode() {
    let r = one(r#"{"op":"launch","stream":0,"name":"k\u00e9\"\n","at":"dir\\f.rs:1:1"}"#);
    assert_eq!(r.name.as_deref(), Some("ké\"\n"));
    assert_eq!(r.at.as_deref(), Some("dir\\f.rs:1:1"));
    let r = one(r#"{"op":"launch","stream":0,"name":"名前"}"#);
    assert_eq!(r.name.as_deref(), Some("名前"));
}

#[test]
fn blank_lines_are_skipped_but_counted() {
    let records =
        read("\n{\"op\":\"device_sync\"}\n   \n\t\n{\"op\":\"device_sync\"}\n\n").unwrap();
    let lines: Vec<u64> = records.iter().map(|r| r.line).collect();
    assert_eq!(lines, [3, 6]);
}

#[test]
fn crlf_and_missing_final_newline() {
    let text =
        b"{\"streamsan_trace\": 1}\r\n{\"op\":\"device_sync\"}\r\n{\"op\":\"event\",\"id\":1}";
    let records = read_all(text).unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[1].line, 3);
    assert_eq!(records[1].op, Op::Event { id: 1 });
}

#[test]
fn header_fields_are_kept() {
    let text = "{\"streamsan_trace\": 1, \"producer\": \"streamsan 0.1\", \"devices\": [{\"name\": \"H200\"}]}\n";
    let reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
    assert_eq!(reader.header()["producer"], "streamsan 0.1");
    assert_eq!(reader.header()["devices"][0]["name"], "H200");
    assert_eq!(reader.header()["streamsan_trace"], 1);
    assert_eq!(reader.minor(), 0);
    assert_eq!(reader.file(), "t.jsonl");
    assert_eq!(reader.line(), 1);
}

#[test]
fn header_with_minor_and_bom() {
    let text = b"\xef\xbb\xbf{\"minor\": 0, \"streamsan_trace\": 1}\n{\"op\":\"device_sync\"}\n";
    let mut reader = TraceReader::new(&text[..], "t.jsonl").unwrap();
    assert_eq!(reader.minor(), 0);
    assert_eq!(reader.next().unwrap().unwrap().line, 2);
    // A BOM counts in columns.
    assert_eq!(
        err_all(b"\xef\xbb\xbf{\"streamsan_trace\": 1,}\n"),
        "t.jsonl:1:26: invalid JSON: trailing comma (in the header)"
    );
}

#[test]
fn newer_minor_skips_unknown_ops() {
    let text = "{\"streamsan_trace\": 1, \"minor\": 9}\n\
                {\"op\":\"device_sync\"}\n\
                {\"op\":\"graph_update\",\"nodes\":{\"count\":4},\"stream\":1}\n\
                {\"op\":\"mem_prefetch\"}\n\
                {\"op\":\"device_sync\",\"device\":1}\n";
    let mut reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
    assert_eq!(reader.minor(), 9);
    let lines: Vec<u64> = reader.by_ref().map(|r| r.unwrap().line).collect();
    assert_eq!(lines, [2, 5]);
    assert_eq!(
        reader.skipped(),
        [
            (3, "graph_update".to_string()),
            (4, "mem_prefetch".to_string())
        ]
    );
    assert_eq!(reader.skipped_count(), 2);
}

#[test]
fn newer_minor_still_checks_known_fields_and_ops() {
    let text = "{\"streamsan_trace\": 1, \"minor\": 1}\n\
                {\"op\":\"graph_launch\",\"stream\":\"s1\"}\n\
                {\"op\":\"launch\",\"stream\":1}\n";
    let mut reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
    assert_eq!(
        reader.next().unwrap().unwrap_err().to_string(),
        "t.jsonl:2:34: `stream`: expected a stream id (unsigned integer), found \"s1\""
    );
    assert_eq!(
        reader.next().unwrap().unwrap_err().to_string(),
        "t.jsonl:3: missing field `name` (a `launch` record needs the kernel name)"
    );
}

#[test]
fn reading_goes_on_after_a_bad_line() {
    let text = format!("{HEADER}{{\"op\":\"nope\"}}\n{{\"op\":\"device_sync\"}}\n");
    let mut reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
    assert!(reader.next().unwrap().is_err());
    assert_eq!(reader.next().unwrap().unwrap().line, 3);
    assert!(reader.next().is_none());
    assert!(reader.next().is_none());
}

#[test]
fn example_traces_read() {
    for name in ["sum_before_randn", "sum_before_randn_fixed"] {
        let path = format!(
            "{}/examples/traces/{name}.jsonl",
            env!("CARGO_MANIFEST_DIR")
        );
        let mut reader = TraceReader::open(&path).unwrap();
        let records: Vec<Record> = reader.by_ref().collect::<Result<_, _>>().unwrap();
        assert!(records.len() > 5, "{name}");
        assert!(reader.skipped().is_empty());
        assert!(records.iter().all(|r| r.at.is_some()), "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// Malformed input: one test per class

#[test]
fn bad_json() {
    assert_eq!(
        err("{\"op\":\"stream\" \"id\":1}\n"),
        "t.jsonl:2:16: invalid JSON: expected `,` or `}`"
    );
    assert_eq!(
        err("{\"op\":\"device_sync\"} {}\n"),
        "t.jsonl:2:22: invalid JSON: trailing characters after the record (one record per line)"
    );
    assert_eq!(
        err("{op:1}\n"),
        "t.jsonl:2:2: invalid JSON: key must be a string"
    );
    // Incomplete JSON on a line that does end in a newline is not "truncated".
    assert_eq!(
        err("{\"op\":\"stream\",\"id\":1\n{\"op\":\"device_sync\"}\n"),
        "t.jsonl:2:21: incomplete JSON: the line ends inside an object"
    );
    assert_eq!(
        err("{\"op\":\n"),
        "t.jsonl:2:6: incomplete JSON: the line ends where a value should be"
    );
}

#[test]
fn truncated_last_line() {
    assert_eq!(
        err("{\"op\":\"device_sync\"}\n{\"op\":\"launch\",\"stre"),
        "t.jsonl:3:20: the last line looks truncated (no newline at the end of the file, and \
         incomplete JSON: the line ends inside a string)"
    );
    // Cut inside a multi-byte character.
    assert_eq!(
        err_all(
            format!("{HEADER}{{\"op\":\"launch\",\"name\":\"\u{540d}")
                .as_bytes()
                .split_last()
                .unwrap()
                .1
        ),
        "t.jsonl:2:24: the last line looks truncated (no newline at the end of the file, and it \
         ends inside a UTF-8 character)"
    );
    // The iteration ends there.
    let text = format!("{HEADER}{{\"op\":");
    let mut reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
    assert!(reader.next().unwrap().is_err());
    assert!(reader.next().is_none());
}

#[test]
fn missing_header() {
    assert_eq!(
        err_all(b"{\"op\":\"launch\",\"stream\":0,\"name\":\"k\"}\n"),
        "t.jsonl:1: missing header: expected line 1 to be the header {\"streamsan_trace\": 1, \
         ...}, found a record (\"op\": \"launch\")"
    );
    assert_eq!(
        err_all(b"{\"version\": 1}\n"),
        "t.jsonl:1: missing header: expected line 1 to be the header {\"streamsan_trace\": 1, \
         ...}, found an object without `streamsan_trace`"
    );
    assert_eq!(
        err_all(b""),
        "t.jsonl:1: empty trace: expected line 1 to be the header {\"streamsan_trace\": 1, ...}"
    );
    assert_eq!(
        err_all(b"\n{\"streamsan_trace\": 1}\n"),
        "t.jsonl:1: missing header: expected line 1 to be the header {\"streamsan_trace\": 1, \
         ...}, found a blank line"
    );
    assert_eq!(
        err_all(b"streamsan trace v1\n"),
        "t.jsonl:1:1: invalid JSON: expected value (in the header)"
    );
    assert_eq!(
        err_all(b"\xff\xfe{\0"),
        "t.jsonl:1:1: the file looks like UTF-16 text (expected UTF-8 JSON Lines)"
    );
}

#[test]
fn header_not_an_object() {
    assert_eq!(
        err_all(b"[\"streamsan_trace\", 1]\n"),
        "t.jsonl:1: expected a header object {\"streamsan_trace\": 1, ...}, found an array"
    );
    assert_eq!(
        err_all(b"1\n"),
        "t.jsonl:1: expected a header object {\"streamsan_trace\": 1, ...}, found 1"
    );
}

#[test]
fn wrong_version() {
    assert_eq!(
        err_all(b"{\"streamsan_trace\": 2}\n"),
        "t.jsonl:1: unsupported trace format version 2 (this reader reads version 1)"
    );
    assert_eq!(
        err_all(b"{\"streamsan_trace\": \"1\"}\n"),
        "t.jsonl:1: `streamsan_trace`: expected the format version 1 (unsigned integer), found \"1\""
    );
    assert_eq!(
        err_all(b"{\"streamsan_trace\": 1.0}\n"),
        "t.jsonl:1: `streamsan_trace`: expected the format version 1 (unsigned integer), found 1.0"
    );
    assert_eq!(
        err_all(b"{\"streamsan_trace\": 1, \"minor\": -1}\n"),
        "t.jsonl:1: `minor`: expected a minor version (unsigned integer), found -1"
    );
    assert_eq!(
        err_all(b"{\"streamsan_trace\": 1, \"minor\": 18446744073709551616}\n"),
        "t.jsonl:1: `minor`: expected a minor version (unsigned integer), found a number too \
         large for an unsigned 64-bit integer"
    );
    assert_eq!(
        err_all(b"{\"streamsan_trace\": 1, \"minor\": 0, \"minor\": 9}\n"),
        "t.jsonl:1:42: duplicate field `minor` (in the header)"
    );
    assert_eq!(
        err(r#"{"streamsan_trace": 1}"#),
        "t.jsonl:2: unexpected second header (a trace has one header, on line 1; traces cannot \
         be concatenated)"
    );
}

#[test]
fn unknown_op() {
    assert_eq!(
        err("{\"op\":\"device_sync\"}\n{\"stream\":1,\"op\":\"lunch\"}\n"),
        "t.jsonl:3:24: unknown op \"lunch\" (expected one of: stream, event, event_destroy, \
         alloc, free, launch, memcpy, memset, host_func, host_access, record, wait, event_sync, \
         event_query, stream_sync, stream_query, device_sync, record_stream, graph_begin, \
         graph_end, graph_launch, graph_destroy, stream_destroy)"
    );
    assert_eq!(
        err("{\"op\":1}\n"),
        "t.jsonl:2:7: `op`: expected an op name (string), found 1"
    );
}

#[test]
fn missing_fields() {
    assert_eq!(
        err("{\"stream\":1}\n"),
        "t.jsonl:2: missing field `op` (expected an op name such as \"launch\")"
    );
    assert_eq!(
        err("{\"op\":\"launch\",\"name\":\"k\"}\n"),
        "t.jsonl:2: missing field `stream` (a `launch` record needs a stream id)"
    );
    assert_eq!(
        err("{\"op\":\"stream\",\"id\":1}\n"),
        "t.jsonl:2: missing field `kind` (a `stream` record needs a stream kind: \
         \"legacy_default\", \"per_thread_default\" or \"created\")"
    );
    assert_eq!(
        err("{\"op\":\"memcpy\",\"stream\":1,\"dst\":2,\"blocking\":true}\n"),
        "t.jsonl:2: missing field `src` (a `memcpy` record needs a source access (a buffer id \
         or an access object))"
    );
    assert_eq!(
        err("{\"op\":\"memset\",\"stream\":1,\"dst\":2}\n"),
        "t.jsonl:2: missing field `blocking` (a `memset` record needs a boolean: true for the \
         synchronous API variant, false for the async one)"
    );
    assert_eq!(
        err("{\"op\":\"stream_query\",\"stream\":1,\"done\":null}\n"),
        "t.jsonl:2: missing field `done` (a `stream_query` record needs a boolean: true when \
         the query returned cudaSuccess)"
    );
    assert_eq!(
        err("{\"op\":\"alloc\",\"buf\":1,\"space\":\"device\"}\n"),
        "t.jsonl:2: missing field `bytes` (a `alloc` record needs a size in bytes)"
    );
    assert_eq!(
        err("{\"op\":\"host_access\",\"reads\":[{\"off\":0,\"len\":4}]}\n"),
        "t.jsonl:2:46: `reads[0]`: missing field `buf` in the access object (expected a buffer id)"
    );
}

#[test]
fn mistyped_fields() {
    assert_eq!(
        err("{\"op\":\"launch\",\"stream\":\"s1\",\"name\":\"k\"}\n"),
        "t.jsonl:2:28: `stream`: expected a stream id (unsigned integer), found \"s1\""
    );
    assert_eq!(
        err("{\"op\":\"memset\",\"stream\":1,\"dst\":2,\"blocking\":1}\n"),
        "t.jsonl:2:46: `blocking`: expected true or false, found 1"
    );
    assert_eq!(
        err("{\"op\":\"launch\",\"stream\":1,\"name\":[\"k\"]}\n"),
        "t.jsonl:2:34: `name`: expected a name (string), found an array"
    );
    assert_eq!(
        err("{\"op\":\"launch\",\"stream\":1,\"name\":\"k\",\"reads\":3}\n"),
        "t.jsonl:2:46: `reads`: expected a list of accesses (buffer ids or access objects), \
         found 3 (write [3] for one access)"
    );
    assert_eq!(
        err("{\"op\":\"launch\",\"stream\":1,\"name\":\"k\",\"writes\":[1,{\"buf\":\"x\"}]}\n"),
        "t.jsonl:2:59: `writes[1].buf`: expected a buffer id (unsigned integer), found \"x\""
    );
    assert_eq!(
        err("{\"op\":\"memcpy\",\"stream\":1,\"src\":[1],\"dst\":2,\"blocking\":true}\n"),
        "t.jsonl:2:33: `src`: expected a buffer id (unsigned integer) or an access object \
         {\"buf\", \"off\", \"len\"}, found an array"
    );
    assert_eq!(
        err("{\"op\":\"launch\",\"stream\":1.5,\"name\":\"k\"}\n"),
        "t.jsonl:2:27: `stream`: expected a stream id (unsigned integer), found 1.5"
    );
    assert_eq!(
        err("{\"op\":\"launch\",\"stream\":1,\"name\":\"k\",\"reads\":[{\"buf\":1,\"arg\":7}]}\n"),
        "t.jsonl:2:62: `reads[0].arg`: expected a kernel argument name (string), found 7"
    );
    assert_eq!(
        err("{\"op\":\"device_sync\",\"thread\":true}\n"),
        "t.jsonl:2:33: `thread`: expected a host thread id (unsigned integer), found true"
    );
}

#[test]
fn negative_and_overflowing_numbers() {
    assert_eq!(
        err("{\"op\":\"launch\",\"stream\":1,\"name\":\"k\",\"reads\":[-1]}\n"),
        "t.jsonl:2:48: `reads[0]`: expected a buffer id (unsigned integer) or an access object \
         {\"buf\", \"off\", \"len\"}, found -1"
    );
    assert_eq!(
        err("{\"op\":\"free\",\"buf\":-3}\n"),
        "t.jsonl:2:21: `buf`: expected a buffer id (unsigned integer), found -3"
    );
    assert_eq!(
        err("{\"op\":\"event\",\"id\":18446744073709551616}\n"),
        "t.jsonl:2:39: `id`: expected an id (unsigned integer), found a number too large for an \
         unsigned 64-bit integer"
    );
    assert_eq!(
        err("{\"op\":\"device_sync\",\"device\":4294967296}\n"),
        "t.jsonl:2:39: `device`: expected a device ordinal (unsigned 32-bit integer), found \
         4294967296 (too large for an unsigned 32-bit integer)"
    );
    assert_eq!(
        err("{\"op\":\"alloc\",\"buf\":1,\"bytes\":1e3,\"space\":\"device\"}\n"),
        "t.jsonl:2:33: `bytes`: expected a size in bytes (unsigned integer), found 1000.0"
    );
    // The largest values are fine.
    assert_eq!(
        op(
            r#"{"op":"alloc","buf":18446744073709551615,"bytes":1,"device":4294967295,"space":"device"}"#
        ),
        Op::Alloc {
            buf: u64::MAX,
            bytes: 1,
            device: u32::MAX,
            space: MemSpace::Device,
            stream: None,
            addr: None,
            pool: Pool::Driver,
        }
    );
}

#[test]
fn access_ranges() {
    assert_eq!(
        err(
            "{\"op\":\"host_access\",\"reads\":[{\"buf\":1,\"off\":18446744073709551615,\"len\":2}]}\n"
        ),
        "t.jsonl:2:73: `reads[0]`: expected off + len to fit in an unsigned 64-bit integer, \
         found off 18446744073709551615 + len 2"
    );
    assert_eq!(
        err("{\"op\":\"host_access\",\"writes\":[{\"buf\":1,\"len\":2}]}\n"),
        "t.jsonl:2:47: `writes[0]`: `len` without `off` (expected both, for bytes [off, off + \
         len), or neither, for the whole buffer)"
    );
    assert_eq!(
        err("{\"op\":\"memset\",\"stream\":0,\"dst\":{\"buf\":1,\"off\":0},\"blocking\":true}\n"),
        "t.jsonl:2:49: `dst`: `off` without `len` (expected both, for bytes [off, off + len), \
         or neither, for the whole buffer)"
    );
    // off + len == u64::MAX is fine.
    assert_eq!(
        op(r#"{"op":"host_access","reads":[{"buf":1,"off":18446744073709551614,"len":1}]}"#),
        Op::HostAccess {
            reads: vec![Access::bytes(1, u64::MAX - 1, 1)],
            writes: vec![]
        }
    );
}

#[test]
fn unknown_enum_spellings() {
    assert_eq!(
        err("{\"op\":\"stream\",\"id\":1,\"kind\":\"default\"}\n"),
        "t.jsonl:2:38: `kind`: expected a stream kind: \"legacy_default\", \"per_thread_default\" \
         or \"created\", found \"default\""
    );
    assert_eq!(
        err("{\"op\":\"stream\",\"id\":1,\"kind\":\"created\",\"flags\":\"nonblocking\"}\n"),
        "t.jsonl:2:60: `flags`: expected stream flags: \"blocking\" or \"non_blocking\", found \
         \"nonblocking\""
    );
    assert_eq!(
        err("{\"op\":\"alloc\",\"buf\":1,\"bytes\":4,\"space\":\"Device\"}\n"),
        "t.jsonl:2:48: `space`: expected a memory space: \"device\", \"pinned\", \"managed\" or \
         \"host\", found \"Device\""
    );
}

#[test]
fn non_object_records() {
    assert_eq!(
        err("[\"launch\"]\n"),
        "t.jsonl:2:1: expected a record object {\"op\": ...}, found an array"
    );
    assert_eq!(
        err("42\n"),
        "t.jsonl:2:2: expected a record object {\"op\": ...}, found 42"
    );
    assert_eq!(
        err("null\n"),
        "t.jsonl:2:4: expected a record object {\"op\": ...}, found null"
    );
    assert_eq!(
        err("\"launch\"\n"),
        "t.jsonl:2:8: expected a record object {\"op\": ...}, found \"launch\""
    );
}

#[test]
fn duplicate_fields() {
    assert_eq!(
        err("{\"op\":\"free\",\"buf\":1,\"buf\":2}\n"),
        "t.jsonl:2:26: duplicate field `buf`"
    );
    assert_eq!(
        err("{\"op\":\"host_access\",\"reads\":[{\"buf\":1,\"buf\":2}]}\n"),
        "t.jsonl:2:43: `reads[0]`: duplicate field `buf`"
    );
}

#[test]
fn invalid_utf8() {
    let mut text = format!("{HEADER}{{\"op\":\"launch\",\"stream\":0,\"name\":\"k").into_bytes();
    text.extend_from_slice(b"\xff\"}\n");
    assert_eq!(
        err_all(&text),
        "t.jsonl:2:36: expected UTF-8 text, found the invalid byte 0xff"
    );
    assert_eq!(
        err_all(b"{\"streamsan_trace\": 1, \"p\": \"\xc3\x28\"}\n"),
        "t.jsonl:1:30: expected UTF-8 text, found the invalid byte 0xc3"
    );
    // In the writer's layout too, which is read off the input's buffer (strings checked as
    // they are read): the same error, at the same column, the next line read after it.
    let mut text = format!("{HEADER}{{\"op\":\"host_access\",\"name\":\"caf").into_bytes();
    text.extend_from_slice(b"\xc3\",\"reads\":[3]}\n{\"op\":\"device_sync\"}\n");
    let mut reader = TraceReader::new(&text[..], "t.jsonl").unwrap();
    assert_eq!(
        reader.next().unwrap().unwrap_err().to_string(),
        "t.jsonl:2:32: expected UTF-8 text, found the invalid byte 0xc3"
    );
    let next = reader.next().unwrap().unwrap();
    assert_eq!((next.line, next.op), (3, Op::DeviceSync { device: 0 }));
}

/// A line end ends a line, also inside what would be a string of a record in the writer's
/// layout (read off the input's buffer): two malformed lines, then the next record.
#[test]
fn a_line_end_inside_a_string_ends_the_line() {
    let text = format!(
        "{HEADER}{{\"op\":\"launch\",\"name\":\"a\nb\",\"stream\":1}}\n{{\"op\":\"device_sync\"}}\n"
    );
    let mut reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
    let got: Vec<String> = std::iter::from_fn(|| reader.next())
        .map(|r| match r {
            Ok(r) => format!("{}: {:?}", r.line, r.op),
            Err(e) => e.to_string(),
        })
        .collect();
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got[0].starts_with("t.jsonl:2:"), "{got:?}");
    assert!(got[1].starts_with("t.jsonl:3:"), "{got:?}");
    assert_eq!(got[2], "4: DeviceSync { device: 0 }");
}

/// Gives `ok` bytes, then fails.
struct Failing {
    ok: &'static [u8],
}

impl Read for Failing {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.ok.is_empty() {
            return Err(io::Error::other("Disk on fire"));
        }
        let n = buf.len().min(self.ok.len());
        buf[..n].copy_from_slice(&self.ok[..n]);
        self.ok = &self.ok[n..];
        Ok(n)
    }
}

/// Fails once, after `ok` bytes, then reads on (`more` bytes).
struct FailingOnce {
    ok: &'static [u8],
    failed: bool,
    more: &'static [u8],
}

impl Read for FailingOnce {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.ok.is_empty() && !self.failed {
            self.failed = true;
            return Err(io::Error::other("Disk on fire"));
        }
        let rest = if self.ok.is_empty() {
            &mut self.more
        } else {
            &mut self.ok
        };
        let n = buf.len().min(rest.len());
        buf[..n].copy_from_slice(&rest[..n]);
        *rest = &rest[n..];
        Ok(n)
    }
}

#[test]
fn io_errors() {
    let failing = Failing {
        ok: b"{\"streamsan_trace\": 1}\n{\"op\":\"device_sync\"}\n",
    };
    let mut reader = TraceReader::new(BufReader::new(failing), "t.jsonl").unwrap();
    assert_eq!(reader.next().unwrap().unwrap().line, 2);
    assert_eq!(
        reader.next().unwrap().unwrap_err().to_string(),
        "t.jsonl:3: cannot read: disk on fire"
    );
    assert!(reader.next().is_none());

    // An error ends the reading, even if the input would read on.
    let failing = FailingOnce {
        ok: b"{\"streamsan_trace\": 1}\n{\"op\":\"device_sync\"}\n",
        failed: false,
        more: b"{\"op\":\"device_sync\"}\n",
    };
    let mut reader = TraceReader::new(BufReader::new(failing), "t.jsonl").unwrap();
    let mut record = Record::default();
    assert!(matches!(reader.read_into(&mut record), Some(Ok(()))));
    assert_eq!(
        reader
            .read_into(&mut record)
            .unwrap()
            .unwrap_err()
            .to_string(),
        "t.jsonl:3: cannot read: disk on fire"
    );
    assert!(reader.read_into(&mut record).is_none());

    let failing = Failing { ok: b"" };
    assert_eq!(
        TraceReader::new(BufReader::new(failing), "t.jsonl")
            .err()
            .unwrap()
            .to_string(),
        "t.jsonl:1: cannot read: disk on fire"
    );

    let missing = "/nonexistent/streamsan/trace.jsonl";
    let e = TraceReader::open(missing).err().unwrap();
    assert_eq!((e.line, e.column), (0, None));
    assert!(
        e.to_string()
            .starts_with("/nonexistent/streamsan/trace.jsonl: cannot open: no such file"),
        "{e}"
    );
}

#[test]
fn overlong_line() {
    let text =
        io::Cursor::new(HEADER.as_bytes()).chain(io::repeat(b' ').take(MAX_LINE_BYTES as u64 + 10));
    let mut reader = TraceReader::new(BufReader::new(text), "t.jsonl").unwrap();
    assert_eq!(
        reader.next().unwrap().unwrap_err().to_string(),
        format!(
            "t.jsonl:2: line is longer than {MAX_LINE_BYTES} bytes (expected one record per line)"
        )
    );
    assert!(reader.next().is_none());
}

/// The same cap on a record in the writer's layout that lies whole in the input's buffer (read
/// where it lies, the line's end found as it is read), just over the cap and just under it.
#[test]
fn overlong_line_in_the_writers_layout() {
    let line = |name_bytes: usize| {
        let name = "k".repeat(name_bytes);
        format!("{{\"op\":\"launch\",\"name\":\"{name}\",\"stream\":0}}")
    };
    let fixed = line(0).len();
    // A line of `MAX_LINE_BYTES` bytes (before its `\n`) is read, one byte more is refused.
    let at_most = line(MAX_LINE_BYTES - fixed);
    let over = line(MAX_LINE_BYTES - fixed + 1);
    let text = format!("{HEADER}{at_most}\n{over}\n{{\"op\":\"device_sync\"}}\n");
    let mut reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
    let first = reader.next().unwrap().unwrap();
    assert_eq!(first.name.map(|n| n.len()), Some(MAX_LINE_BYTES - fixed));
    assert_eq!(
        reader.next().unwrap().unwrap_err().to_string(),
        format!(
            "t.jsonl:3: line is longer than {MAX_LINE_BYTES} bytes (expected one record per line)"
        )
    );
    assert!(reader.next().is_none());
}

/// The same cap on a line that lies whole in the input's buffer (read where it lies).
#[test]
fn overlong_line_whole_in_the_input() {
    let mut text = HEADER.as_bytes().to_vec();
    text.resize(text.len() + MAX_LINE_BYTES + 10, b' ');
    text.extend_from_slice(b"\n{\"op\":\"device_sync\"}\n");
    let mut reader = TraceReader::new(&text[..], "t.jsonl").unwrap();
    assert_eq!(
        reader.next().unwrap().unwrap_err().to_string(),
        format!(
            "t.jsonl:2: line is longer than {MAX_LINE_BYTES} bytes (expected one record per line)"
        )
    );
    assert!(reader.next().is_none());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No input makes the reader panic.
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut text = HEADER.as_bytes().to_vec();
        text.extend_from_slice(&body);
        if let Ok(reader) = TraceReader::new(&text[..], "t.jsonl") {
            for _ in reader {}
        }
        let _ = TraceReader::new(&body[..], "t.jsonl").map(|r| r.count());
    }

    /// Nor does any mangling of a valid line (a byte dropped, replaced or duplicated).
    #[test]
    fn mangled_lines_never_panic(which in 0usize..4, at in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let lines = [
            r#"{"op":"launch","stream":3,"name":"sum","reads":[1,{"buf":2,"off":8,"len":16,"arg":"x"}],"writes":[{"buf":3,"arg":"out"}],"at":"a.rs:1:1"}"#,
            r#"{"op":"alloc","buf":5,"bytes":64,"device":2,"space":"managed","stream":3,"addr":140000000}"#,
            r#"{"op":"stream","id":3,"device":1,"kind":"created","flags":"non_blocking","thread":7}"#,
            r#"{"op":"memcpy","stream":0,"src":1,"dst":{"buf":2,"off":0,"len":4},"blocking":true}"#,
        ];
        let line = lines[which].as_bytes();
        let i = at.index(line.len());
        for variant in 0..3 {
            let mut mangled = line.to_vec();
            match variant {
                0 => { mangled.remove(i); }
                1 => mangled[i] = byte,
                _ => mangled.insert(i, byte),
            }
            let mut text = HEADER.as_bytes().to_vec();
            text.extend_from_slice(&mangled);
            let _ = read_all(&text);
            text.push(b'\n');
            let _ = read_all(&text);
        }
    }
}

/// Writes a synthetic trace of `records` records: 8 streams, 10k buffers, one stream sync per
/// 20 records, the rest launches. `rich`: byte ranges, argument names and source locations
/// (about 200 bytes a line, as the online layer writes); else bare buffer ids (about 70).
fn synthetic_trace(path: &std::path::Path, records: u64, rich: bool) {
    use crate::trace::TraceWriter;
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = TraceWriter::new(file, serde_json::Map::new()).unwrap();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..records {
        let stream = rand() % 8;
        let (a, b, c) = (rand() % 10_000, rand() % 10_000, rand() % 10_000);
        let op = match (i % 20 == 19, rich) {
            (true, _) => Op::StreamSync { stream },
            (false, true) => Op::Launch {
                stream,
                reads: vec![
                    Access::bytes(a, 0, 4096).arg("x"),
                    Access::whole(b).arg("w"),
                ],
                writes: vec![Access::bytes(c, 1024, 1024).arg("out")],
                atomics: Vec::new(),
            },
            (false, false) => Op::Launch {
                stream,
                reads: vec![Access::whole(a), Access::whole(b)],
                writes: vec![Access::whole(c)],
                atomics: Vec::new(),
            },
        };
        let name = matches!(op, Op::Launch { .. }).then(|| "fused_add".to_string());
        let at = rich.then(|| format!("src/model.rs:{}:9", 100 + i % 50));
        let record = Record {
            line: 0,
            thread: 0,
            at,
            name,
            op,
        };
        w.write(&record).unwrap();
    }
    w.flush().unwrap();
}

/// CPU time of this thread in seconds (the machine may be shared), from /proc where there is
/// one: what the hand-run throughput measurements time.
pub(crate) fn thread_cpu_secs() -> Option<f64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split(' ').next()?.parse::<f64>().ok())
        .map(|ns| ns / 1e9)
}

/// Not a timed test: prints the reader's records/s on synthetic traces (best of 3, wall clock
/// and on-CPU time). Run with
/// `cargo test --release --lib trace::reader::tests::throughput -- --ignored --nocapture`.
#[test]
#[ignore = "throughput measurement, run in release by hand"]
fn throughput() {
    use std::time::Instant;

    const RECORDS: u64 = 2_000_000;
    let cpu = thread_cpu_secs;
    for rich in [false, true] {
        let path = std::env::temp_dir().join(format!(
            "streamsan-throughput-{}-{rich}.jsonl",
            std::process::id()
        ));
        synthetic_trace(&path, RECORDS, rich);
        let bytes = std::fs::metadata(&path).unwrap().len();
        let (mut wall, mut on_cpu) = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            let (start, start_cpu) = (Instant::now(), cpu());
            let reader = TraceReader::open(path.to_str().unwrap()).unwrap();
            let mut n = 0u64;
            for r in reader {
                std::hint::black_box(r.unwrap());
                n += 1;
            }
            assert_eq!(n, RECORDS);
            wall = wall.min(start.elapsed().as_secs_f64());
            if let (Some(a), Some(b)) = (start_cpu, cpu()) {
                on_cpu = on_cpu.min(b - a);
            }
        }
        std::fs::remove_file(&path).unwrap();
        println!(
            "{} lines, {:.0} bytes/line: {:.2} M records/s wall ({:.0} MB/s), {:.2} M records/s on-CPU",
            if rich { "rich" } else { "plain" },
            bytes as f64 / RECORDS as f64,
            RECORDS as f64 / wall / 1e6,
            bytes as f64 / wall / 1e6,
            RECORDS as f64 / on_cpu / 1e6,
        );
    }
}

#[test]
fn minor_one_records() {
    assert_eq!(
        op(
            r#"{"op":"alloc","buf":5,"bytes":64,"space":"device","pool":"caching","addr":4096,"stream":2}"#
        ),
        Op::Alloc {
            buf: 5,
            bytes: 64,
            device: 0,
            space: MemSpace::Device,
            stream: Some(2),
            addr: Some(4096),
            pool: Pool::Caching,
        }
    );
    assert_eq!(
        op(r#"{"op":"record_stream","buf":5,"stream":2}"#),
        Op::RecordStream { buf: 5, stream: 2 }
    );
    assert_eq!(
        op(r#"{"op":"graph_begin","graph":7,"stream":1}"#),
        Op::GraphBegin {
            graph: 7,
            stream: 1
        }
    );
    assert_eq!(
        op(r#"{"op":"graph_end","graph":7,"stream":1}"#),
        Op::GraphEnd {
            graph: 7,
            stream: 1
        }
    );
    assert_eq!(
        op(r#"{"op":"graph_launch","graph":7,"stream":3}"#),
        Op::GraphLaunch {
            graph: 7,
            stream: 3
        }
    );
    assert_eq!(
        op(r#"{"op":"graph_destroy","graph":7}"#),
        Op::GraphDestroy { graph: 7 }
    );
    assert_eq!(
        err(r#"{"op":"alloc","buf":5,"bytes":64,"space":"device","pool":"caching"}"#),
        "t.jsonl:2: missing field `addr` (a `caching` alloc needs the block's device address: \
         its bytes keep their history by address)"
    );
    assert_eq!(
        err(r#"{"op":"alloc","buf":5,"bytes":64,"space":"device","pool":"cached","addr":1}"#),
        "t.jsonl:2:65: `pool`: expected a pool: \"driver\" or \"caching\", found \"cached\""
    );
    assert_eq!(
        err(r#"{"op":"graph_launch","stream":3}"#),
        "t.jsonl:2: missing field `graph` (a `graph_launch` record needs a graph id)"
    );
    assert_eq!(
        err(r#"{"op":"record_stream","buf":5}"#),
        "t.jsonl:2: missing field `stream` (a `record_stream` record needs a stream id)"
    );
}

/// `stream_destroy` (minor 3) reads as `event_destroy` does, whatever minor the header
/// declares: a known op is never gated by the header's minor, only unknown ones are.
#[test]
fn stream_destroy_records() {
    assert_eq!(
        op(r#"{"op":"stream_destroy","id":4}"#),
        Op::StreamDestroy { id: 4 }
    );
    let r = one(r#"{"op":"stream_destroy","name":"side","id":7,"thread":2,"at":"a.rs:9:5"}"#);
    assert_eq!(
        (r.op, r.thread, r.name.as_deref(), r.at.as_deref()),
        (
            Op::StreamDestroy { id: 7 },
            2,
            Some("side"),
            Some("a.rs:9:5")
        )
    );
    for minor in [0, 2, 3, 9] {
        let text = format!(
            "{{\"streamsan_trace\": 1, \"minor\": {minor}}}\n{{\"op\":\"stream_destroy\",\"id\":1}}\n"
        );
        let mut reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
        let records: Vec<Record> = reader.by_ref().collect::<Result<_, _>>().unwrap();
        assert_eq!(records.len(), 1, "minor {minor}");
        assert!(reader.skipped().is_empty(), "minor {minor}");
    }
    // A missing or mistyped `id` is the same error as `event_destroy`'s.
    for name in ["event_destroy", "stream_destroy"] {
        assert_eq!(
            err(&format!("{{\"op\":\"{name}\"}}\n")),
            format!("t.jsonl:2: missing field `id` (a `{name}` record needs an id)")
        );
        assert_eq!(
            err(&format!("{{\"op\":\"{name}\",\"id\":null,\"stream\":1}}\n")),
            format!("t.jsonl:2: missing field `id` (a `{name}` record needs an id)")
        );
        let line = format!("{{\"op\":\"{name}\",\"id\":-1}}\n");
        assert_eq!(
            err(&line),
            format!(
                "t.jsonl:2:{}: `id`: expected an id (unsigned integer), found -1",
                line.len() - 2
            )
        );
    }
}

/// Every record example of the spec (`docs/trace-format.md`) reads, and every op has one.
#[test]
fn the_spec_s_examples_read_and_cover_every_op() {
    let spec =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/trace-format.md"))
            .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut in_json = false;
    for line in spec.lines() {
        match line.trim() {
            "```json" => in_json = true,
            "```" => in_json = false,
            l if in_json && l.starts_with("{\"op\"") => {
                let op = one(l).op;
                seen.insert(op.kind());
            }
            _ => {}
        }
    }
    let missing: Vec<&str> = crate::trace::OpKind::ALL
        .iter()
        .filter(|k| !seen.contains(k))
        .map(|k| k.as_str())
        .collect();
    assert!(
        missing.is_empty(),
        "ops without an example in the spec: {missing:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Reading into reused records (`read_into`, as `check` reads)

/// `records` written in `encoding`, each with the line the writer gave it.
fn written(records: &[Record], encoding: Encoding) -> (Vec<u8>, Vec<Record>) {
    let mut expected = Vec::new();
    let bytes = match encoding {
        Encoding::JsonLines => {
            let mut w = TraceWriter::new(Vec::new(), Map::new()).unwrap();
            for r in records {
                expected.push(Record {
                    line: w.next_line(),
                    ..r.clone()
                });
                w.write(r).unwrap();
            }
            w.into_inner()
        }
        Encoding::Binary => {
            let mut w = crate::trace::BinaryWriter::new(Vec::new(), Map::new()).unwrap();
            for r in records {
                expected.push(Record {
                    line: w.next_line(),
                    ..r.clone()
                });
                w.write(r).unwrap();
            }
            w.finish().unwrap();
            w.into_inner()
        }
    };
    (bytes, expected)
}

/// Every record of `bytes`, each read into the next of `slots` records in turn, cloned out.
fn read_through_slots(bytes: &[u8], slots: usize) -> Result<Vec<Record>, TraceError> {
    let mut reader = TraceReader::new(bytes, "t")?;
    let mut slots = vec![Record::default(); slots];
    let count = slots.len();
    let mut records = Vec::new();
    for i in 0.. {
        let slot = &mut slots[i % count];
        match reader.read_into(slot) {
            Some(read) => read.map(|()| records.push(slot.clone()))?,
            None => return Ok(records),
        }
    }
    unreachable!()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A record read into one that held another, of any op and with any strings and access
    /// lists, is exactly the record written: nothing of the one before is left in it.
    #[test]
    fn records_read_into_reused_ones_are_the_records_written(
        records in proptest::collection::vec(crate::trace::arbitrary::any_record(), 0..24),
        slots in 1usize..4,
    ) {
        for encoding in [Encoding::JsonLines, Encoding::Binary] {
            let (bytes, expected) = written(&records, encoding);
            prop_assert_eq!(read_through_slots(&bytes, slots).unwrap(), expected);
        }
    }
}

/// Lines in other layouts than the writer's (read by the scanner's second tier or by
/// serde_json), skipped ops, blank lines and an error, read into one record over and over:
/// the same records and the same error as reading each afresh.
#[test]
fn every_kind_of_line_read_into_one_record() {
    let text = [
        r#"{"streamsan_trace": 1, "minor": 99}"#,
        r#"{"op":"launch","name":"k","stream":1,"reads":[1,{"buf":2,"off":8,"len":16,"arg":"x"}],"writes":[{"buf":3,"arg":"out"}],"at":"a.rs:1:1"}"#,
        r#"{ "op": "launch", "name": "k2", "stream": 1, "reads": [4], "writes": [] }"#,
        r#"{"op":"wait","stream":1,"event":2}"#,
        r#"{"op":"from_the_future","stream":1}"#,
        "",
        r#"{"op":"launch","name":"k\u0033","stream":2,"reads":[],"writes":[5],"thread":3}"#,
        r#"{"op":"host_access","reads":[{"buf":6,"arg":"h"}],"writes":[]}"#,
        r#"{"op":"launch","name":"k","stream":1,"reads":[7],"writes":[8]}"#,
        // Launches the writer's layout declines partway, after their stream and some
        // accesses, over a launch with longer lists: read by the other tiers, nothing of the
        // accesses written over before the decline is left.
        r#"{"op":"launch","name":"w","stream":4,"reads":[{"buf":1,"arg":"a"},2,3],"writes":[4,5],"atomics":[6]}"#,
        r#"{"op":"launch","name":"w","stream":5,"reads":[9,{"buf":8,"arg":"b"} ],"writes":[7]}"#,
        r#"{"op":"launch","name":"w","stream":6,"reads":[10],"writes":[11,12 ]}"#,
        r#"{"op":"launch","name":"w","stream":7,"reads":[13],"writes":[],"atomics":[14] }"#,
        r#"{"op":"launch","stream":1,"reads":[7],"writes":[8]}"#,
    ]
    .join("\n");
    let fresh: Vec<_> = TraceReader::new(text.as_bytes(), "t").unwrap().collect();
    assert_eq!(fresh.len(), 11, "{fresh:?}");
    let mut reader = TraceReader::new(text.as_bytes(), "t").unwrap();
    let mut slot = Record::default();
    let mut reused = Vec::new();
    while let Some(read) = reader.read_into(&mut slot) {
        reused.push(read.map(|()| slot.clone()));
    }
    assert_eq!(reused, fresh);
    assert!(
        fresh[10]
            .as_ref()
            .is_err_and(|e| e.to_string().contains("name"))
    );
    assert_eq!(reader.skipped_count(), 1);
}

/// In steady state a record read into one of the same shape allocates nothing: its name and
/// access lists are the ones it had (or the reader kept) before.
#[test]
fn reading_into_a_record_reuses_its_parts() {
    let launch = |name: &str, reads: Vec<Access>| Record {
        line: 0,
        thread: 0,
        at: None,
        name: Some(name.into()),
        op: Op::Launch {
            stream: 1,
            reads,
            writes: vec![Access::whole(9)],
            atomics: Vec::new(),
        },
    };
    let wait = Record {
        op: Op::Wait {
            stream: 1,
            event: 1,
        },
        ..Record::default()
    };
    let records = [
        launch("axpy", vec![Access::whole(1), Access::whole(2)]),
        wait,
        launch("gemm", vec![Access::whole(3)]),
    ];
    let parts = |r: &Record| match &r.op {
        Op::Launch { reads, writes, .. } => (
            r.name.as_ref().map(|n| n.as_ptr()),
            reads.as_ptr(),
            writes.as_ptr(),
        ),
        _ => panic!("a launch: {r:?}"),
    };
    for encoding in [Encoding::JsonLines, Encoding::Binary] {
        let (bytes, expected) = written(&records, encoding);
        let mut reader = TraceReader::new(&bytes[..], "t").unwrap();
        let mut slot = Record::default();
        reader.read_into(&mut slot).unwrap().unwrap();
        assert_eq!(slot, expected[0]);
        let before = parts(&slot);
        // A wait in between: the launch's parts wait in the reader.
        reader.read_into(&mut slot).unwrap().unwrap();
        assert_eq!(slot, expected[1]);
        reader.read_into(&mut slot).unwrap().unwrap();
        assert_eq!(slot, expected[2]);
        let after = parts(&slot);
        assert_eq!(
            after.0, before.0,
            "{encoding}: the name's bytes are the first name's"
        );
        // The lists come back last kept, first given: the writes list serves the reads.
        assert_eq!(after.1, before.2, "{encoding}");
        assert_eq!(after.2, before.1, "{encoding}");
        assert!(reader.read_into(&mut slot).is_none());
    }
}

/// A launch read from JSON Lines into a record that holds a launch is written over it where
/// it is: its lists are the ones the record had, whatever their lengths before.
#[test]
fn a_launch_read_over_a_launch_keeps_its_lists() {
    let text = [
        r#"{"streamsan_trace":1}"#,
        r#"{"op":"launch","name":"a","stream":1,"reads":[1,{"buf":2,"arg":"x"}],"writes":[3]}"#,
        r#"{"op":"launch","name":"b","stream":2,"reads":[{"buf":4,"arg":"y"}],"writes":[5,6,7],"atomics":[8]}"#,
        r#"{"op":"launch","name":"c","stream":3,"writes":[{"buf":9,"off":1,"len":2}]}"#,
    ]
    .join("\n");
    let fresh: Vec<_> = TraceReader::new(text.as_bytes(), "t")
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut reader = TraceReader::new(text.as_bytes(), "t").unwrap();
    let mut slot = Record::default();
    let lists = |r: &Record| match &r.op {
        Op::Launch { reads, writes, .. } => (reads.as_ptr(), writes.as_ptr()),
        _ => panic!("a launch: {r:?}"),
    };
    reader.read_into(&mut slot).unwrap().unwrap();
    assert_eq!(slot, fresh[0]);
    let first = lists(&slot);
    for want in &fresh[1..] {
        reader.read_into(&mut slot).unwrap().unwrap();
        assert_eq!(&slot, want);
        // The writes list grew for three accesses; the reads list stayed where it was.
        assert_eq!(lists(&slot).0, first.0, "{want:?}");
    }
    assert!(reader.read_into(&mut slot).is_none());
}

/// A line whole in the input's buffer is parsed where it lies, others are read into the
/// reader's own buffer: read through buffers of every size from 1 byte up, so that lines fall
/// both ways and across every boundary, a trace gives the same entries (records, skipped
/// records with their text, errors with their columns) as read whole.
#[test]
fn lines_read_the_same_whatever_the_input_buffer() {
    let text = [
        r#"{"streamsan_trace": 1, "minor": 99}"#,
        r#"{"op":"launch","name":"k","stream":1,"reads":[1,{"buf":2,"off":8,"len":16,"arg":"x"}],"writes":[3],"at":"a.rs:1:1"}"#,
        "",
        "  \t\r",
        "{\"op\":\"graph_update\",\"nodes\":{\"count\":4},\"stream\":1}\r",
        "{\"op\":\"wait\",\"stream\":1,\"event\":2}\r",
        r#"{"op":"launch","name":"k","stream":1,"reads":[7],"writes":[8],}"#,
        r#"{ "op": "launch", "name": "café", "stream": 2, "reads": [], "writes": [5] }"#,
        r#"{"op":"host_access","name":"café ☕","reads":[3]}"#,
        "{\"op\":\"event\",\"id\":1}",
    ]
    .join("\n");
    let entries = |capacity: usize| {
        let input = BufReader::with_capacity(capacity, text.as_bytes());
        let mut reader = TraceReader::new(input, "t").unwrap();
        let mut entries = Vec::new();
        while let Some(entry) = reader.next_entry() {
            entries.push(entry.map_err(|e| e.to_string()));
        }
        // And read into one record, as `check` reads.
        let input = BufReader::with_capacity(capacity, text.as_bytes());
        let mut into = TraceReader::new(input, "t").unwrap();
        let mut record = Record::default();
        // (It passes over skipped records.)
        for entry in entries
            .iter()
            .filter(|e| !matches!(e, Ok(Entry::Skipped(_))))
        {
            let read = into.read_into(&mut record).unwrap();
            match entry {
                Ok(Entry::Record(r)) => assert_eq!((read.unwrap(), &record), ((), r)),
                Ok(Entry::Skipped(_)) => unreachable!(),
                Err(e) => assert_eq!(&read.unwrap_err().to_string(), e),
            }
        }
        assert!(into.read_into(&mut record).is_none());
        (entries, reader.bytes_read(), reader.line())
    };
    let whole = entries(1 << 16);
    assert_eq!(whole.0.len(), 7, "{:?}", whole.0);
    assert!(
        matches!(&whole.0[1], Ok(Entry::Skipped(s)) if s.json.as_deref() == Some(r#"{"op":"graph_update","nodes":{"count":4},"stream":1}"#))
    );
    assert!(
        matches!(&whole.0[3], Err(e) if e.starts_with("t:7:")),
        "{:?}",
        whole.0[3]
    );
    assert_eq!((whole.1, whole.2), (text.len() as u64, 10));
    for capacity in 1..=text.len() + 1 {
        assert_eq!(entries(capacity), whole, "input buffer of {capacity} bytes");
    }
}
