//! Folding findings as they stream in.
//!
//! A loop that races once per iteration makes the same race thousands of times; a report shows
//! it once, with a count. Two races fold when they have the same [`RaceKey`]: what the code did,
//! not when. The first occurrence is kept as the representative.

use rustc_hash::FxHashMap;

use super::fold::RaceKey;
use super::{FoldedRace, Report, Summary};
use crate::engine::Stats;
use crate::engine::finding::{Finding, Race, Warning};

/// At most this many warnings are stored; the rest are only counted.
pub const MAX_STORED_WARNINGS: usize = 1000;

/// At most this many distinct (folded) races are stored with their details; the rest are only
/// counted, by a 128-bit fingerprint of their fold key (about 32 bytes each instead of a few
/// kilobytes), so a trace that races on ever-new buffers keeps its memory small and its
/// count exact.
pub const MAX_STORED_RACES: usize = 10_000;

/// Marks a fingerprint whose race was counted but not stored.
const NOT_STORED: u32 = u32::MAX;

/// Folds findings as they stream in; memory is bounded by at most [`MAX_STORED_RACES`] folded
/// races and [`MAX_STORED_WARNINGS`] warnings, plus a fingerprint per distinct race.
///
/// ```
/// # use streamsan::report::Collector;
/// # use streamsan::engine::{Finding, Stats, Warning, WarningFact};
/// let mut collector = Collector::new();
/// // In a run: engine.apply(&record, &mut |finding| collector.add(finding))?;
/// collector.add(Finding::Warning(Warning {
///     line: 9,
///     fact: WarningFact::Leak { first: Vec::new(), count: 1 },
/// }));
/// let report = collector.finish(&Stats::default());
/// assert!(!report.has_races());
/// assert_eq!(report.summary.warnings, 1);
/// ```
#[derive(Debug, Default)]
pub struct Collector {
    /// Fingerprint of the fold key -> index into `races` (or [`NOT_STORED`]). Only looked up,
    /// never iterated: order comes from `races`.
    index: FxHashMap<u128, u32>,
    races: Vec<FoldedRace>,
    warnings: Vec<Warning>,
    warnings_seen: u64,
}

impl Collector {
    /// An empty collector.
    pub fn new() -> Self {
        Collector::default()
    }

    /// Takes one finding, in the order the engine made it.
    pub fn add(&mut self, finding: Finding) {
        self.fold(finding);
    }

    /// [`Collector::add`], telling whether the finding is a race that opened a new folded entry
    /// (its first occurrence), so a caller printing races as they are found prints each entry
    /// once.
    pub fn fold(&mut self, finding: Finding) -> bool {
        match finding {
            Finding::Race(race) => self.add_race(*race),
            Finding::Warning(warning) => {
                self.warnings_seen = self.warnings_seen.saturating_add(1);
                if self.warnings.len() < MAX_STORED_WARNINGS {
                    self.warnings.push(warning);
                }
                false
            }
        }
    }

    fn add_race(&mut self, race: Race) -> bool {
        use std::collections::hash_map::Entry;
        match self.index.entry(RaceKey::of(&race).fingerprint()) {
            Entry::Occupied(e) => {
                if let Some(folded) = self.races.get_mut(*e.get() as usize) {
                    folded.occurrences = folded.occurrences.saturating_add(1);
                }
                false
            }
            Entry::Vacant(e) => {
                if self.races.len() < MAX_STORED_RACES {
                    e.insert(self.races.len() as u32);
                    self.races.push(FoldedRace {
                        race,
                        occurrences: 1,
                    });
                } else {
                    e.insert(NOT_STORED);
                }
                true
            }
        }
    }

    /// The report: folded races in order of first occurrence, the stored warnings, and the
    /// summary counts (records, streams and buffers from `stats`).
    pub fn finish(self, stats: &Stats) -> Report {
        Report {
            summary: self.summary(stats),
            races: self.races,
            warnings: self.warnings,
        }
    }

    /// The report so far, leaving the collector as it is (a running program asks for it more
    /// than once).
    pub fn report(&self, stats: &Stats) -> Report {
        Report {
            summary: self.summary(stats),
            races: self.races.clone(),
            warnings: self.warnings.clone(),
        }
    }

    fn summary(&self, stats: &Stats) -> Summary {
        Summary {
            records: stats.records,
            races: self.index.len() as u64,
            warnings: self.warnings_seen,
            streams: stats.streams,
            buffers: stats.buffers,
            filtered: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::finding::{AccessKind, RaceKind};
    use crate::report::fixtures::*;

    fn race_finding(race: Race) -> Finding {
        Finding::Race(Box::new(race))
    }

    #[test]
    fn repeats_of_a_site_pair_fold_with_a_count_in_first_occurrence_order() {
        let mut c = Collector::new();
        let a = stream_stream_never_synced();
        let mut a2 = a.clone();
        a2.current.line += 10;
        a2.previous.line += 10;
        a2.range = (0, 16);
        let b = use_after_free();
        assert!(
            c.fold(race_finding(a.clone())),
            "a first occurrence opens an entry"
        );
        assert!(c.fold(race_finding(b.clone())));
        assert!(!c.fold(race_finding(a2)), "a repeat does not");
        assert!(!c.fold(race_finding(a.clone())));
        assert_eq!(c.report(&stats()).races, c.report(&stats()).races);
        let report = c.finish(&stats());
        assert_eq!(report.races.len(), 2);
        assert_eq!(report.summary.races, 2);
        // The first occurrence is the representative, and order is by first occurrence.
        assert_eq!(report.races[0].race, a);
        assert_eq!(report.races[0].occurrences, 3);
        assert_eq!(report.races[1].race, b);
        assert_eq!(report.races[1].occurrences, 1);
    }

    #[test]
    fn sites_without_source_locations_still_fold() {
        let mut a = stream_stream_never_synced();
        a.current.at = None;
        a.previous.at = None;
        let mut again = a.clone();
        again.current.line = 90;
        again.previous.line = 80;
        let mut c = Collector::new();
        c.add(race_finding(a));
        c.add(race_finding(again));
        let report = c.finish(&stats());
        assert_eq!(report.races.len(), 1);
        assert_eq!(report.races[0].occurrences, 2);
    }

    #[test]
    fn a_different_source_location_is_a_different_site() {
        let a = stream_stream_never_synced();
        let mut b = a.clone();
        b.current.at = Some("examples/sum.rs:40:5".into());
        // With `at` on one side and not the other, the keys differ too.
        let mut c_ = a.clone();
        c_.current.at = None;
        let mut c = Collector::new();
        for r in [a, b, c_] {
            c.add(race_finding(r));
        }
        let report = c.finish(&stats());
        assert_eq!(report.races.len(), 3);
        assert!(report.races.iter().all(|r| r.occurrences == 1));
    }

    #[test]
    fn every_part_of_the_key_separates() {
        let base = stream_stream_never_synced();
        let mut variants = vec![base.clone()];
        let mut v = base.clone();
        v.kind = RaceKind::WriteAfterWrite;
        variants.push(v);
        let mut v = base.clone();
        v.current.arg = Some("y".into());
        variants.push(v);
        let mut v = base.clone();
        v.current.name = Some("mean".into());
        variants.push(v);
        let mut v = base.clone();
        v.previous.access = AccessKind::Read;
        variants.push(v);
        let mut v = base.clone();
        v.current.stream = Some(stream_created_blocking());
        variants.push(v);
        let mut v = base.clone();
        v.current.stream = None;
        variants.push(v);
        let mut v = base.clone();
        v.previous.op = crate::trace::record::OpKind::Memcpy;
        variants.push(v);
        let mut v = base.clone();
        v.buffer.name = Some("y".into());
        variants.push(v);
        let n = variants.len();
        let mut c = Collector::new();
        for v in variants {
            c.add(race_finding(v));
        }
        assert_eq!(c.finish(&stats()).races.len(), n);
    }

    #[test]
    fn buffers_fold_by_name_or_else_by_trace_id() {
        // A named buffer allocated afresh (new ordinal, new id) folds by its name.
        let a = stream_stream_never_synced();
        let mut again = a.clone();
        again.buffer.ordinal = 7;
        again.buffer.id = 77;
        // Unnamed buffers fold only with the same trace id (a reused id folds).
        let mut unnamed = a.clone();
        unnamed.buffer.name = None;
        let mut unnamed_reused = unnamed.clone();
        unnamed_reused.buffer.ordinal = 8;
        let mut unnamed_other = unnamed.clone();
        unnamed_other.buffer.id = 88;
        let mut c = Collector::new();
        for r in [
            a,
            again,
            unnamed.clone(),
            unnamed,
            unnamed_reused,
            unnamed_other,
        ] {
            c.add(race_finding(r));
        }
        let report = c.finish(&stats());
        let counts: Vec<u64> = report.races.iter().map(|r| r.occurrences).collect();
        assert_eq!(counts, [2, 3, 1]);
    }

    #[test]
    fn host_sites_fold_across_threads_and_lines() {
        let a = host_reader_after_device_write();
        let mut b = a.clone();
        b.current.thread = 3;
        b.current.line = 99;
        let mut c = Collector::new();
        c.add(race_finding(a));
        c.add(race_finding(b));
        assert_eq!(c.finish(&stats()).races[0].occurrences, 2);
    }

    #[test]
    fn races_beyond_the_cap_are_counted_exactly_but_not_stored() {
        let mut c = Collector::new();
        let mut race = stream_stream_never_synced();
        race.buffer.name = None;
        let total = MAX_STORED_RACES as u64 + 7;
        for id in 0..total {
            race.buffer.id = id;
            assert!(c.fold(race_finding(race.clone())), "a new distinct race");
        }
        // Repeats fold, stored or not, and are not counted again.
        race.buffer.id = 0;
        assert!(!c.fold(race_finding(race.clone())));
        race.buffer.id = total - 1;
        assert!(!c.fold(race_finding(race.clone())));
        let report = c.finish(&stats());
        assert_eq!(report.races.len(), MAX_STORED_RACES);
        assert_eq!(report.summary.races, total);
        assert_eq!(report.races_not_stored(), 7);
        assert_eq!(report.races[0].occurrences, 2);
        let text = crate::report::render_text(&report, &Default::default());
        assert!(
            text.contains("... 7 more races not stored (at most 10000 are kept"),
            "{text}"
        );
        assert!(text.contains(&format!("SUMMARY: {total} races (the 10000 stored: ")));
    }

    #[test]
    fn warnings_are_kept_in_order_capped_and_all_counted() {
        let mut c = Collector::new();
        let total = MAX_STORED_WARNINGS as u64 + 5;
        for line in 0..total {
            c.add(Finding::Warning(Warning {
                line,
                fact: unrecorded_event_warning().fact,
            }));
        }
        let report = c.finish(&stats());
        assert_eq!(report.warnings.len(), MAX_STORED_WARNINGS);
        assert_eq!(report.summary.warnings, total);
        assert_eq!(report.warnings_not_stored(), 5);
        assert!(
            report
                .warnings
                .iter()
                .enumerate()
                .all(|(i, w)| w.line == i as u64)
        );
    }

    #[test]
    fn summary_takes_counts_from_stats_and_folded_races() {
        let mut c = Collector::new();
        c.add(race_finding(stream_stream_never_synced()));
        c.add(race_finding(stream_stream_never_synced()));
        c.add(Finding::Warning(unrecorded_event_warning()));
        let report = c.finish(&stats());
        assert_eq!(
            report.summary,
            Summary {
                records: 12,
                races: 1,
                warnings: 1,
                streams: 2,
                buffers: 3,
                filtered: None,
            }
        );
        assert!(report.has_races());
        assert!(!Collector::new().finish(&stats()).has_races());
    }
}
