//! `randn` fills `x` on the default stream, `sum` reads `x` on a side stream, and nothing makes
//! the side stream wait: the sum adds up the zeros `x` held before, 0 instead of the sum of a
//! million normal samples.
//!
//! The side stream comes from `new_stream`, so it is non-blocking: the legacy default stream's
//! implicit synchronization does not order it either. A `spin` kernel ahead of `randn` keeps the
//! default stream busy for tens of milliseconds, so the unsynchronized `sum` runs first every
//! time. cudarc's event tracking would insert the missing wait itself (`--tracking`); programs
//! that order their streams themselves turn it off, as this one does, and then one forgotten
//! wait is a race.
//!
//! streamsan reports it at the `sum` line: a read-after-write on `x`, `sum` (arg `x`) on the side
//! stream against `randn` (arg `out`) on the default stream, which the side stream never
//! synchronized with; the fix it names is the one `--fixed` makes, an event recorded after
//! `randn` that the side stream waits on.
//!
//! ```text
//! cargo run --example sum_before_randn                 # racy: wrong sum, exit status 1
//! cargo run --example sum_before_randn -- --fixed      # event record + wait: right sum, 0
//! cargo run --example sum_before_randn -- --tracking   # cudarc's tracking inserts the wait: 0
//! STREAMSAN=1 cargo run --example sum_before_randn     # the race, reported at the sum's line
//! cargo run --example sum_before_randn -- --streamsan  # the same, and a trace to replay
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use streamsan::cuda::CudaContext;
use streamsan_demos::{self as demos, Error, Kernels, Outcome, SPIN_CYCLES, Variant};
use streamsan_demos::{cpu, ops};

const USAGE: &str = "usage: sum_before_randn [--fixed] [--tracking] [--streamsan]";
/// Elements of `x`.
pub const N: usize = 1 << 20;
/// The seed of `randn` (its sum is far from 0, so a sum of zeros is clearly wrong).
pub const SEED: u64 = 1234;

/// Runs the program on `ctx`, a fresh context (no stream made yet).
pub fn run(ctx: &Arc<CudaContext>, variant: Variant) -> Result<Outcome, Error> {
    Kernels::get(ctx)?; // compile and load the kernels now, not between the racing calls
    if !variant.tracking {
        // SAFETY: the program orders its streams itself (or, racy, fails to).
        unsafe { ctx.disable_event_tracking() };
    }
    let main = ctx.default_stream();
    let side = ctx.new_stream_named("side")?;
    let mut x = main.alloc_zeros_named::<f32>("x", N)?;
    let mut total = side.alloc_zeros_named::<f32>("total", 1)?;

    ops::spin(&main, SPIN_CYCLES)?; // delays randn: the race shows every time
    ops::randn(&main, &mut x, SEED)?; // race: the write
    if variant.fixed {
        let x_ready = main.record_event(None)?;
        side.wait(&x_ready)?; // the fix: the side stream waits for randn
    }
    ops::sum(&side, &x, &mut total)?; // race: the read
    let gpu = side.clone_dtoh(&total)?;

    ctx.synchronize()?; // the default stream may still be spinning: wait before freeing
    drop((x, total, side));
    Ok(Outcome::sum(ctx, gpu, &cpu::randn(SEED, N))) // vs the sum on the CPU
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let variant = Variant::new(flag("--fixed"), flag("--tracking"));
    demos::main("sum_before_randn", USAGE, &args, variant, run)
}
