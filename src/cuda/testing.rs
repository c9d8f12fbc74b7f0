//! Regression tests for stream ordering: run a closure under a fresh sanitizer and assert on
//! what it found, from a program's own `#[test]`s.
//!
//! Each run gets its own [`Sanitizer`] (no global state, no environment variables read: the
//! context is built with [`ContextBuilder::ignore_env`](super::ContextBuilder::ignore_env)),
//! checking online, printing nothing as it goes. When the closure returns, the findings are
//! taken into a [`Run`]: the races, the warnings, and the report as deterministic text (no
//! addresses, process ids, times or paths of this machine), fit for snapshot tests.
//!
//! ```no_run
//! use streamsan::cuda::testing;
//!
//! #[test]
//! fn sum_waits_for_randn() {
//!     testing::assert_no_races(0, |ctx| {
//!         let main = ctx.default_stream();
//!         let side = ctx.new_stream_named("side")?;
//!         let x = main.alloc_zeros_named::<f32>("x", 1024)?;
//!         side.join(&main)?;
//!         let _host = side.clone_dtoh(&x)?;
//!         Ok::<(), streamsan::cuda::DriverError>(())
//!     });
//! }
//! ```
//!
//! [`Harness`] sets what a run uses beyond the defaults (suppressions, a baseline, a trace
//! file); [`Harness::run_with`] hands the closure the sanitizer itself, for contexts built by
//! hand (`CudaContext::builder().sanitizer(san.clone()).wrap(cuda)`). The guide, with a test to copy,
//! is `docs/regression-tests.md`.
//!
//! Limits: the report is taken when the closure returns, before the sanitizer ends, so it has
//! no end-of-run warnings (buffers still allocated); everything the closure did is in it.

use std::fmt::Debug;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use super::context::CudaContext;
pub use super::error::Error;
use super::options::Options;
use super::sanitizer::Sanitizer;
use crate::engine::{Finding, Race, Warning};
use crate::report::{RenderOptions, Report, render_json, render_text};
use crate::suppress::Suppression;

/// How checked runs are made: [`sanitize`] and [`assert_no_races`] use `Harness::new()`.
#[derive(Clone, Debug, Default)]
pub struct Harness {
    suppressions: Vec<PathBuf>,
    baseline: Option<PathBuf>,
    trace: Option<PathBuf>,
}

impl Harness {
    /// A sanitizer per run, checking online, printing nothing, no trace, no filters.
    pub fn new() -> Harness {
        Harness::default()
    }

    /// Take out the races and warnings this suppressions file matches
    /// (`docs/suppressions.md`); call again for more files.
    pub fn suppressions(mut self, path: impl Into<PathBuf>) -> Self {
        self.suppressions.push(path.into());
        self
    }

    /// Take out the races this baseline (a JSON report) holds.
    pub fn baseline(mut self, path: impl Into<PathBuf>) -> Self {
        self.baseline = Some(path.into());
        self
    }

    /// Also write the run's trace here, to replay it with `streamsan check`.
    pub fn trace_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.trace = Some(path.into());
        self
    }

    /// A fresh sanitizer as this harness sets it up: reports go nowhere (a [`Run`] carries
    /// them); suppressions and baseline are read now.
    pub fn sanitizer(&self) -> Result<Arc<Sanitizer>, Error> {
        let options = Options {
            trace: self.trace.clone(),
            suppressions: self.suppressions.clone(),
            baseline: self.baseline.clone(),
            ..Options::default()
        };
        match &options.trace {
            // The trace path is created (and named in the report's reproduce line).
            Some(_) => Sanitizer::new(Options {
                report: super::ReportTo::Path(null_device()),
                ..options
            }),
            None => Sanitizer::with_outputs(options, None, Box::new(io::sink())),
        }
    }

    /// Runs `f` on a fresh sanitized context on device `ordinal` and returns what it found.
    /// The context (and whatever `f` left in it) is dropped before the report is taken.
    #[track_caller]
    pub fn run<E: Debug>(
        &self,
        ordinal: usize,
        f: impl FnOnce(&Arc<CudaContext>) -> Result<(), E>,
    ) -> Result<Run, Error> {
        let san = self.sanitizer()?;
        let ctx = CudaContext::builder()
            .ignore_env()
            .sanitizer(san.clone())
            .build(ordinal)?;
        let result = f(&ctx);
        drop(ctx);
        finish(&san, result)
    }

    /// Runs `f` with a fresh sanitizer and returns what it found: for code that makes its own
    /// contexts (`CudaContext::builder().sanitizer(san.clone())`, `.wrap(cuda)`), or several.
    pub fn run_with<E: Debug>(
        &self,
        f: impl FnOnce(&Arc<Sanitizer>) -> Result<(), E>,
    ) -> Result<Run, Error> {
        let san = self.sanitizer()?;
        let result = f(&san);
        finish(&san, result)
    }
}

/// Where a report that nobody reads goes when the sanitizer needs a path.
fn null_device() -> PathBuf {
    if cfg!(windows) {
        PathBuf::from("NUL")
    } else {
        PathBuf::from("/dev/null")
    }
}

fn finish<E: Debug>(san: &Sanitizer, result: Result<(), E>) -> Result<Run, Error> {
    let run = Run {
        findings: san.findings(),
        report: san.folded_report(),
        unused: san.unused_suppressions(),
    };
    match result {
        Ok(()) => Ok(run),
        Err(e) => Err(Error::Failed {
            message: format!("{e:?}"),
            report: run.report(),
        }),
    }
}

/// Runs `f` on a fresh sanitized context on device `ordinal` ([`Harness::run`] with the
/// defaults) and returns what it found.
#[track_caller]
pub fn sanitize<E: Debug>(
    ordinal: usize,
    f: impl FnOnce(&Arc<CudaContext>) -> Result<(), E>,
) -> Result<Run, Error> {
    Harness::new().run(ordinal, f)
}

/// Runs `f` as [`sanitize`] does and panics when it raced (the message is the full text
/// report), when it failed, or when no context could be made.
#[track_caller]
pub fn assert_no_races<E: Debug>(
    ordinal: usize,
    f: impl FnOnce(&Arc<CudaContext>) -> Result<(), E>,
) {
    match sanitize(ordinal, f) {
        Ok(run) => run.assert_no_races(),
        Err(e) => panic!("streamsan: {e}"),
    }
}

/// What a checked run found. Races and warnings taken out by suppressions or a baseline are
/// not among them; the report's summary counts them.
#[derive(Clone, Debug)]
pub struct Run {
    findings: Vec<Finding>,
    report: Report,
    unused: Vec<Suppression>,
}

impl Run {
    /// Every race and warning, in the order found (not folded: a race repeated in a loop is
    /// here once per occurrence).
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// The races, in the order found, each occurrence.
    pub fn races(&self) -> Vec<&Race> {
        self.findings.iter().filter_map(Finding::as_race).collect()
    }

    /// The warnings, in the order found.
    pub fn warnings(&self) -> Vec<&Warning> {
        self.findings
            .iter()
            .filter_map(Finding::as_warning)
            .collect()
    }

    /// True when no race was found.
    pub fn is_clean(&self) -> bool {
        !self.report.has_races()
    }

    /// The folded report (repeats of a pair of sites are one entry with a count).
    pub fn folded_report(&self) -> &Report {
        &self.report
    }

    /// Distinct races: the folded report's entries.
    pub fn distinct_races(&self) -> usize {
        self.report.races.len()
    }

    /// The text report (`streamsan check`'s): race blocks, warnings, `SUMMARY` line.
    /// Deterministic: source locations are as `file!()` gives them (an absolute path under
    /// this crate's `CARGO_MANIFEST_DIR` is made relative to it), and there are no addresses,
    /// process ids or times.
    pub fn report(&self) -> String {
        redact(render_text(&self.report, &RenderOptions::default()))
    }

    /// The JSON report (`streamsan check --format json`'s schema), redacted as
    /// [`Run::report`] is.
    pub fn report_json(&self) -> String {
        redact(render_json(&self.report, &RenderOptions::default()))
    }

    /// The suppressions that matched nothing in this run.
    pub fn unused_suppressions(&self) -> &[Suppression] {
        &self.unused
    }

    /// Panics, with the full text report as the message, when a race was found.
    #[track_caller]
    pub fn assert_no_races(&self) {
        if !self.is_clean() {
            panic!(
                "streamsan found {} in code expected to be race-free:\n\n{}",
                plural(self.distinct_races()),
                self.report()
            );
        }
    }

    /// Panics, with the full text report, unless exactly `n` distinct races (folded report
    /// entries) were found.
    #[track_caller]
    pub fn assert_races(&self, n: usize) {
        if self.distinct_races() != n {
            panic!(
                "streamsan: expected {}, found {}:\n\n{}",
                plural(n),
                self.distinct_races(),
                self.report()
            );
        }
    }
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 race".to_string()
    } else {
        format!("{n} races")
    }
}

/// Makes paths under `CARGO_MANIFEST_DIR` (set by `cargo test` and `cargo run`) relative.
fn redact(text: String) -> String {
    match std::env::var("CARGO_MANIFEST_DIR") {
        Ok(dir) if !dir.is_empty() => {
            let mut prefix = dir;
            if !prefix.ends_with(std::path::MAIN_SEPARATOR) {
                prefix.push(std::path::MAIN_SEPARATOR);
            }
            text.replace(&prefix, "")
        }
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_strips_the_manifest_dir() {
        let dir = env!("CARGO_MANIFEST_DIR");
        let text = format!("at {dir}/tests/x.rs:3:5 and tests/y.rs:1:1");
        // `cargo test` sets the variable at run time too.
        assert_eq!(redact(text), "at tests/x.rs:3:5 and tests/y.rs:1:1");
    }
}
