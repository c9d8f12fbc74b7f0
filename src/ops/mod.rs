//! A small set of f32 tensor ops over the streamsan wrappers, with CPU references: what the
//! examples and the GPU tests run, and a model of how a user's own kernels should be wrapped.
//!
//! Every op is a real CUDA C kernel from `kernels/` (compiled by NVRTC at run time, loaded once
//! per CUDA context: [`Kernels`]), launched through [`crate::cuda::LaunchBuilder`] with each
//! parameter named as in the `.cu` source, so a race report says `arg "x"` of `sum`. Buffers a
//! kernel only reads are passed as `&`, buffers it writes as `&mut`: that is what the sanitizer
//! records and what cudarc's event tracking follows. The ops are `#[track_caller]`: reports point
//! at the line that called the op, not into this module.
//!
//! | op | kernel(s) | reads | writes |
//! | --- | --- | --- | --- |
//! | [`randn`]`(&s, &mut out, seed)` | `randn(out, seed, n)` | | `out` |
//! | [`sum`]`(&s, &x, &mut out)` | `fill(out, 0, 1)`, then `sum(x, out, n)` | `x` | `out` |
//! | [`axpy`]`(&s, a, &x, &mut y)` | `axpy(a, x, y, n)`: y = a x + y | `x` | `y` |
//! | [`add`]`(&s, &x, &y, &mut out)` | `add(x, y, out, n)` | `x`, `y` | `out` |
//! | [`fill`]`(&s, &mut out, v)` | `fill(out, value, n)` | | `out` |
//! | [`copy`]`(&s, &src, &mut dst)` | `copy(src, dst, n)` | `src` | `dst` |
//! | [`spin`]`(&s, cycles)` | `spin(cycles)`: one thread busy-waits | | |
//!
//! [`cpu`] computes the same results on the host ([`cpu::randn`] gives the same numbers as the
//! GPU's, to a few ulp: output `i` depends only on `(seed, i)`), [`compare`] says whether two
//! results agree, and [`demos`] holds the bodies of the examples in `examples/`, shared with
//! `tests/gpu_examples.rs`.

pub mod compare;
pub mod cpu;
pub mod demos;
mod gpu;
mod kernels;
mod philox;

pub use gpu::{add, axpy, copy, fill, randn, spin, sum};
pub use kernels::{Kernels, SOURCES};

use crate::cuda::DriverError;

/// What an op can fail with.
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
    /// A thread of a multi-threaded demo stopped early (the other thread's error says why).
    #[error("{0}")]
    Thread(&'static str),
    /// Making a context (examples only).
    #[error("{0}")]
    Context(String),
}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Driver(e)
    }
}

impl From<crate::cuda::Error> for Error {
    fn from(e: crate::cuda::Error) -> Self {
        Error::Context(e.to_string())
    }
}
