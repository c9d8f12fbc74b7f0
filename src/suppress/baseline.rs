//! Baselines: the races of an earlier JSON report, accepted as known.
//!
//! A race of a new report is *baselined* when the baseline holds a race with the same
//! [`RaceKey`]: what the code did, not when (the key the report folds repeats with). The JSON
//! report carries every part of the key, and none of its parts move when unrelated records are
//! added to or removed from a trace. The report is read through the report layer's own wire
//! structs ([`JsonReport`]), so what `--format json` writes is what a baseline reads.

use std::path::Path;

use rustc_hash::FxHashMap;

use super::error::FilterError;
use crate::engine::finding::Race;
use crate::report::{JSON_VERSION, JsonReport, RaceKey, Report};

/// The races of one or more earlier reports, by [`RaceKey`].
#[derive(Clone, Debug, Default)]
pub struct Baseline {
    file: String,
    /// Distinct keys, in the order first listed.
    keys: Vec<RaceKey>,
    index: FxHashMap<RaceKey, usize>,
}

impl Baseline {
    /// Parses a JSON report as `streamsan check --format json` prints it: one pretty-printed
    /// document, or JSON Lines (one report per trace). `file` names it in errors.
    ///
    /// Errors: text that is not such a report (with the line and column where JSON parsing
    /// stopped), a report of another `version`, an empty file, and a report that lists fewer
    /// races than its `summary.races` counts (written with `--max-reports`): a baseline must
    /// list every race it accepts.
    pub fn parse(text: &str, file: &str) -> Result<Baseline, FilterError> {
        let mut baseline = Baseline {
            file: file.to_string(),
            ..Baseline::default()
        };
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<JsonReport>();
        let mut reports = 0;
        loop {
            let start = stream.byte_offset();
            let report = match stream.next() {
                None => break,
                Some(Ok(report)) => report,
                Some(Err(e)) => return Err(json_error(file, &e)),
            };
            reports += 1;
            let line = line_of_document(text, start);
            if report.version != u64::from(JSON_VERSION) {
                return Err(FilterError::new(
                    file,
                    line,
                    None,
                    format!(
                        "unsupported report version {} (expected a streamsan JSON report of \
                         version {JSON_VERSION})",
                        report.version
                    ),
                ));
            }
            if let Some(summary) = &report.summary
                && summary.races > report.races.len() as u64
            {
                return Err(FilterError::new(
                    file,
                    line,
                    None,
                    format!(
                        "the report lists {} of its {} races (was it written with \
                         --max-reports?): a baseline must list every race",
                        report.races.len(),
                        summary.races
                    ),
                ));
            }
            for (i, race) in report.races.into_iter().enumerate() {
                let key = RaceKey::of_json(race).map_err(|message| {
                    FilterError::new(
                        file,
                        line,
                        None,
                        format!("race {i} of the report: {message}"),
                    )
                })?;
                baseline.insert(key);
            }
        }
        if reports == 0 {
            return Err(FilterError::new(
                file,
                0,
                None,
                "empty baseline: expected a JSON report written by `streamsan check --format json`",
            ));
        }
        Ok(baseline)
    }

    /// Reads and parses the file at `path`, named in errors as `path` displays.
    pub fn load(path: impl AsRef<Path>) -> Result<Baseline, FilterError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = super::error::read_text(path, &name)?;
        Baseline::parse(&text, &name)
    }

    /// The races of an in-memory report (the online layer's, say), named `file` in messages.
    pub fn from_report(report: &Report, file: &str) -> Baseline {
        let mut baseline = Baseline {
            file: file.to_string(),
            ..Baseline::default()
        };
        for folded in &report.races {
            baseline.insert(RaceKey::of(&folded.race));
        }
        baseline
    }

    fn insert(&mut self, key: RaceKey) {
        if !self.index.contains_key(&key) {
            self.index.insert(key.clone(), self.keys.len());
            self.keys.push(key);
        }
    }

    /// The file the baseline came from.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Distinct races in the baseline.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The index (in `0..len()`) of the baseline entry with the race's key, if any.
    pub fn find(&self, race: &Race) -> Option<usize> {
        self.index.get(&RaceKey::of(race)).copied()
    }

    /// True when the race is in the baseline.
    pub fn contains(&self, race: &Race) -> bool {
        self.find(race).is_some()
    }
}

/// The 1-based line on which the document starting at byte `start` (possibly after blanks)
/// begins.
fn line_of_document(text: &str, start: usize) -> u64 {
    let rest = &text[start..];
    let begin = start + (rest.len() - rest.trim_start().len());
    text.as_bytes()[..begin]
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as u64
        + 1
}

fn json_error(file: &str, e: &serde_json::Error) -> FilterError {
    let text = e.to_string();
    // serde_json appends " at line L column C"; the location goes in front instead.
    let message = match text.rfind(" at line ") {
        Some(i) if e.line() > 0 => &text[..i],
        _ => text.as_str(),
    };
    // serde_json's column is 0 at the very start of a line (an end of file after a newline).
    let (line, column) = match (e.line(), e.column()) {
        (0, _) => (0, None),
        (line, 0) => (line as u64, None),
        (line, column) => (line as u64, Some(column as u64)),
    };
    FilterError::new(
        file,
        line,
        column,
        format!("expected a JSON report written by `streamsan check --format json`: {message}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Stats;
    use crate::engine::finding::{Finding, RaceKind, Site};
    use crate::report::{Collector, RenderOptions, render_json};
    use crate::suppress::rules::tests::race;

    fn report_of(races: Vec<Race>) -> Report {
        let mut c = Collector::new();
        for r in races {
            c.add(Finding::Race(Box::new(r)));
        }
        c.finish(&Stats::default())
    }

    fn other_race() -> Race {
        let mut r = race();
        r.kind = RaceKind::WriteAfterRead;
        r.current.name = Some("axpy".into());
        r
    }

    #[test]
    fn a_rendered_report_round_trips() {
        let mut unnamed = race();
        unnamed.buffer.name = None;
        unnamed.current.stream = None;
        unnamed.current.at = None;
        let report = report_of(vec![race(), other_race(), unnamed.clone()]);
        let json = render_json(&report, &RenderOptions::default());
        let b = Baseline::parse(&json, "known.json").unwrap();
        assert_eq!(b.len(), 3);
        assert_eq!(b.file(), "known.json");
        assert_eq!(b.find(&race()), Some(0));
        assert_eq!(b.find(&other_race()), Some(1));
        assert_eq!(b.find(&unnamed), Some(2));
        let from_report = Baseline::from_report(&report, "mem");
        assert_eq!(from_report.keys, b.keys);
    }

    #[test]
    fn lines_ranges_threads_and_ordinals_do_not_matter() {
        let b = Baseline::from_report(&report_of(vec![race()]), "known.json");
        let mut moved = race();
        moved.current.line += 100;
        moved.previous.line += 90;
        moved.range = (8, 16);
        moved.current.thread = 4;
        moved.buffer.ordinal = 9;
        moved.buffer.id = 99; // named: the name is the key
        moved.current.stream.as_mut().unwrap().ordinal = 7;
        assert!(b.contains(&moved));
    }

    #[test]
    fn every_part_of_the_key_separates() {
        let b = Baseline::from_report(&report_of(vec![race()]), "known.json");
        let mut variants = Vec::new();
        let mut v = race();
        v.kind = RaceKind::WriteAfterWrite;
        variants.push(v);
        let mut v = race();
        v.buffer.name = Some("other".into());
        variants.push(v);
        let mut v = race();
        v.buffer.name = None;
        variants.push(v);
        fn side_mut(r: &mut Race, current: bool) -> &mut Site {
            if current {
                &mut r.current
            } else {
                &mut r.previous
            }
        }
        let edits: [fn(&mut Site); 6] = [
            |s| s.op = crate::trace::record::OpKind::Memcpy,
            |s| s.name = Some("other".into()),
            |s| s.arg = None,
            |s| s.access = crate::engine::finding::AccessKind::Free,
            |s| s.stream.as_mut().unwrap().id = 42,
            |s| s.at = Some("src/elsewhere.rs:1:1".into()),
        ];
        for current in [true, false] {
            for edit in edits {
                let mut v = race();
                edit(side_mut(&mut v, current));
                variants.push(v);
            }
        }
        for v in &variants {
            assert!(!b.contains(v), "{v:#?}");
        }
        // An unnamed buffer is matched by its trace id.
        let mut unnamed = race();
        unnamed.buffer.name = None;
        let b = Baseline::from_report(&report_of(vec![unnamed.clone()]), "known.json");
        let mut same_id = unnamed.clone();
        same_id.buffer.ordinal = 5;
        assert!(b.contains(&same_id));
        let mut other_id = unnamed;
        other_id.buffer.id = 11;
        assert!(!b.contains(&other_id));
    }

    #[test]
    fn json_lines_of_several_traces_are_one_baseline() {
        let a = render_json(&report_of(vec![race()]), &RenderOptions::default());
        let b = render_json(&report_of(vec![other_race()]), &RenderOptions::default());
        let compact = |s: &str| {
            let v: serde_json::Value = serde_json::from_str(s).unwrap();
            let mut m = v.as_object().unwrap().clone();
            m.insert("file".into(), "t.jsonl".into());
            serde_json::to_string(&m).unwrap()
        };
        let text = format!("{}\n{}\n", compact(&a), compact(&b));
        let baseline = Baseline::parse(&text, "known.jsonl").unwrap();
        assert!(baseline.contains(&race()) && baseline.contains(&other_race()));
        assert_eq!(baseline.len(), 2);
        // A clean report is a valid, empty baseline; duplicates count once.
        let clean = render_json(&report_of(vec![]), &RenderOptions::default());
        assert!(Baseline::parse(&clean, "c.json").unwrap().is_empty());
        let twice = Baseline::parse(&format!("{a}{a}"), "c.json").unwrap();
        assert_eq!(twice.len(), 1);
    }

    #[test]
    fn every_error_names_the_file() {
        let full = render_json(
            &report_of(vec![race(), other_race()]),
            &RenderOptions::default(),
        );
        let cut = render_json(
            &report_of(vec![race(), other_race()]),
            &RenderOptions {
                source: None,
                max_reports: Some(1),
                ..RenderOptions::default()
            },
        );
        let cases: Vec<(String, &str)> = vec![
            (
                String::new(),
                "k.json: empty baseline: expected a JSON report written by `streamsan check \
                 --format json`",
            ),
            (
                "  \n".into(),
                "k.json: empty baseline: expected a JSON report written by `streamsan check \
                 --format json`",
            ),
            (
                "SUMMARY: no races\n".into(),
                "k.json:1:1: expected a JSON report written by `streamsan check --format json`: \
                 expected value",
            ),
            (
                "{\"version\": 1}".into(),
                "k.json:1:14: expected a JSON report written by `streamsan check --format json`: \
                 missing field `races`",
            ),
            (
                "{\"version\": \"2.1.0\", \"runs\": []}".into(),
                "k.json:1:19: expected a JSON report written by `streamsan check --format json`: \
                 invalid type: string \"2.1.0\", expected u64",
            ),
            (
                full.replace("\"version\": 1", "\"version\": 2"),
                "k.json:1: unsupported report version 2 (expected a streamsan JSON report of \
                 version 1)",
            ),
            (
                format!("{full}\n{}", &full[..full.len() / 2]),
                "", // checked below: a truncated second document
            ),
            (
                format!("{full}{cut}"),
                "", // checked below
            ),
            (
                full.replace("\"kind\": \"write-after-read\"", "\"kind\": 3"),
                "", // checked below
            ),
        ];
        for (text, expected) in &cases {
            let err = Baseline::parse(text, "k.json").expect_err("an error");
            assert_eq!(err.file, "k.json");
            if !expected.is_empty() {
                assert_eq!(&err.to_string(), expected);
            }
        }
        let truncated = Baseline::parse(&cases[6].0, "k.json").unwrap_err();
        assert!(truncated.line > 1, "{truncated}");
        assert!(truncated.message.contains("EOF"), "{truncated}");
        let incomplete = Baseline::parse(&cases[7].0, "k.json").unwrap_err();
        let second_line = full.matches('\n').count() as u64 + 1;
        assert_eq!(
            incomplete.to_string(),
            format!(
                "k.json:{second_line}: the report lists 1 of its 2 races (was it written with \
                 --max-reports?): a baseline must list every race"
            )
        );
        let mistyped = Baseline::parse(&cases[8].0, "k.json").unwrap_err();
        assert!(
            mistyped
                .message
                .ends_with("invalid type: integer `3`, expected a string"),
            "{mistyped}"
        );
        let missing = Baseline::load("/nonexistent/known.json").unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with("/nonexistent/known.json: cannot read: "),
            "{missing}"
        );
    }
}
