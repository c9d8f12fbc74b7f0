//! The engine's tables of live objects besides actors: streams, events and buffers. Plain
//! structs; the rules that change them live in the family modules (`streams`, `events`,
//! `memory`).

use std::sync::Arc;

use super::finding::{BufferInfo, StreamInfo};
use super::shadow::{RangeMap, Stamp};
use super::vclock::{ActorIdx, VClock};
use crate::trace::record::ThreadId;

/// A declared stream.
#[derive(Debug)]
pub(super) struct StreamState {
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

/// What an event record captured: the recording stream's clock at the call (R2).
#[derive(Debug)]
pub(super) struct Snapshot {
    pub clock: VClock,
    /// The recording stream's actor.
    pub actor: ActorIdx,
    /// The `record`'s line.
    pub line: u64,
}

/// A declared event.
#[derive(Debug, Default)]
pub(super) struct EventState {
    pub declared_line: u64,
    /// The latest record, if any.
    pub last: Option<Snapshot>,
}

/// An allocation, live or freed (a freed one stays as a tombstone until its id is reused, so
/// later uses are reported as use-after-free).
#[derive(Debug)]
pub(super) struct BufferState {
    /// `info.bytes`, kept inline for the bounds check on the hot path.
    pub bytes: u64,
    pub info: Arc<BufferInfo>,
    pub shadow: RangeMap,
    /// The free, once freed.
    pub freed: Option<Stamp>,
}
