//! Turning engine findings into reports: text for people, JSON for tools, SARIF for
//! code-scanning dashboards.
//!
//! The pipeline has two steps, kept apart as in ThreadSanitizer's `tsan_report` (report data as
//! plain structs, printing with no logic of its own beyond layout):
//!
//! 1. A [`Collector`] takes [`Finding`]s as the engine emits them and folds repeats of the same
//!    pair of sites into one [`FoldedRace`] with a count, so its memory grows with the number of
//!    distinct site pairs, not with the length of the trace. [`Collector::finish`] yields a
//!    [`Report`].
//! 2. A renderer turns the report into a string: [`render_text`], [`render_json`],
//!    [`render_sarif`]. All three are deterministic: no hash-map order, pids or timestamps, so
//!    snapshots of reports are stable.
//!
//! [`why`] and [`fix_hint`] are the two sentences that make a report actionable: which ordering
//! edge is missing (stated in the terms of `docs/ordering-model.md`), and which concrete calls
//! add it. The text, JSON and SARIF renderers all use them.
//!
//! The wire formats are specified in `docs/report-format.md`.
//!
//! [`Finding`]: crate::engine::Finding

mod collect;
mod fold;
mod hints;
pub mod html;
mod json;
mod live;
mod names;
pub mod perfetto;
mod sarif;
mod text;
mod timeline;
mod warnings;

#[cfg(test)]
pub(crate) mod fixtures;

pub use collect::{Collector, MAX_STORED_RACES, MAX_STORED_WARNINGS};
pub use fold::RaceKey;
pub use hints::{fix_hint, fix_hint_for, why};
pub use json::{
    JSON_VERSION, JsonFiltered, JsonRace, JsonReport, JsonSite, JsonSummary, JsonWarning,
    render_json, render_json_line,
};
pub use live::{LiveFindings, MAX_KEPT_FINDINGS, MAX_PRINTED_WARNINGS, live_summary};
pub use sarif::{SarifResult, render_sarif, render_sarif_log, sarif_results};
pub use text::{closing, race_block, render_text, warning_line};
pub use warnings::warning_message;

use crate::engine::finding::{Race, Warning};

/// Everything a run found, folded, in the order it was first found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// One entry per distinct pair of sites, in order of first occurrence; at most
    /// [`MAX_STORED_RACES`] of them (`summary.races` counts all).
    pub races: Vec<FoldedRace>,
    /// The warnings, in the order found; at most [`MAX_STORED_WARNINGS`] of them
    /// (`summary.warnings` counts all).
    pub warnings: Vec<Warning>,
    pub summary: Summary,
}

impl Report {
    /// True when the report holds at least one race (`streamsan check` exits with 1).
    pub fn has_races(&self) -> bool {
        self.summary.races > 0
    }

    /// Distinct races counted but not stored (beyond [`MAX_STORED_RACES`]).
    pub fn races_not_stored(&self) -> u64 {
        self.summary.races.saturating_sub(self.races.len() as u64)
    }

    /// Warnings found but not stored (beyond [`MAX_STORED_WARNINGS`]).
    pub fn warnings_not_stored(&self) -> u64 {
        self.summary
            .warnings
            .saturating_sub(self.warnings.len() as u64)
    }
}

/// A race and how many times the same pair of sites raced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FoldedRace {
    /// The first occurrence.
    pub race: Race,
    /// How many findings folded into this one (at least 1).
    pub occurrences: u64,
}

/// Counts for the summary line and the JSON `summary` object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records applied.
    pub records: u64,
    /// Distinct races (folded entries), whether rendered or not.
    pub races: u64,
    /// All warnings, including those not stored.
    pub warnings: u64,
    /// Streams declared.
    pub streams: u64,
    /// Buffers allocated.
    pub buffers: u64,
    /// What suppressions and a baseline took out of the report ([`crate::suppress`]);
    /// `None` when none were applied. `races` and `warnings` above do not count these.
    pub filtered: Option<FilterCounts>,
}

/// Findings that suppressions and a baseline took out of a report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterCounts {
    /// Distinct (folded) races matched by a suppression.
    pub suppressed: u64,
    /// Distinct races held by the baseline (and matched by no suppression).
    pub baselined: u64,
    /// Warnings matched by a suppression.
    pub suppressed_warnings: u64,
}

/// Choices that shape a rendered report without changing its content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// The trace file the report is about: named in the replay line of the text report, and
    /// the SARIF location of findings that carry no source location.
    pub source: Option<String>,
    /// Render at most this many race blocks; the summary still counts all races.
    pub max_reports: Option<usize>,
    /// Whose calls the fix hints name.
    pub api: Api,
}

/// Whose calls a fix hint names: CUDA's runtime (with cudarc's wrapper verbs), or PyTorch's
/// (`wait_stream`, `record_stream`, ...) for traces its front end recorded. A trace's header
/// says which: `"api": "torch"`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Api {
    #[default]
    Cuda,
    Torch,
}

impl Api {
    /// The api a trace header names (`"api": "torch"`); CUDA for anything else.
    pub fn of_header(header: &serde_json::Map<String, serde_json::Value>) -> Api {
        match header.get("api").and_then(|v| v.as_str()) {
            Some("torch") => Api::Torch,
            _ => Api::Cuda,
        }
    }
}

impl RenderOptions {
    /// The races to render, honouring `max_reports`.
    fn shown<'r>(&self, report: &'r Report) -> &'r [FoldedRace] {
        let n = self
            .max_reports
            .map_or(report.races.len(), |max| max.min(report.races.len()));
        &report.races[..n]
    }
}
