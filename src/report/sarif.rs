//! The SARIF 2.1.0 report (`--format sarif`), for code-scanning dashboards.
//!
//! One run; the driver `streamsan` declares one rule per race kind and per warning kind (ids are
//! the JSON spellings, in declaration order, so `ruleIndex` is stable). Each rendered race is a
//! result of level `error` located at the current access's source location, with the previous
//! access and the allocation as related locations; each stored warning is a result of level
//! `warning`. Where a site has no source location, the location is the trace file itself
//! (`RenderOptions::source`) at the record's trace line; with neither, the location carries
//! only its message.

use serde::Serialize;

#[cfg(test)]
use super::hints::fix_hint;
use super::hints::{fix_hint_for, why};
use super::names::{RACE_KINDS, WARNING_KINDS, allocation, describe_site, headline};
use super::{RenderOptions, Report};
use crate::engine::finding::{RaceKind, Warning, WarningKind};

const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

#[derive(Serialize)]
struct Sarif {
    #[serde(rename = "$schema")]
    schema: &'static str,
    version: &'static str,
    runs: Vec<Run>,
}

#[derive(Serialize)]
struct Run {
    tool: Tool,
    results: Vec<SarifResult>,
}

#[derive(Serialize)]
struct Tool {
    driver: Driver,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Driver {
    name: &'static str,
    version: &'static str,
    rules: Vec<Rule>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    id: &'static str,
    short_description: Text,
    default_configuration: Configuration,
}

#[derive(Serialize)]
struct Configuration {
    level: &'static str,
}

#[derive(Serialize)]
struct Text {
    text: String,
}

/// One result of a SARIF run: a race or a warning.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SarifResult {
    rule_id: &'static str,
    rule_index: usize,
    level: &'static str,
    message: Text,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    locations: Vec<Location>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    related_locations: Vec<Location>,
    #[serde(skip_serializing_if = "Option::is_none")]
    properties: Option<Properties>,
}

#[derive(Serialize)]
struct Properties {
    #[serde(skip_serializing_if = "Option::is_none")]
    occurrences: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
    /// The trace a result came from, when one log holds the results of several.
    #[serde(skip_serializing_if = "Option::is_none")]
    trace: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Location {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    physical_location: Option<PhysicalLocation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<Text>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PhysicalLocation {
    artifact_location: ArtifactLocation,
    #[serde(skip_serializing_if = "Option::is_none")]
    region: Option<Region>,
}

#[derive(Serialize)]
struct ArtifactLocation {
    uri: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Region {
    start_line: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_column: Option<u64>,
}

/// Splits a source location `file:line:col` (or `file:line`, or `file`) into its parts; a part
/// that is missing, not a number, or zero is `None`.
pub(crate) fn parse_at(at: &str) -> (&str, Option<u64>, Option<u64>) {
    fn split_number(s: &str) -> Option<(&str, u64)> {
        let (head, tail) = s.rsplit_once(':')?;
        if tail.is_empty() || !tail.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some((head, tail.parse().ok()?))
    }
    let nonzero = |n: u64| (n > 0).then_some(n);
    match split_number(at) {
        Some((rest, last)) => match split_number(rest) {
            Some((file, line)) => (file, nonzero(line), nonzero(last)),
            None => (rest, nonzero(last), None),
        },
        None => (at, None, None),
    }
}

/// Where a site is: its source location if known, else the trace file at the trace line.
fn physical(at: Option<&str>, line: u64, source: Option<&str>) -> Option<PhysicalLocation> {
    match (at, source) {
        (Some(at), _) => {
            let (file, line, column) = parse_at(at);
            Some(PhysicalLocation {
                artifact_location: ArtifactLocation {
                    uri: file.replace('\\', "/"),
                },
                region: line.map(|start_line| Region {
                    start_line,
                    start_column: column,
                }),
            })
        }
        (None, Some(source)) => Some(PhysicalLocation {
            artifact_location: ArtifactLocation {
                uri: source.replace('\\', "/"),
            },
            region: (line > 0).then_some(Region {
                start_line: line,
                start_column: None,
            }),
        }),
        (None, None) => None,
    }
}

fn race_rule_index(kind: RaceKind) -> usize {
    RACE_KINDS
        .iter()
        .position(|&k| k == kind)
        .expect("RACE_KINDS lists every kind")
}

fn warning_rule_index(kind: WarningKind) -> usize {
    RACE_KINDS.len()
        + WARNING_KINDS
            .iter()
            .position(|&k| k == kind)
            .expect("WARNING_KINDS lists every kind")
}

fn race_description(kind: RaceKind) -> &'static str {
    match kind {
        RaceKind::ReadAfterWrite => "A read not ordered after the last write to the same bytes.",
        RaceKind::WriteAfterRead => "A write not ordered after an earlier read of the same bytes.",
        RaceKind::WriteAfterWrite => "A write not ordered after the last write to the same bytes.",
        RaceKind::FreeWhileInUse => "A free not ordered after an earlier use of the buffer.",
        RaceKind::UseAfterFree => "An access to a buffer after it was freed.",
    }
}

fn warning_description(kind: WarningKind) -> &'static str {
    match kind {
        WarningKind::UnrecordedEvent => {
            "A wait on, sync of or query of an event that was never recorded: it orders nothing."
        }
        WarningKind::ForeignPerThreadStream => {
            "A per-thread default stream used by a host thread other than its owner."
        }
        WarningKind::HostAccessToDevice => {
            "A host access to device memory, which the host cannot touch."
        }
        WarningKind::Leak => "A buffer still allocated at the end of the trace.",
        WarningKind::CachingFreeInUse => {
            "A caching block freed while another stream may still use it, with no record_stream: \
             the next block on these bytes would race with that use."
        }
        WarningKind::NotChecked => {
            "Something the recording of the run could not see (streamsan run): not checked."
        }
        WarningKind::ForgottenBuffer => {
            "A use of a buffer freed so long before that its state was no longer kept: a use \
             after free that was not checked."
        }
        WarningKind::Skipped => {
            "A record the engine skipped (an unknown op of a newer minor trace version)."
        }
    }
}

fn rules() -> Vec<Rule> {
    let races = RACE_KINDS.iter().map(|&kind| Rule {
        id: kind.as_str(),
        short_description: Text {
            text: race_description(kind).to_string(),
        },
        default_configuration: Configuration { level: "error" },
    });
    let warnings = WARNING_KINDS.iter().map(|&kind| Rule {
        id: kind.as_str(),
        short_description: Text {
            text: warning_description(kind).to_string(),
        },
        default_configuration: Configuration {
            level: warning_level(kind),
        },
    });
    races.chain(warnings).collect()
}

/// A limitation of the recording is a note (it is no finding about the program); every other
/// warning is a warning.
fn warning_level(kind: WarningKind) -> &'static str {
    if kind == WarningKind::NotChecked {
        "note"
    } else {
        "warning"
    }
}

fn warning_result(warning: &Warning, source: Option<&str>) -> SarifResult {
    SarifResult {
        rule_id: warning.kind().as_str(),
        rule_index: warning_rule_index(warning.kind()),
        level: warning_level(warning.kind()),
        message: Text {
            text: format!("line {}: {}", warning.line, super::warning_message(warning)),
        },
        locations: physical(None, warning.line, source)
            .map(|p| Location {
                id: None,
                physical_location: Some(p),
                message: None,
            })
            .into_iter()
            .collect(),
        related_locations: Vec::new(),
        properties: None,
    }
}

/// Renders the report as SARIF 2.1.0 (pretty-printed JSON, ending with a newline).
/// `opts.max_reports` limits the race results; warnings are all included.
pub fn render_sarif(report: &Report, opts: &RenderOptions) -> String {
    render_sarif_log(sarif_results(report, opts, None))
}

/// The results of one report: its races (as many as `opts.max_reports` allows), then its
/// warnings. With `trace`, each result names the trace it came from (`properties.trace`), so
/// one log can hold the results of several traces.
pub fn sarif_results(
    report: &Report,
    opts: &RenderOptions,
    trace: Option<&str>,
) -> Vec<SarifResult> {
    let source = opts.source.as_deref();
    let mut results: Vec<SarifResult> = opts
        .shown(report)
        .iter()
        .map(|folded| {
            let race = &folded.race;
            let cur = &race.current;
            let prev = &race.previous;
            let buffer = &race.buffer;
            SarifResult {
                rule_id: race.kind.as_str(),
                rule_index: race_rule_index(race.kind),
                level: "error",
                message: Text {
                    text: format!("{}: {}", headline(race), why(race)),
                },
                locations: vec![Location {
                    id: None,
                    physical_location: physical(cur.at.as_deref(), cur.line, source),
                    message: Some(Text {
                        text: describe_site(cur),
                    }),
                }],
                related_locations: vec![
                    Location {
                        id: Some(1),
                        physical_location: physical(prev.at.as_deref(), prev.line, source),
                        message: Some(Text {
                            text: format!("previous {}", describe_site(prev)),
                        }),
                    },
                    Location {
                        id: Some(2),
                        physical_location: physical(
                            buffer.alloc_at.as_deref(),
                            buffer.alloc_line,
                            source,
                        ),
                        message: Some(Text {
                            text: format!("allocated at {}", allocation(buffer)),
                        }),
                    },
                ],
                properties: Some(Properties {
                    occurrences: Some(folded.occurrences),
                    fix: Some(fix_hint_for(race, opts.api)),
                    trace: trace.map(str::to_string),
                }),
            }
        })
        .collect();
    results.extend(report.warnings.iter().map(|w| {
        let mut result = warning_result(w, source);
        result.properties = trace.map(|t| Properties {
            occurrences: None,
            fix: None,
            trace: Some(t.to_string()),
        });
        result
    }));
    results
}

/// One SARIF 2.1.0 log with one run (the streamsan driver and its rules) holding `results`,
/// pretty-printed, ending with a newline. One run per tool is what code-scanning uploads
/// expect; the rule list is the same whatever the results, so `ruleIndex` stays valid.
pub fn render_sarif_log(results: Vec<SarifResult>) -> String {
    let sarif = Sarif {
        schema: SCHEMA,
        version: "2.1.0",
        runs: vec![Run {
            tool: Tool {
                driver: Driver {
                    name: "streamsan",
                    version: env!("CARGO_PKG_VERSION"),
                    rules: rules(),
                },
            },
            results,
        }],
    };
    let mut out = serde_json::to_string_pretty(&sarif)
        .expect("serializing plain structs of strings and numbers cannot fail");
    out.push('\n');
    out
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
        for race in [
            stream_stream_never_synced(),
            stream_stream_never_synced(),
            host_host(),
        ] {
            c.add(Finding::Race(Box::new(race)));
        }
        c.add(Finding::Warning(unrecorded_event_warning()));
        c.finish(&stats())
    }

    fn sarif(source: Option<&str>, max_reports: Option<usize>) -> Value {
        let opts = RenderOptions {
            source: source.map(str::to_string),
            max_reports,
            ..RenderOptions::default()
        };
        serde_json::from_str(&render_sarif(&report(), &opts)).unwrap()
    }

    #[test]
    fn parses_source_locations_with_missing_parts() {
        assert_eq!(parse_at("src/a.rs:31:5"), ("src/a.rs", Some(31), Some(5)));
        assert_eq!(parse_at("src/a.rs:31"), ("src/a.rs", Some(31), None));
        assert_eq!(parse_at("src/a.rs"), ("src/a.rs", None, None));
        assert_eq!(
            parse_at("C:\\x\\a.rs:3:4"),
            ("C:\\x\\a.rs", Some(3), Some(4))
        );
        assert_eq!(parse_at("a.rs:x:4"), ("a.rs:x", Some(4), None));
        assert_eq!(parse_at("a.rs:0:0"), ("a.rs", None, None));
        assert_eq!(parse_at("a.rs:"), ("a.rs:", None, None));
    }

    #[test]
    fn sarif_has_the_required_structure() {
        let v = sarif(Some("traces/t.jsonl"), None);
        assert_eq!(v["$schema"], SCHEMA);
        assert_eq!(v["version"], "2.1.0");
        let runs = v["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1);
        let driver = &runs[0]["tool"]["driver"];
        assert_eq!(driver["name"], "streamsan");
        let rules = driver["rules"].as_array().unwrap();
        let ids: Vec<&str> = rules.iter().map(|r| r["id"].as_str().unwrap()).collect();
        assert_eq!(
            ids,
            [
                "read-after-write",
                "write-after-read",
                "write-after-write",
                "free-while-in-use",
                "use-after-free",
                "unrecorded-event",
                "foreign-per-thread-stream",
                "host-access-to-device",
                "leak",
                "skipped-record",
                "caching-free-in-use",
                "not-checked",
                "forgotten-buffer"
            ]
        );
        for rule in rules {
            assert!(rule["shortDescription"]["text"].is_string());
        }
        let results = runs[0]["results"].as_array().unwrap();
        // Two folded races and one warning.
        assert_eq!(results.len(), 3);
        for result in results {
            let rule_id = result["ruleId"].as_str().unwrap();
            let index = result["ruleIndex"].as_u64().unwrap() as usize;
            assert_eq!(rules[index]["id"], rule_id);
            assert!(result["message"]["text"].is_string());
            assert!(["error", "warning"].contains(&result["level"].as_str().unwrap()));
            for loc in result["locations"].as_array().unwrap() {
                let phys = &loc["physicalLocation"];
                assert!(phys["artifactLocation"]["uri"].is_string());
                assert!(phys["region"]["startLine"].as_u64().unwrap() >= 1);
            }
        }
    }

    #[test]
    fn race_result_points_at_the_current_access_with_related_locations() {
        let v = sarif(Some("traces/t.jsonl"), None);
        let r = &v["runs"][0]["results"][0];
        assert_eq!(r["ruleId"], "read-after-write");
        assert_eq!(r["level"], "error");
        let race = stream_stream_never_synced();
        assert_eq!(
            r["message"]["text"],
            format!(
                "read-after-write on buffer b1 \"x\" bytes [0, 4096): {}",
                why(&race)
            )
        );
        assert_eq!(
            r["locations"][0]["physicalLocation"],
            json!({"artifactLocation": {"uri": "examples/sum.rs"},
                   "region": {"startLine": 31, "startColumn": 5}})
        );
        let related = r["relatedLocations"].as_array().unwrap();
        assert_eq!(related.len(), 2);
        assert_eq!(related[0]["id"], 1);
        assert_eq!(
            related[0]["physicalLocation"]["region"],
            json!({"startLine": 30, "startColumn": 5})
        );
        assert!(
            related[0]["message"]["text"]
                .as_str()
                .unwrap()
                .starts_with("previous write by launch \"randn\"")
        );
        assert_eq!(related[1]["id"], 2);
        assert_eq!(
            related[1]["physicalLocation"]["region"],
            json!({"startLine": 20, "startColumn": 5})
        );
        assert_eq!(r["properties"]["occurrences"], 2);
        assert_eq!(r["properties"]["fix"], fix_hint(&race));
    }

    /// A limitation of `streamsan run`'s recording is a note, not a warning about the program.
    #[test]
    fn not_checked_is_a_note() {
        let w = Warning {
            line: 1,
            fact: crate::engine::WarningFact::NotChecked {
                what: "host code is not seen".into(),
            },
        };
        let r = warning_result(&w, Some("t.jsonl"));
        assert_eq!((r.rule_id, r.level), ("not-checked", "note"));
        let rules = rules();
        let rule = rules.iter().find(|r| r.id == "not-checked").unwrap();
        assert_eq!(rule.default_configuration.level, "note");
    }

    #[test]
    fn sites_without_source_location_point_into_the_trace_file() {
        let v = sarif(Some("traces/t.jsonl"), None);
        let r = &v["runs"][0]["results"][1];
        assert_eq!(r["ruleId"], "read-after-write");
        assert_eq!(
            r["locations"][0]["physicalLocation"],
            json!({"artifactLocation": {"uri": "traces/t.jsonl"}, "region": {"startLine": 20}})
        );
        assert_eq!(
            r["relatedLocations"][0]["physicalLocation"]["region"],
            json!({"startLine": 18})
        );
        // The pinned buffer has no alloc `at`: its trace line.
        assert_eq!(
            r["relatedLocations"][1]["physicalLocation"]["region"],
            json!({"startLine": 4})
        );

        let w = &v["runs"][0]["results"][2];
        assert_eq!(w["ruleId"], "unrecorded-event");
        assert_eq!(w["level"], "warning");
        assert_eq!(
            w["locations"][0]["physicalLocation"],
            json!({"artifactLocation": {"uri": "traces/t.jsonl"}, "region": {"startLine": 7}})
        );
    }

    #[test]
    fn without_any_location_a_result_keeps_only_messages() {
        let v = sarif(None, None);
        let r = &v["runs"][0]["results"][1];
        assert!(r["locations"][0].get("physicalLocation").is_none());
        assert!(r["locations"][0]["message"]["text"].is_string());
        let w = &v["runs"][0]["results"][2];
        assert!(w.get("locations").is_none());
    }

    #[test]
    fn max_reports_limits_race_results_only() {
        let v = sarif(None, Some(1));
        let results = v["runs"][0]["results"].as_array().unwrap();
        let levels: Vec<&str> = results
            .iter()
            .map(|r| r["level"].as_str().unwrap())
            .collect();
        assert_eq!(levels, ["error", "warning"]);
    }
}
