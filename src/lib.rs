//! streamsan: a CUDA stream sanitizer.
//!
//! # Background
//!
//! GPU programs that use several CUDA streams break quietly. A kernel on one stream reads a
//! buffer that another stream is still writing, because nobody recorded an event and waited on
//! it: `randn` fills a tensor on the default stream, `sum` reads it on a side stream, and
//! sometimes the sum runs first. The numbers are wrong now and then, on some machines.
//! compute-sanitizer does not see these races (they are orderings between streams, not between
//! threads of one kernel), and PyTorch's CUDA Sanitizer sees some of them, only inside PyTorch.
//!
//! # What streamsan does
//!
//! It models CUDA's ordering rules (streams, events, host synchronization, the legacy default
//! stream, copies, host functions, stream-ordered allocation; see `docs/ordering-model.md`) as
//! vector clocks, records which byte ranges each operation reads and writes, and reports every
//! pair of accesses to overlapping bytes that nothing orders. One [`engine::Engine`] serves two
//! ways of feeding it:
//!
//! - **offline**: a trace in [trace format v1](trace) (JSON Lines) is checked by
//!   `streamsan check trace.jsonl` on any machine, no GPU needed ([`check`]);
//! - **online**: [`cuda`] is cudarc's safe driver API under its own names (cargo feature `cuda`,
//!   on by default): a cudarc program changes its `cudarc::driver` paths to `streamsan::cuda`,
//!   and each call then feeds the same records as the program runs, turned on by `STREAMSAN=1`
//!   or the builder API.
//!
//! # Layers
//!
//! [`trace`] (records, reader, writer) → [`engine`] (clocks, rules, shadow state) → [`report`]
//! (text, JSON, SARIF), with [`suppress`] filtering reports by suppressions and baselines.
//! [`check`] wires them for a file. The programs in `examples/` show the online layer on real
//! kernels; those kernels, with their CPU references, are the workspace crate `streamsan-demos`
//! (not published).
//!
//! # Limitations
//!
//! The engine trusts the access declarations it is given: a kernel that writes an argument
//! declared as read is invisible to it. It models only the ordering the CUDA documentation
//! guarantees, so a program that relies on incidental synchronization (say, `cudaFree`
//! happening to wait for the device) is reported. Host-side synchronization between host
//! threads (mutexes, channels) is not part of a trace. See `docs/ordering-model.md`, "What is
//! not modelled".

pub mod check;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod engine;
pub mod live;
pub mod report;
pub mod suppress;
pub mod trace;

/// The regression-test API: run GPU code under a fresh sanitizer and assert on its findings
/// (`docs/regression-tests.md`).
#[cfg(feature = "cuda")]
pub use cuda::testing;
