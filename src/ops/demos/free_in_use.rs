//! A buffer freed while a kernel on another stream still reads it.
//!
//! `randn` fills `x` on the default stream; the side stream joins it (that part is right),
//! then, after a `spin`, sums `x`. The host frees `x` right after enqueuing the sum. cudarc
//! frees a buffer on the stream it was allocated on (`cuMemFreeAsync` on the default stream),
//! which has no reason to wait for the side stream: the free is stream-ordered after `randn`,
//! not after `sum`. The memory goes back to the pool while `sum` has not even started.
//!
//! Wrong numbers are likely but not promised: they need the stream-ordered pool to hand `x`'s
//! memory to the next allocation on the default stream (`y`, same size), and `y`'s `fill`
//! with 7.0 to run before the delayed `sum`, which then adds up sevens. Pools do reuse a
//! block freed on the same stream at once in practice; the driver does not promise it. With
//! tracking off the scenario compares the device addresses of `x` and `y` and says (in
//! [`Outcome::notes`]) whether the memory was reused. The sanitizer's report does not depend
//! on any of that: it is the point of this example.
//!
//! - `fixed`: `side.synchronize()` before the free.
//! - `tracking`: cudarc's drop of a tracked buffer makes its allocation stream wait on the
//!   buffer's read and write events first, and the side stream's `sum` recorded the read event:
//!   cudarc orders the free after `sum`.

use cudarc::driver::DevicePtr;

use super::cli::Demo;
use super::{ExpectedAccess, ExpectedRace, Outcome, SPIN_CYCLES, Variant, next_line};
use crate::cuda::{Context, DeviceBuffer, Stream};
use crate::engine::{AccessKind, RaceKind};
use crate::ops::{self, Error, Kernels, compare::Tolerance, cpu};

pub const NAME: &str = "free_in_use";
/// Elements of `x` (and `y`).
pub const N: usize = 1 << 20;
pub const SEED: u64 = 7;
/// What `y` is filled with.
pub const SEVEN: f32 = 7.0;

/// The device address of a buffer without events (allocated with tracking off): cudarc's
/// `device_ptr` then waits on and records nothing, so the trace stays true.
fn address(buf: &DeviceBuffer<f32>, stream: &Stream) -> u64 {
    let (ptr, _guard) = buf.cudarc().device_ptr(stream.cudarc());
    ptr
}

/// The example: `examples/free_in_use.rs`.
pub const DEMO: Demo = Demo {
    name: NAME,
    about: "sum reads x on a side stream (after a spin) while the host frees x; y, allocated next, may get its memory.",
    racy_flag: None,
    run,
};

/// Runs the scenario on `ctx`, which must be fresh (no stream made yet).
pub fn run(ctx: &Context, v: Variant) -> Result<Outcome, Error> {
    Kernels::get(ctx)?;
    super::set_tracking(ctx, v);
    let main = ctx.default_stream();
    let side = ctx.new_stream_named("side")?;
    let mut x = main.alloc_zeros_named::<f32>("x", N)?;
    let mut total = side.alloc_zeros_named::<f32>("total", 1)?;
    ops::randn(&main, &mut x, SEED)?;
    side.join(&main)?;

    ops::spin(&side, SPIN_CYCLES)?; // delays the sum past the free
    let read = next_line!();
    ops::sum(&side, &x, &mut total)?;
    if v.fixed {
        side.synchronize()?;
    }
    let x_addr = (!v.tracking).then(|| address(&x, &main));
    let free = next_line!();
    x.free();

    // The next allocation of the same size on the same stream: the pool may hand out x's
    // memory at once.
    let mut y = main.alloc_zeros_named::<f32>("y", N)?;
    ops::fill(&main, &mut y, SEVEN)?;
    let y_addr = (!v.tracking).then(|| address(&y, &main));
    let gpu = side.clone_dtoh(&total)?;

    ctx.synchronize()?;
    drop((y, total, side));

    let mut notes = Vec::new();
    if let (Some(x_addr), Some(y_addr)) = (x_addr, y_addr) {
        notes.push(if x_addr == y_addr && v.fixed {
            format!("y was given x's memory ({x_addr:#x}) after the sum had finished with it")
        } else if x_addr == y_addr {
            format!("y was given x's memory ({x_addr:#x}) while the sum could still read it")
        } else {
            format!("y was not given x's memory (x {x_addr:#x}, y {y_addr:#x})")
        });
    }
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
        expected: ExpectedRace {
            kind: RaceKind::FreeWhileInUse,
            buffer: "x",
            current: ExpectedAccess {
                site: free,
                op: crate::trace::OpKind::Free,
                name: None,
                arg: None,
                access: AccessKind::Free,
            },
            previous: ExpectedAccess {
                site: read,
                op: crate::trace::OpKind::Launch,
                name: Some("sum"),
                arg: Some("x"),
                access: AccessKind::Read,
            },
        },
        notes,
    })
}

/// Whether `outcome`'s notes say `y` was given `x`'s memory (only known with tracking off).
pub fn memory_reused(outcome: &Outcome) -> bool {
    outcome.notes.iter().any(|n| n.starts_with("y was given"))
}
