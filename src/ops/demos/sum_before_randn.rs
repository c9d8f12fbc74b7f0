//! `randn` fills `x` on the legacy default stream, `sum` reads `x` on a side stream, and
//! nothing makes the side stream wait: the sum adds up whatever `x` held before.
//!
//! The side stream comes from `new_stream`, so it is non-blocking: the legacy stream's implicit
//! synchronization does not order it either. A `spin` kernel ahead of `randn` keeps the default
//! stream busy for tens of milliseconds, so the unsynchronized `sum` runs first every time and
//! sums the zeros of `alloc_zeros`: 0 instead of the sum of a million normal samples.
//!
//! - `fixed`: record an event on the default stream after `randn`; the side stream waits on it.
//! - `tracking`: leave cudarc's event tracking on. cudarc gives `x` a write event at allocation,
//!   records it after `randn`, and makes the side stream wait on it before `sum`, so the racy
//!   program is right and the sanitizer, which records those implicit waits, reports nothing.
//!   That is why the racy variant turns tracking off first: programs do that to skip cudarc's
//!   per-argument waits and records, or because they order their streams themselves (code
//!   ported from C++ or from a framework that does), and then one forgotten wait is a race.
//!   Allocating `x` before the side stream exists would not make it racy: cudarc gives a
//!   buffer events whenever tracking is on at allocation, and waits on them whenever it
//!   manages synchronization at the time of use (docs/online.md, "When tracking is active").

use super::cli::Demo;
use super::{ExpectedRace, Outcome, SPIN_CYCLES, Variant, next_line};
use crate::cuda::Context;
use crate::ops::{self, Error, Kernels, compare::Tolerance, cpu};

/// The example's name (and its trace files' prefix).
pub const NAME: &str = "sum_before_randn";
/// Elements of `x`.
pub const N: usize = 1 << 20;
/// The seed of `randn` (its sum is far from 0, so a sum of zeros is clearly wrong).
pub const SEED: u64 = 1234;

/// The example: `examples/sum_before_randn.rs`.
pub const DEMO: Demo = Demo {
    name: NAME,
    about: "randn fills x on the default stream after a spin; sum reads x on a side stream (non-blocking).",
    racy_flag: None,
    run,
};

/// Runs the scenario on `ctx`, which must be fresh (no stream made yet).
pub fn run(ctx: &Context, v: Variant) -> Result<Outcome, Error> {
    Kernels::get(ctx)?; // compile and load now, not between the racing calls
    super::set_tracking(ctx, v);
    let main = ctx.default_stream();
    let side = ctx.new_stream_named("side")?;
    let mut x = main.alloc_zeros_named::<f32>("x", N)?;
    let mut total = side.alloc_zeros_named::<f32>("total", 1)?;

    ops::spin(&main, SPIN_CYCLES)?; // delays randn: the race shows every time
    let write = next_line!();
    ops::randn(&main, &mut x, SEED)?;
    if v.fixed {
        let x_ready = main.record_event(None)?;
        side.wait(&x_ready)?;
    }
    let read = next_line!();
    ops::sum(&side, &x, &mut total)?;
    let gpu = side.clone_dtoh(&total)?;

    // The default stream may still be spinning (racy variant): wait before freeing.
    ctx.synchronize()?;
    drop((x, total, side));

    let samples = cpu::randn(SEED, N);
    let (sanitized, findings) = super::findings(ctx);
    Ok(Outcome {
        example: NAME,
        variant: v,
        gpu,
        reference: vec![cpu::sum(&samples)],
        tolerance: Tolerance::for_sum(&samples),
        sanitized,
        findings,
        expected: ExpectedRace::sum_reads_randn_output(read, write),
        notes: Vec::new(),
    })
}
