//! What several test files share (`mod common;`): the kernels of the GPU tests, compiled by
//! NVRTC at run time; finding the source line a report points at; and the records the CPU
//! tests feed to the sanitizer through `Sanitizer::record_op`. Each file uses part of it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use streamsan::cuda::testing::{Harness, Run};
use streamsan::cuda::{CudaContext, CudaFunction, CudaStream, Options, ReportTo, Sanitizer};
use streamsan::engine::{Race, RaceKind};
use streamsan::trace::record::Pool;
use streamsan::trace::record::{MemSpace, Op, StreamFlags, StreamKind};
use streamsan_demos::{Error, ops};

/// The GPU tests' kernels, one thread per element: `fill` writes `out = v`, `scale` writes
/// `out = in * k`, `inc` adds 1 to `y`, `total` adds every `in[i]` into `*sum` with
/// `atomicAdd`.
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
extern "C" __global__ void total(float *sum, const float *in, size_t n) {
    size_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(sum, in[i]);
}
"#;

/// [`KERNELS`], loaded.
pub struct Kernels {
    pub fill: CudaFunction,
    pub scale: CudaFunction,
    pub inc: CudaFunction,
    pub total: CudaFunction,
}

/// Compiles [`KERNELS`] and loads them into `ctx` (loading a module records nothing).
pub fn kernels(ctx: &Arc<CudaContext>) -> Kernels {
    let ptx = cudarc::nvrtc::compile_ptx(KERNELS).expect("nvrtc");
    let module = ctx.load_module(ptx).unwrap();
    Kernels {
        fill: module.load_function("fill").unwrap(),
        scale: module.load_function("scale").unwrap(),
        inc: module.load_function("inc").unwrap(),
        total: module.load_function("total").unwrap(),
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

/// Runs `f` on a fresh sanitized context (the demos' kernels loaded) and returns what it read
/// back, and the run. With `fixture` and `STREAMSAN_FIXTURE_DIR` set, the run's trace goes to
/// `$STREAMSAN_FIXTURE_DIR/<fixture>.jsonl` (to be committed under `tests/fixtures/gpu/`).
pub fn checked(
    fixture: Option<&str>,
    f: impl FnOnce(&Arc<CudaContext>) -> Result<Vec<f32>, Error>,
) -> (Vec<f32>, Run) {
    let mut harness = Harness::new();
    if let (Some(name), Some(dir)) = (fixture, std::env::var_os("STREAMSAN_FIXTURE_DIR")) {
        let path = PathBuf::from(dir).join(format!("{name}.jsonl"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        harness = harness.trace_path(path);
    }
    let mut out = Vec::new();
    let run = harness
        .run(0, |ctx| {
            streamsan_demos::Kernels::get(ctx)?;
            out = f(ctx)?;
            Ok::<(), Error>(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    (out, run)
}

/// Runs the demos' `spin` and `fill` once on `stream` and waits: CUDA loads kernels lazily, with
/// a synchronization, which would hide a race on a kernel's first launch.
pub fn warm_up(stream: &Arc<CudaStream>) -> Result<(), Error> {
    let mut w = stream.alloc_zeros::<f32>(16)?;
    ops::spin(stream, 1)?;
    ops::fill(stream, &mut w, 0.0)?;
    stream.synchronize()?;
    Ok(())
}

/// A racy program and its fixed twin, each as (values read back, run): the racy one read
/// `wrong` everywhere and reported a race of `kind` (returned, for more checks); the fixed one
/// read `right` everywhere and is clean.
pub fn assert_wrong_then_right(
    what: &str,
    racy: (Vec<f32>, Run),
    fixed: (Vec<f32>, Run),
    (wrong, right): (f32, f32),
    kind: RaceKind,
) -> Race {
    let (values, run) = racy;
    println!("{what}: {} (meant: {right})", values[0]);
    assert!(values.iter().all(|&v| v == wrong), "{what}: {}", values[0]);
    let race = run
        .races()
        .into_iter()
        .find(|r| r.kind == kind)
        .cloned()
        .unwrap_or_else(|| panic!("{what}: no {} race\n{}", kind.as_str(), run.report()));
    let (values, run) = fixed;
    assert!(
        values.iter().all(|&v| v == right),
        "{what}, fixed: {}",
        values[0]
    );
    run.assert_no_races();
    race
}

/// A sanitized context of device 0 (the environment ignored) writing its trace to `trace`.
pub fn traced_context(trace: &Path) -> Arc<CudaContext> {
    CudaContext::builder()
        .ignore_env()
        .sanitize(true)
        .trace_path(trace)
        .build(0)
        .expect("a CUDA device")
}

/// A sanitizer as `STREAMSAN=1 STREAMSAN_OPTIONS=trace=...:report=...` makes it: the trace at
/// `trace`, the report beside it (`.report`).
pub fn traced_sanitizer(trace: &Path) -> Arc<Sanitizer> {
    Sanitizer::new(Options {
        trace: Some(trace.to_path_buf()),
        report: ReportTo::Path(trace.with_extension("report")),
        ..Options::default()
    })
    .unwrap()
}
