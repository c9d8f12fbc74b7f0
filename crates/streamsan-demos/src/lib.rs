//! What streamsan's examples and tests run, kept out of the published library: a few f32 tensor
//! ops over the streamsan wrappers with their CPU references, the bits every example shares, and
//! the synthetic workload of the benchmarks. Not published (`publish = false`).
//!
//! Every op is a real CUDA C kernel from the top-level `kernels/` directory (compiled by NVRTC
//! at run time, loaded once per CUDA context: [`Kernels`]), launched through
//! [`streamsan::cuda::LaunchArgs`] with each parameter named as in the `.cu` source, so a race
//! report says `arg "x"` of `sum`. Buffers a kernel only reads are passed as `&`, buffers it
//! writes as `&mut`: that is what the sanitizer records and what cudarc's event tracking follows.
//! The ops are `#[track_caller]`: reports point at the line that called the op, not into this
//! crate. They are also a model of how a user's own kernels should be wrapped.
//!
//! | op | kernel(s) | reads | writes |
//! | --- | --- | --- | --- |
//! | [`ops::randn`]`(&s, &mut out, seed)` | `randn(out, seed, n)` | | `out` |
//! | [`ops::sum`]`(&s, &x, &mut out)` | `fill(out, 0, 1)`, then `sum(x, out, n)` | `x` | `out` |
//! | [`ops::axpy`]`(&s, a, &x, &mut y)` | `axpy(a, x, y, n)`: y = a x + y | `x` | `y` |
//! | [`ops::add`]`(&s, &x, &y, &mut out)` | `add(x, y, out, n)` | `x`, `y` | `out` |
//! | [`ops::fill`]`(&s, &mut out, v)` | `fill(out, value, n)` | | `out` |
//! | [`ops::copy`]`(&s, &src, &mut dst)` | `copy(src, dst, n)` | `src` | `dst` |
//! | [`ops::spin`]`(&s, cycles)` | `spin(cycles)`: one thread busy-waits | | |
//!
//! [`cpu`] computes the same results on the host ([`cpu::randn`] gives the same numbers as the
//! GPU's, to a few ulp: output `i` depends only on `(seed, i)`), [`compare`] says whether two
//! results agree. [`Variant`], [`Outcome`] and [`main`] are what the programs in `examples/`
//! share (and `tests/gpu_examples.rs`, which runs them); [`synth`] generates the
//! race-free workload of `benches/throughput.rs` and of the report tests.

pub mod compare;
pub mod cpu;
mod example;
mod kernels;
pub mod ops;
mod philox;
pub mod synth;

pub use compare::Tolerance;
pub use example::{Outcome, SPIN_CYCLES, Variant, main};
pub use kernels::{Kernels, SOURCES, Source, ptx};

use streamsan::cuda::DriverError;

/// What an op or an example can fail with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// cudarc's `DriverError` (it implements neither `Display` nor `Error` without cudarc's
    /// `std` feature).
    #[error("CUDA driver error: {0:?}")]
    Driver(DriverError),
    /// NVRTC rejected a kernel source.
    #[error("NVRTC could not compile kernels/{file}: {log}")]
    Compile { file: &'static str, log: String },
    /// Buffers of lengths an op cannot combine.
    #[error("{op}: {what}")]
    Length { op: &'static str, what: String },
    /// A thread of a multi-threaded example stopped early (the other thread's error says why).
    #[error("{0}")]
    Thread(&'static str),
    /// Making a context.
    #[error("{0}")]
    Context(String),
}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Driver(e)
    }
}

impl From<streamsan::cuda::Error> for Error {
    fn from(e: streamsan::cuda::Error) -> Self {
        Error::Context(e.to_string())
    }
}
