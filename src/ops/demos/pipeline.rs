//! Copy/compute overlap over two streams with pinned host buffers: chunk `k` is uploaded on
//! the `copy` stream while chunk `k - 1` is computed (`y = 2 x + 1`: `fill` then `axpy`) and
//! downloaded on the `compute` stream; an event per upload hands each chunk from one stream
//! to the other. That part is right in every variant.
//!
//! The racy variant (`--readback-race`) then reads the pinned results on the host without
//! waiting for the downloads: an asynchronous copy returns at once, and nothing orders the
//! host's read after it. A `spin` kernel ahead of the last chunk's download makes the host read
//! first every time: that chunk still holds the NaNs the host wrote before the pipeline ran.
//!
//! - `fixed`: `compute.synchronize()` before reading.
//! - `tracking`: with cudarc's event tracking on (and two streams, so it manages
//!   synchronization), each download records the pinned buffer's event and `host_read`
//!   (`PinnedHostSlice::as_slice`) synchronizes it: cudarc makes the racy read wait. With
//!   tracking off that event is never recorded and the read waits for nothing.

use super::cli::Demo;
use super::{ExpectedAccess, ExpectedRace, Outcome, SPIN_CYCLES, Site, Variant, next_line};
use crate::cuda::{Context, Event, PinnedBuffer};
use crate::engine::{AccessKind, RaceKind};
use crate::ops::{self, Error, Kernels, compare::Tolerance, cpu};

pub const NAME: &str = "pipeline";
/// Chunks.
pub const CHUNKS: usize = 4;
/// Elements per chunk.
pub const CHUNK: usize = 1 << 16;
pub const SEED: u64 = 2024;
/// The computation: `y = A x + B`.
pub const A: f32 = 2.0;
pub const B: f32 = 1.0;

/// A pinned host buffer of `CHUNK` elements, written by the host.
fn pinned(ctx: &Context, name: &str, values: &[f32]) -> Result<PinnedBuffer<f32>, Error> {
    // SAFETY: written in full right away.
    let mut buf = unsafe { ctx.alloc_pinned_named::<f32>(name, CHUNK) }?;
    buf.host_write()?.copy_from_slice(values);
    Ok(buf)
}

/// The example: `examples/pipeline.rs`.
pub const DEMO: Demo = Demo {
    name: NAME,
    about: "chunks uploaded on a copy stream, computed and downloaded on a compute stream (pinned buffers, events); the host reads the results.",
    racy_flag: Some("--readback-race"),
    run,
};

/// Runs the scenario on `ctx`, which must be fresh (no stream made yet). The racy variant is
/// `fixed: false` (the example's `--readback-race`).
pub fn run(ctx: &Context, v: Variant) -> Result<Outcome, Error> {
    Kernels::get(ctx)?;
    super::set_tracking(ctx, v);
    let copy = ctx.new_stream_named("copy")?;
    let compute = ctx.new_stream_named("compute")?;
    let input = cpu::randn(SEED, CHUNKS * CHUNK);

    let mut h_in = Vec::new();
    let mut h_out = Vec::new();
    let mut d_in = Vec::new();
    let mut d_out = Vec::new();
    for (k, x) in input.chunks(CHUNK).enumerate() {
        h_in.push(pinned(ctx, &format!("h_in[{k}]"), x)?);
        h_out.push(pinned(ctx, &format!("h_out[{k}]"), &vec![f32::NAN; CHUNK])?);
        d_in.push(copy.alloc_zeros_named::<f32>(&format!("d_in[{k}]"), CHUNK)?);
        d_out.push(compute.alloc_zeros_named::<f32>(&format!("d_out[{k}]"), CHUNK)?);
    }

    let mut uploaded: Vec<Event> = Vec::new();
    let mut download = Site::UNKNOWN;
    for k in 0..=CHUNKS {
        if k < CHUNKS {
            copy.memcpy_htod(&h_in[k], &mut d_in[k])?;
            uploaded.push(copy.record_event(None)?);
        }
        if k > 0 {
            let j = k - 1;
            compute.wait(&uploaded[j])?;
            ops::fill(&compute, &mut d_out[j], B)?;
            ops::axpy(&compute, A, &d_in[j], &mut d_out[j])?;
            if j == CHUNKS - 1 {
                ops::spin(&compute, SPIN_CYCLES)?; // delays the last download
            }
            download = next_line!();
            compute.memcpy_dtoh(&d_out[j], &mut h_out[j])?;
        }
    }

    if v.fixed {
        compute.synchronize()?;
    }
    let mut gpu = Vec::with_capacity(CHUNKS * CHUNK);
    let mut read = Site::UNKNOWN;
    for h in &h_out {
        read = next_line!();
        gpu.extend_from_slice(h.host_read()?);
    }

    // Wait for everything before freeing (the downloads of the racy variant, the uploads).
    ctx.synchronize()?;
    drop((uploaded, d_in, d_out, h_in, h_out));

    let reference = cpu::axpy(A, &input, &cpu::fill(B, input.len()));
    let (sanitized, findings) = super::findings(ctx);
    Ok(Outcome {
        example: NAME,
        variant: v,
        gpu,
        reference,
        tolerance: Tolerance::ELEMENTWISE,
        sanitized,
        findings,
        expected: ExpectedRace {
            kind: RaceKind::ReadAfterWrite,
            buffer: LAST_OUT,
            current: ExpectedAccess {
                site: read,
                op: crate::trace::OpKind::HostAccess,
                name: None,
                arg: None,
                access: AccessKind::Read,
            },
            previous: ExpectedAccess {
                site: download,
                op: crate::trace::OpKind::Memcpy,
                name: Some("memcpy_dtoh"),
                arg: None,
                access: AccessKind::Write,
            },
        },
        notes: Vec::new(),
    })
}

/// The name of the last chunk's pinned result, the one the spin makes wrong every time.
const LAST_OUT: &str = "h_out[3]";
const _: () = assert!(CHUNKS == 4, "LAST_OUT names chunk CHUNKS - 1");
