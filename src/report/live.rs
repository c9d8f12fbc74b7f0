//! The report side of a program checked as it runs: every finding is folded by the
//! [`Collector`] (repeats of a pair of sites become one entry with a count), a race is printed as
//! a [`race_block`] the first time its pair of sites is seen, and the closing lines are
//! [`closing`] of the folded report. Nothing here prints: the caller says what these functions
//! return. The cudarc layer and the PyTorch front end's session ([`crate::live`]) both use it.

use super::{Api, Collector, FoldedRace, Report, closing, race_block, warning_line};
use crate::engine::{Finding, Stats};

/// The findings kept for the caller to list; the report counts all of them.
pub const MAX_KEPT_FINDINGS: usize = 10_000;
/// Warnings printed as they are found; the summary counts all of them.
pub const MAX_PRINTED_WARNINGS: u64 = 100;

/// What a sanitizer found so far.
#[derive(Debug, Default)]
pub struct LiveFindings {
    /// Whose calls the printed fix hints name.
    api: Api,
    /// The first [`MAX_KEPT_FINDINGS`], in the order found.
    kept: Vec<Finding>,
    collector: Collector,
    warnings_seen: u64,
}

impl LiveFindings {
    /// No findings yet; printed fix hints in `api`'s words.
    pub fn new(api: Api) -> LiveFindings {
        LiveFindings {
            api,
            ..LiveFindings::default()
        }
    }

    /// Takes a finding. With `render`, returns the text to print now: a race block the first
    /// time its pair of sites is seen (later occurrences are counted, not printed), a warning
    /// line for the first [`MAX_PRINTED_WARNINGS`] warnings. A `removed` finding (suppressed
    /// or baselined) is only folded, for the report's counts: not printed, not kept.
    pub fn add(&mut self, finding: Finding, render: bool, removed: bool) -> Option<String> {
        if removed {
            self.collector.add(finding);
            return None;
        }
        if self.kept.len() < MAX_KEPT_FINDINGS {
            self.kept.push(finding.clone());
        }
        let new_entry = self.collector.fold(finding.clone());
        match &finding {
            Finding::Race(race) => {
                let folded = FoldedRace {
                    race: (**race).clone(),
                    occurrences: 1,
                };
                // A blank line after each block, as between the blocks of a report.
                (render && new_entry).then(|| race_block(&folded, self.api) + "\n")
            }
            Finding::Warning(warning) => {
                self.warnings_seen += 1;
                match self.warnings_seen {
                    n if !render || n > MAX_PRINTED_WARNINGS + 1 => None,
                    n if n == MAX_PRINTED_WARNINGS + 1 => Some(format!(
                        "streamsan: more than {MAX_PRINTED_WARNINGS} warnings; the rest are \
                         only counted in the summary\n"
                    )),
                    _ => Some(warning_line(warning)),
                }
            }
        }
    }

    /// The findings kept, in the order found.
    pub fn kept(&self) -> &[Finding] {
        &self.kept
    }

    /// The folded report so far, summary counts from `stats`.
    pub fn report(&self, stats: &Stats) -> Report {
        self.collector.report(stats)
    }
}

/// The closing lines of a run whose findings were printed as found: the text report's
/// `SUMMARY` line (folded counts) and, when there is something to reproduce, the
/// `streamsan check` command for `trace`, or how to record one.
pub fn live_summary(report: &Report, trace: Option<&str>) -> String {
    let mut out = closing(report, trace);
    if trace.is_none() && report.has_races() {
        out.push_str(
            "streamsan: to replay this run offline, record a trace (STREAMSAN_OPTIONS=trace=run.jsonl) and run `streamsan check run.jsonl`\n",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{
        AccessKind, BufferInfo, Race, RaceKind, Site, StreamInfo, Unordered, Warning, WarningFact,
    };
    use crate::trace::record::{MemSpace, OpKind, Pool, StreamFlags, StreamKind};

    fn site(line: u64, stream: Option<u32>, access: AccessKind, at: &str) -> Site {
        Site {
            line,
            stream: stream.map(|ordinal| StreamInfo {
                id: u64::from(ordinal) + 10,
                ordinal,
                device: 0,
                kind: StreamKind::Created,
                flags: StreamFlags::NonBlocking,
                name: None,
            }),
            thread: 0,
            op: OpKind::Launch,
            name: Some("k".into()),
            access,
            arg: Some("x".into()),
            at: Some(at.into()),
            graph: None,
        }
    }

    fn race(line: u64) -> Race {
        Race {
            kind: RaceKind::ReadAfterWrite,
            buffer: BufferInfo {
                id: 1,
                ordinal: 1,
                name: Some("x".into()),
                bytes: 64,
                space: MemSpace::Device,
                device: 0,
                alloc_line: 3,
                alloc_at: Some("a.rs:1:1".into()),
                alloc_stream: None,
                addr: None,
                pool: Pool::Driver,
            },
            range: (0, 64),
            current: site(line + 1, Some(2), AccessKind::Read, "a.rs:9:5"),
            previous: site(line, Some(1), AccessKind::Write, "a.rs:7:5"),
            why: Unordered::NeverSynchronized,
            reused: None,
        }
    }

    fn warning(line: u64) -> Finding {
        Finding::Warning(Warning {
            line,
            fact: WarningFact::UnrecordedEvent {
                event: 1,
                call: OpKind::Wait,
                captured: None,
            },
        })
    }

    /// Variants of one race that fold, and that do not.
    fn variants() -> Vec<Race> {
        let base = race(7);
        let mut out = vec![base.clone(), race(20)];
        let mut v = base.clone();
        v.range = (0, 8);
        out.push(v);
        let mut v = base.clone();
        v.current.at = Some("a.rs:10:5".into());
        out.push(v);
        let mut v = base.clone();
        v.kind = RaceKind::WriteAfterWrite;
        out.push(v);
        let mut v = base.clone();
        v.previous.stream = None;
        out.push(v.clone());
        v.previous.thread = 4;
        out.push(v);
        let mut v = base.clone();
        v.buffer.name = None;
        out.push(v.clone());
        v.buffer.ordinal = 2;
        out.push(v.clone());
        v.buffer.id = 9;
        out.push(v);
        let mut v = base.clone();
        v.buffer.ordinal = 5;
        out.push(v);
        let mut v = base;
        v.current.arg = None;
        out.push(v);
        out
    }

    #[test]
    fn printing_follows_the_collector_s_folding() {
        let mut findings = LiveFindings::default();
        let mut printed = Vec::new();
        for r in variants().into_iter().chain(variants()) {
            if let Some(text) = findings.add(Finding::Race(Box::new(r.clone())), true, false) {
                printed.push((r, text));
            }
        }
        let report = findings.report(&Stats::default());
        // One block per folded entry, for its first occurrence, in the same order.
        assert_eq!(printed.len(), report.races.len());
        for ((r, text), folded) in printed.iter().zip(&report.races) {
            assert_eq!(*r, folded.race);
            assert!(text.starts_with("RACE "), "{text}");
        }
        let total: u64 = report.races.iter().map(|r| r.occurrences).sum();
        assert_eq!(total, 2 * variants().len() as u64);
    }

    #[test]
    fn the_report_can_be_taken_again_and_keeps_counting() {
        let mut findings = LiveFindings::default();
        let mut one_shot = Collector::new();
        let extra_warnings = crate::report::MAX_STORED_WARNINGS as u64 + 3;
        let mut add = |findings: &mut LiveFindings, f: Finding| {
            one_shot.add(f.clone());
            findings.add(f, false, false);
        };
        for r in variants() {
            add(&mut findings, Finding::Race(Box::new(r)));
        }
        let first = findings.report(&Stats::default());
        for r in variants().into_iter().rev() {
            add(&mut findings, Finding::Race(Box::new(r)));
        }
        let mut new = race(30);
        new.kind = RaceKind::UseAfterFree;
        add(&mut findings, Finding::Race(Box::new(new)));
        for line in 0..extra_warnings {
            add(&mut findings, warning(line));
        }
        let second = findings.report(&Stats::default());
        let third = findings.report(&Stats::default());
        let expected = one_shot.finish(&Stats::default());
        assert_eq!(second, expected);
        assert_eq!(third, expected);
        assert_ne!(first, expected);
        assert_eq!(expected.summary.warnings, extra_warnings);
        assert!(expected.races.iter().any(|r| r.occurrences == 2));
    }

    #[test]
    fn warnings_print_up_to_a_limit_and_are_all_counted() {
        let mut findings = LiveFindings::default();
        let printed = (0..MAX_PRINTED_WARNINGS + 10)
            .filter_map(|line| findings.add(warning(line), true, false))
            .collect::<Vec<_>>();
        assert_eq!(printed.len() as u64, MAX_PRINTED_WARNINGS + 1);
        assert!(printed.last().unwrap().contains("only counted"));
        let report = findings.report(&Stats::default());
        assert_eq!(report.summary.warnings, MAX_PRINTED_WARNINGS + 10);
    }

    #[test]
    fn summary_is_the_report_s_last_lines() {
        let mut findings = LiveFindings::default();
        findings.add(Finding::Race(Box::new(race(7))), false, false);
        findings.add(Finding::Race(Box::new(race(17))), false, false);
        findings.add(warning(2), false, false);
        let report = findings.report(&Stats {
            records: 40,
            streams: 3,
            buffers: 2,
            ..Stats::default()
        });
        assert_eq!(
            live_summary(&report, Some("t.jsonl")),
            "SUMMARY: 1 race (read-after-write on b1 \"x\", 2 occurrences), 1 warning in 40 \
             records, 3 streams, 2 buffers\nreproduce: streamsan check t.jsonl\n"
        );
        let without = live_summary(&report, None);
        assert!(without.starts_with("SUMMARY: 1 race"), "{without}");
        assert!(without.contains("record a trace"), "{without}");
        let clean = LiveFindings::default().report(&Stats::default());
        assert_eq!(
            live_summary(&clean, None),
            "SUMMARY: no races in 0 records, 0 streams, 0 buffers\n"
        );
    }
}
