//! Trace format v1: record types, a streaming reader, writers of its two encodings.
//!
//! The format is specified in `docs/trace-format.md`. It has two encodings of the same header
//! and records: JSON Lines, and a binary encoding ([`binary`]) for size and decode speed.
//! [`TraceReader`] turns a file (or stdin, or any `BufRead`) in either encoding, chosen by its
//! first byte, into [`Record`]s with line-numbered [`TraceError`]s, holding one line or frame in
//! memory at a time; [`TraceWriter`] writes JSON Lines, one line per `write_all`, and
//! [`BinaryWriter`] the binary encoding. Writing a record and reading it back gives the same
//! record (its `line` aside, which the reader assigns).

#[cfg(test)]
mod arbitrary;
pub mod binary;
pub mod error;
mod parse;
pub mod reader;
pub mod record;
#[cfg(test)]
pub(crate) mod repository_traces;
mod spare;
pub mod writer;

pub use binary::BinaryWriter;
pub use error::TraceError;
pub use reader::{Encoding, Entry, ReadProgress, SkippedRecord, TraceReader};
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
pub const FORMAT_MINOR: u64 = 3;
/// The longest line the reader accepts, in bytes (16 MiB).
pub const MAX_LINE_BYTES: usize = 16 << 20;
