//! INTERIM — TO BE REPLACED. Minimal stand-ins for two pieces other branches are writing, so
//! that the online layer builds and runs on its own:
//!
//! - [`writer::TraceWriter`] stands for `crate::trace::writer::TraceWriter` (same constructor
//!   and methods). Replace by deleting `writer.rs` and pointing the `TraceWriter` import in
//!   `sanitizer.rs` at the real one.
//! - [`report`] formats races and warnings minimally. Replace its three functions with the
//!   report layer's `Collector` + `render_text` / `render_json` (one-race reports while
//!   running, the whole report at the end); callers are in `sanitizer.rs` only.

pub(crate) mod report;
pub(crate) mod writer;
