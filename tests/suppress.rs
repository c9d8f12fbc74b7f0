//! `--suppressions`, `--baseline` and `--write-baseline` as users run them: the built binary, its
//! exit codes, its reports and its messages on stderr. The reference is `docs/suppressions.md`.
//!
//! Fixtures: `tests/suppress/*.supp` (suppressions files), and
//! `tests/suppress/sum_before_randn_plus_scale.jsonl`, the racy example with every line moved by
//! unrelated records and one new race, for baselines. Traces are otherwise reused from
//! `examples/traces/`, `tests/cli/valid/` and `tests/corpus/`.

use std::path::{Path, PathBuf};

use serde_json::Value;

mod cli_run;
use cli_run::{Run, run};

const RACY: &str = "examples/traces/sum_before_randn.jsonl";
const FIXED: &str = "examples/traces/sum_before_randn_fixed.jsonl";
const PLUS_SCALE: &str = "tests/suppress/sum_before_randn_plus_scale.jsonl";
const THREE_RACES: &str = "tests/cli/valid/three_races.jsonl";
const WARNING_ONLY: &str = "tests/cli/valid/warning_only.jsonl";
const OFFLOAD: &str = "tests/corpus/p03-offload-then-free.racy.jsonl";

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is one JSON document ({e}): {self:#?}"))
    }
}

/// A fresh path for a file a test writes (a baseline), under cargo's scratch directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("suppress");
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn write(name: &str, text: &str) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, text).expect("write a scratch file");
    path
}

fn s(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

// ---------------------------------------------------------------------------------------------
// Suppressions

#[test]
fn a_suppressed_race_leaves_the_verdict_and_the_report() {
    let plain = run(&["check", RACY]);
    assert_eq!(plain.code, 1, "{plain:#?}");

    let r = run(&[
        "check",
        "--suppressions",
        "tests/suppress/sum_before_randn.supp",
        RACY,
    ]);
    assert_eq!(r.code, 0, "{r:#?}");
    assert!(!r.stdout.contains("RACE"), "{}", r.stdout);
    assert_eq!(
        r.stdout,
        "SUMMARY: no races in 12 records, 2 streams, 3 buffers; not counted: 1 suppressed race\n",
        "nothing left to reproduce: no `reproduce:` line"
    );
    assert_eq!(r.stderr, "", "the suppression was used: no warning");
}

#[test]
fn json_summary_counts_what_was_taken_out() {
    let r = run(&[
        "check",
        "--format",
        "json",
        "--suppressions",
        "tests/suppress/sum_before_randn.supp",
        RACY,
    ]);
    assert_eq!(r.code, 0, "{r:#?}");
    let v = r.json();
    assert_eq!(v["races"], serde_json::json!([]));
    assert_eq!(
        v["summary"],
        serde_json::json!({"records": 12, "races": 0, "warnings": 0, "streams": 2,
            "buffers": 3, "suppressed": 1, "baselined": 0, "suppressed_warnings": 0})
    );
    // The keys come after the documented ones, in this order.
    let at = |k: &str| r.stdout.find(&format!("\"{k}\"")).unwrap();
    assert!(at("buffers") < at("suppressed"));
    assert!(at("suppressed") < at("baselined"));
    assert!(at("baselined") < at("suppressed_warnings"));

    // Without any filter the JSON report has none of these keys.
    let plain = run(&["check", "--format", "json", RACY]);
    assert!(!plain.stdout.contains("suppressed"), "{}", plain.stdout);
    assert!(!plain.stdout.contains("baselined"), "{}", plain.stdout);
}

#[test]
fn unused_suppressions_are_reported_with_file_and_line() {
    let r = run(&[
        "check",
        "--suppressions",
        "tests/suppress/unused.supp",
        RACY,
    ]);
    assert_eq!(r.code, 0, "the used line suppresses the race: {r:#?}");
    assert_eq!(
        r.stderr,
        "warning: tests/suppress/unused.supp:3: unused suppression \
         `race:kernel=no_such_kernel`: it matched no race or warning\n"
    );
    // The warning goes to stderr only: stdout stays a valid report.
    let r = run(&[
        "check",
        "--format",
        "json",
        "--suppressions",
        "tests/suppress/unused.supp",
        RACY,
    ]);
    assert_eq!(r.json()["summary"]["suppressed"], 1);
    assert!(r.stderr.contains("unused.supp:3: unused suppression"));

    // An unused suppression does not change the exit code.
    let r = run(&[
        "check",
        "--suppressions",
        "tests/suppress/unused.supp",
        FIXED,
    ]);
    assert_eq!(r.code, 0);
    assert!(
        r.stderr.contains("unused.supp:2: unused suppression"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("unused.supp:3: unused suppression"),
        "{}",
        r.stderr
    );
}

#[test]
fn several_files_and_traces_share_the_usage() {
    // Line 2 of unused.supp is used by RACY only; it is not unused over the whole run.
    let r = run(&[
        "check",
        "--suppressions",
        "tests/suppress/unused.supp",
        "--suppressions",
        "tests/suppress/warnings.supp",
        FIXED,
        RACY,
        WARNING_ONLY,
    ]);
    assert_eq!(r.code, 0, "{r:#?}");
    assert!(!r.stdout.contains("RACE"));
    assert!(
        !r.stdout.contains("warning["),
        "the warning is suppressed: {}",
        r.stdout
    );
    assert_eq!(
        r.stderr,
        "warning: tests/suppress/unused.supp:3: unused suppression \
         `race:kernel=no_such_kernel`: it matched no race or warning\n"
    );
}

#[test]
fn warnings_can_be_suppressed() {
    let plain = run(&["check", "--format", "json", WARNING_ONLY]);
    assert_eq!(plain.json()["summary"]["warnings"], 1);
    let r = run(&[
        "check",
        "--format",
        "json",
        "--suppressions",
        "tests/suppress/warnings.supp",
        WARNING_ONLY,
    ]);
    assert_eq!(r.code, 0);
    let v = r.json();
    assert_eq!(v["warnings"], serde_json::json!([]));
    assert_eq!(v["summary"]["warnings"], 0);
    assert_eq!(v["summary"]["suppressed_warnings"], 1);
    assert_eq!(r.stderr, "");
    let text = run(&[
        "check",
        "--suppressions",
        "tests/suppress/warnings.supp",
        WARNING_ONLY,
    ]);
    assert_eq!(
        text.stdout,
        "SUMMARY: no races in 4 records, 1 stream, 0 buffers; not counted: 1 suppressed warning\n"
    );
}

#[test]
fn only_the_matching_race_of_several_is_suppressed() {
    let supp = write(
        "one_of_three.supp",
        "race:kind=write-after-read   # only the second race\n",
    );
    let r = run(&[
        "check",
        "--format",
        "json",
        "--suppressions",
        s(&supp),
        THREE_RACES,
    ]);
    assert_eq!(r.code, 1, "two races remain: {r:#?}");
    let v = r.json();
    let kinds: Vec<&str> = v["races"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["read-after-write", "write-after-write"]);
    assert_eq!(v["summary"]["races"], 2);
    assert_eq!(v["summary"]["suppressed"], 1);
}

#[test]
fn sides_and_locations_pin_a_corpus_race() {
    let plain = run(&["check", OFFLOAD]);
    assert_eq!(plain.code, 1);
    let r = run(&[
        "check",
        "--suppressions",
        "tests/suppress/offload.supp",
        OFFLOAD,
    ]);
    assert_eq!(r.code, 0, "{r:#?}");
    assert_eq!(r.stderr, "");
    // The same conditions with the sides swapped match nothing.
    let swapped = write(
        "offload_swapped.supp",
        "race:kind=free-while-in-use,current.op=memcpy,previous.op=free\n",
    );
    let r = run(&["check", "--suppressions", s(&swapped), OFFLOAD]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains("offload_swapped.supp:1: unused suppression"),
        "{}",
        r.stderr
    );
    // A location prefix stops at whole components: line 9 is not line 91.
    let line9 = write("offload_line9.supp", "race:at=src/model.rs:9\n");
    assert_eq!(
        run(&["check", "--suppressions", s(&line9), OFFLOAD]).code,
        1
    );
    let file = write("offload_file.supp", "race:at=src/model.rs\n");
    assert_eq!(run(&["check", "--suppressions", s(&file), OFFLOAD]).code, 0);
}

#[test]
fn every_racy_corpus_trace_passes_with_a_catch_all() {
    let all = write("all.supp", "race:kind=*\nwarning:kind=*\n");
    let mut checked = 0;
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus"))
        .expect("tests/corpus")
    {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if !name.ends_with(".racy.jsonl") {
            continue;
        }
        let trace = format!("tests/corpus/{name}");
        let plain = run(&["check", "--format", "json", &trace]).json();
        let r = run(&[
            "check",
            "--format",
            "json",
            "--suppressions",
            s(&all),
            &trace,
        ]);
        assert_eq!(r.code, 0, "{name}: {r:#?}");
        let v = r.json();
        assert_eq!(v["summary"]["races"], 0, "{name}");
        assert_eq!(
            v["summary"]["suppressed"], plain["summary"]["races"],
            "{name}"
        );
        assert_eq!(
            v["summary"]["suppressed_warnings"], plain["summary"]["warnings"],
            "{name}"
        );
        checked += 1;
    }
    assert!(checked >= 40, "the corpus has its racy traces ({checked})");
}

#[test]
fn bad_suppressions_are_input_errors_before_any_report() {
    let r = run(&["check", "--suppressions", "tests/suppress/bad.supp", RACY]);
    assert_eq!(r.code, 2, "{r:#?}");
    assert_eq!(r.stdout, "", "no report, no verdict");
    assert_eq!(
        r.stderr,
        "error: tests/suppress/bad.supp:3:6: unknown key `kernal` in a `race:` suppression \
         (expected one of: kind, buffer, kernel, op, stream, at, or current./previous. before \
         kernel, op, stream, at)\n"
    );
    let r = run(&[
        "check",
        "--suppressions",
        "tests/suppress/no_such.supp",
        RACY,
    ]);
    assert_eq!(r.code, 2);
    assert_eq!(r.stdout, "");
    assert!(
        r.stderr
            .starts_with("error: tests/suppress/no_such.supp: cannot read: "),
        "{}",
        r.stderr
    );
    // A good file beside a bad one does not help.
    let r = run(&[
        "check",
        "--suppressions",
        "tests/suppress/sum_before_randn.supp",
        "--suppressions",
        "tests/suppress/bad.supp",
        FIXED,
    ]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("bad.supp:3:6:"));
}

#[test]
fn the_documented_example_file_parses_and_matches() {
    // The first code block of docs/suppressions.md, "Suppressions file".
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/suppressions.md"))
            .expect("docs/suppressions.md");
    let section = &doc[doc.find("## Suppressions file").expect("the section")..];
    let start = section.find("```text\n").expect("a code block") + "```text\n".len();
    let block = &section[start..start + section[start..].find("```").unwrap()];
    let parsed = streamsan::suppress::Suppressions::parse(block, "docs/suppressions.md")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parsed.len(), 10);
    let path = write("documented.supp", block);
    let r = run(&["check", "--suppressions", s(&path), RACY]);
    assert_eq!(r.code, 0, "{r:#?}");
}

// ---------------------------------------------------------------------------------------------
// Baselines

#[test]
fn a_baseline_of_the_same_trace_passes() {
    let known = scratch("three_races.json");
    let made = run(&["check", "--format", "json", THREE_RACES]);
    assert_eq!(made.code, 1);
    std::fs::write(&known, &made.stdout).unwrap();

    let r = run(&["check", "--baseline", s(&known), THREE_RACES]);
    assert_eq!(r.code, 0, "{r:#?}");
    assert_eq!(
        r.stdout,
        "SUMMARY: no races in 11 records, 2 streams, 2 buffers; not counted: 3 baselined races\n"
    );
    assert_eq!(r.stderr, "");
    let v = run(&[
        "check",
        "--format",
        "json",
        "--baseline",
        s(&known),
        THREE_RACES,
    ])
    .json();
    assert_eq!(v["summary"]["races"], 0);
    assert_eq!(v["summary"]["baselined"], 3);
    assert_eq!(v["summary"]["suppressed"], 0);
}

#[test]
fn a_new_race_beside_a_baselined_one_still_fails() {
    let known = scratch("sum_before_randn.json");
    std::fs::write(&known, run(&["check", "--format", "json", RACY]).stdout).unwrap();

    let r = run(&[
        "check",
        "--format",
        "json",
        "--baseline",
        s(&known),
        PLUS_SCALE,
    ]);
    assert_eq!(r.code, 1, "{r:#?}");
    let v = r.json();
    let races = v["races"].as_array().unwrap();
    assert_eq!(races.len(), 1, "only the new race: {v:#}");
    assert_eq!(races[0]["kind"], "write-after-write");
    assert_eq!(races[0]["current"]["name"], "scale");
    assert_eq!(v["summary"]["races"], 1);
    assert_eq!(v["summary"]["baselined"], 1);

    // The baselined race sits on other lines in the new trace: lines are not part of the key.
    let baseline: Value = serde_json::from_str(&std::fs::read_to_string(&known).unwrap()).unwrap();
    let plain = run(&["check", "--format", "json", PLUS_SCALE]).json();
    assert_eq!(baseline["races"][0]["current"]["line"], 7);
    assert_eq!(plain["races"][0]["current"]["line"], 9);
    assert_eq!(plain["races"][0]["kind"], "read-after-write");
}

#[test]
fn write_baseline_then_baseline_round_trips() {
    let known = scratch("written.json");
    let r = run(&["check", "--write-baseline", s(&known), PLUS_SCALE]);
    assert_eq!(
        r.code, 1,
        "writing a baseline does not change the verdict: {r:#?}"
    );
    assert!(r.stdout.contains("RACE"), "the report is printed as usual");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&known).unwrap()).unwrap();
    assert_eq!(written["races"].as_array().unwrap().len(), 2);

    let r = run(&["check", "--baseline", s(&known), PLUS_SCALE]);
    assert_eq!(r.code, 0, "{r:#?}");

    // Refreshing in place: the baseline holds the baselined races too, not only new ones.
    let r = run(&[
        "check",
        "--baseline",
        s(&known),
        "--write-baseline",
        s(&known),
        "--max-reports",
        "0",
        PLUS_SCALE,
    ]);
    assert_eq!(r.code, 0);
    let rewritten: Value = serde_json::from_str(&std::fs::read_to_string(&known).unwrap()).unwrap();
    assert_eq!(
        rewritten["races"], written["races"],
        "all races, not cut by --max-reports"
    );
}

#[test]
fn a_baseline_of_several_traces_is_json_lines() {
    let known = scratch("several.jsonl");
    let r = run(&[
        "check",
        "--write-baseline",
        s(&known),
        RACY,
        THREE_RACES,
        FIXED,
    ]);
    assert_eq!(r.code, 1);
    let text = std::fs::read_to_string(&known).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one compact report per line"))
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1]["file"], THREE_RACES);
    // `--format json` of several traces is the same thing, and both work as baselines.
    let printed = run(&["check", "--format", "json", RACY, THREE_RACES, FIXED]).stdout;
    assert_eq!(printed, text);
    let r = run(&["check", "--baseline", s(&known), THREE_RACES, RACY]);
    assert_eq!(r.code, 0, "{r:#?}");
}

#[test]
fn stale_baseline_entries_get_a_note() {
    let known = scratch("stale.json");
    std::fs::write(
        &known,
        run(&["check", "--format", "json", THREE_RACES]).stdout,
    )
    .unwrap();
    let r = run(&["check", "--baseline", s(&known), FIXED]);
    assert_eq!(r.code, 0);
    assert_eq!(
        r.stderr,
        format!(
            "note: {}: 3 of the 3 baselined races no longer occur; --write-baseline writes a \
             baseline of the races that do\n",
            s(&known)
        )
    );
}

#[test]
fn suppressions_go_before_the_baseline() {
    let known = scratch("both.json");
    std::fs::write(&known, run(&["check", "--format", "json", RACY]).stdout).unwrap();
    let r = run(&[
        "check",
        "--format",
        "json",
        "--suppressions",
        "tests/suppress/sum_before_randn.supp",
        "--baseline",
        s(&known),
        RACY,
    ]);
    assert_eq!(r.code, 0);
    let v = r.json();
    assert_eq!(v["summary"]["suppressed"], 1);
    assert_eq!(v["summary"]["baselined"], 0);
    assert!(
        r.stderr
            .contains("1 of the 1 baselined races no longer occur"),
        "{}",
        r.stderr
    );
}

#[test]
fn bad_baselines_are_input_errors_naming_the_file() {
    let r = run(&["check", "--baseline", "tests/suppress/no_such.json", RACY]);
    assert_eq!(r.code, 2);
    assert_eq!(r.stdout, "");
    assert!(
        r.stderr
            .starts_with("error: tests/suppress/no_such.json: cannot read: "),
        "{}",
        r.stderr
    );

    // A text report is not a baseline.
    let r = run(&[
        "check",
        "--baseline",
        "tests/suppress/sum_before_randn.supp",
        RACY,
    ]);
    assert_eq!(r.code, 2);
    assert_eq!(r.stdout, "");
    assert_eq!(
        r.stderr,
        "error: tests/suppress/sum_before_randn.supp:1:1: expected a JSON report written by \
         `streamsan check --format json`: expected value\n"
    );

    // A truncated report.
    let full = run(&["check", "--format", "json", RACY]).stdout;
    let cut = write("cut.json", &full[..full.len() / 2]);
    let r = run(&["check", "--baseline", s(&cut), RACY]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.starts_with(&format!("error: {}:", s(&cut))),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("EOF while parsing"), "{}", r.stderr);

    // A report cut by --max-reports would silently baseline too little.
    let partial = write(
        "partial.json",
        &run(&[
            "check",
            "--format",
            "json",
            "--max-reports",
            "1",
            THREE_RACES,
        ])
        .stdout,
    );
    let r = run(&["check", "--baseline", s(&partial), THREE_RACES]);
    assert_eq!(r.code, 2);
    assert_eq!(
        r.stderr,
        format!(
            "error: {}:1: the report lists 1 of its 3 races (was it written with \
             --max-reports?): a baseline must list every race\n",
            s(&partial)
        )
    );

    // Another version.
    let v2 = write("v2.json", &full.replace("\"version\": 1", "\"version\": 2"));
    let r = run(&["check", "--baseline", s(&v2), RACY]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("unsupported report version 2"),
        "{}",
        r.stderr
    );
}

#[test]
fn an_unwritable_baseline_is_an_error() {
    let r = run(&[
        "check",
        "--write-baseline",
        "tests/suppress/no_such_dir/known.json",
        FIXED,
    ]);
    assert_eq!(r.code, 2, "{r:#?}");
    assert!(
        r.stderr.starts_with(
            "error: tests/suppress/no_such_dir/known.json: cannot write the baseline: no such file"
        ),
        "{}",
        r.stderr
    );
    assert!(
        r.stdout.starts_with("SUMMARY: no races"),
        "the report was printed"
    );
}

#[test]
fn no_baseline_is_written_when_a_trace_cannot_be_checked() {
    let known = scratch("not_written.json");
    let r = run(&[
        "check",
        "--write-baseline",
        s(&known),
        RACY,
        "tests/suppress/no_such.jsonl",
    ]);
    assert_eq!(r.code, 2);
    assert!(!known.exists());
    assert!(
        r.stderr.contains(&format!(
            "error: {}: baseline not written: not every trace could be checked",
            s(&known)
        )),
        "{}",
        r.stderr
    );
}
