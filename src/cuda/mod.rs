//! The online layer: cudarc 0.19's safe driver API (`cudarc::driver`), with the same names and
//! signatures, running the real work and, when sanitizing, recording every call and checking it
//! as it happens. A cudarc program is checked by changing its `cudarc::driver` paths to
//! `streamsan::cuda` (`docs/migrating-from-cudarc.md`).
//!
//! Sanitizing is off unless `STREAMSAN=1` or [`ContextBuilder::sanitize`]; off, each wrapper
//! checks one `Option` and calls cudarc (no lock, no allocation).
//!
//! On, every public call is `#[track_caller]`: reports point at the program's line. The wrapper
//! takes its [`Sanitizer`]'s lock, makes the cudarc call, and records what happened —
//! including the waits and records cudarc's automatic event tracking performs on its own
//! (`model.rs` mirrors cudarc 0.19.10 for that; `docs/online.md` lists every case) — so the
//! trace order is the enqueue order across host threads.
//!
//! ```no_run
//! use streamsan::cuda::CudaContext;
//! # fn main() -> Result<(), streamsan::cuda::DriverError> {
//! let ctx = CudaContext::new(0)?; // sanitized when STREAMSAN=1
//! let main = ctx.default_stream();
//! let side = ctx.new_stream()?;
//! let x = main.alloc_zeros::<f32>(1024)?;
//! side.join(&main)?; // without this (and with event tracking off) reading x races
//! let y = side.clone_dtoh(&x)?;
//! # let _ = y; Ok(()) }
//! ```
//!
//! What is not checked: the raw [`sys`] and [`result`] modules (re-exported from cudarc, they
//! reach the driver directly), work done through the wrapped cudarc objects (`.cudarc()`), what
//! a raw pointer from [`DevicePtr::device_ptr`] is used for, and what a kernel does beyond what
//! its arguments declare.
//!
//! Module map: `options` / `builder` (flags), `sanitizer` (the handle, the lock, record
//! numbering), `model` (what cudarc does, as pure functions), `step` (what a call records),
//! `context` / `stream` / `event` / `slice` / `view` / `device_ptr` / `host_slice` / `pinned` /
//! `memory` / `sync_copy` / `module` / `launch` / `graph` / `host_func` (the wrappers),
//! `records` (the records of memory calls, pure), `reporting` (folding and printing findings
//! through the report layer, suppressions and baseline), `trace_file` (where trace lines go,
//! crash-safe), [`testing`] (checked runs for regression tests).

mod builder;
mod context;
#[cfg(feature = "cublas")]
pub mod cublas;
#[cfg(feature = "curand")]
pub mod curand;
mod device_ptr;
mod error;
mod event;
mod forked;
mod graph;
mod host_func;
mod host_slice;
mod inline_list;
mod launch;
#[cfg(any(feature = "cublas", feature = "curand"))]
mod library;
mod memory;
mod model;
mod module;
pub mod options;
mod pinned;
mod prefetch;
mod records;
mod reporting;
mod sanitizer;
mod slice;
mod step;
mod stream;
mod sync_copy;
pub mod testing;
mod threads;
mod trace_file;
mod view;

pub use builder::ContextBuilder;
pub use context::CudaContext;
pub use device_ptr::{BufRef, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop, Tracked};
pub use error::Error;
pub use event::CudaEvent;
pub use graph::CudaGraph;
pub use host_func::HostFuncBuilder;
pub use host_slice::HostSlice;
pub use launch::{ArgAccess, LaunchArgs, PushKernelArg};
pub use module::{CudaFunction, CudaModule};
pub use options::{Options, ReportFormat, ReportTo};
pub use pinned::PinnedHostSlice;
pub use reporting::{MAX_KEPT_FINDINGS, MAX_PRINTED_WARNINGS};
pub use sanitizer::Sanitizer;
pub use slice::CudaSlice;
pub use stream::CudaStream;
pub use view::{CudaView, CudaViewMut};

pub use crate::trace::record::StreamFlags;
/// cudarc's plain data and marker traits, used as they are: they enqueue nothing.
pub use cudarc::driver::{
    DeviceRepr, DriverError, LaunchConfig, Profiler, ValidAsZeroBits, profiler_start, profiler_stop,
};
/// cudarc's raw driver API. **Not checked**: calls through it reach the driver directly and are
/// not recorded.
pub use cudarc::driver::{result, sys};

#[cfg(test)]
mod tests {
    use super::*;

    /// Handles move between host threads, as cudarc's do; the lock makes the sanitizer shared.
    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Sanitizer>();
        check::<CudaContext>();
        check::<CudaStream>();
        check::<CudaEvent>();
        check::<CudaSlice<f32>>();
        check::<CudaView<'static, f32>>();
        check::<PinnedHostSlice<f32>>();
        check::<CudaFunction>();
        check::<CudaModule>();
    }
}
