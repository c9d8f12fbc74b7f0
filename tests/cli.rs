//! The `streamsan` command as users run it: the built binary, its exit codes, its error
//! messages for every class of malformed input, standard input, the three report formats,
//! `--max-reports`, `stats`, several files, `-v`, `convert` and binary traces, and the
//! progress line on a terminal. The reference is `docs/cli.md`.
//!
//! Fixtures live under `tests/cli/`: `malformed/` holds one small trace per class of input
//! error (the table [`MALFORMED`] says which line, column and message each must produce),
//! `valid/` holds a few well-formed traces beyond `examples/traces/`. Error messages are
//! snapshotted with insta, but every case also asserts its exit code and location explicitly,
//! so accepting a snapshot can never accept a wrong verdict.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;

mod cli_run;
use cli_run::Run;

const RACY: &str = "examples/traces/sum_before_randn.jsonl";
const FIXED: &str = "examples/traces/sum_before_randn_fixed.jsonl";
const THREE_RACES: &str = "tests/cli/valid/three_races.jsonl";
const WARNING_ONLY: &str = "tests/cli/valid/warning_only.jsonl";

/// The binary as `cli_run` runs it, without colours.
fn streamsan() -> Command {
    let mut cmd = cli_run::streamsan();
    cmd.env("NO_COLOR", "1");
    cmd
}

/// [`cli_run::finish`], and the exit code is one the CLI documents.
fn finish(cmd: &mut Command) -> Run {
    let run = cli_run::finish(cmd);
    assert!(
        matches!(run.code, 0..=2),
        "exit codes are 0, 1 or 2: {run:#?}"
    );
    run
}

fn run(args: &[&str]) -> Run {
    finish(streamsan().args(args))
}

fn run_stdin(args: &[&str], input: impl Into<Vec<u8>>) -> Run {
    finish(streamsan().args(args).write_stdin(input))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// An insta snapshot of what `streamsan ARGS` printed, kept next to the fixtures in
/// `tests/cli/snapshots/`, with the command as its description.
fn snapshot(name: impl Into<String>, args: &[&str], output: impl AsRef<str>) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("cli/snapshots");
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.set_description(format!("streamsan {}", args.join(" ")));
    settings.bind(|| insta::assert_snapshot!(name.into(), output.as_ref()));
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

// ---------------------------------------------------------------------------------------------
// Exit codes
// ---------------------------------------------------------------------------------------------

#[test]
fn racy_example_exits_1_with_a_report() {
    let r = run(&["check", RACY]);
    assert_eq!(r.code, 1, "{r:#?}");
    assert!(
        r.stdout
            .starts_with("RACE read-after-write on buffer b1 \"x\" bytes [0, 4096)\n")
    );
    assert!(
        r.stdout
            .contains("\nSUMMARY: 1 race (read-after-write on b1 \"x\") in 12 records")
    );
    assert!(
        r.stdout
            .ends_with("\nreproduce: streamsan check examples/traces/sum_before_randn.jsonl\n")
    );
    // Not a terminal: no progress bar, and nothing else on stderr either.
    assert_eq!(r.stderr, "");
}

#[test]
fn fixed_example_exits_0() {
    let r = run(&["check", FIXED]);
    assert_eq!(r.code, 0, "{r:#?}");
    assert_eq!(
        r.stdout,
        "SUMMARY: no races in 16 records, 2 streams, 3 buffers\n"
    );
    assert_eq!(r.stderr, "");
}

#[test]
fn warnings_alone_exit_0() {
    let r = run(&["check", WARNING_ONLY]);
    assert_eq!(r.code, 0, "{r:#?}");
    assert!(r.stdout.contains("warning[unrecorded-event] line 4: "));
    assert!(
        r.stdout
            .contains("SUMMARY: no races, 1 warning in 4 records")
    );
}

#[test]
fn several_files_any_race_exits_1() {
    assert_eq!(run(&["check", FIXED, RACY]).code, 1);
    assert_eq!(run(&["check", RACY, FIXED]).code, 1);
    assert_eq!(run(&["check", FIXED, WARNING_ONLY, FIXED]).code, 0);
}

#[test]
fn several_files_any_invalid_exits_2_and_the_valid_ones_are_still_reported() {
    let bad = "tests/cli/malformed/bad_json.jsonl";
    let r = run(&["check", RACY, bad, FIXED]);
    assert_eq!(r.code, 2, "{r:#?}");
    assert_eq!(
        r.stderr,
        "error: tests/cli/malformed/bad_json.jsonl:3:23: invalid JSON: expected `,` or `}`\n"
    );
    assert!(
        r.stdout
            .starts_with(&format!("== {RACY}\nRACE read-after-write"))
    );
    assert!(
        r.stdout
            .contains(&format!("\n\n== {FIXED}\nSUMMARY: no races in 16 records"))
    );
    assert!(!r.stdout.contains(bad), "no report for the invalid file");

    // A missing file among valid ones: the same.
    let r = run(&["check", FIXED, "tests/cli/no-such-trace.jsonl", FIXED]);
    assert_eq!(r.code, 2, "{r:#?}");
    assert_eq!(r.stdout.matches("SUMMARY: no races").count(), 2);
    assert!(
        r.stderr
            .contains("tests/cli/no-such-trace.jsonl: cannot open")
    );
}

#[test]
fn several_files_text_layout() {
    let args = ["check", FIXED, RACY, WARNING_ONLY];
    let r = run(&args);
    assert_eq!(r.code, 1);
    snapshot("several_files_text", &args, r.stdout);
}

#[test]
fn help_exits_0_and_lists_the_exit_codes() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["check", "--help"],
        &["stats", "--help"],
        &["convert", "--help"],
        &["help", "check"],
    ] {
        let r = run(args);
        assert_eq!(r.code, 0, "{args:?}: {r:#?}");
        assert_eq!(r.stderr, "", "{args:?}");
        assert!(r.stdout.contains("Exit codes:"), "{args:?}: {}", r.stdout);
        // `convert` finds no races, so it has no exit code 1.
        let codes: &[&str] = if args[0] == "convert" {
            &["\n  0  ", "\n  2  "]
        } else {
            &["\n  0  ", "\n  1  ", "\n  2  "]
        };
        for code in codes {
            assert!(r.stdout.contains(code), "{args:?} lacks {code:?}");
        }
    }
    for (name, args) in [
        ("help", &["--help"][..]),
        ("help_check", &["check", "--help"]),
        ("help_stats", &["stats", "--help"]),
        ("help_convert", &["convert", "--help"]),
    ] {
        snapshot(name, args, run(args).stdout);
    }
}

#[test]
fn version_exits_0() {
    let r = run(&["--version"]);
    assert_eq!(r.code, 0);
    assert_eq!(
        r.stdout,
        format!("streamsan {}\n", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn command_line_errors_exit_2() {
    let r = run(&[]);
    assert_eq!(r.code, 2, "no command: {r:#?}");
    assert_eq!(r.stdout, "");
    assert!(r.stderr.contains("Usage: streamsan [OPTIONS] <COMMAND>"));
    for args in [
        &["check"][..],
        &["stats"],
        &["check", "--no-such-flag", RACY],
        &["frobnicate", RACY],
        &["check", "--format", "xml", RACY],
        &["check", "--max-reports", "-1", RACY],
        &["check", "--max-reports", "many", RACY],
        &["stats", "--format", "sarif", RACY],
        &["check", "-", "-"],
    ] {
        let r = run(args);
        assert_eq!(r.code, 2, "{args:?}: {r:#?}");
        assert_eq!(
            r.stdout, "",
            "{args:?}: a usage error prints nothing on stdout"
        );
        assert!(r.stderr.starts_with("error:"), "{args:?}: {}", r.stderr);
    }
    let r = run(&["check"]);
    assert!(r.stderr.contains("<FILE>"), "{}", r.stderr);
    let r = run(&["check", "--no-such-flag", RACY]);
    assert!(r.stderr.contains("'--no-such-flag'"), "{}", r.stderr);
    let r = run_stdin(&["check", "-", "-"], read(RACY));
    assert_eq!(r.code, 2);
    assert!(
        r.stderr
            .contains("standard input (`-`) can be given only once")
    );
}

#[test]
fn nonexistent_file_exits_2_naming_it() {
    for cmd in ["check", "stats"] {
        let r = run(&[cmd, "tests/cli/no-such-trace.jsonl"]);
        assert_eq!(r.code, 2, "{r:#?}");
        assert_eq!(r.stdout, "");
        assert_eq!(
            r.stderr,
            "error: tests/cli/no-such-trace.jsonl: cannot open: no such file or directory (os error 2)\n"
        );
    }
}

#[cfg(unix)]
#[test]
fn directory_exits_2_naming_it() {
    let r = run(&["check", "tests/cli"]);
    assert_eq!(r.code, 2, "{r:#?}");
    assert_eq!(r.stdout, "");
    assert!(r.stderr.starts_with("error: tests/cli"), "{}", r.stderr);
}

// ---------------------------------------------------------------------------------------------
// Malformed input
// ---------------------------------------------------------------------------------------------

/// One class of malformed input: its fixture `tests/cli/malformed/{name}.jsonl`, the line and
/// column (where the reader knows it) the error must name, and a phrase saying what was wrong
/// or expected.
struct Malformed {
    name: &'static str,
    line: u64,
    column: Option<u64>,
    says: &'static str,
}

const fn case(name: &'static str, line: u64, column: Option<u64>, says: &'static str) -> Malformed {
    Malformed {
        name,
        line,
        column,
        says,
    }
}

const MALFORMED: &[Malformed] = &[
    case("bad_json", 3, Some(23), "invalid JSON: expected `,` or `}`"),
    case(
        "truncated_last_line",
        4,
        Some(63),
        "the last line looks truncated (no newline at the end of the file",
    ),
    case(
        "missing_header",
        1,
        None,
        "missing header: expected line 1 to be the header",
    ),
    case("header_not_object", 1, None, "expected a header object"),
    case(
        "header_duplicate_key",
        1,
        Some(42),
        "duplicate field `minor` (in the header)",
    ),
    case(
        "wrong_version",
        1,
        None,
        "unsupported trace format version 2",
    ),
    case(
        "unknown_op",
        3,
        Some(13),
        "unknown op \"lunch\" (expected one of: stream,",
    ),
    case("missing_field", 4, None, "missing field `stream`"),
    case(
        "mistyped_field",
        4,
        Some(28),
        "`stream`: expected a stream id (unsigned integer), found \"s1\"",
    ),
    case(
        "negative_number",
        3,
        Some(22),
        "`buf`: expected a buffer id (unsigned integer), found -3",
    ),
    case(
        "overflowing_number",
        2,
        Some(40),
        "too large for an unsigned 64-bit integer",
    ),
    case(
        "range_overflow",
        4,
        Some(90),
        "expected off + len to fit in an unsigned 64-bit integer",
    ),
    case("undeclared_stream", 3, None, "stream 2 is not declared"),
    case("undeclared_event", 3, None, "event 7 is not declared"),
    case("undeclared_buffer", 4, None, "buffer 2 is not allocated"),
    case(
        "out_of_bounds",
        4,
        None,
        "bytes [32, 32+64) are outside buffer 1, which has 64 bytes",
    ),
    case(
        "double_free",
        4,
        None,
        "buffer 1 is freed twice (first freed at line 3)",
    ),
    case("event_after_destroy", 6, None, "event 1 is not declared"),
    case(
        "empty",
        1,
        None,
        "empty trace: expected line 1 to be the header",
    ),
    // A race found before the bad line must not turn into a verdict (exit 1) or a report.
    case("race_before_error", 6, None, "stream 2 is not declared"),
    // Minor 1: what CUDA or a real pool would refuse.
    case(
        "unjoined_capture",
        10,
        None,
        "stream 2 joined the capture of graph 1 and was not joined back",
    ),
    case(
        "sync_capturing_stream",
        4,
        None,
        "`stream_sync` of stream 1 while it is being captured into graph 1",
    ),
    case("caching_overlap", 3, None, "overlaps the live block 1"),
    case(
        "caching_without_addr",
        2,
        None,
        "missing field `addr` (a `caching` alloc needs the block's device address",
    ),
];

fn malformed_path(name: &str) -> String {
    format!("tests/cli/malformed/{name}.jsonl")
}

/// `error: FILE:LINE[:COL]: ` for a case.
fn location_prefix(file: &str, case: &Malformed) -> String {
    match case.column {
        Some(col) => format!("error: {file}:{}:{col}: ", case.line),
        None => format!("error: {file}:{}: ", case.line),
    }
}

/// A trace of a newer minor version still checks; one warning says how many records of which
/// unknown ops were skipped, since the verdict does not cover them.
#[test]
fn newer_minor_version_checks_and_warns_once_about_skipped_records() {
    let trace = "{\"streamsan_trace\":1,\"minor\":7}\n\
                 {\"op\":\"device_sync\"}\n\
                 {\"op\":\"mem_prefetch\",\"buf\":1}\n\
                 {\"op\":\"graph_update\"}\n\
                 {\"op\":\"mem_prefetch\",\"buf\":2}\n";
    let r = run_stdin(&["check", "-"], trace);
    assert_eq!(r.code, 0, "{r:#?}");
    assert_eq!(
        r.stdout,
        "warning[skipped-record] line 3: 3 records of unknown ops \"mem_prefetch\", \
         \"graph_update\" skipped: the header declares a newer minor version of the format than \
         this reader knows, so the verdict does not cover them\n\
         \n\
         SUMMARY: no races, 1 warning in 1 record, 0 streams, 0 buffers\n"
    );
    let r = run_stdin(&["check", "--format", "json", "-"], trace);
    let v = json(&r.stdout);
    assert_eq!(v["warnings"].as_array().unwrap().len(), 1);
    assert_eq!(v["warnings"][0]["kind"], "skipped-record");
}

#[test]
fn every_malformed_fixture_is_in_the_table() {
    let on_disk: BTreeSet<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/malformed"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
    let in_table: BTreeSet<String> = MALFORMED
        .iter()
        .map(|c| format!("{}.jsonl", c.name))
        .collect();
    assert_eq!(on_disk, in_table);
}

#[test]
fn malformed_input_exits_2_naming_file_line_and_what_was_expected() {
    for case in MALFORMED {
        let path = malformed_path(case.name);
        let r = run(&["check", &path]);
        let ctx = format!("{}: {r:#?}", case.name);
        assert_eq!(r.code, 2, "{ctx}");
        // No report, so no verdict: in particular no "SUMMARY: no races".
        assert_eq!(r.stdout, "", "{ctx}");
        assert_eq!(r.stderr.lines().count(), 1, "one error line: {ctx}");
        let prefix = location_prefix(&path, case);
        assert!(r.stderr.starts_with(&prefix), "expected {prefix:?}: {ctx}");
        assert!(
            r.stderr.contains(case.says),
            "expected {:?}: {ctx}",
            case.says
        );
        snapshot(
            format!("malformed_{}", case.name),
            &["check", &path],
            r.stderr,
        );
    }
}

#[test]
fn malformed_input_exits_2_in_every_format_and_in_stats() {
    for case in MALFORMED {
        let path = malformed_path(case.name);
        let expected = run(&["check", &path]).stderr;
        for args in [
            &["check", "--format", "json", &path][..],
            &["check", "--format", "sarif", &path],
            &["check", "--max-reports", "0", &path],
            &["stats", &path],
            &["stats", "--format", "json", &path],
        ] {
            let r = run(args);
            assert_eq!(r.code, 2, "{args:?}: {r:#?}");
            assert_eq!(r.stdout, "", "{args:?}");
            assert_eq!(
                r.stderr, expected,
                "{args:?}: the same message in every format"
            );
        }
    }
}

#[test]
fn malformed_stdin_names_stdin() {
    for case in MALFORMED {
        let r = run_stdin(&["check", "-"], read(&malformed_path(case.name)));
        let ctx = format!("{}: {r:#?}", case.name);
        assert_eq!(r.code, 2, "{ctx}");
        assert_eq!(r.stdout, "", "{ctx}");
        let prefix = location_prefix("<stdin>", case);
        assert!(r.stderr.starts_with(&prefix), "expected {prefix:?}: {ctx}");
        assert!(r.stderr.contains(case.says), "{ctx}");
    }
}

// ---------------------------------------------------------------------------------------------
// Standard input
// ---------------------------------------------------------------------------------------------

#[test]
fn stdin_racy_exits_1_with_a_report_and_no_replay_line() {
    let r = run_stdin(&["check", "-"], read(RACY));
    assert_eq!(r.code, 1, "{r:#?}");
    let from_file = run(&["check", RACY]).stdout;
    // The same report, without the `reproduce:` line: `streamsan check -` would not replay it.
    let expected = from_file
        .strip_suffix("reproduce: streamsan check examples/traces/sum_before_randn.jsonl\n")
        .unwrap();
    assert_eq!(r.stdout, expected);
    assert!(!r.stdout.contains("reproduce:"));
    assert_eq!(r.stderr, "");

    let r = run_stdin(&["check", "-"], read(FIXED));
    assert_eq!(r.code, 0);
    assert_eq!(
        r.stdout,
        "SUMMARY: no races in 16 records, 2 streams, 3 buffers\n"
    );
}

#[test]
fn stdin_among_files_is_named_stdin() {
    let r = run_stdin(&["check", FIXED, "-"], read(RACY));
    assert_eq!(r.code, 1);
    assert!(
        r.stdout.contains("\n== <stdin>\nRACE read-after-write"),
        "{}",
        r.stdout
    );

    let r = run_stdin(&["check", "--format", "json", FIXED, "-"], read(RACY));
    let lines: Vec<Value> = r.stdout.lines().map(json).collect();
    assert_eq!(lines[1]["file"], "<stdin>");

    let r = run_stdin(&["stats", "--format", "json", "-"], read(RACY));
    assert_eq!(r.code, 1);
    assert_eq!(json(&r.stdout)["file"], "<stdin>");
}

#[test]
fn stdin_json_and_sarif() {
    let r = run_stdin(&["check", "--format", "json", "-"], read(RACY));
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout, run(&["check", "--format", "json", RACY]).stdout);
    let r = run_stdin(&["check", "--format", "sarif", "-"], read(RACY));
    assert_eq!(r.code, 1);
    let v = json(&r.stdout);
    assert_eq!(v["version"], "2.1.0");
    assert_eq!(v["runs"][0]["results"].as_array().unwrap().len(), 1);
    assert!(!r.stdout.contains("\"-\""), "stdin is no artifact URI");
}

// ---------------------------------------------------------------------------------------------
// Formats
// ---------------------------------------------------------------------------------------------

const SITE_KEYS: [&str; 8] = [
    "line", "stream", "thread", "op", "name", "access", "arg", "at",
];

fn assert_design_json(v: &Value) {
    assert_eq!(v["version"], 1);
    for race in v["races"].as_array().expect("races is an array") {
        for key in [
            "kind",
            "buffer",
            "range",
            "current",
            "previous",
            "occurrences",
            "fix",
        ] {
            assert!(race.get(key).is_some(), "race lacks {key}: {race}");
        }
        let range = race["range"].as_array().unwrap();
        assert_eq!(range.len(), 2);
        assert!(range[0].as_u64().unwrap() < range[1].as_u64().unwrap());
        assert!(race["occurrences"].as_u64().unwrap() >= 1);
        for side in ["current", "previous"] {
            for key in SITE_KEYS {
                assert!(race[side].get(key).is_some(), "{side} lacks {key}: {race}");
            }
        }
    }
    assert!(v["warnings"].is_array());
    for key in ["records", "races", "warnings", "streams", "buffers"] {
        assert!(v["summary"][key].is_u64(), "summary lacks {key}: {v}");
    }
}

#[test]
fn json_has_the_design_keys_and_its_verdict_is_the_exit_code() {
    for path in [RACY, FIXED, THREE_RACES, WARNING_ONLY] {
        let r = run(&["check", "--format", "json", path]);
        let v = json(&r.stdout);
        assert_design_json(&v);
        let races = v["summary"]["races"].as_u64().unwrap();
        assert_eq!(r.code, i32::from(races > 0), "{path}");
        assert_eq!(v["races"].as_array().unwrap().len() as u64, races, "{path}");
        assert_eq!(r.stderr, "");
    }
    let v = json(&run(&["check", "--format", "json", RACY]).stdout);
    let race = &v["races"][0];
    assert_eq!(race["kind"], "read-after-write");
    assert_eq!(race["buffer"], 1);
    assert_eq!(race["range"], serde_json::json!([0, 4096]));
    assert_eq!(race["current"]["line"], 7);
    assert_eq!(race["current"]["stream"], 1);
    assert_eq!(race["current"]["name"], "sum");
    assert_eq!(race["current"]["access"], "read");
    assert_eq!(race["previous"]["line"], 6);
    assert_eq!(race["previous"]["stream"], 0);
    assert_eq!(race["previous"]["access"], "write");
    assert_eq!(race["occurrences"], 1);
    assert!(
        race["fix"]
            .as_str()
            .unwrap()
            .contains("cudaStreamWaitEvent")
    );

    let v = json(&run(&["check", "--format", "json", WARNING_ONLY]).stdout);
    assert_eq!(v["warnings"][0]["kind"], "unrecorded-event");
    assert_eq!(v["warnings"][0]["line"], 4);
}

#[test]
fn sarif_is_2_1_0_with_results() {
    let r = run(&["check", "--format", "sarif", THREE_RACES]);
    assert_eq!(r.code, 1);
    let v = json(&r.stdout);
    assert_eq!(v["version"], "2.1.0");
    let results = v["runs"][0]["results"].as_array().unwrap();
    let rules: Vec<&str> = results
        .iter()
        .map(|r| r["ruleId"].as_str().unwrap())
        .collect();
    assert_eq!(
        rules,
        ["read-after-write", "write-after-read", "write-after-write"]
    );
    assert!(results.iter().all(|r| r["level"] == "error"));
    assert_eq!(
        results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
        "src/main.rs"
    );

    let r = run(&["check", "--format", "sarif", FIXED]);
    assert_eq!(r.code, 0);
    let v = json(&r.stdout);
    assert_eq!(v["runs"][0]["results"].as_array().unwrap().len(), 0);
}

#[test]
fn text_has_the_race_block() {
    let r = run(&["check", "--format", "text", RACY]);
    assert_eq!(
        r.stdout,
        run(&["check", RACY]).stdout,
        "text is the default"
    );
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert!(lines[0].starts_with("RACE read-after-write on buffer b1 \"x\""));
    assert!(lines[1].starts_with("  read by launch \"sum\""));
    assert!(lines[2].starts_with("  previous write by launch \"randn\""));
    assert!(lines[3].starts_with("  why: "));
    assert!(lines[4].starts_with("  allocated at "));
    assert!(lines[5].starts_with("  fix: "));
}

// ---------------------------------------------------------------------------------------------
// --max-reports
// ---------------------------------------------------------------------------------------------

#[test]
fn max_reports_limits_races_shown_not_the_verdict() {
    let all = run(&["check", THREE_RACES]);
    assert_eq!(all.code, 1);
    assert_eq!(all.stdout.matches("\nRACE ").count() + 1, 3);
    let summary = "SUMMARY: 3 races (1 read-after-write, 1 write-after-read, 1 write-after-write; \
                   4 occurrences) in 11 records, 2 streams, 2 buffers\n";
    assert!(all.stdout.contains(summary));

    for (n, shown) in [(0usize, 0usize), (1, 1), (2, 2), (3, 3), (100, 3)] {
        let n_arg = n.to_string();
        let r = run(&["check", "--max-reports", &n_arg, THREE_RACES]);
        assert_eq!(r.code, 1, "--max-reports {n}");
        let blocks = r.stdout.lines().filter(|l| l.starts_with("RACE ")).count();
        assert_eq!(blocks, shown, "--max-reports {n}: {}", r.stdout);
        assert!(r.stdout.contains(summary), "--max-reports {n}");
        if shown < 3 {
            let hidden = match 3 - shown {
                1 => "1 more race".to_string(),
                k => format!("{k} more races"),
            };
            assert!(
                r.stdout
                    .contains(&format!("... {hidden} not shown (at most {n} rendered)")),
                "--max-reports {n}: {}",
                r.stdout
            );
        } else {
            assert!(!r.stdout.contains("not shown"));
        }

        let r = run(&[
            "check",
            "--format",
            "json",
            "--max-reports",
            &n_arg,
            THREE_RACES,
        ]);
        assert_eq!(r.code, 1);
        let v = json(&r.stdout);
        assert_eq!(v["races"].as_array().unwrap().len(), shown);
        assert_eq!(v["summary"]["races"], 3, "the summary counts all races");

        let r = run(&[
            "check",
            "--format",
            "sarif",
            "--max-reports",
            &n_arg,
            THREE_RACES,
        ]);
        assert_eq!(r.code, 1);
        let v = json(&r.stdout);
        assert_eq!(v["runs"][0]["results"].as_array().unwrap().len(), shown);
    }
    // The racy example with nothing shown still fails.
    let r = run(&["check", "--max-reports", "0", RACY]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("SUMMARY: 1 race "));
}

// ---------------------------------------------------------------------------------------------
// stats
// ---------------------------------------------------------------------------------------------

#[test]
fn stats_text() {
    let r = run(&["stats", THREE_RACES]);
    assert_eq!(r.code, 1, "stats exits like check: {r:#?}");
    assert_eq!(
        r.stdout,
        "tests/cli/valid/three_races.jsonl\n  records   11\n  streams   2\n  events    0\n  buffers   2\n  graphs    0 (0 launches)\n  syncs     1\n  races     3 (4 occurrences)\n  warnings  0\n"
    );
    let args = ["stats", FIXED, WARNING_ONLY];
    let r = run(&args);
    assert_eq!(r.code, 0);
    snapshot("stats_text", &args, r.stdout);
}

#[test]
fn stats_json() {
    let r = run(&["stats", "--format", "json", THREE_RACES, FIXED, RACY]);
    assert_eq!(r.code, 1);
    let lines: Vec<Value> = r.stdout.lines().map(json).collect();
    assert_eq!(lines.len(), 3, "one object per line: {}", r.stdout);
    assert_eq!(
        lines[0],
        serde_json::json!({
            "file": THREE_RACES, "records": 11, "streams": 2, "events": 0, "buffers": 2,
            "caching_blocks": 0, "graphs": 0, "graph_launches": 0,
            "syncs": 1, "races": 3, "race_occurrences": 4, "warnings": 0,
        })
    );
    assert_eq!(lines[1]["file"], FIXED);
    assert_eq!(lines[1]["events"], 1);
    assert_eq!(lines[1]["syncs"], 3);
    assert_eq!(lines[1]["races"], 0);
    assert_eq!(lines[2]["races"], 1);
    // Keys in the documented order.
    assert!(
        r.stdout
            .starts_with("{\"file\":\"tests/cli/valid/three_races.jsonl\",\"records\":11,")
    );
    assert_eq!(run(&["stats", "--format", "json", FIXED]).code, 0);
}

// ---------------------------------------------------------------------------------------------
// Several files in the machine-readable formats
// ---------------------------------------------------------------------------------------------

#[test]
fn several_files_json_is_json_lines_with_file() {
    let bad = "tests/cli/malformed/undeclared_event.jsonl";
    let r = run(&["check", "--format", "json", RACY, bad, FIXED, THREE_RACES]);
    assert_eq!(r.code, 2, "{r:#?}");
    assert!(r.stderr.starts_with(&format!("error: {bad}:3: ")));
    let lines: Vec<Value> = r.stdout.lines().map(json).collect();
    let files: Vec<&str> = lines.iter().map(|v| v["file"].as_str().unwrap()).collect();
    assert_eq!(
        files,
        [RACY, FIXED, THREE_RACES],
        "one line per checked file, in order"
    );
    for (v, path) in lines.iter().zip(files) {
        assert_design_json(v);
        // The same report as for the file alone, plus `file`.
        let mut alone = json(&run(&["check", "--format", "json", path]).stdout);
        alone["file"] = path.into();
        assert_eq!(*v, alone, "{path}");
    }
    let races: Vec<u64> = lines
        .iter()
        .map(|v| v["summary"]["races"].as_u64().unwrap())
        .collect();
    assert_eq!(races, [1, 0, 3]);
    // Compact: `file` first, then the documented key order.
    assert!(r.stdout.starts_with(&format!(
        "{{\"file\":\"{RACY}\",\"version\":1,\"races\":[{{"
    )));

    let r = run(&["check", "--format", "json", FIXED, RACY]);
    assert_eq!(r.code, 1);
    assert_eq!(r.stdout.lines().count(), 2);
    let r = run(&["check", "--format", "json", FIXED, FIXED]);
    assert_eq!(r.code, 0);
}

#[test]
fn several_files_sarif_is_one_log() {
    let r = run(&[
        "check",
        "--format",
        "sarif",
        RACY,
        FIXED,
        THREE_RACES,
        WARNING_ONLY,
    ]);
    assert_eq!(r.code, 1);
    let v = json(&r.stdout);
    assert_eq!(v["version"], "2.1.0");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(
        runs.len(),
        1,
        "one run: code scanning wants one run per tool"
    );
    let results = runs[0]["results"].as_array().unwrap();
    let got: Vec<(&str, &str)> = results
        .iter()
        .map(|r| {
            (
                r["properties"]["trace"].as_str().unwrap(),
                r["ruleId"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (RACY, "read-after-write"),
            (THREE_RACES, "read-after-write"),
            (THREE_RACES, "write-after-read"),
            (THREE_RACES, "write-after-write"),
            (WARNING_ONLY, "unrecorded-event"),
        ]
    );
    // ruleIndex still points at the rule of the same id.
    let rules = runs[0]["tool"]["driver"]["rules"].as_array().unwrap();
    for result in results {
        let i = result["ruleIndex"].as_u64().unwrap() as usize;
        assert_eq!(rules[i]["id"], result["ruleId"]);
    }
    // Races keep their own properties next to `trace`.
    assert_eq!(results[1]["properties"]["occurrences"], 2);

    // Only invalid files: nothing on stdout.
    let bad = "tests/cli/malformed/empty.jsonl";
    let r = run(&["check", "--format", "sarif", bad, bad]);
    assert_eq!(r.code, 2);
    assert_eq!(r.stdout, "");
    assert_eq!(r.stderr.lines().count(), 2);
}

// ---------------------------------------------------------------------------------------------
// Logging
// ---------------------------------------------------------------------------------------------

#[test]
fn verbose_does_not_change_stdout() {
    for (args, code) in [
        (&["check", RACY][..], 1),
        (&["check", "--format", "json", RACY, FIXED], 1),
        (&["check", "--format", "sarif", THREE_RACES], 1),
        (&["stats", FIXED], 0),
        (&["check", "tests/cli/malformed/bad_json.jsonl"], 2),
    ] {
        let quiet = run(args);
        assert_eq!(quiet.code, code, "{args:?}");
        for flag in ["-v", "-vv"] {
            let mut with_flag = vec![flag];
            with_flag.extend_from_slice(args);
            let loud = run(&with_flag);
            assert_eq!(loud.code, quiet.code, "{with_flag:?}");
            assert_eq!(loud.stdout, quiet.stdout, "{with_flag:?}");
            assert!(
                loud.stderr.contains("checking"),
                "{with_flag:?}: {}",
                loud.stderr
            );
        }
        // After the subcommand too (the flag is global), and through RUST_LOG.
        let mut after = args.to_vec();
        after.push("-v");
        assert_eq!(run(&after).stdout, quiet.stdout, "{after:?}");
        let env = finish(streamsan().args(args).env("RUST_LOG", "trace"));
        assert_eq!(env.stdout, quiet.stdout, "RUST_LOG=trace {args:?}");
        assert_eq!(env.code, quiet.code);
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile strings
// ---------------------------------------------------------------------------------------------

/// Strings from the trace (names, arguments, source locations) must not be able to forge lines
/// of the text report or send terminal escapes (report-format.md: "quoted with escapes, so they
/// cannot break the layout").
#[test]
fn text_report_cannot_be_forged_by_trace_strings() {
    let r = run(&["check", "tests/cli/valid/hostile_strings.jsonl"]);
    assert_eq!(r.code, 1, "{r:#?}");
    assert!(
        !r.stdout.chars().any(|c| c.is_control() && c != '\n'),
        "control characters reach stdout: {:?}",
        r.stdout
    );
    for line in r.stdout.lines() {
        assert!(
            line.is_empty()
                || [
                    "RACE ",
                    "  ",
                    "warning[",
                    "SUMMARY: ",
                    "reproduce: ",
                    "... "
                ]
                .iter()
                .any(|p| line.starts_with(p)),
            "a line the report does not write: {line:?}"
        );
    }
    let summaries = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("SUMMARY: "))
        .count();
    assert_eq!(summaries, 1, "{}", r.stdout);
}

#[test]
fn hostile_strings_stay_inside_json_strings() {
    let r = run(&[
        "check",
        "--format",
        "json",
        "tests/cli/valid/hostile_strings.jsonl",
    ]);
    assert_eq!(r.code, 1);
    let v = json(&r.stdout);
    assert_eq!(
        v["races"][0]["previous"]["at"],
        "f.rs:1:2\nSUMMARY: no races"
    );
    assert_eq!(v["races"][0]["previous"]["name"], "a\nRACE fake");
    // And compact JSON Lines keep them intact.
    let path = "tests/cli/valid/hostile_strings.jsonl";
    let r = run(&["check", "--format", "json", path, path]);
    let lines: Vec<Value> = r.stdout.lines().map(json).collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["races"][0]["previous"]["name"], "a\nRACE fake");
}

// ---------------------------------------------------------------------------------------------
// `convert` and binary traces
// ---------------------------------------------------------------------------------------------

/// A fresh path for a file a test writes, under cargo's scratch directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli");
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn s(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// `trace` converted to the binary encoding at a scratch path named `name`.
fn binary_of(trace: &str, name: &str) -> PathBuf {
    let out = scratch(name);
    let r = run(&["convert", trace, s(&out)]);
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
    out
}

#[test]
fn convert_both_ways_and_every_command_reads_either() {
    let sstb = binary_of(RACY, "racy.sstb");
    let bytes = std::fs::read(&sstb).unwrap();
    assert_eq!(&bytes[..8], b"\x93SSTB\r\n\x1a");
    assert!(bytes.len() < read(RACY).len());

    // The same report, naming the converted file.
    let original = run(&["check", RACY]);
    let converted = run(&["check", s(&sstb)]);
    assert_eq!(converted.code, 1);
    assert_eq!(converted.stdout, original.stdout.replace(RACY, s(&sstb)));
    assert_eq!(converted.stderr, "");
    for format in ["json", "sarif"] {
        let original = run(&["check", "--format", format, RACY]);
        let converted = run(&["check", "--format", format, s(&sstb)]);
        assert_eq!(converted.stdout, original.stdout.replace(RACY, s(&sstb)));
    }
    let stats = run(&["stats", "--format", "json", s(&sstb)]);
    assert_eq!(
        stats.stdout,
        run(&["stats", "--format", "json", RACY])
            .stdout
            .replace(RACY, s(&sstb))
    );
    // The timelines draw the same thing.
    let (from_jsonl, from_binary) = (
        scratch("racy.perfetto.json"),
        scratch("racy-b.perfetto.json"),
    );
    assert_eq!(run(&["check", "--perfetto", s(&from_jsonl), RACY]).code, 1);
    assert_eq!(
        run(&["check", "--perfetto", s(&from_binary), s(&sstb)]).code,
        1
    );
    assert_eq!(
        std::fs::read_to_string(&from_binary).unwrap(),
        std::fs::read_to_string(&from_jsonl)
            .unwrap()
            .replace(RACY, s(&sstb))
    );
    // Back to JSON Lines: the example is in the writer's canonical form, so the same bytes.
    let back = scratch("racy.jsonl");
    let r = run(&["convert", s(&sstb), s(&back)]);
    assert_eq!(r.code, 0, "{r:#?}");
    assert_eq!(std::fs::read_to_string(&back).unwrap(), read(RACY));
    // --to wins over the extension.
    let odd = scratch("racy-binary.jsonl");
    assert_eq!(run(&["convert", "--to", "binary", RACY, s(&odd)]).code, 0);
    assert_eq!(std::fs::read(&odd).unwrap(), bytes);
}

#[test]
fn convert_reads_stdin_and_writes_stdout() {
    let out = scratch("stdin.sstb");
    let r = run_stdin(&["convert", "--to", "binary", "-", s(&out)], read(FIXED));
    assert_eq!(r.code, 0, "{r:#?}");
    let r = run(&["convert", "--to", "jsonl", s(&out), "-"]);
    assert_eq!(r.code, 0, "{r:#?}");
    assert_eq!(r.stdout, read(FIXED));
    // A binary trace on stdout, into a pipe, reads back from stdin.
    let out = streamsan()
        .args(["convert", "--to", "binary", "-", "-"])
        .write_stdin(read(FIXED))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(&out.stdout[..8], b"\x93SSTB\r\n\x1a");
    let r = run_stdin(&["check", "-"], out.stdout);
    assert_eq!(
        r.stdout,
        "SUMMARY: no races in 16 records, 2 streams, 3 buffers\n"
    );
}

#[test]
fn convert_keeps_skipped_records_of_a_newer_minor() {
    let trace = "{\"streamsan_trace\":1,\"minor\":7}\n\
                 {\"op\":\"device_sync\"}\n\
                 \n\
                 {\"op\":\"mem_prefetch\",\"buf\":1}\n";
    let sstb = scratch("newer.sstb");
    let r = run_stdin(&["convert", "-", s(&sstb)], trace);
    assert_eq!(r.code, 0, "{r:#?}");
    let r = run(&["check", s(&sstb)]);
    assert_eq!(r.code, 0, "{r:#?}");
    assert!(r.stdout.starts_with(
        "warning[skipped-record] line 4: 1 record of unknown op \"mem_prefetch\" skipped"
    ));
    let r = run(&["convert", "--to", "jsonl", s(&sstb), "-"]);
    assert_eq!(r.stdout, trace);
}

#[test]
fn convert_errors_exit_2_naming_file_line_and_what_was_expected() {
    // Invalid input: the same message as `check` gives, and no output file.
    let bad = malformed_path("bad_json");
    let out = scratch("bad.sstb");
    let r = run(&["convert", &bad, s(&out)]);
    assert_eq!(r.code, 2);
    assert_eq!(r.stdout, "");
    assert_eq!(r.stderr, run(&["check", &bad]).stderr);
    assert!(!out.exists());
    assert!(!scratch("bad.sstb.partial").exists());

    // A failed conversion leaves an existing OUT as it was.
    std::fs::write(&out, "keep").unwrap();
    assert_eq!(run(&["convert", &bad, s(&out)]).code, 2);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep");

    let cases: [(&[&str], String); 5] = [
        (
            &["convert", "tests/cli/no-such-trace.jsonl", "x.sstb"],
            "error: tests/cli/no-such-trace.jsonl: cannot open: no such file or directory (os \
             error 2)\n"
                .into(),
        ),
        (
            &["convert", RACY, "-"],
            "error: cannot tell which encoding to write to standard output: give --to jsonl or \
             --to binary\n"
                .into(),
        ),
        (
            &["convert", RACY, "trace.txt"],
            "error: trace.txt: cannot tell which encoding to write from the file name \
             (expected .sstb for binary, or .jsonl): give --to jsonl or --to binary\n"
                .into(),
        ),
        (
            &["convert", RACY, "tests/cli/no-such-dir/t.sstb"],
            "error: tests/cli/no-such-dir/t.sstb: cannot write: no such file or directory (os \
             error 2)\n"
                .into(),
        ),
        (&["convert", "--to", "xml", RACY, "t.sstb"], String::new()),
    ];
    for (args, stderr) in cases {
        let r = run(args);
        assert_eq!(r.code, 2, "{args:?}: {r:#?}");
        assert_eq!(r.stdout, "", "{args:?}");
        if stderr.is_empty() {
            assert!(
                r.stderr.starts_with("error: invalid value 'xml'"),
                "{}",
                r.stderr
            );
        } else {
            assert_eq!(r.stderr, stderr, "{args:?}");
        }
    }
}

/// A damaged binary trace: exit 2, no report, and a message with the file, the line, the byte
/// offset and what was expected.
#[test]
fn corrupt_binary_traces_exit_2_with_the_byte_offset() {
    let sstb = binary_of(RACY, "corrupt-source.sstb");
    let bytes = std::fs::read(&sstb).unwrap();
    let truncated = scratch("truncated.sstb");
    std::fs::write(&truncated, &bytes[..bytes.len() - 30]).unwrap();
    let mut flipped = bytes.clone();
    // The layout version byte.
    flipped[8] = 9;
    let version = scratch("version.sstb");
    std::fs::write(&version, &flipped).unwrap();
    for (name, path) in [
        ("binary_truncated", &truncated),
        ("binary_version", &version),
    ] {
        for args in [
            &["check", s(path)][..],
            &["check", "--format", "json", s(path)],
            &["stats", s(path)],
            &["convert", "--to", "jsonl", s(path), "-"],
        ] {
            let r = run(args);
            assert_eq!(r.code, 2, "{args:?}: {r:#?}");
            assert!(
                r.stderr.starts_with(&format!("error: {}:", s(path))),
                "{}",
                r.stderr
            );
            assert!(r.stderr.contains(": at byte "), "{}", r.stderr);
            if args[0] != "convert" {
                assert_eq!(r.stdout, "", "{args:?}: no verdict for an invalid trace");
            }
        }
        let r = run(&["check", s(path)]);
        snapshot(
            format!("malformed_{name}"),
            &["check", &format!("{name}.sstb")],
            r.stderr.replace(s(path), &format!("{name}.sstb")),
        );
    }
}

/// On a terminal, `check` draws a progress line on stderr (percent of the file, records/s) and
/// clears it at the end. Run under `script`, which gives the command a terminal; skipped where
/// there is no `script`.
#[test]
fn progress_line_on_a_terminal() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: no `script` to give streamsan a terminal");
        return;
    }
    // Long enough to be drawn a few times, in a debug build too.
    let trace = scratch("progress.sstb");
    {
        use streamsan::trace::BinaryWriter;
        let file = std::io::BufWriter::new(std::fs::File::create(&trace).unwrap());
        let mut w = BinaryWriter::new(file, serde_json::Map::new()).unwrap();
        let config = streamsan_demos::synth::SynthConfig::default();
        for r in streamsan_demos::synth::records(config).take(200_000) {
            w.write(&r).unwrap();
        }
        w.finish().unwrap();
    }
    let report = scratch("progress-report.txt");
    let exe = assert_cmd::cargo::cargo_bin("streamsan");
    // A short relative name, so that the line fits the terminal's width.
    let command = format!(
        "{} check progress.sstb > progress-report.txt",
        exe.display()
    );
    let out = std::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .current_dir(trace.parent().unwrap())
        .env("NO_COLOR", "1")
        .output()
        .expect("script runs");
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert!(terminal.contains("checking progress.sstb ["), "{terminal}");
    assert!(terminal.contains("% of "), "{terminal}");
    assert!(terminal.contains("records/s"), "{terminal}");
    // Cleared at the end: the last thing drawn erases the line.
    assert!(terminal.ends_with("\r\x1b[2K"), "{terminal:?}");
    // The report on stdout has none of it.
    let report = std::fs::read_to_string(&report).unwrap();
    assert!(report.contains("SUMMARY: no races"), "{report}");
    assert!(!report.contains("records/s"));
}

/// A report that cannot be written (a full disk) is an error, after the verdict: exit 2 and
/// the reason on stderr, for every format and for `stats`; a reader that closes the pipe is
/// not (`cli_run::finish` reads the whole output, so that case is the shell's `| head`).
#[cfg(target_os = "linux")]
#[test]
fn a_report_lost_to_a_full_disk_exits_2() {
    let full = || std::fs::File::create("/dev/full").expect("/dev/full");
    for args in [
        &["check", FIXED][..],
        &["check", RACY],
        &["check", "--format", "json", RACY],
        &["check", "--format", "sarif", RACY],
        &["stats", RACY],
    ] {
        let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("streamsan"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .args(args)
            .stdout(full())
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("<stdout>: cannot write") && stderr.contains("no space left"),
            "{args:?}: {stderr}"
        );
    }
}

/// `--html` to a path that cannot be created checks nothing, as `--perfetto` does.
#[test]
fn an_unwritable_html_path_checks_nothing() {
    let out = "no/such/dir/page.html";
    let r = run(&["check", "--html", out, RACY]);
    assert_eq!(r.code, 2, "{r:#?}");
    assert!(r.stdout.is_empty(), "{}", r.stdout);
    assert!(
        r.stderr
            .starts_with(&format!("error: {out}: cannot write the HTML page: ")),
        "{}",
        r.stderr
    );
}

/// A drawing written to a symbolic link replaces the file it points to, not the link.
#[cfg(unix)]
#[test]
fn a_drawing_is_written_through_a_symbolic_link() {
    let dir = std::env::temp_dir().join(format!("streamsan-cli-link-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (real, link) = (dir.join("real.json"), dir.join("link.json"));
    std::fs::write(&real, "old").unwrap();
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let abs = Path::new(env!("CARGO_MANIFEST_DIR")).join(RACY);
    let r = run(&[
        "check",
        "--perfetto",
        link.to_str().unwrap(),
        abs.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 1, "{r:#?}");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let drawn = std::fs::read_to_string(&real).unwrap();
    assert!(
        drawn.starts_with('{') && drawn.contains("traceEvents"),
        "{drawn}"
    );
}

/// `/dev/stdout` as an output path writes into the redirection as it is (appending to a file
/// opened to append), not around it; `--perfetto` and `--html` naming one file is a usage
/// error.
#[cfg(target_os = "linux")]
#[test]
fn dev_stdout_is_written_into_and_one_file_is_not_drawn_twice() {
    let dir = std::env::temp_dir().join(format!("streamsan-cli-stdout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("appended.jsonl");
    std::fs::write(&out, "kept\n").unwrap();
    let appending = || std::fs::OpenOptions::new().append(true).open(&out).unwrap();
    for _ in 0..2 {
        let status = std::process::Command::new(assert_cmd::cargo::cargo_bin("streamsan"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["convert", "--to", "jsonl", RACY, "/dev/stdout"])
            .stdout(appending())
            .status()
            .expect("runs");
        assert!(status.success());
    }
    let text = std::fs::read_to_string(&out).unwrap();
    let trace = read(RACY);
    assert_eq!(
        text.lines().count(),
        1 + 2 * trace.lines().count(),
        "{text}"
    );
    assert!(text.starts_with("kept\n"));

    let same = dir.join("drawing");
    let r = run(&[
        "check",
        "--perfetto",
        same.to_str().unwrap(),
        "--html",
        same.to_str().unwrap(),
        RACY,
    ]);
    assert_eq!(r.code, 2, "{r:#?}");
    assert!(r.stderr.contains("name the same file"), "{}", r.stderr);
    assert!(!same.exists());
}
