//! Suppressions and baselines: adopting streamsan in a codebase that already has races.
//!
//! A codebase that turns streamsan on for the first time usually finds races it cannot fix
//! today. Two tools keep such known races from failing every run while still failing on new
//! ones, both applied to a finished [`Report`] (the engine is not involved):
//!
//! - **Suppressions** ([`Suppressions`]): a small line syntax, one rule per line, each a list of
//!   conditions on a race (kind, buffer, kernel, op, stream, source location; `*` globs) or on
//!   a warning (kind, message). A race or warning that some rule matches is taken out of the
//!   report, the verdict and the exit code. Rules that match nothing are worth reporting:
//!   the race they were written for is gone, or the rule has a typo ([`Filtered::unused`]).
//! - **Baselines** ([`Baseline`]): a previous JSON report (`streamsan check --format json`).
//!   A race whose [`RaceKey`](crate::report::RaceKey) (kind, buffer, and what each side did and
//!   where, never trace line numbers) is in the baseline is taken out; any other race still
//!   fails.
//!
//! [`Filters`] is what a front end holds: both, loaded from their files, applied to each
//! report, with the closing notes. [`apply`] is the step underneath: it does both,
//! suppressions first, and says what it took out; the counts go into
//! [`Summary::filtered`](crate::report::Summary::filtered), which the JSON report prints as
//! `suppressed`, `baselined` and `suppressed_warnings`. The user-facing specification,
//! including the exact matching rules, is `docs/suppressions.md`.
//!
//! ```
//! # use streamsan::suppress::{Suppressions, apply};
//! # let report = streamsan::report::Collector::new().finish(&Default::default());
//! let suppressions = Suppressions::parse("race:kernel=sum,stream=side\n", "known.supp")?;
//! let filtered = apply(report, &suppressions, None);
//! for unused in filtered.unused(&suppressions) {
//!     eprintln!("warning: {}: unused suppression `{}`", unused.location(), unused.text);
//! }
//! assert!(!filtered.report.has_races());
//! # Ok::<(), streamsan::suppress::FilterError>(())
//! ```
//!
//! Limits: only stored warnings can be suppressed (a report keeps at most
//! [`MAX_STORED_WARNINGS`](crate::report::MAX_STORED_WARNINGS); the rest are only counted).
//! A baseline names streams by their trace id, which the JSON report carries, so a recorder
//! that numbers streams differently from one run to the next defeats it; suppressions, which
//! can name streams, do not have this limit.

mod baseline;
mod error;
mod filters;
mod glob;
mod rules;

pub use baseline::Baseline;
pub use error::FilterError;
pub use filters::{Filters, Tally};
pub use rules::{Suppression, Suppressions, Target};

use crate::engine::finding::{Race, Warning};
use crate::report::{FilterCounts, FoldedRace, Report};

/// Why [`removes_race`] takes a race out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removed {
    /// The suppression at this index in [`Suppressions::entries`] (the first that matches).
    Suppressed(usize),
    /// The baseline entry at this index.
    Baselined(usize),
}

/// Whether [`apply`] would take `race` out, and why, decided for one race as it is found: for
/// checkers that print races one at a time (the online layer), before any report exists. The
/// same rules as [`apply`]: suppressions first, then the baseline.
pub fn removes_race(
    race: &Race,
    suppressions: &Suppressions,
    baseline: Option<&Baseline>,
) -> Option<Removed> {
    if let Some(i) = suppressions
        .entries()
        .iter()
        .position(|s| s.matches_race(race))
    {
        return Some(Removed::Suppressed(i));
    }
    baseline.and_then(|b| b.find(race)).map(Removed::Baselined)
}

/// The index of the first suppression that takes `warning` out, as [`apply`] decides it.
pub fn removes_warning(warning: &Warning, suppressions: &Suppressions) -> Option<usize> {
    suppressions
        .entries()
        .iter()
        .position(|s| s.matches_warning(warning))
}

/// A race a suppression took out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuppressedRace {
    pub race: FoldedRace,
    /// The index in [`Suppressions::entries`] of the first suppression that matched it.
    pub by: usize,
}

/// A warning a suppression took out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuppressedWarning {
    pub warning: Warning,
    /// The index in [`Suppressions::entries`] of the first suppression that matched it.
    pub by: usize,
}

/// A report with suppressions and a baseline applied, and what they took out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filtered {
    /// The report without the suppressed and baselined findings. `summary.races` and
    /// `summary.warnings` no longer count them; `summary.filtered` does.
    pub report: Report,
    /// Races a suppression matched, in report order.
    pub suppressed: Vec<SuppressedRace>,
    /// Warnings a suppression matched, in report order.
    pub suppressed_warnings: Vec<SuppressedWarning>,
    /// Races that no suppression matched and the baseline holds, in report order.
    pub baselined: Vec<FoldedRace>,
    /// For each suppression (in [`Suppressions::entries`] order), how many findings (distinct
    /// races and warnings) it matched. Every matching suppression counts, not only the first.
    /// Sum these over several reports to find the suppressions unused by all of them
    /// ([`Suppressions::unused`]).
    pub hits: Vec<u64>,
    /// For each baseline entry (`0..Baseline::len()`), how many races of this report it took
    /// out. Empty without a baseline.
    pub baseline_hits: Vec<u64>,
}

impl Filtered {
    /// A report nothing was applied to.
    pub fn unchanged(report: Report) -> Filtered {
        Filtered {
            report,
            suppressed: Vec::new(),
            suppressed_warnings: Vec::new(),
            baselined: Vec::new(),
            hits: Vec::new(),
            baseline_hits: Vec::new(),
        }
    }

    /// The suppressions that matched nothing in this report.
    pub fn unused<'s>(&self, suppressions: &'s Suppressions) -> Vec<&'s Suppression> {
        suppressions.unused(&self.hits)
    }

    /// How many baseline entries matched no race of this report (races fixed since, or changed
    /// beyond recognition).
    pub fn stale_baseline_entries(&self) -> usize {
        self.baseline_hits.iter().filter(|&&h| h == 0).count()
    }
}

/// Takes out of `report` every race and warning that a suppression matches, then every
/// remaining race the baseline holds; the rest stay in order. `report.summary.filtered` is set
/// (added to, when the report was filtered before), so renderers show the counts.
pub fn apply(report: Report, suppressions: &Suppressions, baseline: Option<&Baseline>) -> Filtered {
    let Report {
        races,
        warnings,
        mut summary,
    } = report;
    let entries = suppressions.entries();
    let mut hits = vec![0u64; entries.len()];
    let mut baseline_hits = vec![0u64; baseline.map_or(0, Baseline::len)];
    let mut first_match = |matches: &dyn Fn(&Suppression) -> bool| {
        let mut by = None;
        for (i, s) in entries.iter().enumerate() {
            if matches(s) {
                hits[i] += 1;
                by.get_or_insert(i);
            }
        }
        by
    };

    let (mut kept, mut suppressed, mut baselined) = (Vec::new(), Vec::new(), Vec::new());
    for folded in races {
        if let Some(by) = first_match(&|s| s.matches_race(&folded.race)) {
            suppressed.push(SuppressedRace { race: folded, by });
        } else if let Some(i) = baseline.and_then(|b| b.find(&folded.race)) {
            baseline_hits[i] += 1;
            baselined.push(folded);
        } else {
            kept.push(folded);
        }
    }
    let (mut kept_warnings, mut suppressed_warnings) = (Vec::new(), Vec::new());
    for warning in warnings {
        if let Some(by) = first_match(&|s| s.matches_warning(&warning)) {
            suppressed_warnings.push(SuppressedWarning { warning, by });
        } else {
            kept_warnings.push(warning);
        }
    }

    let removed = (suppressed.len() + baselined.len()) as u64;
    summary.races = summary.races.saturating_sub(removed);
    summary.warnings = summary
        .warnings
        .saturating_sub(suppressed_warnings.len() as u64);
    let counts = summary.filtered.get_or_insert_with(FilterCounts::default);
    counts.suppressed += suppressed.len() as u64;
    counts.baselined += baselined.len() as u64;
    counts.suppressed_warnings += suppressed_warnings.len() as u64;

    Filtered {
        report: Report {
            races: kept,
            warnings: kept_warnings,
            summary,
        },
        suppressed,
        suppressed_warnings,
        baselined,
        hits,
        baseline_hits,
    }
}

#[cfg(test)]
mod tests {
    use super::rules::tests::race;
    use super::*;
    use crate::engine::Stats;
    use crate::engine::finding::{Finding, Race, RaceKind, WarningFact};
    use crate::report::{Collector, RenderOptions, render_json, render_text};

    fn other_race() -> Race {
        let mut r = race();
        r.kind = RaceKind::WriteAfterWrite;
        r.current.name = Some("axpy".into());
        r.current.stream.as_mut().unwrap().name = Some("main".into());
        r
    }

    fn leak() -> Warning {
        let mut logits = crate::report::fixtures::buffer_x();
        logits.name = Some("logits".into());
        Warning {
            line: 12,
            fact: WarningFact::Leak {
                first: vec![logits],
                count: 1,
            },
        }
    }

    fn report() -> Report {
        let mut c = Collector::new();
        c.add(Finding::Race(Box::new(race())));
        c.add(Finding::Race(Box::new(race())));
        c.add(Finding::Race(Box::new(other_race())));
        c.add(Finding::Warning(leak()));
        c.finish(&Stats {
            records: 20,
            ..Stats::default()
        })
    }

    fn supp(text: &str) -> Suppressions {
        Suppressions::parse(text, "t.supp").unwrap()
    }

    #[test]
    fn suppressed_races_leave_report_verdict_and_counts() {
        let s = supp("race:kernel=sum,stream=side\n");
        let f = apply(report(), &s, None);
        assert_eq!(f.report.races.len(), 1);
        assert_eq!(f.report.races[0].race, other_race());
        assert_eq!(f.report.summary.races, 1);
        assert_eq!(f.report.summary.warnings, 1);
        assert_eq!(f.suppressed.len(), 1);
        assert_eq!(f.suppressed[0].race.occurrences, 2);
        assert_eq!(f.suppressed[0].by, 0);
        assert_eq!(f.hits, [1]);
        assert_eq!(
            f.report.summary.filtered,
            Some(FilterCounts {
                suppressed: 1,
                baselined: 0,
                suppressed_warnings: 0
            })
        );

        let all = supp("race:kind=*\nwarning:kind=leak\n");
        let f = apply(report(), &all, None);
        assert!(!f.report.has_races());
        assert!(f.report.warnings.is_empty());
        assert_eq!(f.report.summary.warnings, 0);
        assert_eq!(f.hits, [2, 1]);
        assert!(f.unused(&all).is_empty());
    }

    #[test]
    fn every_matching_suppression_is_used_and_the_first_is_credited() {
        let s = supp("race:kernel=nothing\nrace:buffer=logits\nrace:kind=read-after-write\n");
        let f = apply(report(), &s, None);
        assert_eq!(f.hits, [0, 2, 1]);
        assert_eq!(
            f.suppressed.iter().map(|r| r.by).collect::<Vec<_>>(),
            [1, 1]
        );
        let unused: Vec<u64> = f.unused(&s).iter().map(|u| u.line).collect();
        assert_eq!(unused, [1]);
    }

    #[test]
    fn baseline_takes_out_known_races_after_suppressions() {
        let baseline = Baseline::from_report(&report(), "known.json");
        let f = apply(report(), &Suppressions::new(), Some(&baseline));
        assert!(!f.report.has_races());
        assert_eq!(f.baselined.len(), 2);
        assert_eq!(f.baseline_hits, [1, 1]);
        assert_eq!(f.stale_baseline_entries(), 0);
        // Suppressions go first: a race both match counts as suppressed.
        let f = apply(report(), &supp("race:kernel=axpy"), Some(&baseline));
        assert_eq!((f.suppressed.len(), f.baselined.len()), (1, 1));
        assert_eq!(f.baseline_hits, [1, 0]);
        assert_eq!(f.stale_baseline_entries(), 1);
        assert_eq!(
            f.report.summary.filtered,
            Some(FilterCounts {
                suppressed: 1,
                baselined: 1,
                suppressed_warnings: 0
            })
        );
    }

    #[test]
    fn one_race_at_a_time_agrees_with_apply() {
        let baseline = Baseline::from_report(&report(), "known.json");
        let s = supp("race:kernel=axpy\nwarning:kind=leak\n");
        assert_eq!(
            removes_race(&other_race(), &s, Some(&baseline)),
            Some(Removed::Suppressed(0))
        );
        assert_eq!(
            removes_race(&race(), &s, Some(&baseline)),
            Some(Removed::Baselined(0))
        );
        assert_eq!(removes_race(&race(), &s, None), None);
        assert_eq!(removes_warning(&leak(), &s), Some(1));
        assert_eq!(removes_warning(&leak(), &Suppressions::new()), None);
    }

    #[test]
    fn a_new_race_beside_a_baselined_one_still_counts() {
        let mut c = Collector::new();
        c.add(Finding::Race(Box::new(race())));
        let baseline = Baseline::from_report(&c.finish(&Stats::default()), "known.json");
        let f = apply(report(), &Suppressions::new(), Some(&baseline));
        assert!(f.report.has_races());
        assert_eq!(f.report.races[0].race, other_race());
        assert_eq!(f.baselined.len(), 1);
    }

    #[test]
    fn applying_twice_adds_up_and_renderers_show_the_counts() {
        let f = apply(report(), &supp("race:kernel=axpy"), None);
        let baseline = Baseline::from_report(&report(), "known.json");
        let f = apply(f.report, &supp("warning:kind=leak"), Some(&baseline));
        let counts = f.report.summary.filtered.unwrap();
        assert_eq!(
            (
                counts.suppressed,
                counts.baselined,
                counts.suppressed_warnings
            ),
            (1, 1, 1)
        );
        let json: serde_json::Value =
            serde_json::from_str(&render_json(&f.report, &RenderOptions::default())).unwrap();
        assert_eq!(
            json["summary"],
            serde_json::json!({"records": 20, "races": 0, "warnings": 0, "streams": 0,
                "buffers": 0, "suppressed": 1, "baselined": 1, "suppressed_warnings": 1})
        );
        let text = render_text(&f.report, &RenderOptions::default());
        assert_eq!(
            text,
            "SUMMARY: no races in 20 records, 0 streams, 0 buffers; not counted: 1 suppressed \
             race, 1 baselined race, 1 suppressed warning\n"
        );
    }

    #[test]
    fn nothing_to_apply_changes_nothing_but_marks_the_summary() {
        let f = apply(report(), &Suppressions::new(), None);
        let mut expected = report();
        expected.summary.filtered = Some(FilterCounts::default());
        assert_eq!(f.report, expected);
        // Unfiltered reports keep their JSON shape: no filter keys.
        let json = render_json(&report(), &RenderOptions::default());
        assert!(!json.contains("suppressed"));
        // Filtered with nothing taken out: the keys are there, at 0; the text is unchanged.
        let json = render_json(&f.report, &RenderOptions::default());
        assert!(json.contains("\"suppressed\": 0"));
        assert_eq!(
            render_text(&f.report, &RenderOptions::default()),
            render_text(&report(), &RenderOptions::default())
        );
    }
}
