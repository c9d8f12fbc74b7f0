//! The suppressions and baseline of one run, as every front end applies them: `streamsan check`
//! over several traces, the online layer over a running program. Loading, the per-finding
//! decision, the two filtering steps, the tally of what each rule matched, and the closing
//! notes (unused suppressions, stale baseline entries) are here once, worded once.

use std::path::Path;

use super::{Baseline, FilterError, Filtered, Suppressions, apply};
use crate::engine::finding::Finding;
use crate::report::Report;

/// Suppressions (`--suppressions`, repeatable) and a baseline (`--baseline`), read before any
/// trace is checked.
#[derive(Debug)]
pub struct Filters {
    /// `None` when no suppressions file was given (an empty file counts as given: the report
    /// then carries filter counts).
    suppressions: Option<Suppressions>,
    baseline: Option<Baseline>,
}

/// What the rules of a [`Filters`] matched, summed over every report they filtered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Per suppression, the findings it matched.
    pub hits: Vec<u64>,
    /// Per baseline entry, the races it took out.
    pub baseline_hits: Vec<u64>,
}

impl Tally {
    /// Adds what one filtering step matched.
    pub fn add(&mut self, filtered: &Filtered) {
        add_into(&mut self.hits, &filtered.hits);
        add_into(&mut self.baseline_hits, &filtered.baseline_hits);
    }
}

fn add_into(total: &mut Vec<u64>, more: &[u64]) {
    if total.len() < more.len() {
        total.resize(more.len(), 0);
    }
    for (t, m) in total.iter_mut().zip(more) {
        *t += m;
    }
}

impl Filters {
    /// Reads every suppressions file (in order) and the baseline. `None` when neither is
    /// given. The first unreadable or malformed file is the error (it names file and line).
    pub fn load<P: AsRef<Path>>(
        suppressions: &[P],
        baseline: Option<&Path>,
    ) -> Result<Option<Filters>, FilterError> {
        if suppressions.is_empty() && baseline.is_none() {
            return Ok(None);
        }
        let mut all = Suppressions::new();
        for path in suppressions {
            all.extend(Suppressions::load(path)?);
        }
        Ok(Some(Filters {
            suppressions: (!suppressions.is_empty()).then_some(all),
            baseline: baseline.map(Baseline::load).transpose()?,
        }))
    }

    /// Filters made of already parsed parts.
    pub fn new(suppressions: Option<Suppressions>, baseline: Option<Baseline>) -> Filters {
        Filters {
            suppressions,
            baseline,
        }
    }

    /// The suppressions, if any were given.
    pub fn suppressions(&self) -> Option<&Suppressions> {
        self.suppressions.as_ref()
    }

    /// The baseline, if one was given.
    pub fn baseline(&self) -> Option<&Baseline> {
        self.baseline.as_ref()
    }

    /// True when [`Filters::apply`] would take `finding` out: for front ends that print
    /// findings one at a time, before any report exists.
    pub fn removes(&self, finding: &Finding) -> bool {
        let none = Suppressions::new();
        let suppressions = self.suppressions.as_ref().unwrap_or(&none);
        match finding {
            Finding::Race(race) => {
                super::removes_race(race, suppressions, self.baseline.as_ref()).is_some()
            }
            Finding::Warning(w) => super::removes_warning(w, suppressions).is_some(),
        }
    }

    /// The first step: what the suppressions take out. Without suppressions, the report as it
    /// is.
    pub fn suppress(&self, report: Report) -> Filtered {
        match &self.suppressions {
            Some(s) => apply(report, s, None),
            None => Filtered::unchanged(report),
        }
    }

    /// The second step: what the baseline takes out. Without a baseline, the report as it is.
    pub fn drop_baselined(&self, report: Report) -> Filtered {
        match &self.baseline {
            Some(b) => apply(report, &Suppressions::new(), Some(b)),
            None => Filtered::unchanged(report),
        }
    }

    /// Both steps, suppressions first; `tally` adds what they matched.
    pub fn apply(&self, report: Report, tally: &mut Tally) -> Report {
        let suppressed = self.suppress(report);
        tally.add(&suppressed);
        let baselined = self.drop_baselined(suppressed.report);
        tally.add(&baselined);
        baselined.report
    }

    /// `report` with optional filters applied, and what they matched (`None` without
    /// filters, when the report is left as it is): what an online session shows so far.
    pub fn apply_optional(filters: Option<&Filters>, report: Report) -> (Report, Option<Tally>) {
        match filters {
            Some(filters) => {
                let mut tally = Tally::default();
                let report = filters.apply(report, &mut tally);
                (report, Some(tally))
            }
            None => (report, None),
        }
    }

    /// The lines that close a run: each suppression that matched nothing (a warning: the race
    /// it was written for is gone, or the rule has a typo), and how many baseline entries
    /// matched nothing (a note). Empty when there is nothing to say.
    pub fn closing(&self, tally: &Tally) -> String {
        let mut out = String::new();
        if let Some(suppressions) = &self.suppressions {
            for unused in suppressions.unused(&tally.hits) {
                out.push_str(&format!(
                    "warning: {}: unused suppression `{}`: it matched no race or warning\n",
                    unused.location(),
                    unused.text
                ));
            }
        }
        if let Some(baseline) = &self.baseline {
            let matched = |i: usize| tally.baseline_hits.get(i).copied().unwrap_or(0) > 0;
            let stale = (0..baseline.len()).filter(|&i| !matched(i)).count();
            if stale > 0 {
                out.push_str(&format!(
                    "note: {}: {stale} of the {} baselined races no longer occur; \
                     --write-baseline writes a baseline of the races that do\n",
                    baseline.file(),
                    baseline.len()
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Stats;
    use crate::report::Collector;
    use crate::suppress::rules::tests::race;

    fn report() -> Report {
        let mut c = Collector::new();
        c.add(Finding::Race(Box::new(race())));
        c.finish(&Stats::default())
    }

    #[test]
    fn steps_tally_and_closing_notes() {
        let suppressions = Suppressions::parse("race:kernel=nothing\n", "t.supp").unwrap();
        let baseline = Baseline::from_report(&report(), "known.json");
        let filters = Filters::new(Some(suppressions), Some(baseline));
        let mut tally = Tally::default();
        let left = filters.apply(report(), &mut tally);
        assert!(!left.has_races());
        assert_eq!(tally.hits, [0]);
        assert_eq!(tally.baseline_hits, [1]);
        assert!(filters.removes(&Finding::Race(Box::new(race()))));
        assert_eq!(
            filters.closing(&tally),
            "warning: t.supp:1: unused suppression `race:kernel=nothing`: it matched no race \
             or warning\n"
        );
        let empty = Collector::new().finish(&Stats::default());
        let mut fresh = Tally::default();
        filters.apply(empty, &mut fresh);
        assert!(
            filters
                .closing(&fresh)
                .ends_with("note: known.json: 1 of the 1 baselined races no longer occur; --write-baseline writes a baseline of the races that do\n")
        );
    }

    #[test]
    fn nothing_given_is_no_filters_and_a_missing_step_changes_nothing() {
        assert!(Filters::load::<&str>(&[], None).unwrap().is_none());
        let filters = Filters::new(None, None);
        let f = filters.suppress(report());
        assert_eq!(f.report, report());
        assert!(f.hits.is_empty());
    }
}
