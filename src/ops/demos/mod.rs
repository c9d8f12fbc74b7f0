//! The bodies of the examples in `examples/`, as functions the example `main`s and
//! `tests/gpu_examples.rs` both call: each runs one scenario on a [`Context`] it is given
//! (sanitized or not) and returns an [`Outcome`]: the GPU's numbers, the CPU reference, the
//! sanitizer's findings, and the race a correct sanitizer must report for the racy variant,
//! pinned to the lines of this module that make the racing calls.
//!
//! Each scenario is a real race: without its fix the numbers are wrong, because a [`spin`]
//! kernel delays the producing side by tens of milliseconds, so the consuming side runs first
//! every time (`free_in_use` is the exception: there the wrong numbers need the memory pool
//! to hand the freed memory out again, which it does in practice but does not promise).
//!
//! Every scenario takes a [`Variant`]: `fixed` adds the synchronization the racy program lacks;
//! `tracking` leaves cudarc's automatic event tracking on. With tracking on, cudarc's own
//! waits and records order each of these programs even without the fix (docs/online.md, "What
//! cudarc does on its own", says where), so the racy variants turn it off first, as programs do
//! that manage their streams themselves or want to skip its overhead. A race is expected
//! exactly when the variant is racy and tracking is off ([`Variant::races`]).
//!
//! [`spin`]: super::spin

pub mod cli;
pub mod free_in_use;
pub mod pipeline;
pub mod producer_consumer;
pub mod sum_before_randn;

use super::compare::{self, Comparison, Tolerance};
use crate::cuda::Context;
use crate::engine::{AccessKind, Finding, Race, RaceKind, Warning};

/// Clock cycles of the `spin` kernel put ahead of the producer: 50-70 ms on an H100 / H200 at
/// full clock, far longer than the host takes to enqueue the consumer (a few microseconds, or
/// a few hundred with the sanitizer writing a trace).
pub const SPIN_CYCLES: i64 = 100_000_000;

/// Which program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Variant {
    /// With the synchronization the racy program lacks.
    pub fixed: bool,
    /// With cudarc's automatic event tracking on (the racy variants turn it off).
    pub tracking: bool,
}

impl Variant {
    /// The racy program, tracking off: the race happens.
    pub const RACY: Variant = Variant {
        fixed: false,
        tracking: false,
    };
    /// The fixed program, tracking off.
    pub const FIXED: Variant = Variant {
        fixed: true,
        tracking: false,
    };
    /// Every combination.
    pub const ALL: [Variant; 4] = [
        Variant::RACY,
        Variant::FIXED,
        Variant {
            fixed: false,
            tracking: true,
        },
        Variant {
            fixed: true,
            tracking: true,
        },
    ];

    /// `"racy"` or `"fixed"`.
    pub fn label(&self) -> &'static str {
        if self.fixed { "fixed" } else { "racy" }
    }

    /// `"on"` or `"off"`.
    pub fn tracking_label(&self) -> &'static str {
        if self.tracking { "on" } else { "off" }
    }

    /// Whether the program races: racy, and cudarc's tracking (which would order it) off.
    pub fn races(&self) -> bool {
        !self.fixed && !self.tracking
    }

    /// The trace file name of a run: `<example>-<racy|fixed>-tracking-<on|off>.jsonl`.
    pub fn trace_name(&self, example: &str) -> String {
        format!(
            "{example}-{}-tracking-{}.jsonl",
            self.label(),
            self.tracking_label()
        )
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, cudarc event tracking {}",
            self.label(),
            self.tracking_label()
        )
    }
}

/// A source line of this module, as reports give it (`file:line:col`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub file: &'static str,
    pub line: u32,
}

impl Site {
    /// Not known (never matches).
    pub const UNKNOWN: Site = Site { file: "", line: 0 };

    /// Whether a report's `file:line:col` is this line.
    pub fn is(&self, at: Option<&str>) -> bool {
        let Some(at) = at else {
            return false;
        };
        let mut parts = at.rsplitn(3, ':');
        let (_col, line, file) = (parts.next(), parts.next(), parts.next());
        file == Some(self.file) && line.and_then(|l| l.parse().ok()) == Some(self.line)
    }
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// The [`Site`] of the statement on the next line (put it just above the racing call).
macro_rules! next_line {
    () => {
        $crate::ops::demos::Site {
            file: file!(),
            line: line!() + 1,
        }
    };
}
pub(crate) use next_line;

/// One side of an expected race.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectedAccess {
    pub site: Site,
    /// The trace op: `launch`, `memcpy`, `host_access`, `free`, ...
    pub op: crate::trace::OpKind,
    /// The kernel name or label, where the record has one.
    pub name: Option<&'static str>,
    /// The kernel argument, where the record has one.
    pub arg: Option<&'static str>,
    pub access: AccessKind,
}

impl ExpectedAccess {
    fn matches(&self, s: &crate::engine::Site) -> bool {
        self.site.is(s.at.as_deref())
            && s.op == self.op
            && s.access == self.access
            && (self.name.is_none() || s.name.as_deref() == self.name)
            && (self.arg.is_none() || s.arg.as_deref() == self.arg)
    }
}

/// The race a correct sanitizer reports for a scenario's racy variant (tracking off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpectedRace {
    pub kind: RaceKind,
    /// The buffer's name.
    pub buffer: &'static str,
    pub current: ExpectedAccess,
    pub previous: ExpectedAccess,
}

impl ExpectedRace {
    /// `sum` reading `x` (argument "x", at `read`) before `randn`'s write of it (argument
    /// "out", at `write`) is ordered: the race of the two randn-then-sum scenarios.
    pub fn sum_reads_randn_output(read: Site, write: Site) -> ExpectedRace {
        ExpectedRace {
            kind: RaceKind::ReadAfterWrite,
            buffer: "x",
            current: ExpectedAccess {
                site: read,
                op: crate::trace::OpKind::Launch,
                name: Some("sum"),
                arg: Some("x"),
                access: AccessKind::Read,
            },
            previous: ExpectedAccess {
                site: write,
                op: crate::trace::OpKind::Launch,
                name: Some("randn"),
                arg: Some("out"),
                access: AccessKind::Write,
            },
        }
    }

    /// Whether `race` is this one.
    pub fn matches(&self, race: &Race) -> bool {
        race.kind == self.kind
            && race.buffer.name.as_deref() == Some(self.buffer)
            && self.current.matches(&race.current)
            && self.previous.matches(&race.previous)
    }
}

/// What one run of a scenario gave.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub example: &'static str,
    pub variant: Variant,
    /// The GPU's result.
    pub gpu: Vec<f32>,
    /// The CPU reference.
    pub reference: Vec<f32>,
    pub tolerance: Tolerance,
    /// Whether the context was sanitized (else `findings` is empty).
    pub sanitized: bool,
    /// The sanitizer's findings of this run, in the order found.
    pub findings: Vec<Finding>,
    /// The race of the racy variant.
    pub expected: ExpectedRace,
    /// What the scenario observed beyond the numbers (e.g. memory reuse).
    pub notes: Vec<String>,
}

impl Outcome {
    /// How the GPU's numbers compare with the reference.
    pub fn comparison(&self) -> Comparison {
        compare::compare(&self.gpu, &self.reference, self.tolerance)
    }

    /// Whether the GPU's numbers are right.
    pub fn matches(&self) -> bool {
        self.comparison().matches()
    }

    /// The races found.
    pub fn races(&self) -> Vec<&Race> {
        self.findings
            .iter()
            .filter_map(|f| match f {
                Finding::Race(r) => Some(&**r),
                Finding::Warning(_) => None,
            })
            .collect()
    }

    /// The warnings found.
    pub fn warnings(&self) -> Vec<&Warning> {
        self.findings
            .iter()
            .filter_map(|f| match f {
                Finding::Warning(w) => Some(w),
                Finding::Race(_) => None,
            })
            .collect()
    }

    /// The expected race, if the sanitizer reported it.
    pub fn expected_race(&self) -> Option<&Race> {
        self.races().into_iter().find(|r| self.expected.matches(r))
    }
}

/// The findings of `ctx`'s sanitizer so far (none when not sanitizing).
fn findings(ctx: &Context) -> (bool, Vec<Finding>) {
    match ctx.sanitizer() {
        Some(san) => (true, san.findings()),
        None => (false, Vec::new()),
    }
}

/// Turns cudarc's event tracking off for the variants that run without it. Must come before
/// the first stream and allocation: buffers allocated while tracking is on keep their events.
fn set_tracking(ctx: &Context, v: Variant) {
    if !v.tracking {
        // SAFETY: the scenarios order their streams themselves (or, in the racy variants,
        // deliberately fail to); the sanitizer checks exactly that.
        unsafe { ctx.disable_event_tracking() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_match_report_locations() {
        let s = next_line!();
        let here = format!("{}:{}:9", file!(), line!());
        assert!(s.is(Some(&here)), "{s} vs {here}");
        assert!(!s.is(Some(&format!("{}:{}:9", file!(), line!()))));
        assert!(!s.is(None));
        assert!(!Site::UNKNOWN.is(Some("x.rs:0:1")));
        assert!(!s.is(Some("other.rs:1:1")));
    }

    #[test]
    fn variants_name_their_traces() {
        assert_eq!(
            Variant::RACY.trace_name("pipeline"),
            "pipeline-racy-tracking-off.jsonl"
        );
        assert_eq!(
            Variant::ALL[3].trace_name("free_in_use"),
            "free_in_use-fixed-tracking-on.jsonl"
        );
        let racing: Vec<bool> = Variant::ALL.iter().map(Variant::races).collect();
        assert_eq!(racing, [true, false, false, false]);
        assert_eq!(
            Variant::FIXED.to_string(),
            "fixed, cudarc event tracking off"
        );
    }
}

#[cfg(test)]
mod seed_tests {
    use super::*;
    use crate::ops::cpu;

    /// A sum of zeros (or of sevens) must be clearly wrong: each scenario's seed gives a sum
    /// far outside the tolerance around 0, and far from 7 n.
    #[test]
    fn demo_seeds_give_sums_far_from_zero() {
        for (seed, n) in [
            (sum_before_randn::SEED, sum_before_randn::N),
            (producer_consumer::SEED, producer_consumer::N),
            (free_in_use::SEED, free_in_use::N),
        ] {
            let x = cpu::randn(seed, n);
            let (sum, tol) = (cpu::sum(&x), Tolerance::for_sum(&x));
            assert!(
                sum.abs() > 10.0 * tol.atol,
                "seed {seed}: sum {sum}, {tol:?}"
            );
            assert!(!tol.close(0.0, sum) && !tol.close(7.0 * n as f32, sum));
        }
    }
}
