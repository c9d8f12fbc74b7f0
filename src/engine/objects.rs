//! The engine's tables of live objects: actors (streams and host threads) with their clocks,
//! streams, events and buffers. Plain structs; the rules that change them live in `apply`.

use std::sync::Arc;

use super::finding::{BufferInfo, StreamInfo};
use super::shadow::{RangeMap, Stamp};
use super::vclock::{ActorIdx, VClock};
use crate::trace::record::{StreamId, ThreadId};

/// Where an actor's knowledge of another actor last came from: the line and op of the call
/// through which it arrived. The "why" sentence of a report names it.
pub type Via = (u64, &'static str);

/// Who an actor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActorKind {
    Stream(StreamId),
    Host(ThreadId),
}

/// A stream or host thread with its vector clock.
#[derive(Debug)]
pub struct Actor {
    pub kind: ActorKind,
    pub clock: VClock,
    /// `via[i]`: where this actor last learned more of actor `i`.
    pub via: Vec<Via>,
    /// Bumped whenever `clock` changes, so a stream can skip re-joining a host clock it has
    /// already joined (the common case: a host enqueuing many operations between syncs).
    pub version: u64,
}

impl Actor {
    pub fn new(kind: ActorKind) -> Actor {
        Actor {
            kind,
            clock: VClock::new(),
            via: Vec::new(),
            version: 0,
        }
    }
}

/// A declared stream.
#[derive(Debug)]
pub struct StreamState {
    pub info: StreamInfo,
    pub actor: ActorIdx,
    /// The line of its `stream` record (0 for the implicit stream 0 until declared).
    pub declared_line: u64,
    /// The thread that declared it: the owner of a per-thread default stream.
    pub owner: ThreadId,
    /// Whether it synchronizes with its device's legacy default stream.
    pub blocking: bool,
    /// For the implicit stream 0: whether any record used it (for the stream count).
    pub used: bool,
    /// `(actor, version)` pairs already joined into this stream: the host threads that issued
    /// work on it and, for a blocking stream, its device's legacy stream.
    pub joined: Vec<(ActorIdx, u64)>,
}

/// The snapshot an event record took.
#[derive(Debug)]
pub struct Snapshot {
    pub clock: VClock,
}

/// A declared event.
#[derive(Debug, Default)]
pub struct EventState {
    pub declared_line: u64,
    /// The latest record, if any.
    pub last: Option<Snapshot>,
}

/// An allocation, live or freed (a freed one stays as a tombstone until its id is reused, so
/// later uses are reported as use-after-free).
#[derive(Debug)]
pub struct BufferState {
    /// `info.bytes`, kept inline for the bounds check on the hot path.
    pub bytes: u64,
    pub info: Arc<BufferInfo>,
    pub shadow: RangeMap,
    /// The free, once freed.
    pub freed: Option<Stamp>,
}
