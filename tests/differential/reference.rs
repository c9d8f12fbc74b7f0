//! The reference model: a deliberately simple, slow and independent statement of
//! docs/ordering-model.md, written without looking at the engine.
//!
//! Happens-before is an explicit graph. Every record is a *call node* in its host thread's
//! program order; an operation enqueued on a stream is also an *op node*, after its call node
//! (R1) and after the previous op node of its stream. Synchronization adds edges (R2-R9, R14);
//! "A happens before B" is "A's node is reachable backwards from B's node" (a DFS). No clocks, no
//! epochs: what the engine computes with vector clocks, this computes by graph search.
//!
//! Shadow state follows the engine's documented definition of a reported pair, per byte: the last
//! write (alloc "birth" and free "death" included) and, per actor, the latest read since it.
//!
//! Readings of the spec that are choices (each has a fixed trace in tests/differential.rs):
//! - R6: a blocking stream waits for legacy-stream work at its *next* operation; syncing the
//!   blocking stream before it enqueues anything more does not cover the legacy work.
//! - R8: the "stream sync before the copy" of a synchronous pageable host-to-device copy is a
//!   stream sync like `stream_sync(s)`, so on a legacy stream it covers blocking streams too.
//! - R8: a host-to-host copy's accesses are its stream's, at its op node; the host joins after.
//! - R12: an `alloc` of a freed id is a new object with no history.
//! - R11: per byte, one latest read per actor since the last write, even where an earlier read
//!   of another actor is ordered before it (no FastTrack-style collapsing of the read set).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use streamsan::engine::{AccessKind, RaceKind};
use streamsan::trace::record::{
    Access, BufId, DeviceId, EventId, MemSpace, Op, Record, StreamFlags, StreamId, StreamKind,
    ThreadId,
};

/// (current line, previous line, kind): what the differential test compares.
pub type Triple = (u64, u64, RaceKind);

/// Who performs an access: the stream (a host function counts as its stream) or the host thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Actor {
    Stream(StreamId),
    Thread(ThreadId),
}

/// One access as remembered in the shadow state.
#[derive(Clone, Copy, Debug)]
struct Acc {
    line: u64,
    node: usize,
}

#[derive(Clone, Debug, Default)]
struct ByteState {
    write: Option<Acc>,
    /// The latest read of each actor since `write`.
    reads: Vec<(Actor, Acc)>,
}

#[derive(Clone, Debug)]
struct Buf {
    space: MemSpace,
    /// The line of the free, once freed (until the id is allocated again).
    freed_at: Option<u64>,
    shadow: Vec<ByteState>,
}

#[derive(Clone, Copy, Debug)]
struct StreamDecl {
    device: DeviceId,
    legacy: bool,
    /// Takes part in legacy-default-stream synchronization (R6, R7): created blocking streams
    /// and per-thread default streams. False for the legacy stream itself.
    blocking: bool,
}

/// Which way a copy goes, by the spaces of its buffers (R8: managed counts as device).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Pageable,
    Pinned,
    Device,
}

fn side(space: MemSpace) -> Side {
    match space {
        MemSpace::Host => Side::Pageable,
        MemSpace::Pinned => Side::Pinned,
        MemSpace::Device | MemSpace::Managed => Side::Device,
    }
}

#[derive(Debug, Default)]
pub struct Reference {
    /// `preds[n]`: the nodes with an edge into `n`. Nodes are numbered in creation order and
    /// every edge goes from an older node to a newer one.
    preds: Vec<Vec<usize>>,
    streams: BTreeMap<StreamId, StreamDecl>,
    /// The legacy default stream of each device.
    legacy: BTreeMap<DeviceId, StreamId>,
    /// The last op node of each stream.
    last_op: HashMap<StreamId, usize>,
    /// The last node of each host thread's program order.
    host_last: HashMap<ThreadId, usize>,
    /// Each live event's latest record op node (`None`: never recorded).
    events: HashMap<EventId, Option<usize>>,
    bufs: HashMap<BufId, Buf>,
    races: BTreeSet<Triple>,
    /// Ancestors of one node (the last asked for).
    cache: Option<(usize, Vec<bool>)>,
}

/// The racing pairs of a valid trace, by the reference model.
pub fn races(records: &[Record]) -> BTreeSet<Triple> {
    let mut r = Reference::new();
    for rec in records {
        r.apply(rec);
    }
    r.races
}

impl Reference {
    pub fn new() -> Reference {
        let mut r = Reference::default();
        r.streams.insert(
            0,
            StreamDecl {
                device: 0,
                legacy: true,
                blocking: false,
            },
        );
        r.legacy.insert(0, 0);
        r
    }

    fn node(&mut self, preds: Vec<usize>) -> usize {
        self.preds.push(preds);
        self.preds.len() - 1
    }

    /// Every node from which `n` can be reached (including `n`): a DFS over the reversed edges.
    fn ancestors(&mut self, n: usize) -> &[bool] {
        if self.cache.as_ref().is_none_or(|(m, _)| *m != n) {
            let mut seen = vec![false; self.preds.len()];
            let mut stack = vec![n];
            seen[n] = true;
            while let Some(x) = stack.pop() {
                for &p in &self.preds[x] {
                    if !seen[p] {
                        seen[p] = true;
                        stack.push(p);
                    }
                }
            }
            self.cache = Some((n, seen));
        }
        &self.cache.as_ref().unwrap().1
    }

    fn decl(&self, s: StreamId) -> StreamDecl {
        *self.streams.get(&s).expect("reference: undeclared stream")
    }

    /// The op nodes a host synchronization with stream `s` waits for (R5): the last op of `s`,
    /// and for a legacy stream also the last op of every blocking stream of its device (R6).
    fn sync_preds(&self, s: StreamId) -> Vec<usize> {
        let d = self.decl(s);
        let mut preds: Vec<usize> = self.last_op.get(&s).copied().into_iter().collect();
        if d.legacy {
            for (id, other) in &self.streams {
                if other.device == d.device && other.blocking {
                    preds.extend(self.last_op.get(id).copied());
                }
            }
        }
        preds
    }

    /// A new node in `thread`'s program order, with extra incoming edges.
    fn call_node(&mut self, thread: ThreadId, mut extra: Vec<usize>) -> usize {
        extra.extend(self.host_last.get(&thread).copied());
        let n = self.node(extra);
        self.host_last.insert(thread, n);
        n
    }

    /// The operation enqueued on `s` by the call `call` (R1, R6, R7).
    fn op_node(&mut self, call: usize, s: StreamId) -> usize {
        self.op_node_after(call, s, None)
    }

    /// An op node with one more incoming edge (a wait's event record).
    fn op_node_after(&mut self, call: usize, s: StreamId, extra: Option<usize>) -> usize {
        let d = self.decl(s);
        let mut preds = vec![call];
        preds.extend(extra);
        // After the earlier work of `s`; on a legacy stream, first after all work enqueued so
        // far on every blocking stream of the device (the same set a host sync waits for).
        preds.extend(self.sync_preds(s));
        if d.blocking {
            // Every blocking stream waits for the legacy stream's work enqueued before.
            if let Some(l) = self.legacy.get(&d.device) {
                preds.extend(self.last_op.get(l).copied());
            }
        }
        let n = self.node(preds);
        self.last_op.insert(s, n);
        n
    }

    /// The host thread's next action is after `op` (the call returned once `op` completed).
    fn host_joins(&mut self, thread: ThreadId, op: usize) {
        self.call_node(thread, vec![op]);
    }

    fn access(&mut self, a: &Access, kind: AccessKind, node: usize, actor: Actor, line: u64) {
        let (start, end, freed_at) = {
            let buf = self
                .bufs
                .get(&a.buf)
                .expect("reference: unallocated buffer");
            let (off, len) = a
                .range
                .map_or((0, buf.shadow.len() as u64), |r| (r.off, r.len));
            (off as usize, (off + len) as usize, buf.freed_at)
        };
        if let Some(free_line) = freed_at {
            self.races.insert((line, free_line, RaceKind::UseAfterFree));
            return;
        }
        let anc = self.ancestors(node).to_vec();
        let ordered = |prev: &Acc| prev.line == line || anc[prev.node];
        let me = Acc { line, node };
        let buf = self.bufs.get_mut(&a.buf).unwrap();
        for st in &mut buf.shadow[start..end] {
            match kind {
                AccessKind::Read => {
                    if let Some(w) = st.write.filter(|w| !ordered(w)) {
                        self.races.insert((line, w.line, RaceKind::ReadAfterWrite));
                    }
                    match st.reads.iter_mut().find(|(who, _)| *who == actor) {
                        Some(slot) => slot.1 = me,
                        None => st.reads.push((actor, me)),
                    }
                }
                AccessKind::Write | AccessKind::Allocate | AccessKind::Free => {
                    let (ww, wr) = if kind == AccessKind::Free {
                        (RaceKind::FreeWhileInUse, RaceKind::FreeWhileInUse)
                    } else {
                        (RaceKind::WriteAfterWrite, RaceKind::WriteAfterRead)
                    };
                    if let Some(w) = st.write.filter(|w| !ordered(w)) {
                        self.races.insert((line, w.line, ww));
                    }
                    for (_, r) in st.reads.iter().filter(|(_, r)| !ordered(r)) {
                        self.races.insert((line, r.line, wr));
                    }
                    st.write = Some(me);
                    st.reads.clear();
                }
            }
        }
    }

    /// A launch or host function: its reads, then its writes, all at its op node.
    fn stream_accesses(
        &mut self,
        node: usize,
        s: StreamId,
        line: u64,
        reads: &[Access],
        writes: &[Access],
    ) {
        for a in reads {
            self.access(a, AccessKind::Read, node, Actor::Stream(s), line);
        }
        for a in writes {
            self.access(a, AccessKind::Write, node, Actor::Stream(s), line);
        }
    }

    fn space(&self, a: &Access) -> MemSpace {
        self.bufs[&a.buf].space
    }

    pub fn apply(&mut self, rec: &Record) {
        let h = rec.thread;
        let line = rec.line;
        // Incoming edges of the call node itself: what the host knows when the call returns.
        let extra = match &rec.op {
            Op::StreamSync { stream } | Op::StreamQuery { stream, done: true } => {
                self.sync_preds(*stream)
            }
            Op::EventSync { event } | Op::EventQuery { event, done: true } => {
                self.events[event].into_iter().collect()
            }
            Op::DeviceSync { device } => self
                .streams
                .iter()
                .filter(|(_, d)| d.device == *device)
                .filter_map(|(id, _)| self.last_op.get(id).copied())
                .collect(),
            Op::Memcpy {
                stream,
                src,
                dst,
                blocking: true,
            } if side(self.space(src)) == Side::Pageable
                && side(self.space(dst)) == Side::Device =>
            {
                // "a stream sync is performed before the copy is initiated"
                self.sync_preds(*stream)
            }
            _ => Vec::new(),
        };
        let call = self.call_node(h, extra);
        match &rec.op {
            Op::Stream {
                id,
                device,
                kind,
                flags,
            } => {
                let legacy = *kind == StreamKind::LegacyDefault;
                let blocking = match kind {
                    StreamKind::LegacyDefault => false,
                    StreamKind::PerThreadDefault => true,
                    StreamKind::Created => *flags == StreamFlags::Blocking,
                };
                self.streams.insert(
                    *id,
                    StreamDecl {
                        device: *device,
                        legacy,
                        blocking,
                    },
                );
                if legacy {
                    self.legacy.insert(*device, *id);
                }
            }
            Op::Event { id } => {
                self.events.insert(*id, None);
            }
            Op::EventDestroy { id } => {
                self.events.remove(id);
            }
            Op::Alloc {
                buf,
                bytes,
                space,
                stream,
                ..
            } => {
                self.bufs.insert(
                    *buf,
                    Buf {
                        space: *space,
                        freed_at: None,
                        shadow: vec![ByteState::default(); *bytes as usize],
                    },
                );
                if let Some(s) = stream {
                    let op = self.op_node(call, *s);
                    self.access(
                        &Access::whole(*buf),
                        AccessKind::Write,
                        op,
                        Actor::Stream(*s),
                        line,
                    );
                }
            }
            Op::Free { buf, stream } => {
                let whole = Access::whole(*buf);
                match stream {
                    Some(s) => {
                        let op = self.op_node(call, *s);
                        self.access(&whole, AccessKind::Free, op, Actor::Stream(*s), line);
                    }
                    None => self.access(&whole, AccessKind::Free, call, Actor::Thread(h), line),
                }
                let b = self.bufs.get_mut(buf).unwrap();
                if b.freed_at.is_none() {
                    b.freed_at = Some(line);
                }
            }
            Op::Launch {
                stream,
                reads,
                writes,
            }
            | Op::HostFunc {
                stream,
                reads,
                writes,
            } => {
                let op = self.op_node(call, *stream);
                self.stream_accesses(op, *stream, line, reads, writes);
            }
            Op::Memcpy {
                stream,
                src,
                dst,
                blocking,
            } => {
                let s = *stream;
                let from = side(self.space(src));
                let to = side(self.space(dst));
                if *blocking && from == Side::Pageable && to == Side::Device {
                    // The host reads the source during the call; the device write is not known
                    // done when it returns.
                    self.access(src, AccessKind::Read, call, Actor::Thread(h), line);
                    let op = self.op_node(call, s);
                    self.access(dst, AccessKind::Write, op, Actor::Stream(s), line);
                } else {
                    let op = self.op_node(call, s);
                    self.stream_accesses(
                        op,
                        s,
                        line,
                        std::slice::from_ref(src),
                        std::slice::from_ref(dst),
                    );
                    let joins = match (from, to) {
                        (Side::Device, Side::Device) => false,
                        // Host to host: "fully synchronous with respect to the host".
                        (Side::Pageable | Side::Pinned, Side::Pageable | Side::Pinned) => true,
                        // Pinned to device, device to host; pageable to device if async.
                        _ => *blocking,
                    };
                    if joins {
                        self.host_joins(h, op);
                    }
                }
            }
            Op::Memset {
                stream,
                dst,
                blocking,
            } => {
                let op = self.op_node(call, *stream);
                self.stream_accesses(op, *stream, line, &[], std::slice::from_ref(dst));
                let space = self.space(dst);
                if *blocking && space == MemSpace::Pinned {
                    self.host_joins(h, op);
                }
            }
            Op::HostAccess { reads, writes } => {
                for a in reads {
                    self.access(a, AccessKind::Read, call, Actor::Thread(h), line);
                }
                for a in writes {
                    self.access(a, AccessKind::Write, call, Actor::Thread(h), line);
                }
            }
            Op::Record { event, stream } => {
                let op = self.op_node(call, *stream);
                assert!(
                    self.events.contains_key(event),
                    "reference: undeclared event"
                );
                self.events.insert(*event, Some(op));
            }
            Op::Wait { stream, event } => {
                // The latest record before the wait call; never recorded: no edge (R4).
                let rec = self.events[event];
                self.op_node_after(call, *stream, rec);
            }
            // Their edges went into the call node above.
            Op::EventSync { .. }
            | Op::EventQuery { .. }
            | Op::StreamSync { .. }
            | Op::StreamQuery { .. }
            | Op::DeviceSync { .. } => {}
            Op::RecordStream { .. }
            | Op::GraphBegin { .. }
            | Op::GraphEnd { .. }
            | Op::GraphLaunch { .. }
            | Op::GraphDestroy { .. } => unreachable!("reference: minor 1 ops are not generated"),
        }
    }
}
