//! Trace format v1 (JSON Lines): record types, a streaming reader, a writer.
//!
//! The format is specified in `docs/trace-format.md`. [`TraceReader`] turns a file (or stdin, or
//! any `BufRead`) into [`Record`]s with line-numbered [`TraceError`]s, holding one line in
//! memory at a time; [`TraceWriter`] writes records back in the same format, one line per
//! `write_all`. Writing a record and reading it back gives the same record (its `line` aside,
//! which the reader assigns).

pub mod error;
mod parse;
pub mod reader;
pub mod record;
pub mod writer;

pub use error::TraceError;
pub use reader::TraceReader;
pub use record::{
    Access, BufId, ByteRange, DeviceId, EventId, GraphId, MemSpace, Op, OpKind, Pool, Record,
    StreamFlags, StreamId, StreamKind, ThreadId,
};
pub use writer::TraceWriter;

/// The header key whose value is the major format version: `{"streamsan_trace": 1}`.
pub const HEADER_KEY: &str = "streamsan_trace";
/// The major format version this crate reads and writes.
pub const FORMAT_VERSION: u64 = 1;
/// The newest minor version this crate knows. A trace declaring a newer `"minor"` may hold ops
/// this reader skips (see [`TraceReader::skipped`]).
pub const FORMAT_MINOR: u64 = 1;
/// The longest line the reader accepts, in bytes (16 MiB).
pub const MAX_LINE_BYTES: usize = 16 << 20;
