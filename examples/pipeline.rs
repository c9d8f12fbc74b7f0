//! Copy/compute overlap over two streams with pinned host buffers: chunks are uploaded on the
//! `copy` stream while earlier ones are computed (`y = 2 x + 1`) and downloaded on the `compute`
//! stream; an event per upload hands each chunk over. That part is right in every variant.
//!
//! With `--readback-race` the host then reads the results without waiting for the downloads
//! (an asynchronous copy returns at once); a `spin` kernel ahead of the last download makes it
//! read first every time, and see the NaNs it wrote there before. streamsan reports the host's
//! read of each pinned result against its `memcpy_dtoh` on the compute stream; the fix (the
//! default) synchronizes the compute stream before reading. With `--tracking`, cudarc records
//! each download in the pinned buffer's event, which `host_read` waits on.
//!
//! ```text
//! cargo run --example pipeline                         # right numbers, exit status 0
//! cargo run --example pipeline -- --readback-race      # the last chunk is NaN, exit status 1
//! cargo run --example pipeline -- --readback-race --tracking   # cudarc makes the read wait: 0
//! STREAMSAN=1 cargo run --example pipeline -- --readback-race  # host read races the download
//! cargo run --example pipeline -- --readback-race --streamsan  # the same, and a trace
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use streamsan::cuda::{CudaContext, PinnedHostSlice};
use streamsan_demos::{self as demos, Error, Kernels, Outcome, SPIN_CYCLES, Tolerance, Variant};
use streamsan_demos::{cpu, ops};

const USAGE: &str = "usage: pipeline [--readback-race] [--tracking] [--streamsan]";
const CHUNKS: usize = 4;
const CHUNK: usize = 1 << 16; // elements

/// A pinned host buffer holding `values`.
fn pinned(
    ctx: &Arc<CudaContext>,
    name: &str,
    values: &[f32],
) -> Result<PinnedHostSlice<f32>, Error> {
    // SAFETY: written in full right away.
    let mut buf = unsafe { ctx.alloc_pinned_named::<f32>(name, values.len()) }?;
    buf.as_mut_slice()?.copy_from_slice(values);
    Ok(buf)
}

/// Runs the program on `ctx`, a fresh context; the racy variant is `--readback-race`.
pub fn run(ctx: &Arc<CudaContext>, variant: Variant) -> Result<Outcome, Error> {
    Kernels::get(ctx)?; // compile and load the kernels now, not between the racing calls
    if !variant.tracking {
        // SAFETY: the program orders its streams itself (or, racy, fails to).
        unsafe { ctx.disable_event_tracking() };
    }
    let copy = ctx.new_stream_named("copy")?;
    let compute = ctx.new_stream_named("compute")?;
    let input = cpu::randn(2024, CHUNKS * CHUNK);
    let (mut h_in, mut h_out, mut d_in, mut d_out) = (vec![], vec![], vec![], vec![]);
    let mut uploaded = vec![];
    for (k, x) in input.chunks(CHUNK).enumerate() {
        h_in.push(pinned(ctx, &format!("h_in[{k}]"), x)?);
        d_in.push(copy.alloc_zeros_named::<f32>(&format!("d_in[{k}]"), CHUNK)?);
        copy.memcpy_htod(&h_in[k], &mut d_in[k])?;
        uploaded.push(copy.record_event(None)?);
        h_out.push(pinned(ctx, &format!("h_out[{k}]"), &vec![f32::NAN; CHUNK])?);
        d_out.push(compute.alloc_zeros_named::<f32>(&format!("d_out[{k}]"), CHUNK)?);
    }
    for (k, chunk_ready) in uploaded.iter().enumerate() {
        compute.wait(chunk_ready)?;
        ops::fill(&compute, &mut d_out[k], 1.0)?;
        ops::axpy(&compute, 2.0, &d_in[k], &mut d_out[k])?;
        if k == CHUNKS - 1 {
            ops::spin(&compute, SPIN_CYCLES)?; // delays the last download
        }
        compute.memcpy_dtoh(&d_out[k], &mut h_out[k])?; // race: the write
    }
    if variant.fixed {
        compute.synchronize()?; // the fix: the downloads have landed before the host reads
    }
    let mut gpu = Vec::with_capacity(CHUNKS * CHUNK);
    for h in &h_out {
        gpu.extend_from_slice(h.as_slice()?); // race: the read
    }

    ctx.synchronize()?; // wait for everything (the racy downloads too) before freeing
    drop((uploaded, d_in, d_out, h_in, h_out));
    let reference = cpu::axpy(2.0, &input, &cpu::fill(1.0, input.len()));
    Ok(Outcome::new(ctx, gpu, reference, Tolerance::ELEMENTWISE))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let variant = Variant::new(!flag("--readback-race"), flag("--tracking"));
    demos::main("pipeline", USAGE, &args, variant, run)
}
