//! Unit tests of the fast path: which lines it takes and which it leaves to serde_json. Every
//! case is also run through the serde path, which must agree wherever the fast path answers
//! (the differential tests over whole corpora are in `parse/tests.rs`).

use super::*;
use crate::trace::parse::fields::FieldName;
use crate::trace::parse::parse_with_serde;
use crate::trace::record::{Access, Op};

/// Whether the fast path takes `line`; where it does, the serde path must give the same `Ok`.
fn takes(line: &str, allow_unknown_ops: bool) -> bool {
    let slow = parse_with_serde(line, allow_unknown_ops);
    match scan_line(line, allow_unknown_ops) {
        Some(fast) => {
            match slow {
                Ok(slow) => assert_eq!(fast, slow, "{line}"),
                Err(e) => panic!("the fast path took {line:?}; serde says {}", e.message),
            }
            true
        }
        None => false,
    }
}

/// Whether the serde path reads `line`.
fn serde_reads(line: &str, allow_unknown_ops: bool) -> bool {
    parse_with_serde(line, allow_unknown_ops).is_ok()
}

#[test]
fn takes_what_the_writer_emits() {
    for line in [
        r#"{"op":"launch","name":"gemm","stream":3,"reads":[5322,{"buf":9324,"off":3072,"len":1024}],"writes":[4242]}"#,
        r#"{"op":"stream","name":"side","id":1,"kind":"created","flags":"non_blocking","at":"src/main.rs:12:16"}"#,
        r#"{"op":"stream","id":2,"device":1,"kind":"per_thread_default","thread":4}"#,
        r#"{"op":"event","name":"x_ready","id":1}"#,
        r#"{"op":"event_destroy","id":1}"#,
        r#"{"op":"alloc","name":"x","buf":1,"bytes":4096,"space":"device","addr":140230168576000}"#,
        r#"{"op":"alloc","name":"logits","buf":7,"bytes":1048576,"space":"device","stream":1,"addr":139870437130240,"pool":"caching"}"#,
        r#"{"op":"alloc","buf":3,"bytes":4,"device":2,"space":"pinned","pool":"driver"}"#,
        r#"{"op":"free","buf":1,"stream":2}"#,
        r#"{"op":"launch","name":"sum","stream":1,"reads":[{"buf":1,"arg":"x"}],"writes":[{"buf":2,"off":0,"len":4,"arg":"out"}],"at":"src/main.rs:33:5"}"#,
        r#"{"op":"memcpy","stream":0,"src":2,"dst":{"buf":3,"off":8,"len":8},"blocking":true}"#,
        r#"{"op":"memset","stream":1,"dst":{"buf":2,"off":0,"len":256},"blocking":false}"#,
        r#"{"op":"host_func","name":"log_loss","stream":1,"reads":[3]}"#,
        r#"{"op":"host_access","name":"print y","reads":[3],"thread":1}"#,
        r#"{"op":"record","event":1,"stream":0}"#,
        r#"{"op":"wait","stream":1,"event":1}"#,
        r#"{"op":"event_sync","event":1}"#,
        r#"{"op":"event_query","event":1,"done":true}"#,
        r#"{"op":"stream_sync","stream":1}"#,
        r#"{"op":"stream_query","stream":1,"done":false}"#,
        r#"{"op":"device_sync"}"#,
        r#"{"op":"device_sync","device":3}"#,
        r#"{"op":"record_stream","buf":7,"stream":2}"#,
        r#"{"op":"graph_begin","graph":1,"stream":1}"#,
        r#"{"op":"graph_end","graph":1,"stream":1}"#,
        r#"{"op":"graph_launch","graph":1,"stream":3}"#,
        r#"{"op":"graph_destroy","graph":1}"#,
        r#"{"op":"stream_destroy","id":1,"thread":2}"#,
    ] {
        assert!(takes(line, false), "{line}");
        assert!(takes(line, true), "{line}");
    }
}

#[test]
fn takes_spaces_other_orders_and_what_is_ignored() {
    for line in [
        // Spaces after `:` and `,`, as Python's json.dumps writes, and whitespace anywhere.
        r#"{"op": "launch", "name": "k", "stream": 1, "reads": [1, {"buf": 2, "off": 0, "len": 4}], "writes": []}"#,
        " \t{ \"op\" :\"free\" ,\r\"buf\"\n: 1 } \r",
        // Any order.
        r#"{"writes":[4],"stream":3,"name":"k","op":"launch"}"#,
        r#"{"reads":[{"len":4,"arg":"x","off":0,"buf":2}],"name":"k","op":"launch","stream":0}"#,
        // Unknown fields, whatever their value, and the fields of other ops (typed by name).
        r#"{"future":{"a":[1,{"b":null}],"c":-1.5e-3},"op":"free","buf":1,"x":-0,"y":0.25,"z":"s"}"#,
        r#"{"op":"event","id":1,"done":true,"bytes":5,"reads":[1],"src":{"buf":1},"kind":"created"}"#,
        r#"{"op":"host_access","reads":[{"buf":1,"note":[true,false,null]}]}"#,
        // `null` counts as absent.
        r#"{"op":"free","buf":1,"stream":null,"thread":null,"name":null,"at":null}"#,
        r#"{"op":"host_access","reads":null,"writes":[{"buf":1,"off":null,"len":null,"arg":null}]}"#,
        r#"{"op":"memset","stream":0,"dst":1,"src":null,"blocking":true}"#,
        // The header key in a record that has an op.
        r#"{"op":"device_sync","streamsan_trace":1,"streamsan_trace":"twice"}"#,
        // Non-ASCII text.
        r#"{"op":"launch","stream":0,"name":"名前","at":"é.rs:1:1"}"#,
        // The largest values.
        r#"{"op":"alloc","buf":18446744073709551615,"bytes":0,"device":4294967295,"space":"device"}"#,
        r#"{"op":"host_access","reads":[{"buf":1,"off":18446744073709551614,"len":1}]}"#,
        // Text after an unknown field's nested value.
        r#"{"x":[[[[]]],{}],"op":"device_sync"}"#,
    ] {
        assert!(takes(line, false), "{line}");
    }
}

#[test]
fn takes_unknown_ops_only_where_allowed() {
    let line = r#"{"op":"future_op","stream":1,"whatever":[1]}"#;
    assert!(takes(line, true));
    assert!(!takes(line, false));
    // Known fields are still checked on a skipped record.
    assert!(!takes(r#"{"op":"future_op","stream":"s1"}"#, true));
}

/// Lines serde_json reads but the fast path leaves to it: the results would be the same, but
/// the fast path does not follow these forms.
#[test]
fn leaves_escapes_and_deep_nesting_to_serde() {
    let deep = format!(
        r#"{{"x":{}{},"op":"device_sync"}}"#,
        "[".repeat(40),
        "]".repeat(40)
    );
    for line in [
        r#"{"op":"launch","stream":0,"name":"k\u00e9\"\n","at":"dir\\f.rs:1:1"}"#,
        r#"{"o\u0070":"device_sync"}"#,
        r#"{"op":"laun\u0063h","stream":0,"name":"k"}"#,
        r#"{"op":"device_sync","x":"\n"}"#,
        r#"{"op":"host_access","reads":[{"buf":1,"a\rg":"x"}]}"#,
        &deep,
    ] {
        assert!(serde_reads(line, false), "{line}");
        assert!(!takes(line, false), "{line}");
    }
}

/// Every malformed line is the serde path's, so its message and column stay as they were.
#[test]
fn leaves_every_error_to_serde() {
    for line in [
        "",
        " ",
        "{}",
        "[]",
        "null",
        "42",
        r#"{"op":"launch","stream":1,"name":"k"}x"#,
        r#"{"op":"launch","stream":1,"name":"k"}{"op":"device_sync"}"#,
        r#"{"op":"launch","stream":1,"name":"k",}"#,
        r#"{"op":"launch","stream":1,"name":"k""#,
        r#"{"op":"launch","stream":1,"name":"k"#,
        r#"{"op":"launch","stream":1,"reads":[1,],"name":"k"}"#,
        r#"{"op":"launch","stream":1,"reads":[,1],"name":"k"}"#,
        r#"{"op":"launch","stream":1,"reads":[null],"name":"k"}"#,
        r#"{"op":"launch","stream":1,"reads":1,"name":"k"}"#,
        r#"{"op":"launch","stream":1,"reads":{"buf":1},"name":"k"}"#,
        r#"{"op":"launch","stream":1}"#,
        r#"{"op":"launch","name":"k"}"#,
        r#"{"stream":1,"name":"k"}"#,
        r#"{"op":null,"stream":1,"name":"k"}"#,
        r#"{"streamsan_trace":1}"#,
        r#"{"op":"lunch","stream":1}"#,
        r#"{"op":1}"#,
        r#"{"op":"free","buf":1,"buf":2}"#,
        r#"{"op":"free","buf":null,"buf":2}"#,
        r#"{"op":"free","op":"free","buf":2}"#,
        r#"{"op":"free","buf":-3}"#,
        r#"{"op":"free","buf":-0}"#,
        r#"{"op":"free","buf":01}"#,
        r#"{"op":"free","buf":00}"#,
        r#"{"op":"free","buf":1.0}"#,
        r#"{"op":"free","buf":1e3}"#,
        r#"{"op":"free","buf":1E3}"#,
        r#"{"op":"free","buf":18446744073709551616}"#,
        r#"{"op":"free","buf":99999999999999999999999}"#,
        r#"{"op":"free","buf":"1"}"#,
        r#"{"op":"free","buf":true}"#,
        r#"{"op":"free","buf":[1]}"#,
        r#"{"op":"free","buf":1,"thread":-1}"#,
        r#"{"op":"device_sync","device":4294967296}"#,
        r#"{"op":"stream","id":1,"kind":"default"}"#,
        r#"{"op":"stream","id":1,"kind":"created","flags":"nonblocking"}"#,
        r#"{"op":"alloc","buf":1,"bytes":4,"space":"Device"}"#,
        r#"{"op":"alloc","buf":1,"bytes":4,"space":"device","pool":"caching"}"#,
        r#"{"op":"event_query","event":1,"done":1}"#,
        r#"{"op":"event_query","event":1,"done":tru}"#,
        r#"{"op":"event_query","event":1,"done":truex}"#,
        r#"{"op":"event_query","event":1,"done":nul}"#,
        r#"{"op":"memcpy","stream":0,"src":null,"dst":1,"blocking":true}"#,
        r#"{"op":"memcpy","stream":0,"src":{},"dst":1,"blocking":true}"#,
        r#"{"op":"memcpy","stream":0,"src":{"buf":1,"off":0},"dst":1,"blocking":true}"#,
        r#"{"op":"memcpy","stream":0,"src":{"buf":1,"len":0},"dst":1,"blocking":true}"#,
        r#"{"op":"memcpy","stream":0,"src":{"buf":1,"buf":1},"dst":1,"blocking":true}"#,
        r#"{"op":"memcpy","stream":0,"src":{"buf":1,"arg":1},"dst":1,"blocking":true}"#,
        r#"{"op":"host_access","reads":[{"buf":1,"off":18446744073709551615,"len":2}]}"#,
        r#"{"op":"host_access","reads":[{"buf":1,"off":1,"len":null}]}"#,
        r#"{"op":"launch","stream":0,"name":"tab	inside"}"#,
        r#"{"op":"device_sync","x":[1,]}"#,
        r#"{"op":"device_sync","x":{"a"}}"#,
        r#"{"op":"device_sync","x":{"a":1,}}"#,
        r#"{"op":"device_sync","x":{1:1}}"#,
        r#"{"op":"device_sync","x":1.}"#,
        r#"{"op":"device_sync","x":.5}"#,
        r#"{"op":"device_sync","x":1e}"#,
        r#"{"op":"device_sync","x":-}"#,
        r#"{"op":"device_sync","x":+1}"#,
        r#"{"op":"device_sync","x":01}"#,
        r#"{"op":"device_sync","x":NaN}"#,
        r#"{"op":"device_sync" "x":1}"#,
        r#"{"op" "device_sync"}"#,
        r#"{op:"device_sync"}"#,
        "{\"op\":\"device_sync\"}\u{a0}",
        "\u{feff}{\"op\":\"device_sync\"}",
    ] {
        assert!(!serde_reads(line, false), "{line}");
        assert!(!takes(line, false), "{line}");
    }
}

#[test]
fn op_kind_agrees_with_the_vocabulary() {
    for op in OpKind::ALL {
        assert_eq!(op_kind(op.as_str()), Some(op));
    }
    for name in ["", "Launch", "launc", "launchx", "lunch", "wait ", "graph"] {
        assert_eq!(op_kind(name), None, "{name}");
    }
}

/// The keys compared as words are exactly the field names, and every name short enough is
/// found that way.
#[test]
fn keys_read_as_words_agree_with_the_names() {
    for field in FieldName::ALL {
        let name = field.name();
        for tail in ["\":1}....", "x\":1}...", "\"", "_\":0,\"abc"] {
            let text = format!("{name}{tail}");
            let Some(window) = text.as_bytes().get(..8) else {
                continue;
            };
            if let Some((found, len)) = keys::record_key(window.try_into().unwrap()) {
                assert_eq!(text.as_bytes()[len - 1], b'"', "{text}");
                assert_eq!(FieldName::parse(&text[..len - 1]), found, "{text}");
            }
        }
        let text = format!("{name}\":1}}....");
        let window = text.as_bytes()[..8].try_into().unwrap();
        let short = name.len() < 8 && !matches!(field, FieldName::Other);
        assert_eq!(
            keys::record_key(window),
            short.then_some((field, name.len() + 1)),
            "{name}"
        );
    }
    for (key, bit) in [
        ("buf", keys::ACCESS_BUF),
        ("off", keys::ACCESS_OFF),
        ("len", keys::ACCESS_LEN),
        ("arg", keys::ACCESS_ARG),
    ] {
        let window = format!("{key}\"").into_bytes().try_into().unwrap();
        assert_eq!(keys::access_key(window), Some(bit));
        assert_eq!(keys::access_key_named(key), Some(bit));
    }
    assert_eq!(keys::access_key(*b"bu\"\""), None);
    assert_eq!(keys::access_key_named("bufx"), None);
    assert_eq!(OpKind::Launch.as_str(), "launch");
    assert_eq!(keys::common_op(*b"launch\","), Some((OpKind::Launch, 7)));
    assert_eq!(keys::common_op(*b"launchx\""), None);
    assert_eq!(keys::common_op(*b"lunch\",\""), None);
}

/// The record line at the start of `input` as [`scan_written_line`] reads it: the record and
/// the line's lengths without and with its ending.
fn written_line(input: &[u8]) -> Option<(Record, usize, usize)> {
    let mut out = Record::default();
    let (text, line) = scan_written_line(input, &mut SpareParts::default(), &mut out)?;
    Some((out, text, line))
}

#[test]
fn a_written_line_is_read_where_it_lies_up_to_its_line_ending() {
    let line = r#"{"op":"launch","name":"sum","stream":1,"reads":[{"buf":1,"arg":"x"}],"writes":[2],"at":"a.rs:1:1"}"#;
    let Some(Parsed::Record(want)) = scan_written(line) else {
        panic!("the writer's layout")
    };
    let n = line.len();
    for (ending, next) in [
        ("\n", ""),
        ("\r\n", ""),
        ("\n", "{\"op\":\"event\",\"id\":1}\n"),
    ] {
        let input = format!("{line}{ending}{next}");
        let got = written_line(input.as_bytes());
        assert_eq!(got, Some((want.clone(), n, n + ending.len())), "{input:?}");
    }
    // Non-ASCII text in a string is read as such.
    let line = r#"{"op":"host_access","name":"café ☕","reads":[3]}"#;
    let (record, _, len) = written_line(format!("{line}\nrest").as_bytes()).expect("UTF-8");
    assert_eq!(
        (record.name.as_deref(), len),
        (Some("café ☕"), line.len() + 1)
    );
}

/// Anything but a whole line in the writer's layout, ended by `\n` or `\r\n`, is left to the
/// reader's usual path (which words the errors), and the record read into keeps its name.
#[test]
fn a_written_line_that_is_not_whole_or_not_text_is_left_to_the_usual_path() {
    let line = r#"{"op":"wait","stream":1,"event":2}"#;
    let declined: Vec<Vec<u8>> = vec![
        // No line ending (yet, or at all), or cut by the end of the input.
        line.into(),
        line[..line.len() - 3].into(),
        // Trailing whitespace, a lone `\r`, `\r` at the end of the input, trailing characters.
        format!("{line} \n").into(),
        format!("{line}\r\r\n").into(),
        format!("{line}\r").into(),
        format!("{line}x\n").into(),
        // A line end inside the record, between keys and inside a string.
        b"{\"op\":\"wait\",\n\"stream\":1,\"event\":2}\n".into(),
        b"{\"op\":\"launch\",\"name\":\"a\nb\",\"stream\":1}\n".into(),
        b"{\"op\":\"host_access\",\"name\":\"a\",\"reads\":[{\"buf\":1,\"arg\":\"x\ny\"}]}\n"
            .into(),
        // Not UTF-8, and a character cut short.
        b"{\"op\":\"host_access\",\"name\":\"\xff\",\"reads\":[3]}\n".into(),
        b"{\"op\":\"host_access\",\"name\":\"caf\xc3\",\"reads\":[3]}\n".into(),
        // Another layout.
        b"{ \"op\":\"wait\",\"stream\":1,\"event\":2}\n".into(),
    ];
    for input in declined {
        let mut out = Record {
            name: Some("before".into()),
            ..Record::default()
        };
        let got = scan_written_line(&input, &mut SpareParts::default(), &mut out);
        assert_eq!(got, None, "{:?}", String::from_utf8_lossy(&input));
        assert_eq!(out.name.as_deref(), Some("before"));
    }
}

/// A line the writer-layout scan declines partway leaves the strings and access lists it took
/// in `out`'s op or in `spare`: where it declines, no part of the record is lost (a reader of reused records then
/// allocates nothing, whatever lines it declines at its input buffer's end).
#[test]
fn a_line_declined_partway_gives_its_parts_back() {
    let whole = r#"{"op":"launch","name":"k","stream":1,"reads":[{"buf":1,"arg":"x"},2],"writes":[{"buf":3,"arg":"y"}],"at":"a.rs:1:1"}"#;
    // Cut inside the reads (before and after an argument's name), inside the writes, after
    // the op (in the call site), and at the very end (no line ending).
    for cut in [50, 65, 80, 100, 110, whole.len()] {
        let mut spare = SpareParts::default();
        for _ in 0..4 {
            spare.keep_list(vec![Access {
                buf: 0,
                range: None,
                arg: Some("kept".into()),
            }]);
        }
        let before = spare.kept();
        assert_eq!(before, (4, 4));
        let mut out = Record::default();
        let got = scan_written_line(&whole.as_bytes()[..cut], &mut spare, &mut out);
        assert_eq!(got, None, "cut at {cut}");
        // A launch is written in place: what it took is in `out`'s lists, which whoever fills
        // `out` next keeps (as `scan_line_into` does before its other paths).
        spare.reclaim(&mut out);
        assert_eq!(
            spare.kept(),
            before,
            "cut at {cut}: every part taken came back"
        );
    }
}

/// A launch declined partway over a record that holds a launch with longer lists (and argument
/// names): the op it leaves is a launch with those lists partly written over, and every list
/// and string, its own and those it took from `spare`, is in `out` or in `spare`.
#[test]
fn a_launch_declined_over_a_launch_loses_nothing() {
    let held = || Op::Launch {
        stream: 9,
        reads: vec![
            Access {
                buf: 1,
                range: None,
                arg: Some("x".into()),
            },
            Access::whole(2),
            Access {
                buf: 3,
                range: None,
                arg: Some("y".into()),
            },
        ],
        writes: vec![Access::whole(4), Access::whole(5)],
        atomics: Vec::new(),
    };
    let whole = r#"{"op":"launch","name":"k","stream":1,"reads":[{"buf":6,"arg":"z"},7],"writes":[8],"at":"a.rs:1:1"}"#;
    // Cut after the stream, inside the first access, after it, in the writes, and in the
    // call site.
    for cut in [40, 50, 67, 75, 95] {
        let mut spare = SpareParts::default();
        spare.keep_list(Vec::with_capacity(2));
        let mut out = Record {
            op: held(),
            ..Record::default()
        };
        let got = scan_written_line(&whole.as_bytes()[..cut], &mut spare, &mut out);
        assert_eq!(got, None, "cut at {cut}");
        assert!(
            matches!(out.op, Op::Launch { stream: 1, .. }),
            "cut at {cut}: {:?}",
            out.op
        );
        spare.reclaim(&mut out);
        // `out`'s two lists and the one kept before (its atomics own nothing); the names `x`
        // and `y`, and `z` once the cut comes after its access.
        let strings = if cut >= 65 { 3 } else { 2 };
        assert_eq!(spare.kept(), (strings, 3), "cut at {cut}");
    }
}
