//! Semantic input errors: records that parse but cannot describe a real program (an undeclared
//! stream, an access outside its buffer, a double free). They carry the record's line; the
//! caller adds the file name.

use crate::trace::record::{BufId, EventId, GraphId, StreamId};

/// A record the engine cannot accept. Checking stops at the first one: a verdict on a trace
/// that is not what it claims would not be a verdict.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct InputError {
    pub line: u64,
    pub kind: InputErrorKind,
}

/// What is wrong with the record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputErrorKind {
    #[error("stream {0} is not declared (expected a `stream` record with this id earlier)")]
    UndeclaredStream(StreamId),
    #[error(
        "event {0} is not declared (expected an `event` record with this id earlier, and no `event_destroy` since)"
    )]
    UndeclaredEvent(EventId),
    #[error("buffer {0} is not allocated (expected an `alloc` record with this id earlier)")]
    UndeclaredBuffer(BufId),
    #[error("stream {id} is declared again while it exists (first declared at line {first})")]
    StreamRedeclared { id: StreamId, first: u64 },
    #[error("event {id} is declared again before its `event_destroy` (declared at line {first})")]
    EventRedeclared { id: EventId, first: u64 },
    #[error("buffer {id} is allocated again before it is freed (allocated at line {first})")]
    BufferRedeclared { id: BufId, first: u64 },
    #[error("buffer {id} is freed twice (first freed at line {first})")]
    DoubleFree { id: BufId, first: u64 },
    #[error(
        "bytes [{off}, {off}+{len}) are outside buffer {id}, which has {bytes} bytes (expected off + len <= {bytes})"
    )]
    OutOfBounds {
        id: BufId,
        off: u64,
        len: u64,
        bytes: u64,
    },
    #[error("stream 0 is the legacy default stream of device 0; it cannot be declared as {0}")]
    BadStreamZero(String),
    #[error(
        "graph {0} is not captured (expected a `graph_begin` record with this id earlier, and no `graph_destroy` since)"
    )]
    UndeclaredGraph(GraphId),
    #[error(
        "graph {id} is captured again before its `graph_destroy` (its capture began at line {first})"
    )]
    GraphRedeclared { id: GraphId, first: u64 },
    /// A stream-capture rule of CUDA broken: the capture would fail, so the trace cannot be a
    /// real program's.
    #[error("{0}")]
    Capture(String),
    /// A caching allocator's block declared over bytes of a block that is still live: no
    /// pool does that. Kept apart from [`InputErrorKind::Invalid`] so that a recorder can
    /// tell which block it still holds (the PyTorch recorder ends a stale one and retries).
    #[error(
        "caching block {buf} at [{addr:#x}, {end:#x}) overlaps the live block {other} on device {device} (a pool hands out only free bytes; expected a `free` of buffer {other} first)"
    )]
    CachingOverlap {
        buf: BufId,
        addr: u64,
        end: u64,
        other: BufId,
        device: crate::trace::record::DeviceId,
    },
    #[error("{0}")]
    Invalid(String),
}
