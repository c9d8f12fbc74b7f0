//! What several test files share (`mod common;`): the kernels of the GPU tests, compiled by
//! NVRTC at run time; finding the source line a report points at; and the records the CPU
//! tests feed to the sanitizer through `Sanitizer::record_op`. Each file uses part of it.

#![allow(dead_code)]

use std::sync::Arc;
use streamsan::cuda::{CudaContext, CudaFunction};
use streamsan::trace::record::Pool;
use streamsan::trace::record::{MemSpace, Op, StreamFlags, StreamKind};

/// The GPU tests' kernels, one thread per element: `fill` writes `out = v`, `scale` writes
/// `out = in * k`, `inc` adds 1 to `y`.
pub const KERNELS: &str = r#"
extern "C" __global__ void fill(float *out, float v, size_t n) {
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v;
}
extern "C" __global__ void scale(float *out, const float *in, float k, size_t n) {
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * k;
}
extern "C" __global__ void inc(float *y, size_t n) {
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += 1.0f;
}
"#;

/// [`KERNELS`], loaded.
pub struct Kernels {
    pub fill: CudaFunction,
    pub scale: CudaFunction,
    pub inc: CudaFunction,
}

/// Compiles [`KERNELS`] and loads them into `ctx` (loading a module records nothing).
pub fn kernels(ctx: &Arc<CudaContext>) -> Kernels {
    let ptx = cudarc::nvrtc::compile_ptx(KERNELS).expect("nvrtc");
    let module = ctx.load_module(ptx).unwrap();
    Kernels {
        fill: module.load_function("fill").unwrap(),
        scale: module.load_function("scale").unwrap(),
        inc: module.load_function("inc").unwrap(),
    }
}

/// The line a report's `file:line:col` points at, in `source`, the text of the test file
/// `file` (the location must be in it).
pub fn source_line(source: &'static str, file: &str, at: &str) -> &'static str {
    let mut parts = at.rsplitn(3, ':');
    let (_col, line, at_file) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
    assert!(at_file.ends_with(file), "{at} is not in {file}");
    let line: usize = line.parse().unwrap();
    source.lines().nth(line - 1).unwrap()
}

/// A created, non-blocking stream of device 0.
pub fn created_stream(id: u64) -> Op {
    Op::Stream {
        id,
        device: 0,
        kind: StreamKind::Created,
        flags: StreamFlags::NonBlocking,
    }
}

/// A 4096-byte device buffer of device 0, allocated by the host (not stream-ordered).
pub fn device_buffer(buf: u64) -> Op {
    Op::Alloc {
        buf,
        bytes: 4096,
        device: 0,
        space: MemSpace::Device,
        stream: None,
        addr: None,
        pool: Pool::Driver,
    }
}
