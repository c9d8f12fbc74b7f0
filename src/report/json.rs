//! The JSON report (`--format json`): stable, specified in `docs/report-format.md`.
//!
//! The shape is DESIGN.md's, with two documented additions per race (`buffer_name`, `why`).
//! These structs are the wire format, both ways: [`render_json`] writes them (keys in
//! declaration order, pretty-printed with two-space indentation and a final newline), and
//! baselines ([`crate::suppress::Baseline`]) read them back, so the two cannot drift apart.
//! Identities are the raw trace ids (stream, buffer), not the report symbols: tools join them
//! with the trace. Reading ignores unknown keys, as the format's stability rules ask of
//! consumers; the keys a consumer needs to identify a race are required, the rest default.

use serde::{Deserialize, Serialize};

#[cfg(test)]
use super::hints::fix_hint;
use super::hints::{fix_hint_for, why};
use super::{Api, RenderOptions, Report, warning_message};
use crate::engine::finding::{Race, Site, Warning};

/// The version of this JSON shape: bumped only for a change that could break a consumer
/// (a removed or renamed key, a changed type or meaning). New keys do not bump it.
pub const JSON_VERSION: u32 = 1;

/// A whole report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonReport {
    pub version: u64,
    pub races: Vec<JsonRace>,
    #[serde(default)]
    pub warnings: Vec<JsonWarning>,
    /// Always written; optional when read (a hand-made baseline may leave it out).
    pub summary: Option<JsonSummary>,
}

/// One (folded) race.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonRace {
    pub kind: String,
    pub buffer: u64,
    pub buffer_name: Option<String>,
    #[serde(default)]
    pub range: [u64; 2],
    pub current: JsonSite,
    pub previous: JsonSite,
    #[serde(default)]
    pub occurrences: u64,
    #[serde(default)]
    pub why: String,
    #[serde(default)]
    pub fix: String,
    /// The line of the graph launch whose node is a side of the race (the current side's when
    /// both are nodes); absent when neither is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_launch: Option<u64>,
}

/// One side of a race.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonSite {
    #[serde(default)]
    pub line: u64,
    pub stream: Option<u64>,
    #[serde(default)]
    pub thread: u64,
    pub op: String,
    pub name: Option<String>,
    pub access: String,
    pub arg: Option<String>,
    pub at: Option<String>,
    /// The trace id of the buffer this side accessed, when it is not the race's `buffer`: an
    /// earlier caching block on the same bytes (only ever on `previous`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer: Option<u64>,
    /// For a graph node: the line of the launch that ran it (`line` is where it was captured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph_launch: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonWarning {
    pub kind: String,
    pub line: u64,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonSummary {
    pub records: u64,
    pub races: u64,
    pub warnings: u64,
    pub streams: u64,
    pub buffers: u64,
    /// Only when suppressions or a baseline were applied (`crate::suppress`).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub filtered: Option<JsonFiltered>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonFiltered {
    pub suppressed: u64,
    pub baselined: u64,
    pub suppressed_warnings: u64,
}

impl JsonSite {
    pub fn of(site: &Site) -> Self {
        JsonSite {
            line: site.line,
            stream: site.stream.as_ref().map(|s| s.id),
            thread: site.thread,
            op: site.op.as_str().to_string(),
            name: site.name.clone(),
            access: site.access.as_str().to_string(),
            arg: site.arg.clone(),
            at: site.at.clone(),
            buffer: None,
            graph_launch: site.graph.as_ref().map(|g| g.launch),
        }
    }
}

impl JsonRace {
    /// A race as the report lists it, folded `occurrences` times, its fix in `api`'s words.
    pub fn of(race: &Race, occurrences: u64, api: Api) -> Self {
        JsonRace {
            kind: race.kind.as_str().to_string(),
            buffer: race.buffer.id,
            buffer_name: race.buffer.name.clone(),
            range: [race.range.0, race.range.1],
            current: JsonSite::of(&race.current),
            previous: JsonSite {
                buffer: race.reused.as_ref().map(|r| r.buffer.id),
                ..JsonSite::of(&race.previous)
            },
            occurrences,
            why: why(race),
            fix: fix_hint_for(race, api),
            graph_launch: race.graph_launch(),
        }
    }
}

impl JsonWarning {
    pub fn of(warning: &Warning) -> Self {
        JsonWarning {
            kind: warning.kind().as_str().to_string(),
            line: warning.line,
            message: warning_message(warning),
        }
    }
}

impl JsonReport {
    /// The report as written: `opts.max_reports` limits `races`; `summary.races` still counts
    /// all. `opts.source` is not used.
    pub fn of(report: &Report, opts: &RenderOptions) -> Self {
        let s = &report.summary;
        JsonReport {
            version: u64::from(JSON_VERSION),
            races: opts
                .shown(report)
                .iter()
                .map(|f| JsonRace::of(&f.race, f.occurrences, opts.api))
                .collect(),
            warnings: report.warnings.iter().map(JsonWarning::of).collect(),
            summary: Some(JsonSummary {
                records: s.records,
                races: s.races,
                warnings: s.warnings,
                streams: s.streams,
                buffers: s.buffers,
                filtered: s.filtered.map(|f| JsonFiltered {
                    suppressed: f.suppressed,
                    baselined: f.baselined,
                    suppressed_warnings: f.suppressed_warnings,
                }),
            }),
        }
    }
}

/// Renders the report as JSON (pretty-printed, ending with a newline).
pub fn render_json(report: &Report, opts: &RenderOptions) -> String {
    let mut out = serde_json::to_string_pretty(&JsonReport::of(report, opts))
        .expect("serializing plain structs of strings and numbers cannot fail");
    out.push('\n');
    out
}

/// One line of JSON Lines for a report among several: compact, with a `"file"` key first.
pub fn render_json_line(report: &Report, opts: &RenderOptions, file: &str) -> String {
    #[derive(Serialize)]
    struct Line<'a> {
        file: &'a str,
        #[serde(flatten)]
        report: JsonReport,
    }
    let line = Line {
        file,
        report: JsonReport::of(report, opts),
    };
    serde_json::to_string(&line).expect("serializing plain structs cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::finding::Finding;
    use crate::report::Collector;
    use crate::report::fixtures::*;
    use serde_json::{Value, json};

    fn report() -> Report {
        let mut c = Collector::new();
        let race = stream_stream_never_synced();
        c.add(Finding::Race(Box::new(race.clone())));
        c.add(Finding::Race(Box::new(race)));
        c.add(Finding::Race(Box::new(free_while_in_use_host_free())));
        c.add(Finding::Warning(unrecorded_event_warning()));
        c.finish(&stats())
    }

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object()
            .expect("an object")
            .keys()
            .map(String::as_str)
            .collect()
    }

    #[test]
    fn json_report_snapshot() {
        let out = render_json(&report(), &RenderOptions::default());
        insta::assert_snapshot!(out);

        // The verdict, independently of the snapshot.
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["races"].as_array().unwrap().len(), 2);
        assert_eq!(v["races"][0]["kind"], "read-after-write");
        assert_eq!(v["races"][0]["occurrences"], 2);
        assert_eq!(v["races"][1]["kind"], "free-while-in-use");
        assert_eq!(v["summary"]["races"], 2);
    }

    #[test]
    fn json_has_exactly_the_documented_keys_in_order() {
        let out = render_json(&report(), &RenderOptions::default());
        // Key order is part of the promise: check it on the text, since serde_json's `Value`
        // sorts keys.
        let top = ["\"version\"", "\"races\"", "\"warnings\"", "\"summary\""];
        let positions: Vec<usize> = top.iter().map(|k| out.find(k).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{out}");

        let v: Value = serde_json::from_str(&out).unwrap();
        let mut top_keys = keys(&v);
        top_keys.sort();
        assert_eq!(top_keys, ["races", "summary", "version", "warnings"]);
        assert_eq!(v["version"], 1);

        let race = &v["races"][0];
        let mut race_keys = keys(race);
        race_keys.sort();
        assert_eq!(
            race_keys,
            [
                "buffer",
                "buffer_name",
                "current",
                "fix",
                "kind",
                "occurrences",
                "previous",
                "range",
                "why"
            ]
        );
        for side in ["current", "previous"] {
            let mut site_keys = keys(&race[side]);
            site_keys.sort();
            assert_eq!(
                site_keys,
                [
                    "access", "arg", "at", "line", "name", "op", "stream", "thread"
                ]
            );
        }
        let mut warning_keys = keys(&v["warnings"][0]);
        warning_keys.sort();
        assert_eq!(warning_keys, ["kind", "line", "message"]);
        let mut summary_keys = keys(&v["summary"]);
        summary_keys.sort();
        assert_eq!(
            summary_keys,
            ["buffers", "races", "records", "streams", "warnings"]
        );
    }

    #[test]
    fn json_values_are_trace_ids_and_spelled_kinds() {
        let v: Value =
            serde_json::from_str(&render_json(&report(), &RenderOptions::default())).unwrap();
        let race = &v["races"][0];
        assert_eq!(race["buffer"], 100, "the trace id, not the ordinal");
        assert_eq!(race["buffer_name"], "x");
        assert_eq!(race["range"], json!([0, 4096]));
        assert_eq!(
            race["current"],
            json!({"line": 9, "stream": 7, "thread": 0, "op": "launch", "name": "sum",
                   "access": "read", "arg": "x", "at": "examples/sum.rs:31:5"})
        );
        assert_eq!(race["previous"]["stream"], 0);
        assert_eq!(race["previous"]["access"], "write");
        assert_eq!(race["why"], why(&stream_stream_never_synced()));
        assert_eq!(race["fix"], fix_hint(&stream_stream_never_synced()));

        // A host free: no stream, no name, no argument, all null rather than absent.
        let free = &v["races"][1]["current"];
        assert_eq!(free["stream"], Value::Null);
        assert_eq!(free["name"], Value::Null);
        assert_eq!(free["arg"], Value::Null);
        assert_eq!(free["access"], "free");
        assert_eq!(free["op"], "free");

        assert_eq!(
            v["warnings"][0],
            json!({"kind": "unrecorded-event", "line": 7,
                   "message": warning_message(&unrecorded_event_warning())})
        );
        assert_eq!(
            v["summary"],
            json!({"records": 12, "races": 2, "warnings": 1, "streams": 2, "buffers": 3})
        );
    }

    #[test]
    fn filter_counts_follow_the_summary_keys_only_when_filtered() {
        let mut filtered = report();
        filtered.summary.filtered = Some(crate::report::FilterCounts {
            suppressed: 3,
            baselined: 2,
            suppressed_warnings: 1,
        });
        let out = render_json(&filtered, &RenderOptions::default());
        let order = [
            "\"buffers\"",
            "\"suppressed\"",
            "\"baselined\"",
            "\"suppressed_warnings\"",
        ];
        let positions: Vec<usize> = order.iter().map(|k| out.find(k).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{out}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["summary"],
            json!({"records": 12, "races": 2, "warnings": 1, "streams": 2, "buffers": 3,
                   "suppressed": 3, "baselined": 2, "suppressed_warnings": 1})
        );
    }

    #[test]
    fn max_reports_limits_the_races_array_but_not_the_summary() {
        let opts = RenderOptions {
            source: None,
            max_reports: Some(1),
            ..RenderOptions::default()
        };
        let v: Value = serde_json::from_str(&render_json(&report(), &opts)).unwrap();
        assert_eq!(v["races"].as_array().unwrap().len(), 1);
        assert_eq!(v["summary"]["races"], 2);
    }

    #[test]
    fn json_lines_put_the_file_first_and_read_back() {
        let line = render_json_line(&report(), &RenderOptions::default(), "a b.jsonl");
        assert!(
            line.starts_with("{\"file\":\"a b.jsonl\",\"version\":1,"),
            "{line}"
        );
        assert!(!line.contains('\n'));
        let back: JsonReport = serde_json::from_str(&line).unwrap();
        assert_eq!(back, JsonReport::of(&report(), &RenderOptions::default()));
    }

    #[test]
    fn clean_report_has_empty_arrays() {
        let report = Collector::new().finish(&stats());
        let v: Value =
            serde_json::from_str(&render_json(&report, &RenderOptions::default())).unwrap();
        assert_eq!(v["races"], json!([]));
        assert_eq!(v["warnings"], json!([]));
        assert_eq!(v["summary"]["races"], 0);
    }
}
