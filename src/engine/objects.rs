//! The engine's tables of live objects besides actors: streams, events and buffers. Plain
//! structs; the rules that change them live in the family modules (`streams`, `events`,
//! `memory`).

use std::sync::Arc;

use smallvec::SmallVec;

use super::finding::{BufferInfo, StreamInfo};
use super::shadow::{RangeMap, Stamp};
use super::vclock::{ActorIdx, VClock};
use crate::trace::record::{GraphId, Record, StreamId, ThreadId};

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
    /// For a blocking stream, its device's legacy stream's actor once looked up (a device's
    /// legacy stream, once declared, stays): every operation on the stream needs it.
    pub legacy: Option<ActorIdx>,
    /// For the implicit stream 0: whether any record used it (for the stream count).
    pub used: bool,
    /// `(actor, version)` pairs already joined into this stream: the host threads that issued
    /// work on it and, for a blocking stream, its device's legacy stream.
    pub joined: Vec<(ActorIdx, u64)>,
    /// While the stream is being captured: the graph and the stream's lane in it.
    pub capture: Option<(GraphId, u32)>,
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

/// An event record made while its stream was being captured: not a point in any stream's
/// history but a position in a graph (CUDA Programming Guide, "Cross-stream Dependencies and
/// Events": a captured event represents a set of nodes in a capture graph).
#[derive(Clone, Debug)]
pub(super) struct CapturedRecord {
    pub graph: GraphId,
    /// The `graph_begin` line of the capture: a graph id may be captured again after
    /// `graph_destroy`, and an event recorded in an earlier capture names none of its nodes.
    pub capture: u64,
    /// The nodes the recording lane's next node would have depended on at the record: its last
    /// node and the nodes of the waits captured since ("the contents of stream", R17).
    pub nodes: SmallVec<[u32; 2]>,
    /// The stream that recorded it.
    pub stream: StreamId,
    /// The `record`'s line.
    pub line: u64,
}

/// An event's latest record.
#[derive(Debug)]
pub(super) enum LastRecord {
    Snapshot(Snapshot),
    Captured(CapturedRecord),
}

/// A declared event.
#[derive(Debug, Default)]
pub(super) struct EventState {
    pub declared_line: u64,
    /// The latest record, if any.
    pub last: Option<LastRecord>,
}

/// A graph: captured (or being captured), launched any number of times.
#[derive(Debug)]
pub(super) struct GraphState {
    /// The `graph_begin` line.
    pub begin_line: u64,
    /// The stream capture began on (lane 0); `graph_end` must name it.
    pub origin: StreamId,
    /// Until `graph_end`.
    pub capturing: bool,
    /// The captured streams, in the order they joined the capture.
    pub lanes: Vec<Lane>,
    /// The captured operations, in capture order.
    pub nodes: Vec<Node>,
    /// One actor per lane, made at the first launch and kept: launches of one graph are
    /// ordered anyway.
    pub lane_actors: Vec<ActorIdx>,
    /// What the previous launch's nodes had done, for the next launch to wait for.
    pub done: Option<VClock>,
    /// The report label: `g1`, `g2`, ... in order of capture.
    pub ordinal: u32,
    /// The latest launches' lines and streams (for reports about their nodes).
    pub launches: std::collections::VecDeque<(u64, StreamId)>,
    /// Its allocation nodes' buffers and allocation ordinals (`graph_memory.rs`).
    pub allocations: Vec<(crate::trace::record::BufId, u32)>,
}

/// A buffer whose id was reused while something may still refer to its allocation (a node
/// of a live graph): what a later use after free reports.
#[derive(Debug)]
pub(super) struct Retired {
    pub info: Arc<BufferInfo>,
    pub freed: Stamp,
}

/// One captured stream of a graph.
#[derive(Debug)]
pub(super) struct Lane {
    pub stream: StreamId,
    /// The lane's last node.
    pub last: Option<u32>,
    /// Nodes of other lanes the lane's next node depends on (waits captured since its last
    /// node).
    pub pending: SmallVec<[u32; 2]>,
}

/// One captured operation.
#[derive(Debug)]
pub(super) struct Node {
    /// The record as captured (its line and `at` name the node in reports).
    pub record: Record,
    pub lane: u32,
    /// Nodes of other lanes it depends on; its lane's previous node is implied.
    pub deps: SmallVec<[u32; 2]>,
    /// The allocation identity (ordinal) of each buffer it accesses, in access order, as at
    /// capture: a buffer freed (and its id reused) before a launch is a use after free.
    pub ordinals: SmallVec<[u32; 4]>,
}

/// An allocation, live or freed (a freed one stays as a tombstone until its id is reused, so
/// later uses are reported as use-after-free). Laid out to fill two cache lines exactly: every
/// access reads it, and with thousands of live buffers it is what the engine waits for.
#[derive(Debug)]
#[repr(align(64))]
pub(super) struct BufferState {
    /// `info.bytes`, kept inline for the bounds check on the hot path.
    pub bytes: u64,
    /// `info.ordinal`, inline for the same reason.
    pub ordinal: u32,
    pub info: Arc<BufferInfo>,
    pub shadow: RangeMap,
    /// The free, once freed (boxed: most buffers that are accessed are live, and the state
    /// stays small).
    pub freed: Option<Box<Stamp>>,
}
#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    /// Every access reads a buffer's state: it stays within two cache lines.
    #[test]
    fn a_buffer_state_fills_two_cache_lines() {
        assert_eq!(std::mem::size_of::<super::BufferState>(), 128);
        assert_eq!(std::mem::align_of::<super::BufferState>(), 64);
    }
}
