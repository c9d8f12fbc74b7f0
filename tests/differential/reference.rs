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
//! Trace v1 minor 1 (R16-R18):
//! - Caching blocks (R16) keep their shadow state by (device, address), not by buffer id, so a
//!   later block on the same bytes is checked against what earlier blocks did to them, as if one
//!   buffer had lived on. A caching `alloc` accesses nothing; a caching `free` is a host call that
//!   accesses nothing either (no free-while-in-use), but it ends the id (later accesses to it are
//!   use-after-free, R12). At the free, each `record_stream(buf, s)` of the block leaves on every
//!   byte of the block the last op node of `s` (the snapshot of "all work queued on stream at the
//!   time of deallocation"); the call node of a later caching `alloc` that takes over the byte has
//!   an edge from it (the pool waited for it), and the byte's pending snapshots are then spent
//!   (the new occupant's own free leaves its own). A driver `alloc` with an `addr` ends the
//!   history of the bytes it covers (the driver's memory is fresh) and keeps its own shadow.
//! - Graphs (R17, R18): while a stream captures, its launches, copies, memsets, host functions,
//!   records and waits are *items* of the graph and run nothing; a record there makes a captured
//!   event, and a stream that waits on one joins the capture. At each `graph_launch`, after the
//!   launch's own op node on its stream, every item gets a fresh node in capture order: after the
//!   launch's op node, the previous item of its captured stream, the item its wait named, and the
//!   whole previous launch of the same graph (its join node); a join node after all of them (and
//!   after the previous launch, also when the graph has no item) is then the stream's last op.
//!   An item's accesses are made by an actor of its own per (graph, captured stream), on the
//!   item's capture line. A captured copy has no host-side part.
//! - Graph memory nodes (R17): a stream-ordered driver `alloc` on a capturing stream declares its
//!   buffer (no access, no node) and is an item; at each launch its node starts a new lifetime of
//!   the buffer (fresh shadow state, as an `alloc` of a freed id, R12: "Graph allocations are
//!   considered recreated every time a graph runs") and writes all of it, by the item's actor on
//!   its capture line. A stream-ordered `free` of a driver allocation on a capturing stream is an
//!   item too; at each launch its node is a free (a death write, R12) by the item's actor, after
//!   which the buffer is a tombstone: later accesses are uses after free naming the free node's
//!   capture line, until the next allocation node runs. The reference asserts what the generator
//!   keeps out: an access to a graph allocation no launch has allocated yet, an allocation node
//!   running while its buffer is live, a free node running while it is not.
//!
//! Trace v1 minor 3 (R20, `stream_destroy`):
//! - A stream is known by its *declaration*, not its id: each `stream` record gets a new
//!   declaration number, which keys the stream's last op node and its actor in the shadow state
//!   (the per-actor latest reads of R11). A stream id declared again after `stream_destroy` is a
//!   new stream with no op node yet: it learns of the old one only as any stream learns (R1,
//!   the host's enqueue; R6, the legacy stream's barrier).
//! - The destroy itself is only a call node in its host thread's program order: it orders
//!   nothing. The stream's op nodes stay in the graph, so events recorded on it keep their
//!   record nodes (waits and syncs on them still order, R2-R5), and a graph captured on it
//!   keeps its items (launches still run them).
//! - A destroyed stream's declaration is kept apart ([`Reference::destroyed`]): a `device_sync`
//!   of its device still waits for its last op node (R5), and when it was blocking so do the
//!   legacy stream's barrier (R6: an action on the legacy stream waits for it) and a host sync
//!   of the legacy stream (R5 + R6).
//! - Left open by the spec and not generated: a caching block's free after a stream its
//!   `record_stream` named was destroyed. The reference keeps the `record_stream` by
//!   declaration, so the snapshot is the destroyed stream's last op node (all its work).
//! - Invalid input (the engine's input errors, never generated): any record naming the id after
//!   the destroy ("undeclared stream"), destroying stream 0, a legacy or a per-thread default
//!   stream, the stream a capture began on before the capture ends, or an undeclared stream
//!   (a stream that joined a capture by a wait on a captured event may be destroyed: it leaves
//!   the capture, its items stay in the graph); declaring a stream id while it exists. The reference panics with a message naming
//!   the line (`reference: line N: ...`).
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
//! - R16: `record_stream`'s snapshot of a stream is the stream's own last operation at the free
//!   (on a legacy stream that is not a new barrier over the blocking streams).
//! - R17: an event whose latest record was captured orders nothing once the capture ended, for
//!   waits, syncs and queries alike ("its record never ran as such").
//! - R18: a graph launched on a legacy stream is one action there: blocking streams' next
//!   operations wait for all of its nodes.
//! - R17: an allocation node's birth is not checked against the buffer's previous lifetime
//!   (the previous free, or accesses the free did not cover): neither the Programming Guide nor
//!   docs/ordering-model.md orders the next allocation node after the earlier free.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use streamsan::engine::{AccessKind, RaceKind};
use streamsan::trace::record::{
    Access, BufId, DeviceId, EventId, GraphId, MemSpace, Op, Pool, Record, StreamFlags, StreamId,
    StreamKind, ThreadId,
};

/// (current line, previous line, kind): what the differential test compares.
pub type Triple = (u64, u64, RaceKind);

/// Who performs an access: the stream (a host function counts as its stream; by its
/// declaration number, so that a stream id declared again after `stream_destroy` is another
/// actor, R20), the host thread, or the nodes one captured stream contributed to one graph (by
/// the graph's capture number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Actor {
    Stream(usize),
    Thread(ThreadId),
    Node(usize, StreamId),
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
    /// The latest atomic of each actor since `write` (R19).
    atomics: Vec<(Actor, Acc)>,
}

/// One byte of memory known by device address (caching blocks, R16).
#[derive(Clone, Debug, Default)]
struct Cell {
    state: ByteState,
    /// The `record_stream` snapshots (op nodes) left by the last caching free of the block that
    /// held this byte, not yet joined by a caching alloc that took the byte over.
    pending: Vec<usize>,
}

/// Where a buffer's shadow state lives.
#[derive(Clone, Debug)]
enum Mem {
    /// Its own bytes (driver allocations).
    Own(Vec<ByteState>),
    /// Bytes `[addr, addr + len)` of `device`, in [`Reference::memory`] (caching blocks).
    At { device: DeviceId, addr: u64 },
}

#[derive(Clone, Debug)]
struct Buf {
    space: MemSpace,
    bytes: u64,
    /// The line of the free, once freed (until the id is allocated again).
    freed_at: Option<u64>,
    mem: Mem,
    /// The streams named by `record_stream` (caching blocks only), by declaration number.
    recorded: Vec<usize>,
    /// A graph allocation no launch has allocated yet (R17).
    unborn: bool,
}

#[derive(Clone, Copy, Debug)]
struct StreamDecl {
    /// Distinct for every declaration: a stream id declared again after its `stream_destroy`
    /// names a new stream (R20).
    key: usize,
    device: DeviceId,
    kind: StreamKind,
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

/// What an event stands for.
#[derive(Clone, Copy, Debug)]
enum Ev {
    /// Its latest record's op node (`None`: never recorded, or recorded in a capture that ended).
    Recorded(Option<usize>),
    /// Recorded in a capture still going on: the item of the record in that graph.
    Captured(GraphId, usize),
}

/// A captured operation (R17).
#[derive(Clone, Debug)]
struct Item {
    /// The captured stream it was enqueued on.
    stream: StreamId,
    /// Its capture record.
    line: u64,
    /// The items it follows: the previous item of its stream, and the record item a wait named.
    deps: Vec<usize>,
    reads: Vec<Access>,
    writes: Vec<Access>,
    atomics: Vec<Access>,
    /// An allocation node (`true`) or a free node (`false`) of a buffer (R17).
    mem: Option<(BufId, bool)>,
}

#[derive(Clone, Debug)]
struct Graph {
    /// Distinct for every capture, also when a graph id is used again after `graph_destroy`.
    number: usize,
    items: Vec<Item>,
    /// The last item of each captured stream.
    tail: HashMap<StreamId, usize>,
    /// The join node of the latest launch.
    last_launch: Option<usize>,
    /// The stream the capture began on.
    origin: StreamId,
}

#[derive(Debug, Default)]
pub struct Reference {
    /// `preds[n]`: the nodes with an edge into `n`. Nodes are numbered in creation order and
    /// every edge goes from an older node to a newer one.
    preds: Vec<Vec<usize>>,
    /// The declared streams (not destroyed since).
    streams: BTreeMap<StreamId, StreamDecl>,
    /// The destroyed streams (R20): their work still runs, and a device sync, the legacy
    /// stream's barrier and a sync of the legacy stream still wait for it.
    destroyed: Vec<StreamDecl>,
    /// Stream declarations so far (the next [`StreamDecl::key`]).
    declarations: usize,
    /// The legacy default stream of each device.
    legacy: BTreeMap<DeviceId, StreamId>,
    /// The last op node of each stream, by declaration number.
    last_op: HashMap<usize, usize>,
    /// The line of the record being applied (for the messages of invalid input).
    line: u64,
    /// The last node of each host thread's program order.
    host_last: HashMap<ThreadId, usize>,
    events: HashMap<EventId, Ev>,
    bufs: HashMap<BufId, Buf>,
    /// Bytes known by (device, address): caching blocks, live or freed.
    memory: HashMap<(DeviceId, u64), Cell>,
    graphs: HashMap<GraphId, Graph>,
    /// The graph each capturing stream captures into.
    capturing: HashMap<StreamId, GraphId>,
    /// Captures begun so far.
    captures: usize,
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

/// The stream a record names, if any: it must be declared (and not destroyed since, R20).
fn named_stream(op: &Op) -> Option<StreamId> {
    match op {
        Op::Launch { stream, .. }
        | Op::Memcpy { stream, .. }
        | Op::Memset { stream, .. }
        | Op::HostFunc { stream, .. }
        | Op::Record { stream, .. }
        | Op::Wait { stream, .. }
        | Op::StreamSync { stream }
        | Op::StreamQuery { stream, .. }
        | Op::RecordStream { stream, .. }
        | Op::GraphBegin { stream, .. }
        | Op::GraphEnd { stream, .. }
        | Op::GraphLaunch { stream, .. } => Some(*stream),
        Op::Alloc { stream, .. } | Op::Free { stream, .. } => *stream,
        Op::StreamDestroy { id } => Some(*id),
        Op::Stream { .. }
        | Op::Event { .. }
        | Op::EventDestroy { .. }
        | Op::HostAccess { .. }
        | Op::EventSync { .. }
        | Op::EventQuery { .. }
        | Op::DeviceSync { .. }
        | Op::GraphDestroy { .. } => None,
    }
}

/// R11 on one byte: `me` accesses it as `kind`; `ordered` says whether an earlier access
/// happens before it.
fn check_byte(
    st: &mut ByteState,
    kind: AccessKind,
    me: Acc,
    actor: Actor,
    ordered: &dyn Fn(&Acc) -> bool,
    races: &mut BTreeSet<Triple>,
) {
    let line = me.line;
    let free = kind == AccessKind::Free;
    // R19: two atomics never conflict; an atomic conflicts with every plain access.
    let unordered_write = st.write.filter(|w| !ordered(w));
    let unordered = |list: &[(Actor, Acc)]| -> Vec<u64> {
        list.iter()
            .filter(|(_, a)| !ordered(a))
            .map(|(_, a)| a.line)
            .collect()
    };
    let keep_latest =
        |list: &mut Vec<(Actor, Acc)>| match list.iter_mut().find(|(who, _)| *who == actor) {
            Some(slot) => slot.1 = me,
            None => list.push((actor, me)),
        };
    match kind {
        AccessKind::Read => {
            if let Some(w) = unordered_write {
                races.insert((line, w.line, RaceKind::ReadAfterWrite));
            }
            for a in unordered(&st.atomics) {
                races.insert((line, a, RaceKind::ReadAfterWrite));
            }
            keep_latest(&mut st.reads);
        }
        AccessKind::Atomic => {
            if let Some(w) = unordered_write {
                races.insert((line, w.line, RaceKind::WriteAfterWrite));
            }
            for r in unordered(&st.reads) {
                races.insert((line, r, RaceKind::WriteAfterRead));
            }
            keep_latest(&mut st.atomics);
        }
        AccessKind::Write | AccessKind::Allocate | AccessKind::Free => {
            let (ww, wr) = if free {
                (RaceKind::FreeWhileInUse, RaceKind::FreeWhileInUse)
            } else {
                (RaceKind::WriteAfterWrite, RaceKind::WriteAfterRead)
            };
            if let Some(w) = unordered_write {
                races.insert((line, w.line, ww));
            }
            for r in unordered(&st.reads) {
                races.insert((line, r, wr));
            }
            for a in unordered(&st.atomics) {
                races.insert((line, a, ww));
            }
            st.write = Some(me);
            st.reads.clear();
            st.atomics.clear();
        }
    }
}

impl Reference {
    pub fn new() -> Reference {
        let mut r = Reference::default();
        r.streams.insert(
            0,
            StreamDecl {
                key: 0,
                device: 0,
                kind: StreamKind::LegacyDefault,
                legacy: true,
                blocking: false,
            },
        );
        r.declarations = 1;
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

    /// Invalid input: the trace is not one the reference models (the engine's input errors).
    /// The message names the line, so that a test can compare it with the engine's error.
    fn invalid(&self, what: &str) -> ! {
        panic!("reference: line {}: {what}", self.line)
    }

    /// The declared stream `s`; undeclared (never, or destroyed since, R20) is invalid input.
    fn decl(&self, s: StreamId) -> StreamDecl {
        match self.streams.get(&s) {
            Some(d) => *d,
            None => self.invalid(&format!("undeclared stream {s}")),
        }
    }

    /// The actor of the declared stream `s`.
    fn actor(&self, s: StreamId) -> Actor {
        Actor::Stream(self.decl(s).key)
    }

    /// The last op node of the declared stream `s`.
    fn last(&self, s: StreamId) -> Option<usize> {
        self.last_op.get(&self.decl(s).key).copied()
    }

    /// Every stream of `device` ever declared, destroyed ones included (R20).
    fn device_streams(&self, device: DeviceId) -> impl Iterator<Item = &StreamDecl> {
        self.streams
            .values()
            .chain(&self.destroyed)
            .filter(move |d| d.device == device)
    }

    /// The op nodes a host synchronization with stream `s` waits for (R5): the last op of `s`,
    /// and for a legacy stream also the last op of every blocking stream of its device (R6),
    /// destroyed ones included (R20).
    fn sync_preds(&self, s: StreamId) -> Vec<usize> {
        let d = self.decl(s);
        let mut preds: Vec<usize> = self.last_op.get(&d.key).copied().into_iter().collect();
        if d.legacy {
            for other in self.device_streams(d.device) {
                if other.blocking {
                    preds.extend(self.last_op.get(&other.key).copied());
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
            if let Some(&l) = self.legacy.get(&d.device) {
                preds.extend(self.last(l));
            }
        }
        let n = self.node(preds);
        self.last_op.insert(d.key, n);
        n
    }

    /// The host thread's next action is after `op` (the call returned once `op` completed).
    fn host_joins(&mut self, thread: ThreadId, op: usize) {
        self.call_node(thread, vec![op]);
    }

    /// The latest record of `e` that ran (R2-R5, R17).
    fn recorded(&self, e: EventId) -> Option<usize> {
        match self.events.get(&e).expect("reference: undeclared event") {
            Ev::Recorded(r) => *r,
            Ev::Captured(..) => panic!("reference: a captured event synchronized"),
        }
    }

    fn access(&mut self, a: &Access, kind: AccessKind, node: usize, actor: Actor, line: u64) {
        let (start, end, freed_at) = {
            let buf = self
                .bufs
                .get(&a.buf)
                .expect("reference: unallocated buffer");
            let (off, len) = a.range.map_or((0, buf.bytes), |r| (r.off, r.len));
            (off, off + len, buf.freed_at)
        };
        if let Some(free_line) = freed_at {
            self.races.insert((line, free_line, RaceKind::UseAfterFree));
            return;
        }
        assert!(
            !self.bufs[&a.buf].unborn,
            "reference: an access to a graph allocation no launch allocated (left open)"
        );
        let anc = self.ancestors(node).to_vec();
        let ordered = |prev: &Acc| prev.line == line || anc[prev.node];
        let me = Acc { line, node };
        let buf = self.bufs.get_mut(&a.buf).unwrap();
        match &mut buf.mem {
            Mem::Own(shadow) => {
                for st in &mut shadow[start as usize..end as usize] {
                    check_byte(st, kind, me, actor, &ordered, &mut self.races);
                }
            }
            Mem::At { device, addr } => {
                for b in *addr + start..*addr + end {
                    let cell = self.memory.entry((*device, b)).or_default();
                    check_byte(&mut cell.state, kind, me, actor, &ordered, &mut self.races);
                }
            }
        }
    }

    /// A launch or host function: its reads, then its writes, all at its op node.
    fn accesses(
        &mut self,
        node: usize,
        actor: Actor,
        line: u64,
        reads: &[Access],
        writes: &[Access],
        atomics: &[Access],
    ) {
        for a in reads {
            self.access(a, AccessKind::Read, node, actor, line);
        }
        for a in writes {
            self.access(a, AccessKind::Write, node, actor, line);
        }
        for a in atomics {
            self.access(a, AccessKind::Atomic, node, actor, line);
        }
    }

    fn captured(&self, s: &StreamId) -> bool {
        self.capturing.contains_key(s)
    }

    fn space(&self, a: &Access) -> MemSpace {
        self.bufs[&a.buf].space
    }

    /// Adds an item on the capturing stream `s` (R17); returns its index in the graph.
    fn capture(
        &mut self,
        s: StreamId,
        line: u64,
        after: Option<usize>,
        reads: &[Access],
        writes: &[Access],
        atomics: &[Access],
    ) -> usize {
        let g = self.capturing[&s];
        let graph = self.graphs.get_mut(&g).unwrap();
        let mut deps: Vec<usize> = graph.tail.get(&s).copied().into_iter().collect();
        deps.extend(after);
        graph.items.push(Item {
            stream: s,
            line,
            deps,
            reads: reads.to_vec(),
            writes: writes.to_vec(),
            atomics: atomics.to_vec(),
            mem: None,
        });
        let i = graph.items.len() - 1;
        graph.tail.insert(s, i);
        i
    }

    /// Runs every item of `g` after the op node `launch` (R18); returns the join node.
    fn launch_graph(&mut self, g: GraphId, launch: usize) -> usize {
        let graph = self.graphs[&g].clone();
        let mut nodes: Vec<usize> = Vec::with_capacity(graph.items.len());
        for item in &graph.items {
            let mut preds = vec![launch];
            preds.extend(item.deps.iter().map(|&d| nodes[d]));
            preds.extend(graph.last_launch);
            let n = self.node(preds);
            nodes.push(n);
            let actor = Actor::Node(graph.number, item.stream);
            match item.mem {
                Some((buf, true)) => {
                    // "Graph allocations are considered recreated every time a graph runs": a
                    // new lifetime with no history (as an `alloc` of a freed id, R12), which the
                    // node writes all of.
                    let b = self.bufs.get_mut(&buf).unwrap();
                    assert!(
                        b.unborn || b.freed_at.is_some(),
                        "reference: a launch allocates a live graph allocation (CUDA fails it)"
                    );
                    b.unborn = false;
                    b.freed_at = None;
                    b.mem = Mem::Own(vec![ByteState::default(); b.bytes as usize]);
                    self.access(&Access::whole(buf), AccessKind::Write, n, actor, item.line);
                }
                Some((buf, false)) => {
                    let b = &self.bufs[&buf];
                    assert!(
                        b.freed_at.is_none() && !b.unborn,
                        "reference: a free node frees a buffer not allocated (an input error)"
                    );
                    self.access(&Access::whole(buf), AccessKind::Free, n, actor, item.line);
                    self.bufs.get_mut(&buf).unwrap().freed_at = Some(item.line);
                }
                None => {}
            }
            self.accesses(
                n,
                actor,
                item.line,
                &item.reads,
                &item.writes,
                &item.atomics,
            );
        }
        // The launch as a whole is "ordered behind ... any previous launches of graphExec", even
        // where the graph has no node to carry it.
        let mut preds = vec![launch];
        preds.extend(nodes);
        preds.extend(graph.last_launch);
        let join = self.node(preds);
        self.graphs.get_mut(&g).unwrap().last_launch = Some(join);
        join
    }

    /// The caching-block bytes `[addr, addr + bytes)` of `device`.
    fn span(device: DeviceId, addr: u64, bytes: u64) -> impl Iterator<Item = (DeviceId, u64)> {
        (addr..addr + bytes).map(move |b| (device, b))
    }

    pub fn apply(&mut self, rec: &Record) {
        let h = rec.thread;
        let line = rec.line;
        self.line = line;
        // Every record that names a stream needs it declared, and not destroyed since (R20: "any
        // later use of S ... is the input error 'undeclared stream'").
        if let Some(s) = named_stream(&rec.op) {
            self.decl(s);
        }
        // Incoming edges of the call node itself: what the host knows when the call returns.
        let extra = match &rec.op {
            Op::StreamSync { stream } | Op::StreamQuery { stream, done: true } => {
                self.sync_preds(*stream)
            }
            Op::EventSync { event } | Op::EventQuery { event, done: true } => {
                self.recorded(*event).into_iter().collect()
            }
            // "all preceding requested tasks": destroyed streams' work too (R20).
            Op::DeviceSync { device } => self
                .device_streams(*device)
                .filter_map(|d| self.last_op.get(&d.key).copied())
                .collect(),
            Op::Memcpy {
                stream,
                src,
                dst,
                blocking: true,
            } if !self.captured(stream)
                && side(self.space(src)) == Side::Pageable
                && side(self.space(dst)) == Side::Device =>
            {
                // "a stream sync is performed before the copy is initiated"
                self.sync_preds(*stream)
            }
            Op::Alloc {
                bytes,
                device,
                addr: Some(addr),
                pool: Pool::Caching,
                ..
            } => {
                // R16: the pool waited for the snapshots the bytes' last free left.
                let mut pending: Vec<usize> = Vec::new();
                for key in Self::span(*device, *addr, *bytes) {
                    if let Some(cell) = self.memory.get_mut(&key) {
                        pending.append(&mut cell.pending);
                    }
                }
                pending
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
                if *id == 0 {
                    // Stream 0 exists from the start; declaring it only names it.
                    if !legacy || *device != 0 {
                        self.invalid("stream 0 declared as another stream than device 0's legacy");
                    }
                    return;
                }
                if self.streams.contains_key(id) {
                    self.invalid(&format!("stream {id} declared again while it exists"));
                }
                // A stream id declared after its `stream_destroy` is a new stream (R20): a new
                // declaration number, so no op node and no actor of the old one carries over.
                let key = self.declarations;
                self.declarations += 1;
                self.streams.insert(
                    *id,
                    StreamDecl {
                        key,
                        device: *device,
                        kind: *kind,
                        legacy,
                        blocking,
                    },
                );
                if legacy {
                    self.legacy.insert(*device, *id);
                }
            }
            Op::StreamDestroy { id } => {
                // R20. The destroy orders nothing: no op node, no edge (the call node above is
                // only the host's program order). The id is undeclared from now on; the
                // stream's op nodes stay, and its events' record nodes with them.
                let d = self.decl(*id);
                if d.kind != StreamKind::Created {
                    self.invalid(&format!(
                        "stream {id} is a {} stream: only a created stream can be destroyed",
                        d.kind.as_str()
                    ));
                }
                if let Some(graph) = self.capturing.get(id) {
                    if self.graphs[graph].origin == *id {
                        self.invalid(&format!("stream {id}, a capture's origin, destroyed"));
                    }
                    self.capturing.remove(id);
                }
                self.streams.remove(id);
                self.destroyed.push(d);
            }
            Op::Event { id } => {
                self.events.insert(*id, Ev::Recorded(None));
            }
            Op::EventDestroy { id } => {
                self.events.remove(id);
            }
            Op::Alloc {
                buf,
                bytes,
                device,
                space,
                stream,
                addr,
                pool,
            } => {
                let mem = match (pool, addr) {
                    (Pool::Caching, Some(addr)) => Mem::At {
                        device: *device,
                        addr: *addr,
                    },
                    (Pool::Caching, None) => panic!("reference: a caching block without addr"),
                    (Pool::Driver, addr) => {
                        // Fresh memory: whatever a pool did to these bytes is over.
                        if let Some(addr) = addr {
                            for key in Self::span(*device, *addr, *bytes) {
                                self.memory.remove(&key);
                            }
                        }
                        Mem::Own(vec![ByteState::default(); *bytes as usize])
                    }
                };
                // R17: on a capturing stream, an allocation node; nothing happens until a launch.
                let node = match (stream, pool) {
                    (Some(s), Pool::Driver) if self.captured(s) => Some(*s),
                    _ => None,
                };
                self.bufs.insert(
                    *buf,
                    Buf {
                        space: *space,
                        bytes: *bytes,
                        freed_at: None,
                        mem,
                        recorded: Vec::new(),
                        unborn: node.is_some(),
                    },
                );
                if let Some(s) = node {
                    let i = self.capture(s, line, None, &[], &[], &[]);
                    self.graphs.get_mut(&self.capturing[&s]).unwrap().items[i].mem =
                        Some((*buf, true));
                    return;
                }
                // A caching block's stream names its pool: no enqueue, no access (R16).
                if let (Some(s), Pool::Driver) = (stream, pool) {
                    let op = self.op_node(call, *s);
                    self.access(
                        &Access::whole(*buf),
                        AccessKind::Write,
                        op,
                        self.actor(*s),
                        line,
                    );
                }
            }
            Op::Free {
                buf,
                stream: Some(s),
            } if self.captured(s) && matches!(self.bufs[buf].mem, Mem::Own(_)) => {
                // R17: a free node; it frees at each launch.
                let i = self.capture(*s, line, None, &[], &[], &[]);
                self.graphs.get_mut(&self.capturing[s]).unwrap().items[i].mem = Some((*buf, false));
            }
            Op::Free { buf, stream } => {
                let whole = Access::whole(*buf);
                let b = &self.bufs[buf];
                assert!(
                    !b.unborn,
                    "reference: a graph allocation freed before it was allocated"
                );
                let at = match b.mem {
                    Mem::At { device, addr } => Some((device, addr)),
                    Mem::Own(_) => None,
                };
                match (at, stream) {
                    (Some((device, addr)), _) => {
                        // R16: no access; the snapshots of the recorded streams at the free.
                        let snaps: Vec<usize> = b
                            .recorded
                            .iter()
                            .filter_map(|key| self.last_op.get(key).copied())
                            .collect();
                        for key in Self::span(device, addr, b.bytes) {
                            self.memory.entry(key).or_default().pending = snaps.clone();
                        }
                    }
                    (None, Some(s)) => {
                        let op = self.op_node(call, *s);
                        self.access(&whole, AccessKind::Free, op, self.actor(*s), line);
                    }
                    (None, None) => {
                        self.access(&whole, AccessKind::Free, call, Actor::Thread(h), line)
                    }
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
                atomics,
            } => {
                if self.captured(stream) {
                    self.capture(*stream, line, None, reads, writes, atomics);
                } else {
                    let op = self.op_node(call, *stream);
                    self.accesses(op, self.actor(*stream), line, reads, writes, atomics);
                }
            }
            Op::HostFunc {
                stream,
                reads,
                writes,
            } => {
                if self.captured(stream) {
                    self.capture(*stream, line, None, reads, writes, &[]);
                } else {
                    let op = self.op_node(call, *stream);
                    self.accesses(op, self.actor(*stream), line, reads, writes, &[]);
                }
            }
            Op::Memcpy {
                stream, src, dst, ..
            } if self.captured(stream) => {
                // A node has no host-side part, whatever the API form (R18).
                let (src, dst) = (std::slice::from_ref(src), std::slice::from_ref(dst));
                self.capture(*stream, line, None, src, dst, &[]);
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
                    self.access(dst, AccessKind::Write, op, self.actor(s), line);
                } else {
                    let op = self.op_node(call, s);
                    self.accesses(
                        op,
                        self.actor(s),
                        line,
                        std::slice::from_ref(src),
                        std::slice::from_ref(dst),
                        &[],
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
            Op::Memset { stream, dst, .. } if self.captured(stream) => {
                self.capture(*stream, line, None, &[], std::slice::from_ref(dst), &[]);
            }
            Op::Memset {
                stream,
                dst,
                blocking,
            } => {
                let op = self.op_node(call, *stream);
                let dst = std::slice::from_ref(dst);
                self.accesses(op, self.actor(*stream), line, &[], dst, &[]);
                let space = self.space(&dst[0]);
                if *blocking && space == MemSpace::Pinned {
                    self.host_joins(h, op);
                }
            }
            Op::HostAccess { reads, writes } => {
                self.accesses(call, Actor::Thread(h), line, reads, writes, &[]);
            }
            Op::Record { event, stream } => {
                assert!(
                    self.events.contains_key(event),
                    "reference: undeclared event"
                );
                let ev = if self.captured(stream) {
                    let item = self.capture(*stream, line, None, &[], &[], &[]);
                    Ev::Captured(self.capturing[stream], item)
                } else {
                    Ev::Recorded(Some(self.op_node(call, *stream)))
                };
                self.events.insert(*event, ev);
            }
            Op::Wait { stream, event } => match self.events[event] {
                Ev::Captured(g, item) => {
                    // R17: waiting on a captured event joins its capture.
                    let joined = *self.capturing.entry(*stream).or_insert(g);
                    assert_eq!(joined, g, "reference: two captures merged");
                    self.capture(*stream, line, Some(item), &[], &[], &[]);
                }
                Ev::Recorded(rec) => {
                    assert!(
                        !self.captured(stream),
                        "reference: a capture waits on an outside event"
                    );
                    // The latest record before the wait call; never recorded: no edge (R4).
                    self.op_node_after(call, *stream, rec);
                }
            },
            // Their edges went into the call node above.
            Op::EventSync { .. }
            | Op::EventQuery { .. }
            | Op::StreamSync { .. }
            | Op::StreamQuery { .. }
            | Op::DeviceSync { .. } => {}
            Op::RecordStream { buf, stream } => {
                let key = self.decl(*stream).key;
                self.bufs
                    .get_mut(buf)
                    .expect("reference: unallocated buffer")
                    .recorded
                    .push(key);
            }
            Op::GraphBegin { graph, stream } => {
                self.captures += 1;
                let g = Graph {
                    number: self.captures,
                    items: Vec::new(),
                    tail: HashMap::new(),
                    last_launch: None,
                    origin: *stream,
                };
                assert!(
                    self.graphs.insert(*graph, g).is_none(),
                    "reference: live graph"
                );
                assert!(self.capturing.insert(*stream, *graph).is_none());
            }
            Op::GraphEnd { graph, .. } => {
                self.capturing.retain(|_, g| g != graph);
                for ev in self.events.values_mut() {
                    if matches!(ev, Ev::Captured(g, _) if g == graph) {
                        *ev = Ev::Recorded(None);
                    }
                }
            }
            Op::GraphLaunch { graph, stream } => {
                let op = self.op_node(call, *stream);
                let join = self.launch_graph(*graph, op);
                self.last_op.insert(self.decl(*stream).key, join);
            }
            Op::GraphDestroy { graph } => {
                self.graphs.remove(graph);
            }
        }
    }
}
