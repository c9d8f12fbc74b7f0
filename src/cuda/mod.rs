//! The online layer: wrappers over cudarc that run the real work and, when sanitizing, record
//! every call and check it as it happens.
//!
//! The nouns and verbs are cudarc's: a [`Context`] makes [`Stream`]s (`default_stream`,
//! `new_stream`, `fork`), streams allocate [`DeviceBuffer`]s, copy, `launch_builder`,
//! `record_event`, `wait`, `join`, `synchronize`. Sanitizing is off unless `STREAMSAN=1` or
//! [`ContextBuilder::sanitize`]; off, each wrapper checks one `Option` and calls cudarc (no lock,
//! no allocation).
//!
//! On, every public call is `#[track_caller]`: reports point at the program's line. The wrapper
//! takes its [`Sanitizer`]'s lock, makes the cudarc call, and records what happened —
//! including the waits and records cudarc's automatic event tracking performs on its own
//! (`model.rs` mirrors cudarc 0.19.10 for that; `docs/online.md` lists every case) — so the
//! trace order is the enqueue order across host threads.
//!
//! ```no_run
//! use streamsan::cuda::{Context, LaunchConfig};
//! # fn main() -> Result<(), streamsan::cuda::Error> {
//! let ctx = Context::builder().sanitize(true).trace_path("run.jsonl").build(0)?;
//! let main = ctx.default_stream();
//! let side = ctx.new_stream_named("side")?;
//! let x = main.alloc_zeros_named::<f32>("x", 1024)?;
//! side.join(&main)?; // without this (and with event tracking off) reading x races
//! let y = side.clone_dtoh(&x)?;
//! # let _ = y; Ok(()) }
//! ```
//!
//! Module map: `options` (flags), `sanitizer` (the handle, the lock, record numbering), `model`
//! (what cudarc does, as pure functions), `step` (what a call records), `context` / `stream` / `event` / `buffer` / `pinned` /
//! `host_mem` / `memory` / `sync_copy` / `launch` / `host_func` (the wrappers), `records`
//! (the records of memory calls, pure), `reporting` (folding and printing findings through the
//! report layer, suppressions and baseline), `trace_file` (where trace lines go, crash-safe),
//! [`testing`] (checked runs for regression tests).

mod buffer;
mod context;
mod error;
mod event;
mod host_func;
mod host_mem;
mod launch;
mod memory;
mod model;
pub mod options;
mod pinned;
mod records;
mod reporting;
mod sanitizer;
mod step;
mod stream;
mod sync_copy;
pub mod testing;
mod threads;
mod trace_file;

pub use buffer::{BufRef, DeviceBuffer, DeviceDst, DeviceSrc, DeviceView, DeviceViewMut, Tracked};
pub use context::{Context, ContextBuilder};
pub use error::Error;
pub use event::Event;
pub use host_func::HostFuncBuilder;
pub use host_mem::HostMem;
pub use launch::{ArgAccess, Function, KernelArg, KernelArgMut, LaunchBuilder, Module};
pub use options::{Options, ReportFormat, ReportTo};
pub use pinned::PinnedBuffer;
pub use reporting::{MAX_KEPT_FINDINGS, MAX_PRINTED_WARNINGS};
pub use sanitizer::Sanitizer;
pub use stream::Stream;

pub use crate::trace::record::StreamFlags;
pub use cudarc::driver::{DeviceRepr, DriverError, LaunchConfig, ValidAsZeroBits};

#[cfg(test)]
mod tests {
    use super::*;

    /// Handles move between host threads, as cudarc's do; the lock makes the sanitizer shared.
    #[test]
    fn handles_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Sanitizer>();
        check::<Context>();
        check::<Stream>();
        check::<Event>();
        check::<DeviceBuffer<f32>>();
        check::<DeviceView<'static, f32>>();
        check::<PinnedBuffer<f32>>();
        check::<Function>();
    }
}
