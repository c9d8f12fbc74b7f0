//! What the programs in `examples/` share: the [`Variant`] they run, the [`Outcome`] they return
//! (the GPU's numbers, the CPU reference, the sanitizer's findings), and the end of their
//! [`main`]: the context they run on, printing the outcome, the exit status.
//!
//! Each example is a real race: without its fix the numbers are wrong, because a `spin` kernel
//! delays the producing side by tens of milliseconds, so the consuming side runs first every
//! time (`free_in_use` is the exception: there the wrong numbers need the memory pool to hand
//! the freed memory out again, which it does in practice but does not promise).
//!
//! `fixed` adds the synchronization the racy program lacks; `tracking` leaves cudarc's automatic
//! event tracking on. With tracking on, cudarc's own waits and records order each of these
//! programs even without the fix (docs/online.md, "What cudarc does on its own", says where), so
//! the racy variants turn it off first, as programs do that manage their streams themselves or
//! want to skip its overhead. A race is expected exactly when the variant is racy and tracking
//! is off ([`Variant::races`]).

use std::process::ExitCode;

use std::sync::Arc;

use streamsan::cuda::CudaContext;
use streamsan::engine::{Finding, Race, Warning};

use crate::Error;
use crate::compare::{self, Comparison, Tolerance};

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
    pub const RACY: Variant = Variant::new(false, false);
    /// The fixed program, tracking off.
    pub const FIXED: Variant = Variant::new(true, false);
    /// Every combination.
    pub const ALL: [Variant; 4] = [
        Variant::RACY,
        Variant::FIXED,
        Variant::new(false, true),
        Variant::new(true, true),
    ];

    pub const fn new(fixed: bool, tracking: bool) -> Variant {
        Variant { fixed, tracking }
    }

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

/// What one run of an example gave. `Display` shows the numbers and whether they match.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The GPU's result.
    pub gpu: Vec<f32>,
    /// The CPU reference.
    pub reference: Vec<f32>,
    pub tolerance: Tolerance,
    /// Whether the context was sanitized (else `findings` is empty).
    pub sanitized: bool,
    /// The sanitizer's findings of this run, in the order found.
    pub findings: Vec<Finding>,
    /// What the program observed beyond the numbers (e.g. memory reuse), one line each.
    pub notes: Vec<String>,
}

impl Outcome {
    /// The outcome of a run on `ctx` that is over (every stream synchronized): the GPU's
    /// numbers, the reference and the findings of `ctx`'s sanitizer so far.
    pub fn new(
        ctx: &Arc<CudaContext>,
        gpu: Vec<f32>,
        reference: Vec<f32>,
        tolerance: Tolerance,
    ) -> Self {
        let (sanitized, findings) = match ctx.sanitizer() {
            Some(san) => (true, san.findings()),
            None => (false, Vec::new()),
        };
        Outcome {
            gpu,
            reference,
            tolerance,
            sanitized,
            findings,
            notes: Vec::new(),
        }
    }

    /// The outcome of a run that summed `samples` on the GPU: the reference is their sum on the
    /// CPU, with the tolerance of a sum.
    pub fn sum(ctx: &Arc<CudaContext>, gpu: Vec<f32>, samples: &[f32]) -> Self {
        let reference = vec![crate::cpu::sum(samples)];
        Outcome::new(ctx, gpu, reference, Tolerance::for_sum(samples))
    }

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
        self.findings.iter().filter_map(Finding::as_race).collect()
    }

    /// The warnings found.
    pub fn warnings(&self) -> Vec<&Warning> {
        self.findings
            .iter()
            .filter_map(Finding::as_warning)
            .collect()
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "  GPU:       {}", head(&self.gpu))?;
        writeln!(f, "  reference: {}", head(&self.reference))?;
        let c = self.comparison();
        match c.first_mismatch {
            None => writeln!(f, "  the GPU's numbers match the CPU reference")?,
            Some((i, g, r)) => writeln!(
                f,
                "  the GPU's numbers are WRONG: {} of {} differ; element {i}: GPU {g}, \
                 reference {r}",
                c.mismatches,
                self.reference.len()
            )?,
        }
        for note in &self.notes {
            writeln!(f, "  {note}")?;
        }
        Ok(())
    }
}

/// The first elements of `values`, and how many there are.
fn head(values: &[f32]) -> String {
    const SHOWN: usize = 4;
    let shown: Vec<String> = values.iter().take(SHOWN).map(|v| format!("{v}")).collect();
    if values.len() > SHOWN {
        format!("[{}, ...] ({} elements)", shown.join(", "), values.len())
    } else {
        format!("[{}]", shown.join(", "))
    }
}

/// An example's `main`, once it has read its [`Variant`] from `args` (the command line without
/// the program name): checks that every argument is a flag of `usage` (else prints `usage` and
/// returns 2, or 0 for `--help`); runs `run` on a fresh context of device 0, sanitized through
/// the builder API with `--streamsan` (writing the trace to [`Variant::trace_name`] in the
/// current directory), else as `STREAMSAN=1` says; prints the GPU's numbers next to the CPU
/// reference, and how to check the run with streamsan or what streamsan found. Returns the exit
/// status: 0 when the numbers match, 1 when they do not, 2 on an error (no libcuda, a CUDA
/// error).
pub fn main(
    example: &str,
    usage: &str,
    args: &[String],
    variant: Variant,
    run: fn(&Arc<CudaContext>, Variant) -> Result<Outcome, Error>,
) -> ExitCode {
    if let Some(bad) = args.iter().find(|a| !usage.contains(&format!("[{a}]"))) {
        eprintln!("{usage}");
        return ExitCode::from(if bad == "--help" { 0 } else { 2 });
    }
    let streamsan = args.iter().any(|a| a == "--streamsan");
    let trace = streamsan.then(|| variant.trace_name(example));
    // The context, and with it the sanitizer, which prints its summary when dropped, ends
    // before the outcome is printed.
    let outcome = context(trace.as_deref()).and_then(|ctx| run(&ctx, variant));
    finish(example, variant, outcome, trace.as_deref())
}

/// The context of device 0 for an example: sanitized, writing the trace to `trace`, when
/// given (`CudaContext::builder().sanitize(true).trace_path(trace)`, for runners that cannot set
/// the environment per command; the other options still come from `STREAMSAN_OPTIONS`); else
/// as `CudaContext::new(0)`, which sanitizes when `STREAMSAN=1` is set (a bad
/// `STREAMSAN_OPTIONS` is the example's error here, not an exit). Where there is no libcuda, an
/// error instead of cudarc's panic.
fn context(trace: Option<&str>) -> Result<Arc<CudaContext>, Error> {
    // SAFETY: only tries to open the library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::Context(
            "libcuda not found: this example needs an NVIDIA GPU and its driver".into(),
        ));
    }
    let builder = CudaContext::builder();
    let ctx = match trace {
        Some(path) => builder.sanitize(true).trace_path(path).build(0),
        None => builder.build(0),
    };
    Ok(ctx?)
}

/// The end of an example's [`main`]: prints what the run of `variant` gave (or its error), and
/// how to check the run with streamsan or what streamsan found; returns the exit status: 0
/// when the GPU's numbers match the CPU reference, 1 when they do not, 2 on an error. `trace`:
/// the trace the run wrote, when known.
fn finish(
    example: &str,
    variant: Variant,
    outcome: Result<Outcome, Error>,
    trace: Option<&str>,
) -> ExitCode {
    let o = match outcome {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{example}: {e}");
            return ExitCode::from(2);
        }
    };
    print!("{example} ({variant})\n{o}");
    println!(
        "  expected: {}",
        if variant.races() {
            "a race (racy program, cudarc's event tracking off)"
        } else if variant.fixed {
            "no race (the program synchronizes)"
        } else {
            "no race (cudarc's event tracking inserts the missing wait)"
        }
    );
    if o.sanitized {
        println!(
            "streamsan: on; {} race(s), {} warning(s) (reported on stderr as they happened)",
            o.races().len(),
            o.warnings().len()
        );
        if let Some(t) = trace {
            println!("  trace: {t}; replay it anywhere: streamsan check {t}");
        }
    } else {
        let argv: Vec<String> = std::env::args().collect();
        let t = variant.trace_name(example);
        println!(
            "streamsan: off. To check this run:\n  STREAMSAN=1 STREAMSAN_OPTIONS=trace={t} {}\n  \
             (or add --streamsan), and replay the trace anywhere: streamsan check {t}",
            argv.join(" ")
        );
    }
    if o.matches() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn outcomes_show_the_numbers_and_the_first_mismatch() {
        let o = Outcome {
            gpu: vec![0.0; 6],
            reference: vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
            tolerance: Tolerance::ELEMENTWISE,
            sanitized: false,
            findings: Vec::new(),
            notes: vec!["a note".into()],
        };
        assert!(!o.matches());
        assert_eq!(
            o.to_string(),
            "  GPU:       [0, 0, 0, 0, ...] (6 elements)\n  \
             reference: [1, 0, 0, 0, ...] (6 elements)\n  \
             the GPU's numbers are WRONG: 1 of 6 differ; element 0: GPU 0, reference 1\n  \
             a note\n"
        );
        assert_eq!(head(&[1.0, 2.5]), "[1, 2.5]");
    }
}
