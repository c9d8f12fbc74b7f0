//! The happens-before engine: decides, from stream / event / buffer operations in issue order,
//! which accesses to device-visible memory are unordered.
//!
//! # Algorithm
//!
//! Vector clocks over *actors* (every stream and every host thread), after FastTrack
//! (Flanagan and Freund, PLDI 2009) and Miri's data race detector. The synchronization verbs of
//! CUDA become joins of clocks: enqueueing joins the host thread's clock into the stream, a
//! stream wait joins an event's snapshot, a host synchronization joins a stream's clock into the
//! host thread, and the legacy default stream joins (and is joined by) every blocking stream of
//! its device. Every rule, with the NVIDIA documentation it comes from, is in
//! `docs/ordering-model.md`; rule ids (R1..R15) are cited at the code that applies them.
//!
//! Shadow state is per buffer and per byte range (`shadow::RangeMap`): the last write and, per
//! actor, the latest read since it. Departures from FastTrack: one read entry per actor rather
//! than a read epoch that inflates to a clock, so that a report can name every unordered read;
//! allocation and free are writes (a stream-ordered allocation is a "birth" write on its
//! stream, every free a "death" write), as in Miri; a freed buffer keeps a tombstone so later
//! uses are found.
//!
//! # Definition
//!
//! Two accesses to overlapping bytes, at least one a write (a free counts as a write), race
//! when neither happens before the other under the rules. Reads race with the last write;
//! writes race with the last write and every per-actor latest read since it.
//!
//! # Precision
//!
//! The engine reports only pairs that the documented rules leave unordered, so every report is
//! a real missing edge *in the model*: it trusts the access declarations it is given (a kernel
//! that writes an argument declared read is invisible to it). Keeping only the latest read per
//! actor can omit an older unordered read of the same actor from a report, never a race
//! verdict: if the latest read is ordered, so is every earlier read of its actor.
//!
//! # Where things are
//!
//! [`Engine::apply`] dispatches each record to its family: `streams` (declarations, the
//! enqueue rule, legacy-stream barriers, stream and device syncs), `events` (record, wait,
//! event sync and query), `memory` (allocation, free, copies, memsets, launches, host accesses:
//! everything that touches bytes), with `clocks` (actors and joins) below them and `explain`
//! (turning a conflict into a [`Race`] with its facts, and warnings) beside them.

mod clocks;
pub(crate) mod error;
mod events;
mod explain;
pub(crate) mod finding;
mod forgotten;
mod graph_memory;
mod graphs;
mod hints;
mod memory;
mod objects;
mod pool;
pub mod prefetch;
mod recent;
mod resolved;
mod shadow;
mod sites;
mod streams;
mod symbols;
mod table;
mod vclock;

use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

use clocks::Actors;
pub use error::{InputError, InputErrorKind};
pub use explain::LEAKS_NAMED;
pub use finding::{
    AccessKind, BufferInfo, Finding, GraphSite, LastSync, Race, RaceKind, Reuse, Site, StreamInfo,
    Unordered, Warning, WarningFact, WarningKind,
};
pub use graphs::node_stream;
pub(crate) use hints::{RecordHint, RecordHints};
use objects::{BufferState, EventState, GraphState, Retired, StreamState};
pub use pool::LiveBlocks;
pub use resolved::{EdgeKind, Place, Resolved, SyncEdge};
use shadow::{Conflict, Sym};
use sites::RecordKey;
use symbols::Symbols;
use vclock::ActorIdx;

use crate::trace::record::{
    BufId, DeviceId, GraphId, LEGACY_STREAM_DEVICE0, Op, OpKind, Record, StreamFlags, StreamId,
    StreamKind, ThreadId,
};

/// Counts over everything the engine has seen, for `streamsan stats` and report summaries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records applied.
    pub records: u64,
    /// Streams declared (the implicit legacy stream of device 0 counts once declared or used).
    pub streams: u64,
    /// Events declared.
    pub events: u64,
    /// Buffers allocated (a reused id counts again; a graph allocation counts once, at its
    /// capture, and not at all if its graph is destroyed before any launch).
    pub buffers: u64,
    /// Synchronization calls: records, waits, stream/event/device syncs, queries.
    pub syncs: u64,
    /// Caching blocks allocated (among `buffers`).
    pub caching_blocks: u64,
    /// Graphs captured.
    pub graphs: u64,
    /// Graph launches.
    pub graph_launches: u64,
    /// Race findings emitted (before any folding).
    pub races: u64,
    /// Warnings emitted.
    pub warnings: u64,
}

/// How many freed buffers keep their tombstone (for use-after-free reports) by default: about
/// 50 MB of state at most.
pub const FREED_KEPT: usize = 1 << 17;

/// How far ahead [`Engine::prefetch`] loads buffer states: far enough that the loads arrive in
/// time, near enough that they are still in cache when used (4 and 8 were tried with
/// `throughput -- --engine` at 10,000 and 100,000 live buffers, docs/performance.md).
pub const PREFETCH_AHEAD: usize = 4;
/// Live buffers below which [`Engine::prefetch`] does nothing: their states fit the CPU's
/// caches (4,096 states are 512 KB), and prefetching would cost more than it saves. Tombstones
/// do not count: only a use after free reads one.
pub const PREFETCH_FROM: usize = 4096;
/// How far ahead [`Engine::prefetch`] loads the heap part of shadow states: nearer than
/// [`PREFETCH_AHEAD`], so that the states it reads to find it have arrived.
pub const PREFETCH_SHADOW_AHEAD: usize = 2;

/// Where findings go as they are made.
pub type Out<'a> = dyn FnMut(Finding) + 'a;

/// One pure state machine: feed it records in trace order, it emits findings. No I/O, no CUDA.
#[derive(Debug)]
pub struct Engine {
    stats: Stats,
    symbols: Symbols,
    sites: sites::Sites,
    recent: recent::Recent,
    actors: Actors,
    streams: table::IdTable<StreamState>,
    /// Each device's legacy default stream.
    legacy: FxHashMap<DeviceId, StreamId>,
    /// Each device's streams in declaration order (device sync, legacy barriers).
    device_streams: FxHashMap<DeviceId, Vec<StreamId>>,
    next_stream_ordinal: u32,
    /// Events by trace id in dense slots: recorders number events, and cudarc's tracking
    /// makes two per buffer, all waited on and recorded around every launch.
    events: table::IdTable<EventState>,
    buffers: table::IdTable<BufferState>,
    /// Buffers allocated and not freed (`buffers` also holds tombstones).
    live_buffers: usize,
    /// The streams of each live caching block's `record_stream` calls (few blocks have any:
    /// kept out of [`BufferState`] so the hot state stays small).
    /// Each stream as (id, ordinal): an id may be declared again after its `stream_destroy`.
    record_streams: FxHashMap<BufId, SmallVec<[(StreamId, u32); 2]>>,
    next_buffer_ordinal: u32,
    graphs: FxHashMap<GraphId, GraphState>,
    next_graph_ordinal: u32,
    /// Graphs whose capture has begun and not ended: while none is, no stream is capturing,
    /// and a record need not look its stream up to know that.
    graphs_capturing: usize,
    /// How many captured node accesses refer to each buffer (by ordinal) in live graphs.
    graph_refs: FxHashMap<u32, u32>,
    /// Allocations captured into graphs, by ordinal: their owner, whether it frees them, and
    /// whether their allocation node has run (`graph_memory.rs`).
    graph_allocations: FxHashMap<u32, graph_memory::GraphAllocation>,
    /// Freed buffers whose id was reused while live graphs still refer to them, by ordinal.
    retired: FxHashMap<u32, Retired>,
    /// Caching pools' live blocks and the history of their freed bytes, by address.
    pools: pool::Pools,
    /// The latest frees, oldest first, as (id, ordinal, line of the free): the tombstones
    /// kept. Past `keep_freed` of them the oldest is let go, so memory stays bounded by live
    /// state when a recorder never reuses an id (the online layer numbers buffers in allocation
    /// order).
    freed_kept: std::collections::VecDeque<(BufId, u32, u64)>,
    keep_freed: usize,
    /// Ids whose tombstone was let go, with their memory space: a later access is a warning,
    /// not an input error.
    forgotten: forgotten::Forgotten,
    /// (stream, thread) pairs already warned about a foreign per-thread stream.
    foreign_warned: FxHashSet<(StreamId, ThreadId)>,
    /// Scratch space for the conflicts of one access.
    conflicts: Vec<Conflict>,
    /// The record being applied, with its strings interned once.
    current: Current,
    /// What the last record resolved, when observing ([`Engine::observe`]).
    resolved: Option<Resolved>,
}

/// What every access of the record being applied shares.
#[derive(Clone, Copy, Debug)]
struct Current {
    line: u64,
    thread: ThreadId,
    op: OpKind,
    name: Sym,
    at: Sym,
    /// The `graph_launch` line while its nodes run (their `line` is where they were captured);
    /// 0 otherwise.
    launch: u64,
    /// The calling thread's actor, once looked up for this record.
    host: Option<ActorIdx>,
    /// The interned site of each (access kind, on a stream) this record made without an
    /// argument name, once made ([`NO_SITE`] before).
    sites: sites::RecordSites,
    /// Where records like this one keep those sites ([`sites::Sites::of_record`]); `None`
    /// for a graph node, whose sites also name its capture.
    memo: Option<u32>,
}

use sites::NO_SITE;

impl Current {
    /// The line this record's accesses run at: its own, or for a graph node its launch's.
    fn runs_at(&self) -> u64 {
        if self.launch > 0 {
            self.launch
        } else {
            self.line
        }
    }

    /// The record at `line` by `thread`, with its name and location interned; `launch` is the
    /// `graph_launch` line running it as a node, or 0.
    fn new(line: u64, thread: ThreadId, op: OpKind, name: Sym, at: Sym, launch: u64) -> Current {
        Current {
            line,
            thread,
            op,
            name,
            at,
            launch,
            host: None,
            sites: [NO_SITE; AccessKind::COUNT * 2],
            memo: None,
        }
    }
}

/// Who performs an operation's accesses: a stream, or a host thread (host code, a host free,
/// the host-side read of a synchronous pageable copy).
#[derive(Clone, Copy, Debug)]
struct Performer {
    actor: ActorIdx,
    on_stream: bool,
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new()
    }
}

impl Engine {
    /// A fresh engine: only the legacy default stream of device 0 exists.
    pub fn new() -> Engine {
        let mut engine = Engine {
            stats: Stats::default(),
            symbols: Symbols::default(),
            sites: Default::default(),
            recent: Default::default(),
            actors: Actors::default(),
            streams: Default::default(),
            legacy: FxHashMap::default(),
            device_streams: FxHashMap::default(),
            next_stream_ordinal: 0,
            events: Default::default(),
            buffers: Default::default(),
            live_buffers: 0,
            record_streams: FxHashMap::default(),
            next_buffer_ordinal: 1,
            graphs: FxHashMap::default(),
            next_graph_ordinal: 0,
            graphs_capturing: 0,
            graph_refs: FxHashMap::default(),
            graph_allocations: FxHashMap::default(),
            retired: FxHashMap::default(),
            pools: Default::default(),
            freed_kept: Default::default(),
            keep_freed: FREED_KEPT,
            forgotten: Default::default(),
            foreign_warned: FxHashSet::default(),
            conflicts: Vec::new(),
            current: Current::new(0, 0, OpKind::Stream, 0, 0, 0),
            resolved: None,
        };
        engine.add_stream(
            LEGACY_STREAM_DEVICE0,
            0,
            StreamKind::LegacyDefault,
            StreamFlags::Blocking,
            None,
            0,
        );
        engine
    }

    /// Counts so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Convenience for tests: applies every record, then [`Engine::finish`], and returns all
    /// findings, or the first input error.
    pub fn check_all<'a>(
        records: impl IntoIterator<Item = &'a Record>,
    ) -> Result<Vec<Finding>, InputError> {
        let mut engine = Engine::new();
        let mut findings = Vec::new();
        for record in records {
            engine.apply(record, &mut |f| findings.push(f))?;
        }
        engine.finish(&mut |f| findings.push(f));
        Ok(findings)
    }

    /// Ends the trace: warns about buffers still allocated (one warning for all of them).
    pub fn finish(&mut self, out: &mut Out<'_>) {
        self.warn_leaks(out);
    }

    /// Applies one record; races and warnings go to `out` as they are found. An input error
    /// leaves the engine as it was before the record, as far as the checks before any change
    /// allow; callers stop at the first one.
    pub fn apply(&mut self, record: &Record, out: &mut Out<'_>) -> Result<(), InputError> {
        self.apply_hinted(record, None, out)
    }

    /// [`Engine::apply`], with the record's hint from a [`RecordHints`] that saw every hinted
    /// record this engine applied: `check` makes hints on its parsing thread.
    #[inline]
    pub(crate) fn apply_hinted(
        &mut self,
        record: &Record,
        hint: Option<RecordHint>,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        self.stats.records += 1;
        let op = record.op.kind();
        if op.accesses_memory() {
            self.begin_accessing(record, op, hint);
        } else {
            // Its name and location would only name the sites of its accesses, and it makes
            // none: not interned (cudarc's tracked waits and records are named after each
            // buffer's event, so a program brings two such names per buffer).
            self.current = Current::new(record.line, record.thread, op, 0, 0, 0);
        }
        // Every thread that issues a record is an actor from then on (a captured node or a
        // driver allocation would not look its thread up otherwise): an ended actor's slot
        // waits for every such thread to learn that actor's work (clocks.rs).
        self.host();
        if let Some(r) = &mut self.resolved {
            r.stream = None;
            r.buffers.clear();
            r.edges.clear();
            r.graph = None;
        }
        self.dispatch(record, out)
    }

    /// Whether applying a record of `op` reads its name or location (`Record::name`,
    /// `Record::at`): a record that accesses memory names its sites with them (and only such
    /// records become graph nodes, which keep both), an allocation names its buffer, a stream
    /// keeps its name for reports. Any other record is applied alike with or without them, so
    /// a producer may leave them out: the online checker thread then does not write them.
    pub fn reads_texts(op: OpKind) -> bool {
        op.accesses_memory() || op == OpKind::Stream
    }

    /// Hints that the records after `batch[i]` will be applied soon, as `batch[i]` is about to
    /// be: the states of the buffers that the record [`PREFETCH_AHEAD`] places on accesses
    /// start loading into the CPU's caches, and the heap part of the states of the record
    /// [`PREFETCH_SHADOW_AHEAD`] places on (loaded by then), so that applying them does not
    /// wait for memory. With thousands of live buffers such waits were most of the engine's
    /// time; below [`PREFETCH_FROM`] buffers it does nothing. Changes nothing either way. `op`
    /// gives an item's op (`None` for an item that is no record).
    #[inline]
    pub fn prefetch<T>(&self, batch: &[T], i: usize, op: impl Fn(&T) -> Option<&Op>) {
        if self.live_buffers < PREFETCH_FROM {
            return;
        }
        let ahead = |n: usize| i.checked_add(n).and_then(|j| batch.get(j)).and_then(&op);
        if let Some(op) = ahead(PREFETCH_AHEAD) {
            prefetch::for_each_buffer(op, |buf| self.buffers.prefetch(buf));
        }
        if let Some(op) = ahead(PREFETCH_SHADOW_AHEAD) {
            prefetch::for_each_buffer(op, |buf| {
                if let Some(b) = self.buffers.get(&buf) {
                    b.shadow.prefetch();
                }
            });
        }
    }

    /// The current record, of `op`, which accesses memory: its name and location
    /// interned, and its sites' memo found (at once by its hint, where it has one already
    /// seen).
    fn begin_accessing(&mut self, record: &Record, op: OpKind, hint: Option<RecordHint>) {
        let (key, memo) = match hint.and_then(|hint| self.recent.find_hinted(hint)) {
            Some(found) => found,
            None => {
                let found = self.look_up(record, op);
                if let Some(hint) = hint {
                    self.recent.put_hinted(hint, found.0, found.1);
                }
                found
            }
        };
        self.current = Current::new(record.line, record.thread, op, key.name, key.at, 0);
        self.current.memo = Some(memo);
        self.current.sites = self.sites.of_memo(memo);
    }

    /// The key of `record` (of `op`), its name and location interned, and its sites' memo.
    #[inline]
    fn look_up(&mut self, record: &Record, op: OpKind) -> (RecordKey, u32) {
        let hash = recent::hash_of(record, op);
        if let Some(found) = self.recent.find(hash, record, op, &self.symbols) {
            return found;
        }
        let key = RecordKey {
            name: self.symbols.intern(record.name.as_deref()),
            at: self.symbols.intern(record.at.as_deref()),
            op,
            thread: record.thread,
        };
        let (memo, _) = self.sites.of_record(key);
        self.recent.put(hash, key, memo);
        (key, memo)
    }

    /// How many freed buffers keep their tombstone ([`FREED_KEPT`] unless set here): an access
    /// to an older one is a [`WarningFact::ForgottenBuffer`], not a use-after-free race, and
    /// the record's other accesses are checked as usual.
    pub fn keep_freed(&mut self, n: usize) {
        self.keep_freed = n;
    }

    /// [`Engine::apply`] after its bookkeeping: the record's family. A launch while no capture
    /// is under way (most records) goes straight to [`Engine::launch`]: the match over every family makes a
    /// large function (with a stack frame of over a kilobyte), whose entry and exit cost more
    /// than finding the family.
    #[inline(always)]
    fn dispatch(&mut self, record: &Record, out: &mut Out<'_>) -> Result<(), InputError> {
        if let Op::Launch {
            stream,
            reads,
            writes,
            atomics,
        } = &record.op
            && self.graphs_capturing == 0
        {
            return self.launch(*stream, reads, writes, atomics, out);
        }
        self.dispatch_any(record, out)
    }

    /// [`Engine::dispatch`] of any record.
    #[inline(never)]
    fn dispatch_any(&mut self, record: &Record, out: &mut Out<'_>) -> Result<(), InputError> {
        let line = record.line;
        let err = |kind| InputError { line, kind };
        if self.graphs_capturing > 0 {
            if let Some(stream) = graphs::node_stream(&record.op)
                && let Some((graph, lane)) = self.capturing(stream)
            {
                // Captured: it becomes a node and runs at each launch.
                let accesses = graphs::node_accesses(&record.op);
                return self.capture_node(record, graph, lane, &accesses, out);
            }
            if let Some((graph, lane)) = self.memory_node_lane(&record.op) {
                return self.capture_memory_node(record, graph, lane, out);
            }
        }
        match &record.op {
            Op::Stream {
                id,
                device,
                kind,
                flags,
            } => self
                .declare_stream(record, *id, *device, *kind, *flags)
                .map_err(err),
            Op::Event { id } => self.declare_event(*id).map_err(err),
            Op::EventDestroy { id } => self.destroy_event(*id).map_err(err),
            Op::StreamDestroy { id } => self.destroy_stream(*id).map_err(err),
            Op::Alloc { buf, bytes, .. } => {
                let place = memory::Placement::of(&record.op).expect("an alloc");
                self.alloc(record, *buf, *bytes, place, false, out)
            }
            Op::Free { buf, stream } => self.free(*buf, *stream, out),
            Op::Launch {
                stream,
                reads,
                writes,
                atomics,
            } => self.launch(*stream, reads, writes, atomics, out),
            Op::HostFunc {
                stream,
                reads,
                writes,
            } => self.launch(*stream, reads, writes, &[], out),
            Op::Memcpy {
                stream,
                src,
                dst,
                blocking,
            } => self.memcpy(*stream, src, dst, *blocking, out),
            Op::Memset {
                stream,
                dst,
                blocking,
            } => self.memset(*stream, dst, *blocking, out),
            Op::HostAccess { reads, writes } => self.host_access(reads, writes, out),
            Op::Record { event, stream } => self.record_event(*event, *stream, out),
            Op::Wait { stream, event } => self.wait_event(*stream, *event, out),
            Op::EventSync { event } => self.host_waits_event(*event, true, out).map_err(err),
            Op::EventQuery { event, done } => {
                self.host_waits_event(*event, *done, out).map_err(err)
            }
            Op::StreamSync { stream } => self.host_waits_stream(*stream, true).map_err(err),
            Op::StreamQuery { stream, done } => self.host_waits_stream(*stream, *done).map_err(err),
            Op::DeviceSync { device } => self.device_sync(*device).map_err(err),
            Op::RecordStream { buf, stream } => self.record_stream(*buf, *stream).map_err(err),
            Op::GraphBegin { graph, stream } => self.graph_begin(*graph, *stream).map_err(err),
            Op::GraphEnd { graph, stream } => self.graph_end(*graph, *stream).map_err(err),
            Op::GraphLaunch { graph, stream } => self.graph_launch(*graph, *stream, out),
            Op::GraphDestroy { graph } => self.graph_destroy(*graph).map_err(err),
        }
    }

    /// An input error on the current record.
    fn input_error(&self, kind: InputErrorKind) -> InputError {
        InputError {
            line: self.current.line,
            kind,
        }
    }

    /// The call being applied, as a synchronization others may learn through.
    fn via(&self) -> LastSync {
        LastSync {
            line: self.current.line,
            op: self.current.op,
        }
    }

    /// The calling host thread's actor.
    fn host(&mut self) -> ActorIdx {
        if let Some(host) = self.current.host {
            return host;
        }
        let host = self.actors.host(self.current.thread);
        self.current.host = Some(host);
        host
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_graph_memory;
#[cfg(test)]
mod tests_minor1;
#[cfg(test)]
pub(crate) mod tests_prefetch;
#[cfg(test)]
mod tests_stream_destroy;
#[cfg(test)]
mod tests_texts;
