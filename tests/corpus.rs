//! The rule corpus: for every case of every rule of the ordering model
//! (`docs/ordering-model.md`), a racy trace and its fixed twin under `tests/corpus/`, plus a few
//! realistic programs that mix rules.
//!
//! Each trace's header carries the verdict that NVIDIA's documentation gives (`expect`), the
//! page it comes from (`doc`) and the sentence that decides it (`quote`); the expectations were
//! derived from the documentation, never from what the engine does. This test first checks the
//! engine's findings and the JSON report against `expect` (the exact set of racing
//! `(current line, previous line)` pairs, the set of race kinds, the set of warning kinds), and
//! only then snapshots the text and JSON reports, so that reviewing a snapshot can never accept
//! a flipped verdict. `tests/corpus/README.md` describes the files. The same checks run on
//! PyTorch CSAN's event-handler tests translated into traces (`tests/csan/`, README there).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use serde_json::{Map, Value};
use streamsan::engine::{Engine, Finding, Stats};
use streamsan::report::{Collector, RenderOptions, render_json, render_text};
use streamsan::trace::reader::TraceReader;
use streamsan::trace::record::Record;

/// The race kinds a header may name (the JSON report's spelling).
const RACE_KINDS: [&str; 5] = [
    "read-after-write",
    "write-after-read",
    "write-after-write",
    "free-while-in-use",
    "use-after-free",
];

/// The warning kinds a header may name.
const WARNING_KINDS: [&str; 5] = [
    "unrecorded-event",
    "foreign-per-thread-stream",
    "host-access-to-device",
    "leak",
    "caching-free-in-use",
];

/// The rules the corpus must pin: R1 to R14, R16 to R18 of trace v1 minor 1, R19 of minor 2
/// and R20 of minor 3 (R15, cudarc's event tracking, is covered by GPU-recorded traces
/// elsewhere).
const RULES: [u32; 19] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 18, 19, 20,
];

/// Where a case's deciding sentence may come from: NVIDIA's CUDA documentation, and for the
/// caching allocator (R16) PyTorch's.
const DOCS_PREFIXES: [&str; 2] = ["https://docs.nvidia.com/", "https://docs.pytorch.org/"];

/// What a trace's verdict consists of, whether promised by a header or observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Verdict {
    /// Distinct `(current line, previous line)` pairs of race findings.
    pairs: BTreeSet<(u64, u64)>,
    /// Race kinds, as spelled in the JSON report.
    kinds: BTreeSet<String>,
    /// Warning kinds, as spelled in the JSON report.
    warnings: BTreeSet<String>,
}

/// A header's `expect`, checked for internal consistency.
#[derive(Debug)]
struct Expect {
    races: u64,
    verdict: Verdict,
}

/// The path as the snapshots and reports show it: relative to the crate, with `/`.
fn display_path(path: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

fn str_list(value: Option<&Value>, what: &str, file: &str) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{file}: header field `{what}` must be a list of strings"))
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("{file}: `{what}` holds a non-string: {v}"))
                .to_owned()
        })
        .collect()
}

/// A sorted list without repeats, as the headers write sets.
fn sorted_set(list: Vec<String>, what: &str, file: &str) -> BTreeSet<String> {
    let set: BTreeSet<String> = list.iter().cloned().collect();
    assert_eq!(
        list,
        set.iter().cloned().collect::<Vec<_>>(),
        "{file}: `{what}` must be sorted and without repeats"
    );
    set
}

fn parse_expect(header: &Map<String, Value>, file: &str) -> Expect {
    let expect = header
        .get("expect")
        .and_then(Value::as_object)
        .unwrap_or_else(|| panic!("{file}: header has no `expect` object"));
    let races = expect
        .get("races")
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{file}: `expect.races` must be a number"));
    let kinds = sorted_set(
        str_list(expect.get("kinds"), "expect.kinds", file),
        "kinds",
        file,
    );
    let warnings = sorted_set(
        str_list(expect.get("warnings"), "expect.warnings", file),
        "warnings",
        file,
    );
    let pairs_list = expect
        .get("pairs")
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{file}: `expect.pairs` must be a list of [current, previous]"));
    let mut pairs = BTreeSet::new();
    for pair in pairs_list {
        let lines: Vec<u64> = pair
            .as_array()
            .map(|p| p.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        assert_eq!(
            lines.len(),
            2,
            "{file}: each of `expect.pairs` must be [current_line, previous_line], got {pair}"
        );
        assert!(
            pairs.insert((lines[0], lines[1])),
            "{file}: `expect.pairs` lists {pair} twice"
        );
    }
    assert_eq!(
        races,
        pairs.len() as u64,
        "{file}: `expect.races` must equal the number of `expect.pairs`"
    );
    assert_eq!(
        races == 0,
        kinds.is_empty(),
        "{file}: `expect.kinds` must be empty exactly when no race is expected"
    );
    for kind in &kinds {
        assert!(
            RACE_KINDS.contains(&kind.as_str()),
            "{file}: unknown race kind `{kind}`"
        );
    }
    for kind in &warnings {
        assert!(
            WARNING_KINDS.contains(&kind.as_str()),
            "{file}: unknown warning kind `{kind}`"
        );
    }
    Expect {
        races,
        verdict: Verdict {
            pairs,
            kinds,
            warnings,
        },
    }
}

fn load(path: &Path, file: &str) -> (Map<String, Value>, Vec<Record>) {
    let os_path = path.to_str().expect("corpus paths are UTF-8");
    let reader = TraceReader::open(os_path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let header = reader.header().clone();
    let records = reader
        .collect::<Result<Vec<Record>, _>>()
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    (header, records)
}

/// Runs the engine record by record (for its statistics), and checks that the convenience
/// entry point finds the same.
fn check(records: &[Record], file: &str) -> (Vec<Finding>, Stats) {
    let mut engine = Engine::new();
    let mut findings = Vec::new();
    for record in records {
        if let Err(e) = engine.apply(record, &mut |f| findings.push(f)) {
            panic!("{file}: the corpus trace is invalid input: {e}");
        }
    }
    engine.finish(&mut |f| findings.push(f));
    let all = Engine::check_all(records).unwrap_or_else(|e| panic!("{file}: {e}"));
    assert_eq!(
        all, findings,
        "{file}: Engine::check_all disagrees with apply + finish"
    );
    (findings, engine.stats().clone())
}

fn observe(findings: &[Finding]) -> Verdict {
    let mut verdict = Verdict::default();
    for finding in findings {
        match finding {
            Finding::Race(race) => {
                verdict
                    .pairs
                    .insert((race.current.line, race.previous.line));
                verdict.kinds.insert(race.kind.as_str().to_owned());
            }
            Finding::Warning(warning) => {
                verdict.warnings.insert(warning.kind().as_str().to_owned());
            }
        }
    }
    verdict
}

/// The verdict the JSON report states (folding may merge repeats, never distinct pairs).
fn observe_json(report: &Value, file: &str) -> Verdict {
    let mut verdict = Verdict::default();
    let races = report["races"]
        .as_array()
        .unwrap_or_else(|| panic!("{file}: JSON report has no `races` list"));
    for race in races {
        let line = |side: &str| {
            race[side]["line"]
                .as_u64()
                .unwrap_or_else(|| panic!("{file}: JSON race without `{side}.line`: {race}"))
        };
        verdict.pairs.insert((line("current"), line("previous")));
        verdict.kinds.insert(
            race["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("{file}: JSON race without `kind`: {race}"))
                .to_owned(),
        );
    }
    let warnings = report["warnings"]
        .as_array()
        .unwrap_or_else(|| panic!("{file}: JSON report has no `warnings` list"));
    for warning in warnings {
        verdict.warnings.insert(
            warning["kind"]
                .as_str()
                .unwrap_or_else(|| panic!("{file}: JSON warning without `kind`: {warning}"))
                .to_owned(),
        );
    }
    verdict
}

#[test]
fn corpus_verdicts_and_reports() {
    insta::glob!("corpus/*.jsonl", |path| {
        let file = display_path(path);
        let (header, records) = load(path, &file);
        let expect = parse_expect(&header, &file);

        // The verdict, from the findings themselves.
        let (findings, stats) = check(&records, &file);
        let observed = observe(&findings);
        assert_eq!(
            observed,
            expect.verdict,
            "{file}: the engine's verdict differs from the documented expectation \
             (doc: {doc})\nfindings: {findings:#?}",
            doc = header.get("doc").and_then(Value::as_str).unwrap_or("?"),
        );
        assert_eq!(observed.pairs.len() as u64, expect.races);

        // The reports must state the same verdict.
        let mut collector = Collector::new();
        for finding in findings {
            collector.add(finding);
        }
        let report = collector.finish(&stats);
        // `.into()`: the report names its source by whatever string type it takes.
        #[allow(clippy::useless_conversion)]
        let options = RenderOptions {
            source: Some(file.as_str().into()),
            max_reports: None,
            ..RenderOptions::default()
        };
        let text = render_text(&report, &options).to_string();
        let json_out = render_json(&report, &options).to_string();
        let json: Value = serde_json::from_str(&json_out)
            .unwrap_or_else(|e| panic!("{file}: the JSON report does not parse: {e}\n{json_out}"));
        assert_eq!(
            observe_json(&json, &file),
            expect.verdict,
            "{file}: the JSON report states a different verdict\n{json_out}"
        );
        if expect.races > 0 {
            assert!(
                text.contains(&file),
                "{file}: a race report names the trace it checked (to reproduce it)\n{text}"
            );
        }

        insta::assert_snapshot!("text", text);
        insta::assert_snapshot!(
            "json",
            serde_json::to_string_pretty(&json).expect("a JSON value prints")
        );
    });
}

/// One corpus file as the coverage check sees it (the header only; no engine involved).
struct CorpusFile {
    name: String,
    id: String,
    case: String,
    variant: String,
    header: Map<String, Value>,
    expect: Expect,
}

fn read_corpus() -> Vec<CorpusFile> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files = Vec::new();
    let mut entries: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("readable directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let file = display_path(&path);
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let line_count = text.lines().count() as u64;
        let first = text.lines().next().unwrap_or_default();
        let header: Map<String, Value> = serde_json::from_str(first)
            .unwrap_or_else(|e| panic!("{file}: line 1 is not a header object: {e}"));
        assert_eq!(
            header.get("streamsan_trace"),
            Some(&Value::from(1)),
            "{file}: not a v1 trace"
        );

        // <id>-<case>.<variant>.jsonl
        let stem = name.strip_suffix(".jsonl").unwrap();
        let (rest, variant) = stem
            .rsplit_once('.')
            .unwrap_or_else(|| panic!("{file}: expected <id>-<case>.<racy|fixed>.jsonl"));
        let (id, case) = rest
            .split_once('-')
            .unwrap_or_else(|| panic!("{file}: expected <id>-<case>.<racy|fixed>.jsonl"));
        assert!(
            variant == "racy" || variant == "fixed",
            "{file}: variant must be racy or fixed"
        );
        assert!(
            case.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{file}: the case must be kebab-case"
        );
        assert_eq!(
            header.get("case").and_then(Value::as_str),
            Some(case),
            "{file}: header `case` must match the file name"
        );
        if let Some(v) = header.get("variant") {
            assert_eq!(
                v.as_str(),
                Some(variant),
                "{file}: header `variant` must match the file name"
            );
        }

        let doc = header
            .get("doc")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(
            DOCS_PREFIXES
                .iter()
                .any(|p| doc.starts_with(p) && doc.len() > p.len()),
            "{file}: `doc` must be a page under one of {DOCS_PREFIXES:?}, got {doc:?}"
        );
        let quote = header
            .get("quote")
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(
            !quote.trim().is_empty(),
            "{file}: `quote` must hold the deciding sentence"
        );

        let expect = parse_expect(&header, &file);
        // A graph node's line is where it was captured; it ran at a later launch, so in a trace
        // that launches graphs the current side may have the earlier line.
        let launches_graphs = text.contains("\"graph_launch\"");
        for &(current, previous) in &expect.verdict.pairs {
            let ordered = previous < current || (launches_graphs && previous != current);
            assert!(
                1 < previous.min(current) && current.max(previous) <= line_count && ordered,
                "{file}: pair [{current}, {previous}] must name two record lines, the current \
                 one later unless it is a graph node (the trace has {line_count} lines, the \
                 header is line 1)"
            );
        }
        match variant {
            "fixed" => assert_eq!(expect.races, 0, "{file}: a fixed trace must expect no race"),
            _ => assert!(
                expect.races > 0 || !expect.verdict.warnings.is_empty(),
                "{file}: a racy trace must expect a race or a warning"
            ),
        }
        files.push(CorpusFile {
            id: id.to_owned(),
            case: case.to_owned(),
            variant: variant.to_owned(),
            name,
            header,
            expect,
        });
    }
    files
}

/// `R6` for a rule id, from a file id like `r06`.
fn rule_of_id(id: &str) -> Option<String> {
    let number: u32 = id.strip_prefix('r')?.parse().ok()?;
    Some(format!("R{number}"))
}

#[test]
fn every_rule_is_pinned_by_a_racy_fixed_pair() {
    let files = read_corpus();
    assert!(!files.is_empty(), "tests/corpus holds no traces");

    // Every file has its twin, and the twins describe the same case.
    let mut by_stem: BTreeMap<(String, String), Vec<&CorpusFile>> = BTreeMap::new();
    for f in &files {
        by_stem
            .entry((f.id.clone(), f.case.clone()))
            .or_default()
            .push(f);
    }
    for ((id, case), twins) in &by_stem {
        let variants: BTreeSet<&str> = twins.iter().map(|f| f.variant.as_str()).collect();
        assert_eq!(
            variants,
            BTreeSet::from(["fixed", "racy"]),
            "{id}-{case}: needs exactly one .racy.jsonl and one .fixed.jsonl"
        );
        assert_eq!(
            twins[0].header.get("rule"),
            twins[1].header.get("rule"),
            "{id}-{case}: the twins name different rules"
        );
    }

    // File ids match header rules; multi-rule programs list real rules.
    let mut racy_rules = BTreeSet::new();
    let mut fixed_rules = BTreeSet::new();
    for f in &files {
        let rule = f
            .header
            .get("rule")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if let Some(expected) = rule_of_id(&f.id) {
            assert_eq!(
                rule, expected,
                "{}: file id {} but header rule {rule:?}",
                f.name, f.id
            );
            if f.variant == "racy" && f.expect.races >= 1 {
                racy_rules.insert(rule.to_owned());
            }
            if f.variant == "fixed" && f.expect.races == 0 {
                fixed_rules.insert(rule.to_owned());
            }
        } else {
            assert!(
                f.id.starts_with('p') && rule == "multi",
                "{}: ids are rNN (one rule) or pNN with `\"rule\": \"multi\"`",
                f.name
            );
            let rules = str_list(f.header.get("rules"), "rules", &f.name);
            assert!(
                !rules.is_empty(),
                "{}: a multi-rule program lists its `rules`",
                f.name
            );
            for r in rules {
                let n: u32 = r
                    .strip_prefix('R')
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                assert!(
                    RULES.contains(&n),
                    "{}: unknown rule {r:?} in `rules`",
                    f.name
                );
            }
        }
    }

    for n in RULES {
        let rule = format!("R{n}");
        assert!(
            racy_rules.contains(&rule),
            "{rule} has no racy trace that expects a race (races >= 1, a use-after-free or a \
             free-while-in-use included)"
        );
        assert!(
            fixed_rules.contains(&rule),
            "{rule} has no fixed trace that expects no race"
        );
    }
}

/// PyTorch CSAN's own tests of its event handler (`TestEventHandler` in
/// `test/test_cuda_sanitizer.py`), one trace each under `tests/csan/` (README there): every one
/// of them must be translated, and streamsan must give each the verdict CUDA's documentation
/// gives, which for all of these is also CSAN's.
const CSAN_TESTS: [&str; 15] = [
    "all_reads_checked_failing",
    "all_reads_checked_passing",
    "branch_sync",
    "chain_sync",
    "correct_state_merging",
    "deleted_record",
    "empty_kernel_launch",
    "expired_record",
    "multiple_errors",
    "multiple_wait",
    "reads_check_last_write",
    "record_override",
    "simple_error",
    "simple_passing",
    "simple_sync",
];

#[test]
fn csan_event_handler_suite() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/csan");
    let mut names: Vec<String> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| {
            let name = entry.expect("readable entry").file_name();
            name.to_string_lossy()
                .strip_suffix(".jsonl")
                .map(str::to_owned)
        })
        .collect();
    names.sort();
    assert_eq!(
        names, CSAN_TESTS,
        "tests/csan must hold one trace per CSAN test"
    );

    for name in CSAN_TESTS {
        let path = dir.join(format!("{name}.jsonl"));
        let file = display_path(&path);
        let (header, records) = load(&path, &file);
        assert_eq!(
            header.get("csan_test").and_then(Value::as_str),
            Some(format!("TestEventHandler.test_{name}").as_str()),
            "{file}: `csan_test` names the test it translates"
        );
        let doc = header.get("doc").and_then(Value::as_str).unwrap_or("");
        assert!(
            DOCS_PREFIXES[..1].iter().any(|p| doc.starts_with(p)),
            "{file}: the verdict comes from NVIDIA's documentation, got {doc:?}"
        );
        assert!(
            header
                .get("quote")
                .and_then(Value::as_str)
                .is_some_and(|q| !q.is_empty()),
            "{file}: `quote` holds the deciding sentence"
        );
        let expect = parse_expect(&header, &file);
        let (findings, stats) = check(&records, &file);
        assert_eq!(
            observe(&findings),
            expect.verdict,
            "{file}: the engine's verdict differs from the documented one\n{findings:#?}"
        );
        // CSAN counts one error per tensor (`test_multiple_errors` asserts ten), where the
        // pairs count distinct lines: `expect.findings` says how many races there are then.
        let races = findings
            .iter()
            .filter(|f| matches!(f, Finding::Race(_)))
            .count() as u64;
        let want = header["expect"]
            .get("findings")
            .and_then(Value::as_u64)
            .unwrap_or(expect.races);
        assert_eq!(races, want, "{file}: race findings");

        let mut collector = Collector::new();
        for finding in findings {
            collector.add(finding);
        }
        let report = collector.finish(&stats);
        let json: Value =
            serde_json::from_str(&render_json(&report, &RenderOptions::default()).to_string())
                .expect("the JSON report parses");
        assert_eq!(
            observe_json(&json, &file),
            expect.verdict,
            "{file}: JSON report"
        );
    }
}

/// The two subtests of CSAN's `test_deleted_record` that are not CUDA programs (README.md in
/// `tests/csan/`): a wait on a destroyed event, and an event created twice with no destroy
/// between. CSAN logs and carries on; a trace that says so is refused, naming the line.
#[test]
fn csan_subtests_that_are_not_cuda_programs_are_refused() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/csan/deleted_record.jsonl");
    let (_, records) = load(&path, "tests/csan/deleted_record.jsonl");
    let destroy = records
        .iter()
        .position(|r| matches!(r.op, streamsan::trace::record::Op::EventDestroy { .. }))
        .expect("the trace destroys the event");
    for (skip, line, says) in [
        (destroy + 1, records[destroy + 2].line, "is not declared"),
        (destroy, records[destroy + 1].line, "is declared again"),
    ] {
        let mut engine = Engine::new();
        let error = records
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != skip)
            .find_map(|(_, r)| engine.apply(r, &mut |_| {}).err())
            .expect("the engine refuses the trace");
        assert_eq!(error.line, line, "{error}");
        assert!(error.to_string().contains(says), "{error}");
    }
}
