//! A buffer freed while a kernel on another stream still reads it. `randn` fills `x` on the
//! default stream; the side stream joins it (right), spins, and sums `x`; the host frees `x`
//! right after enqueuing the sum. cudarc frees on the stream that allocated (`cuMemFreeAsync` on
//! the default stream), which does not wait for the side stream: `x`'s memory goes back to the
//! pool before `sum` has even started.
//!
//! The next allocation of the same size (`y`, filled with sevens) usually gets that memory, and
//! the delayed sum adds up sevens; pools do that in practice but do not promise it, so the
//! program says whether it happened. The sanitizer's report does not depend on it: a
//! free-while-in-use of `x` at the `x.free()` line, against `sum`'s read on the side stream. The
//! fix synchronizes the side stream before the free; with `--tracking`, cudarc's drop makes the
//! default stream wait for the reads of `x` first.
//!
//! ```text
//! cargo run --example free_in_use                      # racy: usually sums sevens, exit 1
//! cargo run --example free_in_use -- --fixed           # synchronize before freeing: 0
//! cargo run --example free_in_use -- --tracking        # cudarc's drop waits for the reader: 0
//! STREAMSAN=1 cargo run --example free_in_use          # free-while-in-use, at the free's line
//! cargo run --example free_in_use -- --streamsan       # the same, and a trace to replay
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use cudarc::driver::DevicePtr;
use streamsan::cuda::{CudaContext, CudaSlice, CudaStream};
use streamsan_demos::{self as demos, Error, Kernels, Outcome, SPIN_CYCLES, Variant};
use streamsan_demos::{cpu, ops};

const USAGE: &str = "usage: free_in_use [--fixed] [--tracking] [--streamsan]";
pub const N: usize = 1 << 20; // elements of x and y
pub const SEED: u64 = 7;

/// The device address of a buffer allocated with tracking off (cudarc's `device_ptr` then waits
/// on and records nothing, so the trace stays true).
fn address(buf: &CudaSlice<f32>, stream: &Arc<CudaStream>) -> u64 {
    buf.cudarc().device_ptr(stream.cudarc()).0
}

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
    ops::randn(&main, &mut x, SEED)?;
    side.join(&main)?;
    ops::spin(&side, SPIN_CYCLES)?; // delays the sum past the free
    ops::sum(&side, &x, &mut total)?; // race: the read
    if variant.fixed {
        side.synchronize()?; // the fix: the sum is done before x is freed
    }
    let x_addr = (!variant.tracking).then(|| address(&x, &main));
    x.free(); // race: the free
    let mut y = main.alloc_zeros_named::<f32>("y", N)?; // may be given x's memory at once
    ops::fill(&main, &mut y, 7.0)?;
    let y_addr = (!variant.tracking).then(|| address(&y, &main));
    let gpu = side.clone_dtoh(&total)?;

    ctx.synchronize()?;
    drop((y, total, side));
    let mut outcome = Outcome::sum(ctx, gpu, &cpu::randn(SEED, N)); // vs the sum on the CPU
    if let (Some(x_addr), Some(y_addr)) = (x_addr, y_addr) {
        outcome.notes.push(if x_addr == y_addr {
            format!("y was given x's memory ({x_addr:#x})")
        } else {
            format!("y was not given x's memory (x {x_addr:#x}, y {y_addr:#x})")
        });
    }
    Ok(outcome)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let variant = Variant::new(flag("--fixed"), flag("--tracking"));
    demos::main("free_in_use", USAGE, &args, variant, run)
}
