//! What the engine resolved about the record it just applied, for exporters that draw a trace
//! (`report::timeline`): where the record ran, the buffers it touched, and the synchronization
//! edges the ordering rules applied. Exporters draw these instead of replaying the rules, so a
//! drawn arrow is exactly an ordering the engine used. Collected only when asked for
//! ([`Engine::observe`]): the checking path does not pay for it.

use std::sync::Arc;

use super::Engine;
use super::clocks::ActorKind;
use super::finding::{BufferInfo, StreamInfo};
use super::vclock::ActorIdx;
use crate::trace::record::{OpKind, StreamId, ThreadId};

/// Where work ran: a stream, or a host thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    Stream(StreamId),
    Host(ThreadId),
}

/// Why an edge exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeKind {
    /// A call that orders: a `wait`, a stream / event / device sync, a query that returned
    /// done, a copy or memset that the host waits for.
    Call(OpKind),
    /// The legacy default stream's implicit barrier (R6), in either direction.
    LegacyBarrier,
}

/// "`to` learned of the work `from` had done up to its operation at `from_line`", applied by
/// the current record. Only edges that taught the destination something new are listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyncEdge {
    pub from: Place,
    /// The trace line of the latest operation of `from` that the destination learned of (for a
    /// wait or an event sync: the `record`).
    pub from_line: u64,
    /// The current record's stream, or its host thread.
    pub to: Place,
    pub kind: EdgeKind,
}

/// See the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The stream the record ran on (or declared, or synchronized), if any.
    pub stream: Option<StreamInfo>,
    /// The buffers of the record's accesses, in the order of its fields: `reads` then
    /// `writes`; `src` then `dst`; the allocated or freed buffer.
    pub buffers: Vec<Arc<BufferInfo>>,
    /// The edges applied, in order.
    pub edges: Vec<SyncEdge>,
    /// The graph's report ordinal (`g{n}`), for a graph record, or for a record captured into
    /// a graph instead of running.
    pub graph: Option<u32>,
}

impl Engine {
    /// Starts (or stops) collecting a [`Resolved`] for every record applied from now on.
    pub fn observe(&mut self, on: bool) {
        self.resolved = on.then(Resolved::default);
    }

    /// What the engine resolved about the last record applied, when observing.
    pub fn resolved(&self) -> Option<&Resolved> {
        self.resolved.as_ref()
    }

    pub(super) fn note_stream(&mut self, id: StreamId) {
        if let Some(r) = &mut self.resolved {
            r.stream = Some(self.streams[&id].info.clone());
        }
    }

    pub(super) fn note_graph(&mut self, graph: crate::trace::record::GraphId) {
        if let (Some(r), Some(g)) = (&mut self.resolved, self.graphs.get(&graph)) {
            r.graph = Some(g.ordinal);
        }
    }

    pub(super) fn note_buffer(&mut self, info: &Arc<BufferInfo>) {
        if let Some(r) = &mut self.resolved {
            r.buffers.push(info.clone());
        }
    }

    /// Joins `src` into `dst` through the current call, noting the edge when it taught `dst`
    /// something new about `src`.
    pub(super) fn join_noted(&mut self, dst: ActorIdx, src: ActorIdx, kind: EdgeKind) {
        let before = self.actors.clock(dst).get(src);
        self.actors.join(dst, src, self.via());
        if self.resolved.is_some() && self.actors.clock(dst).get(src) > before {
            let from_line = self.actors.last_line(src);
            self.push_edge(src, from_line, dst, kind);
        }
    }

    /// Joins an event snapshot taken on `src` at `from_line` into `dst`, noting the edge.
    pub(super) fn join_snapshot_noted(
        &mut self,
        dst: ActorIdx,
        clock: &super::vclock::VClock,
        src: ActorIdx,
        from_line: u64,
    ) {
        let before = self.actors.clock(dst).get(src);
        self.actors.join_clock(dst, clock, self.via());
        if self.resolved.is_some() && self.actors.clock(dst).get(src) > before {
            let kind = EdgeKind::Call(self.current.op);
            self.push_edge(src, from_line, dst, kind);
        }
    }

    /// A wait captured into a graph: an edge from the node the event stood for (captured on
    /// `from` at `from_line`) to the current record on `to`.
    pub(super) fn note_captured_edge(&mut self, from: StreamId, from_line: u64, to: StreamId) {
        let kind = EdgeKind::Call(self.current.op);
        if let Some(r) = &mut self.resolved {
            r.edges.push(SyncEdge {
                from: Place::Stream(from),
                from_line,
                to: Place::Stream(to),
                kind,
            });
        }
    }

    fn push_edge(&mut self, src: ActorIdx, from_line: u64, dst: ActorIdx, kind: EdgeKind) {
        let place = |k: ActorKind| match k {
            ActorKind::Stream(id) | ActorKind::Lane { stream: id, .. } => Place::Stream(id),
            ActorKind::Host(t) => Place::Host(t),
        };
        let edge = SyncEdge {
            from: place(self.actors.kind(src)),
            from_line,
            to: place(self.actors.kind(dst)),
            kind,
        };
        if let Some(r) = &mut self.resolved {
            r.edges.push(edge);
        }
    }
}
