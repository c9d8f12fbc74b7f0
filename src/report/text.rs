//! The text report, for people. Layout after ThreadSanitizer's: per race a headline, the
//! current access, the previous access, why nothing orders them, where the memory came from,
//! and a fix; then the warnings and a one-line SUMMARY, and the command that reproduces it.
//!
//! ```text
//! RACE read-after-write on buffer b1 "x" bytes [0, 4096) (3 occurrences)
//!   read by launch "sum" (arg "x") on stream s1 "side" (created, non-blocking), thread 0, at examples/sum.rs:31:5, trace line 9
//!   previous write by launch "randn" (arg "out") on stream s0 (legacy default), thread 0, at examples/sum.rs:30:5, trace line 5
//!   why: stream s1 never synchronized with stream s0: ...
//!   allocated at examples/sum.rs:20:5 (trace line 3): 4096 bytes of device memory on device 0
//!   fix: record an event on s0 after its write (line 5) and make s1 wait on it ...
//!
//! warning[unrecorded-event] line 7: ...
//!
//! SUMMARY: 1 race (read-after-write on b1 "x", 3 occurrences), 1 warning in 12 records, 2 streams, 3 buffers
//! reproduce: streamsan check trace.jsonl
//! ```

use std::fmt::Write as _;

use super::hints::{fix_hint_for, why};
use super::names::{
    RACE_KINDS, allocation, buffer_label, count, describe_site, headline, reuse_line,
};
use super::{
    Api, FoldedRace, MAX_STORED_RACES, MAX_STORED_WARNINGS, RenderOptions, Report, warning_message,
};
use crate::engine::finding::Warning;

/// Renders the report as text; ends with a newline. Deterministic: the same report gives the
/// same bytes.
pub fn render_text(report: &Report, opts: &RenderOptions) -> String {
    let mut out = String::new();
    let shown = opts.shown(report);
    for (i, folded) in shown.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&race_block(folded, opts.api));
    }
    let hidden = report.races.len() - shown.len();
    if hidden > 0 {
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "... {} not shown (at most {} rendered)",
            count(hidden as u64, "more race", "more races"),
            shown.len()
        );
    }

    let races_not_stored = report.races_not_stored();
    if races_not_stored > 0 {
        if !out.is_empty() {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "... {} not stored (at most {MAX_STORED_RACES} are kept; the summary counts all)",
            count(races_not_stored, "more race", "more races")
        );
    }

    if !report.warnings.is_empty() || report.warnings_not_stored() > 0 {
        if !out.is_empty() {
            out.push('\n');
        }
        for warning in &report.warnings {
            out.push_str(&warning_line(warning));
        }
        let not_stored = report.warnings_not_stored();
        if not_stored > 0 {
            let _ = writeln!(
                out,
                "... {} not stored (at most {MAX_STORED_WARNINGS} are kept)",
                count(not_stored, "more warning", "more warnings")
            );
        }
    }

    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&closing(report, opts.source.as_deref()));
    out
}

/// One race block (headline, both sites, why, allocation, fix in `api`'s words), each line
/// ending in a newline.
pub fn race_block(folded: &FoldedRace, api: Api) -> String {
    let mut out = String::new();
    let race = &folded.race;
    let _ = write!(out, "RACE {}", headline(race));
    if folded.occurrences > 1 {
        let _ = write!(out, " ({} occurrences)", folded.occurrences);
    }
    out.push('\n');
    let _ = writeln!(out, "  {}", describe_site(&race.current));
    let _ = writeln!(out, "  previous {}", describe_site(&race.previous));
    let _ = writeln!(out, "  why: {}", why(race));
    let _ = writeln!(out, "  allocated at {}", allocation(&race.buffer));
    if let Some(reuse) = reuse_line(race) {
        let _ = writeln!(out, "  reused: {reuse}");
    }
    let _ = writeln!(out, "  fix: {}", fix_hint_for(race, api));
    out
}

/// One warning as its own line: `warning[leak] line 9: ...`.
pub fn warning_line(warning: &Warning) -> String {
    format!(
        "warning[{}] line {}: {}\n",
        warning.kind().as_str(),
        warning.line,
        warning_message(warning)
    )
}

/// The report's last lines: the `SUMMARY` line and, when there is something to reproduce and
/// the trace `source` is known, the `streamsan check` command that does.
pub fn closing(report: &Report, source: Option<&str>) -> String {
    let mut out = summary_line(report);
    out.push('\n');
    if let Some(source) = source
        && (report.summary.races > 0 || report.summary.warnings > 0)
    {
        // A path that starts with `-` would be taken for an option.
        let end_of_options = if source.starts_with('-') { "-- " } else { "" };
        let _ = writeln!(
            out,
            "reproduce: streamsan check {end_of_options}{}",
            shell_quote(source)
        );
    }
    out
}

/// `SUMMARY: 1 race (read-after-write on b1 "x") in 12 records, 2 streams, 3 buffers`.
fn summary_line(report: &Report) -> String {
    let s = &report.summary;
    let races = match report.races.as_slice() {
        [] if s.races == 0 => "no races".to_string(),
        [only] if s.races == 1 => {
            let mut what = format!(
                "1 race ({} on {}",
                only.race.kind.as_str(),
                buffer_label(&only.race.buffer)
            );
            if only.occurrences > 1 {
                let _ = write!(what, ", {} occurrences", only.occurrences);
            }
            what.push(')');
            what
        }
        races => {
            let by_kind: Vec<String> = RACE_KINDS
                .iter()
                .filter_map(|&kind| {
                    let n = races.iter().filter(|r| r.race.kind == kind).count();
                    (n > 0).then(|| format!("{n} {}", kind.as_str()))
                })
                .collect();
            let occurrences: u64 = races
                .iter()
                .fold(0u64, |sum, r| sum.saturating_add(r.occurrences));
            let mut what = count(s.races, "race", "races");
            if !by_kind.is_empty() {
                // Beyond the stored races only the count is known.
                let of = if report.races_not_stored() > 0 {
                    format!("the {} stored: ", races.len())
                } else {
                    String::new()
                };
                let _ = write!(what, " ({of}{}", by_kind.join(", "));
                if occurrences > races.len() as u64 {
                    let _ = write!(what, "; {occurrences} occurrences");
                }
                what.push(')');
            }
            what
        }
    };
    let warnings = if s.warnings > 0 {
        format!(", {}", count(s.warnings, "warning", "warnings"))
    } else {
        String::new()
    };
    let mut line = format!(
        "SUMMARY: {races}{warnings} in {}, {}, {}",
        count(s.records, "record", "records"),
        count(s.streams, "stream", "streams"),
        count(s.buffers, "buffer", "buffers")
    );
    // What suppressions and a baseline took out (crate::suppress), when they took anything.
    if let Some(f) = s.filtered {
        let parts: Vec<String> = [
            (f.suppressed, "suppressed race", "suppressed races"),
            (f.baselined, "baselined race", "baselined races"),
            (
                f.suppressed_warnings,
                "suppressed warning",
                "suppressed warnings",
            ),
        ]
        .into_iter()
        .filter(|(n, _, _)| *n > 0)
        .map(|(n, one, many)| count(n, one, many))
        .collect();
        if !parts.is_empty() {
            let _ = write!(line, "; not counted: {}", parts.join(", "));
        }
    }
    line
}

/// Quotes a path for a POSIX shell when it holds anything beyond plain path characters.
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:=@%".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Stats;
    use crate::engine::finding::{Finding, WarningFact};
    use crate::report::Collector;
    use crate::report::fixtures::*;

    fn report_of(races: Vec<crate::engine::finding::Race>, warnings: Vec<Warning>) -> Report {
        let mut c = Collector::new();
        for race in races {
            c.add(Finding::Race(Box::new(race)));
        }
        for warning in warnings {
            c.add(Finding::Warning(warning));
        }
        c.finish(&stats())
    }

    fn opts(source: Option<&str>, max_reports: Option<usize>) -> RenderOptions {
        RenderOptions {
            source: source.map(str::to_string),
            max_reports,
            ..RenderOptions::default()
        }
    }

    /// Several races (one folded three times), a warning, a source file.
    fn full_report() -> Report {
        let first = stream_stream_never_synced();
        let mut again = first.clone();
        again.current.line = 19;
        again.previous.line = 15;
        report_of(
            vec![
                first.clone(),
                host_reader_after_device_write(),
                again.clone(),
                again,
                free_while_in_use_host_free(),
                stream_ordered_alloc_on_other_stream(),
            ],
            vec![unrecorded_event_warning()],
        )
    }

    #[test]
    fn full_text_report() {
        let report = full_report();
        let text = render_text(&report, &opts(Some("traces/sum.jsonl"), None));
        insta::assert_snapshot!(text);

        // The verdict, independently of the snapshot.
        assert_eq!(text.matches("\nRACE ").count() + 1, 4, "{text}");
        assert!(text.starts_with(
            "RACE read-after-write on buffer b1 \"x\" bytes [0, 4096) (3 occurrences)\n"
        ));
        assert!(text.contains(
            "\n  previous write by launch \"randn\" (arg \"out\") on stream s0 (legacy default), \
             thread 0, at examples/sum.rs:30:5, trace line 5\n"
        ));
        assert!(text.contains("\nRACE free-while-in-use on buffer b1 \"x\" bytes [0, 4096)\n"));
        assert!(text.contains("\nwarning[unrecorded-event] line 7: "));
        assert!(text.contains(
            "\nSUMMARY: 4 races (3 read-after-write, 1 free-while-in-use; 6 occurrences), \
             1 warning in 12 records, 2 streams, 3 buffers\n"
        ));
        assert!(text.ends_with("\nreproduce: streamsan check traces/sum.jsonl\n"));
        // Raw trace ids and addresses stay out of the text report.
        assert!(!text.contains("100"), "{text}");
        assert!(!text.contains("0x7f"), "{text}");
    }

    #[test]
    fn blocks_are_in_the_documented_order() {
        let report = report_of(vec![stream_stream_never_synced()], vec![]);
        let text = render_text(&report, &opts(None, None));
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("RACE read-after-write on buffer b1 \"x\" bytes [0, 4096)"));
        assert!(lines[1].starts_with("  read by launch \"sum\" (arg \"x\") on stream s1 \"side\""));
        assert!(lines[2].starts_with("  previous write by launch \"randn\""));
        assert!(lines[3].starts_with("  why: stream s1 never synchronized with stream s0"));
        assert!(lines[4].starts_with("  allocated at examples/sum.rs:20:5 (trace line 3)"));
        assert!(lines[5].starts_with("  fix: record an event on s0"));
        assert_eq!(lines[6], "");
        assert_eq!(
            lines[7],
            "SUMMARY: 1 race (read-after-write on b1 \"x\") in 12 records, 2 streams, 3 buffers"
        );
        // No source, no replay line.
        assert_eq!(lines.len(), 8);
    }

    #[test]
    fn max_reports_limits_blocks_and_says_how_many_were_not_shown() {
        let report = full_report();
        let text = render_text(&report, &opts(None, Some(1)));
        assert_eq!(text.matches("RACE ").count(), 1, "{text}");
        assert!(text.contains("\n... 3 more races not shown (at most 1 rendered)\n"));
        // The summary still counts all.
        assert!(text.contains("SUMMARY: 4 races (3 read-after-write, 1 free-while-in-use;"));

        let none = render_text(&report, &opts(None, Some(0)));
        assert!(
            none.starts_with("... 4 more races not shown (at most 0 rendered)\n"),
            "{none}"
        );
        let all = render_text(&report, &opts(None, Some(10)));
        assert!(!all.contains("not shown"));
    }

    #[test]
    fn clean_report_is_a_short_no_races_summary() {
        let report = Collector::new().finish(&Stats {
            records: 1,
            streams: 1,
            buffers: 0,
            ..Stats::default()
        });
        assert_eq!(
            render_text(&report, &opts(Some("t.jsonl"), None)),
            "SUMMARY: no races in 1 record, 1 stream, 0 buffers\n"
        );
    }

    #[test]
    fn warnings_only_report_still_names_the_replay_command() {
        let report = report_of(vec![], vec![unrecorded_event_warning()]);
        let text = render_text(&report, &opts(Some("my trace.jsonl"), None));
        assert_eq!(
            text,
            "warning[unrecorded-event] line 7: a wait on event 3, which was never recorded, \
             orders nothing (record it with cudaEventRecord first)\n\
             \n\
             SUMMARY: no races, 1 warning in 12 records, 2 streams, 3 buffers\n\
             reproduce: streamsan check 'my trace.jsonl'\n"
        );
    }

    #[test]
    fn a_path_that_looks_like_an_option_is_replayed_after_the_end_of_options() {
        let report = report_of(vec![], vec![unrecorded_event_warning()]);
        let text = render_text(&report, &opts(Some("-x.jsonl"), None));
        assert!(
            text.ends_with("\nreproduce: streamsan check -- -x.jsonl\n"),
            "{text}"
        );
    }

    #[test]
    fn warnings_beyond_the_cap_are_counted() {
        let warnings = (0..MAX_STORED_WARNINGS as u64 + 2)
            .map(|line| Warning {
                line,
                fact: WarningFact::Leak {
                    first: vec![buffer_x()],
                    count: 1,
                },
            })
            .collect();
        let text = render_text(&report_of(vec![], warnings), &opts(None, None));
        assert!(text.contains("\n... 2 more warnings not stored (at most 1000 are kept)\n"));
        assert!(text.contains("SUMMARY: no races, 1002 warnings in"));
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("traces/a-b_c.jsonl"), "traces/a-b_c.jsonl");
        assert_eq!(shell_quote("it's here"), "'it'\\''s here'");
    }
}
