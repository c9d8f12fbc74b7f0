//! Suppressions: syntax errors and matching.

use super::*;
use crate::engine::finding::{AccessKind, BufferInfo, RaceKind, StreamInfo};
use crate::engine::finding::{Unordered, WarningFact};
use crate::trace::record::OpKind;
use crate::trace::record::{MemSpace, Pool, StreamFlags, StreamKind};

fn parse(text: &str) -> Suppressions {
    Suppressions::parse(text, "t.supp").unwrap_or_else(|e| panic!("{e}"))
}

fn error(text: &str) -> String {
    Suppressions::parse(text, "t.supp")
        .expect_err("a syntax error")
        .to_string()
}

fn stream(id: u64, ordinal: u32, name: Option<&str>) -> StreamInfo {
    StreamInfo {
        id,
        ordinal,
        device: 0,
        kind: if ordinal == 0 {
            StreamKind::LegacyDefault
        } else {
            StreamKind::Created
        },
        flags: StreamFlags::NonBlocking,
        name: name.map(str::to_string),
    }
}

/// `sum` on stream s1 "side" reads buffer b1 "logits" that `randn` on s0 wrote.
pub(crate) fn race() -> Race {
    Race {
        kind: RaceKind::ReadAfterWrite,
        buffer: BufferInfo {
            id: 10,
            ordinal: 1,
            name: Some("logits".into()),
            bytes: 64,
            space: MemSpace::Device,
            device: 0,
            alloc_line: 3,
            alloc_at: Some("src/alloc.rs:1:1".into()),
            alloc_stream: None,
            addr: None,
            pool: Pool::Driver,
        },
        range: (0, 64),
        current: Site {
            line: 7,
            stream: Some(stream(5, 1, Some("side"))),
            thread: 0,
            op: OpKind::Launch,
            name: Some("sum".into()),
            access: AccessKind::Read,
            arg: Some("x".into()),
            at: Some("src/model.rs:120:5".into()),
            graph: None,
        },
        previous: Site {
            line: 6,
            stream: Some(stream(0, 0, None)),
            thread: 0,
            op: OpKind::Launch,
            name: Some("randn".into()),
            access: AccessKind::Write,
            arg: Some("out".into()),
            at: Some("src/model.rs:118:5".into()),
            graph: None,
        },
        why: Unordered::NeverSynchronized,
        reused: None,
    }
}

fn matches(line: &str, race: &Race) -> bool {
    parse(line).entries()[0].matches_race(race)
}

#[test]
fn comments_blank_lines_and_entries() {
    let s = parse(
        "# header comment\n\
         \n   \t\n\
         race:kernel=sum            # either side\n\
         \u{20}\u{20}warning:kind=leak\r\n\
         race: kind = write-after-read , kernel = axpy#tight comment\n",
    );
    let e = s.entries();
    assert_eq!(e.len(), 3);
    assert_eq!((e[0].line, e[0].text.as_str()), (4, "race:kernel=sum"));
    assert_eq!(e[0].target, Target::Race);
    assert_eq!((e[1].line, e[1].text.as_str()), (5, "warning:kind=leak"));
    assert_eq!(e[1].target, Target::Warning);
    assert_eq!(
        e[2].text, "race: kind = write-after-read , kernel = axpy",
        "blanks around separators are allowed"
    );
    assert_eq!(e[2].conditions.len(), 2);
    assert_eq!(e[2].location(), "t.supp:6");
    assert!(parse("").is_empty());
    assert!(parse("# only\n").is_empty());
}

#[test]
fn quoted_values_hold_blanks_commas_hashes_and_escapes() {
    let s = parse(r#"race:kernel="void axpy<float, 4>(#1) \"q\" \\",op=launch"#);
    let c = &s.entries()[0].conditions;
    assert_eq!(c[0].value.as_str(), r#"void axpy<float, 4>(#1) "q" \"#);
    assert_eq!(c[1].value.as_str(), "launch");
}

#[test]
fn every_syntax_error_names_line_column_and_what_was_expected() {
    let cases: &[(&str, &str)] = &[
        (
            "kernel=sum",
            "t.supp:1:1: expected a suppression `race:CONDITIONS` or `warning:CONDITIONS`, \
             or a `#` comment, found `kernel=sum`",
        ),
        (
            "  =x",
            "t.supp:1:3: expected a suppression `race:CONDITIONS` or `warning:CONDITIONS`, \
             or a `#` comment, found `=x`",
        ),
        (
            "race",
            "t.supp:1:5: expected `:` after `race`, found the end of the line",
        ),
        (
            "race kernel=sum",
            "t.supp:1:5: expected `:` after `race`, found a blank",
        ),
        (
            "races:kernel=sum",
            "t.supp:1:1: unknown suppression type `races` (expected `race` or `warning`)",
        ),
        (
            "race:",
            "t.supp:1:6: expected a condition `key=value` after `race:`, found the end of \
             the line",
        ),
        (
            "warning: # nothing",
            "t.supp:1:10: expected a condition `key=value` after `warning:`, found `#`",
        ),
        (
            "race:kernel=sum,",
            "t.supp:1:17: expected a condition `key=value` after `,`, found the end of the \
             line",
        ),
        (
            "race:kernel=sum,,op=free",
            "t.supp:1:17: expected a condition `key=value` after `,`, found `,op=free`",
        ),
        (
            "race:kernal=sum",
            "t.supp:1:6: unknown key `kernal` in a `race:` suppression (expected one of: \
             kind, buffer, kernel, op, stream, at, or current./previous. before kernel, op, \
             stream, at)",
        ),
        (
            "race:message=x",
            "t.supp:1:6: unknown key `message` in a `race:` suppression (expected one of: \
             kind, buffer, kernel, op, stream, at, or current./previous. before kernel, op, \
             stream, at)",
        ),
        (
            "race:next.kernel=x",
            "t.supp:1:6: unknown key `next.kernel` in a `race:` suppression (expected one \
             of: kind, buffer, kernel, op, stream, at, or current./previous. before kernel, \
             op, stream, at)",
        ),
        (
            "race:current.kind=use-after-free",
            "t.supp:1:6: `current.kind`: `kind` belongs to the race as a whole, not to one \
             side (`current.` and `previous.` go with kernel, op, stream and at)",
        ),
        (
            "race:previous.buffer=x",
            "t.supp:1:6: `previous.buffer`: `buffer` belongs to the race as a whole, not to \
             one side (`current.` and `previous.` go with kernel, op, stream and at)",
        ),
        (
            "warning:kernel=sum",
            "t.supp:1:9: unknown key `kernel` in a `warning:` suppression (expected one of: \
             kind, message)",
        ),
        (
            "warning:current.kind=leak",
            "t.supp:1:9: unknown key `current.kind` in a `warning:` suppression (expected \
             one of: kind, message)",
        ),
        (
            "race:kernel",
            "t.supp:1:12: expected `=` after `kernel`, found the end of the line",
        ),
        (
            "race:kernel:sum",
            "t.supp:1:12: expected `=` after `kernel`, found `:sum`",
        ),
        (
            "race:kernel=",
            "t.supp:1:13: expected a value after `kernel=` (`*` matches anything; quote a \
             value that holds blanks, `,` or `#`), found the end of the line",
        ),
        (
            "race:kernel=,op=free",
            "t.supp:1:13: expected a value after `kernel=` (`*` matches anything; quote a \
             value that holds blanks, `,` or `#`), found `,op=free`",
        ),
        (
            "race:kernel=\"\"",
            "t.supp:1:13: expected a value after `kernel=` (`*` matches anything; quote a \
             value that holds blanks, `,` or `#`), found `\"\"`",
        ),
        (
            "race:kernel=my kernel",
            "t.supp:1:16: expected `,` before another condition, `#` before a comment, or \
             the end of the line after the value of `kernel`, found `kernel`",
        ),
        (
            "race:kernel=\"sum\"x",
            "t.supp:1:18: expected `,` before another condition, `#` before a comment, or \
             the end of the line after the value of `kernel`, found `x`",
        ),
        (
            "race:kernel=\"sum",
            "t.supp:1:13: unterminated quoted value: expected a closing `\"` before the end \
             of the line",
        ),
        (
            "race:kernel=\"a\\nb\"",
            "t.supp:1:15: unknown escape in a quoted value: expected `\\\"` or `\\\\`, found \
             `\\n`",
        ),
        (
            "race:kernel=\"a\\",
            "t.supp:1:15: unknown escape in a quoted value: expected `\\\"` or `\\\\`, found \
             \\ at the end of the line",
        ),
        (
            "race:kind=read-after-wrote",
            "t.supp:1:11: unknown race kind `read-after-wrote` (expected one of: \
             read-after-write, write-after-read, write-after-write, free-while-in-use, \
             use-after-free)",
        ),
        (
            "race:kind=wirte-*",
            "t.supp:1:11: `wirte-*` matches no race kind (expected one of: \
             read-after-write, write-after-read, write-after-write, free-while-in-use, \
             use-after-free)",
        ),
        (
            "warning:kind=leaks",
            "t.supp:1:14: unknown warning kind `leaks` (expected one of: unrecorded-event, \
             foreign-per-thread-stream, host-access-to-device, leak, skipped-record, \
             caching-free-in-use, not-checked, forgotten-buffer)",
        ),
        (
            "race:current.op=kernel",
            "t.supp:1:17: unknown op `kernel` (expected one of: alloc, free, launch, \
             memcpy, memset, host_func, host_access)",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(&error(text), expected, "for {text:?}");
    }
    // The first bad line is named, after good ones.
    assert_eq!(
        error("# ok\nrace:kernel=sum\n\nrace:kernel\n"),
        "t.supp:4:12: expected `=` after `kernel`, found the end of the line"
    );
}

#[test]
fn load_names_the_file_in_errors() {
    let err = Suppressions::load("/nonexistent/streamsan.supp").unwrap_err();
    assert_eq!(err.file, "/nonexistent/streamsan.supp");
    assert_eq!(err.line, 0);
    assert!(
        err.to_string()
            .starts_with("/nonexistent/streamsan.supp: cannot read: "),
        "{err}"
    );
}

#[test]
fn race_fields_match_exactly_or_by_glob() {
    let r = race();
    for (line, expected) in [
        ("race:kind=read-after-write", true),
        ("race:kind=write-after-read", false),
        ("race:kind=*-after-write", true),
        ("race:buffer=logits", true),
        ("race:buffer=log*", true),
        ("race:buffer=logit", false),
        ("race:buffer=b1", true),
        ("race:buffer=b2", false),
        ("race:kernel=sum", true),
        ("race:kernel=randn", true),
        ("race:kernel=Sum", false),
        ("race:kernel=su", false),
        ("race:op=launch", true),
        ("race:op=memcpy", false),
        ("race:stream=side", true),
        ("race:stream=s0", true),
        ("race:stream=s1", true),
        ("race:stream=s2", false),
        ("race:stream=main", false),
        ("race:at=src/model.rs", true),
        ("race:at=src/model.rs:120", true),
        ("race:at=src/model.rs:118:5", true),
        ("race:at=src/model.rs:12", false),
        ("race:at=src/*", true),
        ("race:at=src", false),
        ("race:at=src/alloc.rs", false),
    ] {
        assert_eq!(matches(line, &r), expected, "{line}");
    }
}

#[test]
fn sides_either_or_pinned() {
    let r = race();
    assert!(matches("race:current.kernel=sum", &r));
    assert!(!matches("race:previous.kernel=sum", &r));
    assert!(matches("race:previous.kernel=randn", &r));
    assert!(matches("race:previous.stream=s0", &r));
    assert!(!matches("race:current.stream=s0", &r));
    assert!(matches("race:current.at=src/model.rs:120", &r));
    assert!(!matches("race:previous.at=src/model.rs:120", &r));
    assert!(matches("race:current.op=launch,previous.op=launch", &r));
    // Unqualified conditions are checked one by one against either side: the pair of
    // kernels is written as two conditions.
    assert!(matches("race:kernel=randn,kernel=sum", &r));
    assert!(!matches("race:kernel=randn,kernel=axpy", &r));
    assert!(matches("race:kernel=sum,stream=s0", &r), "different sides");
    assert!(!matches("race:current.kernel=sum,current.stream=s0", &r));
}

#[test]
fn all_conditions_must_hold() {
    let r = race();
    assert!(matches(
        "race:kind=read-after-write,buffer=logits,kernel=sum,stream=side,at=src/*",
        &r
    ));
    assert!(!matches("race:kind=write-after-read,kernel=sum", &r));
    assert!(!matches("race:kernel=sum,buffer=other", &r));
}

#[test]
fn missing_values_never_match_except_through_symbols() {
    let mut r = race();
    r.buffer.name = None;
    r.current.name = None;
    r.current.at = None;
    r.previous.at = None;
    r.current.stream = None; // host code
    assert!(matches("race:buffer=*", &r), "every buffer has a symbol");
    assert!(matches("race:buffer=b1", &r), "the symbol still matches");
    assert!(!matches("race:buffer=logits", &r));
    assert!(!matches("race:current.kernel=*", &r));
    assert!(!matches("race:at=*", &r));
    assert!(!matches("race:current.stream=*", &r));
    assert!(matches("race:current.op=launch", &r));
}

#[test]
fn targets_do_not_cross() {
    let r = race();
    let mut tmp = crate::report::fixtures::buffer_x();
    tmp.name = Some("tmp".into());
    let w = Warning {
        line: 9,
        fact: WarningFact::Leak {
            first: vec![tmp],
            count: 1,
        },
    };
    let s = parse("race:kernel=*\nwarning:kind=leak\nwarning:message=*\"tmp\"*\n");
    let e = s.entries();
    assert!(e[0].matches_race(&r) && !e[0].matches_warning(&w));
    assert!(e[1].matches_warning(&w) && !e[1].matches_race(&r));
    assert!(e[2].matches_warning(&w));
    assert!(!parse("warning:kind=unrecorded-event").entries()[0].matches_warning(&w));
    assert!(!parse("warning:message=never").entries()[0].matches_warning(&w));
}

#[test]
fn unused_are_those_without_hits_and_extend_keeps_order() {
    let mut s = parse("race:kernel=a\nrace:kernel=b\n");
    s.extend(Suppressions::parse("warning:kind=leak\n", "u.supp").unwrap());
    assert_eq!(s.len(), 3);
    let unused: Vec<String> = s.unused(&[1, 0, 0]).iter().map(|u| u.location()).collect();
    assert_eq!(unused, ["t.supp:2", "u.supp:1"]);
}
