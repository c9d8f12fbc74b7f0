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
//! Shadow state is per buffer and per byte range ([`shadow::RangeMap`]): the last write and, per
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

pub mod error;
pub mod finding;
mod objects;
pub mod shadow;
mod symbols;
pub mod vclock;

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

pub use error::{InputError, InputErrorKind};
pub use finding::{
    AccessKind, BufferInfo, Finding, LastSync, Race, RaceKind, Site, StreamInfo, Warning,
    WarningKind,
};
use objects::{Actor, ActorKind, BufferState, EventState, Snapshot, StreamState, Via};
use shadow::{Cell, Conflict, RangeMap, SiteRef, Stamp};
use symbols::Symbols;
use vclock::{ActorIdx, VClock};

use crate::trace::record::{
    Access, BufId, DeviceId, EventId, LEGACY_STREAM_DEVICE0, MemSpace, Op, Record, StreamFlags,
    StreamId, StreamKind, ThreadId,
};

/// Counts over everything the engine has seen, for `streamsan stats` and report summaries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records applied.
    pub records: u64,
    /// Streams declared (the implicit legacy stream of device 0 counts once used).
    pub streams: u64,
    /// Events declared.
    pub events: u64,
    /// Buffers allocated (a reused id counts again).
    pub buffers: u64,
    /// Synchronization calls: records, waits, stream/event/device syncs, queries.
    pub syncs: u64,
    /// Race findings emitted (before any folding).
    pub races: u64,
    /// Warnings emitted.
    pub warnings: u64,
}

/// One pure state machine: feed it records in trace order, it emits findings. No I/O, no CUDA.
#[derive(Debug)]
pub struct Engine {
    stats: Stats,
    symbols: Symbols,
    actors: Vec<Actor>,
    threads: FxHashMap<ThreadId, ActorIdx>,
    streams: FxHashMap<StreamId, StreamState>,
    /// Each device's legacy default stream.
    legacy: FxHashMap<DeviceId, StreamId>,
    /// Each device's streams in declaration order (device sync, legacy barriers).
    device_streams: FxHashMap<DeviceId, Vec<StreamId>>,
    next_stream_ordinal: u32,
    events: FxHashMap<EventId, EventState>,
    buffers: FxHashMap<BufId, BufferState>,
    next_buffer_ordinal: u32,
    /// (stream, thread) pairs already warned about a foreign per-thread stream.
    foreign_warned: FxHashSet<(StreamId, ThreadId)>,
    /// Scratch space for the conflicts of one access.
    conflicts: Vec<Conflict>,
    /// The current record's interned `name` and `at`, computed once per record.
    record_syms: (shadow::Sym, shadow::Sym),
    /// The current record's op code.
    record_op: u8,
    /// The last (thread, actor) looked up: most traces issue from one thread.
    last_thread: Option<(ThreadId, ActorIdx)>,
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new()
    }
}

/// How an access touches memory and from where; the part of a [`SiteRef`] fixed per record.
#[derive(Clone, Copy)]
struct Who {
    actor: ActorIdx,
    on_stream: bool,
}

impl Engine {
    /// A fresh engine: only the legacy default stream of device 0 exists.
    pub fn new() -> Engine {
        let mut engine = Engine {
            stats: Stats::default(),
            symbols: Symbols::default(),
            actors: Vec::new(),
            threads: FxHashMap::default(),
            streams: FxHashMap::default(),
            legacy: FxHashMap::default(),
            device_streams: FxHashMap::default(),
            next_stream_ordinal: 0,
            events: FxHashMap::default(),
            buffers: FxHashMap::default(),
            next_buffer_ordinal: 1,
            foreign_warned: FxHashSet::default(),
            conflicts: Vec::new(),
            record_syms: (0, 0),
            record_op: 0,
            last_thread: None,
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
    pub fn finish(&mut self, out: &mut dyn FnMut(Finding)) {
        let mut leaked: Vec<&BufferState> = self
            .buffers
            .values()
            .filter(|b| b.freed.is_none())
            .collect();
        if leaked.is_empty() {
            return;
        }
        leaked.sort_by_key(|b| b.info.ordinal);
        let shown: Vec<String> = leaked
            .iter()
            .take(5)
            .map(|b| buffer_label(&b.info))
            .collect();
        let more = leaked.len().saturating_sub(shown.len());
        let message = format!(
            "{} buffer{} still allocated at the end of the trace: {}{}",
            leaked.len(),
            if leaked.len() == 1 { " is" } else { "s are" },
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        );
        let line = leaked[0].info.alloc_line;
        self.warn(out, WarningKind::Leak, line, message);
    }

    /// Applies one record; races and warnings go to `out` as they are found.
    pub fn apply(
        &mut self,
        record: &Record,
        out: &mut dyn FnMut(Finding),
    ) -> Result<(), InputError> {
        self.stats.records += 1;
        self.record_syms = (
            self.symbols.intern(record.name.as_deref()),
            self.symbols.intern(record.at.as_deref()),
        );
        self.record_op = record.op.code();
        let line = record.line;
        let err = |kind| InputError { line, kind };
        match &record.op {
            Op::Stream {
                id,
                device,
                kind,
                flags,
            } => self
                .declare_stream(record, *id, *device, *kind, *flags)
                .map_err(err),
            Op::Event { id } => {
                if let Some(e) = self.events.get(id) {
                    return Err(err(InputErrorKind::EventRedeclared {
                        id: *id,
                        first: e.declared_line,
                    }));
                }
                self.stats.events += 1;
                self.events.insert(
                    *id,
                    EventState {
                        declared_line: line,
                        last: None,
                    },
                );
                Ok(())
            }
            Op::EventDestroy { id } => {
                self.events
                    .remove(id)
                    .ok_or(err(InputErrorKind::UndeclaredEvent(*id)))?;
                Ok(())
            }
            Op::Alloc {
                buf,
                bytes,
                device,
                space,
                stream,
                addr,
            } => self.alloc(record, *buf, *bytes, *device, *space, *stream, *addr, out),
            Op::Free { buf, stream } => self.free(record, *buf, *stream, out),
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
                let who = self.begin_op(record, *stream, out)?;
                self.touch_all(record, who, reads, AccessKind::Read, out)?;
                self.touch_all(record, who, writes, AccessKind::Write, out)?;
                Ok(())
            }
            Op::Memcpy {
                stream,
                src,
                dst,
                blocking,
            } => self.memcpy(record, *stream, src, dst, *blocking, out),
            Op::Memset {
                stream,
                dst,
                blocking,
            } => {
                self.check_accesses(record, [dst])?;
                let who = self.begin_op(record, *stream, out)?;
                self.touch(record, who, dst, AccessKind::Write, out)?;
                // R9: a synchronous memset of pinned memory is synchronous to the host;
                // otherwise (and always for the async variant) it is not.
                if *blocking && self.space_of(dst.buf) == MemSpace::Pinned {
                    self.host_joins_stream(record, *stream, false);
                }
                Ok(())
            }
            Op::HostAccess { reads, writes } => {
                self.check_accesses(record, reads.iter().chain(writes))?;
                let host = self.thread_actor(record.thread);
                self.tick(host);
                let who = Who {
                    actor: host,
                    on_stream: false,
                };
                for (list, kind) in [(reads, AccessKind::Read), (writes, AccessKind::Write)] {
                    for access in list {
                        // R13: host code cannot touch device memory; say so, check nothing.
                        if self.space_of(access.buf) == MemSpace::Device {
                            let message = format!(
                                "host code {} device memory of buffer {}; only pinned, managed and host memory are visible to the host",
                                if kind == AccessKind::Read {
                                    "reads"
                                } else {
                                    "writes"
                                },
                                access.buf
                            );
                            self.warn(out, WarningKind::HostAccessToDevice, line, message);
                            continue;
                        }
                        self.touch(record, who, access, kind, out)?;
                    }
                }
                Ok(())
            }
            Op::Record { event, stream } => {
                self.stats.syncs += 1;
                if !self.events.contains_key(event) {
                    return Err(err(InputErrorKind::UndeclaredEvent(*event)));
                }
                let who = self.begin_op(record, *stream, out)?;
                // R2: the event captures the stream's clock at the call.
                let clock = self.actors[who.actor as usize].clock.clone();
                self.events.get_mut(event).expect("checked above").last = Some(Snapshot { clock });
                Ok(())
            }
            Op::Wait { stream, event } => {
                self.stats.syncs += 1;
                if !self.events.contains_key(event) {
                    return Err(err(InputErrorKind::UndeclaredEvent(*event)));
                }
                self.stream(*stream).map_err(err)?;
                let actor = self.streams[stream].actor;
                // R3: join the snapshot of the latest record before this call; R4: a
                // never-recorded event orders nothing.
                match self.events[event].last.as_ref().map(|s| s.clock.clone()) {
                    Some(snapshot) => self.join_clock(actor, &snapshot, (line, "wait")),
                    None => self.warn_unrecorded(out, line, *event, "a wait on"),
                }
                self.begin_op(record, *stream, out)?;
                Ok(())
            }
            Op::EventSync { event } | Op::EventQuery { event, .. } => {
                self.stats.syncs += 1;
                let done = match &record.op {
                    Op::EventQuery { done, .. } => *done,
                    _ => true,
                };
                let e = self
                    .events
                    .get(event)
                    .ok_or(err(InputErrorKind::UndeclaredEvent(*event)))?;
                match e.last.as_ref().map(|s| s.clock.clone()) {
                    None => {
                        let what = if matches!(record.op, Op::EventSync { .. }) {
                            "a synchronize of"
                        } else {
                            "a query of"
                        };
                        self.warn_unrecorded(out, line, *event, what);
                    }
                    // R5: a sync, or a query that returned done, joins the snapshot.
                    Some(snapshot) if done => {
                        let host = self.thread_actor(record.thread);
                        self.join_clock(host, &snapshot, (line, record.op.name()));
                    }
                    Some(_) => {}
                }
                Ok(())
            }
            Op::StreamSync { stream } | Op::StreamQuery { stream, .. } => {
                self.stats.syncs += 1;
                let done = match &record.op {
                    Op::StreamQuery { done, .. } => *done,
                    _ => true,
                };
                self.stream(*stream).map_err(err)?;
                self.mark_used(*stream);
                if done {
                    self.host_joins_stream(record, *stream, true);
                }
                Ok(())
            }
            Op::DeviceSync { device } => {
                self.stats.syncs += 1;
                // R5: cudaDeviceSynchronize waits for every stream of the device.
                let host = self.thread_actor(record.thread);
                let streams = self.device_streams.get(device).cloned().unwrap_or_default();
                for s in streams {
                    let actor = self.streams[&s].actor;
                    self.join_actor(host, actor, (line, "device_sync"));
                }
                Ok(())
            }
        }
    }

    // ----- declarations -------------------------------------------------------------------

    fn declare_stream(
        &mut self,
        record: &Record,
        id: StreamId,
        device: DeviceId,
        kind: StreamKind,
        flags: StreamFlags,
    ) -> Result<(), InputErrorKind> {
        if id == LEGACY_STREAM_DEVICE0 {
            // Stream 0 exists implicitly; declaring it only names it.
            if kind != StreamKind::LegacyDefault || device != 0 {
                return Err(InputErrorKind::BadStreamZero(format!(
                    "a {} stream of device {device}",
                    kind.as_str()
                )));
            }
            let s = self.streams.get_mut(&id).expect("stream 0 always exists");
            if s.declared_line != 0 {
                return Err(InputErrorKind::StreamRedeclared {
                    id,
                    first: s.declared_line,
                });
            }
            s.declared_line = record.line;
            s.info.name = record.name.clone();
            return Ok(());
        }
        if let Some(s) = self.streams.get(&id) {
            return Err(InputErrorKind::StreamRedeclared {
                id,
                first: s.declared_line,
            });
        }
        match (kind, flags) {
            (StreamKind::LegacyDefault, StreamFlags::NonBlocking) => {
                return Err(InputErrorKind::Invalid(
                    "the legacy default stream cannot be non_blocking".into(),
                ));
            }
            (StreamKind::PerThreadDefault, StreamFlags::NonBlocking) => {
                return Err(InputErrorKind::Invalid(
                    "a per-thread default stream is blocking: it synchronizes with the legacy default stream (expected flags \"blocking\" or none)".into(),
                ));
            }
            (StreamKind::LegacyDefault, _) => {
                if let Some(existing) = self.legacy.get(&device) {
                    return Err(InputErrorKind::Invalid(format!(
                        "device {device} already has a legacy default stream (stream {existing})"
                    )));
                }
            }
            _ => {}
        }
        self.add_stream(id, device, kind, flags, record.name.clone(), record.thread);
        self.streams.get_mut(&id).expect("just added").declared_line = record.line;
        self.stats.streams += 1;
        Ok(())
    }

    fn add_stream(
        &mut self,
        id: StreamId,
        device: DeviceId,
        kind: StreamKind,
        flags: StreamFlags,
        name: Option<String>,
        owner: ThreadId,
    ) {
        let actor = self.new_actor(ActorKind::Stream(id));
        let ordinal = self.next_stream_ordinal;
        self.next_stream_ordinal += 1;
        if kind == StreamKind::LegacyDefault {
            self.legacy.insert(device, id);
        }
        self.device_streams.entry(device).or_default().push(id);
        self.streams.insert(
            id,
            StreamState {
                info: StreamInfo {
                    id,
                    ordinal,
                    device,
                    kind,
                    flags,
                    name,
                },
                actor,
                owner,
                blocking: flags == StreamFlags::Blocking && kind != StreamKind::LegacyDefault,
                declared_line: 0,
                used: id != LEGACY_STREAM_DEVICE0,
                joined: Vec::new(),
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn alloc(
        &mut self,
        record: &Record,
        buf: BufId,
        bytes: u64,
        device: DeviceId,
        space: MemSpace,
        stream: Option<StreamId>,
        addr: Option<u64>,
        out: &mut dyn FnMut(Finding),
    ) -> Result<(), InputError> {
        let line = record.line;
        if let Some(b) = self.buffers.get(&buf)
            && b.freed.is_none()
        {
            return Err(InputError {
                line,
                kind: InputErrorKind::BufferRedeclared {
                    id: buf,
                    first: b.info.alloc_line,
                },
            });
        }
        let alloc_stream = match stream {
            Some(s) => Some(
                self.stream(s)
                    .map_err(|kind| InputError { line, kind })?
                    .info
                    .clone(),
            ),
            None => None,
        };
        // R12: a host allocation is usable by every stream at once (no birth write that could
        // race); a stream-ordered one is a birth write on its stream.
        let cell = match stream {
            None => Cell::default(),
            Some(s) => {
                let who = self.begin_op(record, s, out)?;
                let epoch = self.actors[who.actor as usize].clock.get(who.actor);
                let stamp = Stamp {
                    epoch: vclock::Epoch {
                        actor: who.actor,
                        tick: epoch,
                    },
                    site: self.site_ref(record, who, AccessKind::Write, None),
                };
                Cell {
                    write: Some(stamp),
                    reads: Default::default(),
                }
            }
        };
        let ordinal = self.next_buffer_ordinal;
        self.next_buffer_ordinal += 1;
        self.stats.buffers += 1;
        let info = BufferInfo {
            id: buf,
            ordinal,
            name: record.name.clone(),
            bytes,
            space,
            device,
            alloc_line: line,
            alloc_at: record.at.clone(),
            alloc_stream,
            addr,
        };
        self.buffers.insert(
            buf,
            BufferState {
                bytes,
                info: Arc::new(info),
                shadow: RangeMap::new(bytes, cell),
                freed: None,
            },
        );
        Ok(())
    }

    fn free(
        &mut self,
        record: &Record,
        buf: BufId,
        stream: Option<StreamId>,
        out: &mut dyn FnMut(Finding),
    ) -> Result<(), InputError> {
        let line = record.line;
        let err = |kind| InputError { line, kind };
        let b = self
            .buffers
            .get(&buf)
            .ok_or(err(InputErrorKind::UndeclaredBuffer(buf)))?;
        if let Some(f) = &b.freed {
            return Err(err(InputErrorKind::DoubleFree {
                id: buf,
                first: f.site.line,
            }));
        }
        let bytes = b.info.bytes;
        // R12: a free is a death write over the whole buffer, by the host thread (cudaFree) or
        // on its stream (cudaFreeAsync).
        let who = match stream {
            Some(s) => self.begin_op(record, s, out)?,
            None => {
                let host = self.thread_actor(record.thread);
                self.tick(host);
                Who {
                    actor: host,
                    on_stream: false,
                }
            }
        };
        let access = Access::bytes(buf, 0, bytes);
        let stamp = self.touch(record, who, &access, AccessKind::Free, out)?;
        let b = self.buffers.get_mut(&buf).expect("checked above");
        b.freed = stamp;
        b.shadow = RangeMap::new(0, Cell::default());
        Ok(())
    }

    fn memcpy(
        &mut self,
        record: &Record,
        stream: StreamId,
        src: &Access,
        dst: &Access,
        blocking: bool,
        out: &mut dyn FnMut(Finding),
    ) -> Result<(), InputError> {
        self.check_accesses(record, [src, dst])?;
        self.stream(stream).map_err(|kind| InputError {
            line: record.line,
            kind,
        })?;
        let host_side = |s: MemSpace| matches!(s, MemSpace::Host | MemSpace::Pinned);
        let (from, to) = (self.space_of(src.buf), self.space_of(dst.buf));
        // R8, API synchronization behaviour, "Memcpy".
        if blocking && from == MemSpace::Host && !host_side(to) {
            // Pageable host -> device, synchronous: a stream sync before the copy starts; the
            // host has read the source when the call returns, the device write may not have
            // landed.
            self.host_joins_stream(record, stream, true);
            let host = self.thread_actor(record.thread);
            self.tick(host);
            let who = Who {
                actor: host,
                on_stream: false,
            };
            self.touch(record, who, src, AccessKind::Read, out)?;
            let who = self.begin_op(record, stream, out)?;
            self.touch(record, who, dst, AccessKind::Write, out)?;
            return Ok(());
        }
        let who = self.begin_op(record, stream, out)?;
        self.touch(record, who, src, AccessKind::Read, out)?;
        self.touch(record, who, dst, AccessKind::Write, out)?;
        let host_waits = if blocking {
            // pinned -> device, device -> any host memory, host -> host; not device -> device.
            host_side(from) || host_side(to)
        } else {
            // Async: only host -> host is fully synchronous.
            host_side(from) && host_side(to)
        };
        if host_waits {
            self.host_joins_stream(record, stream, false);
        }
        Ok(())
    }

    // ----- stream operations --------------------------------------------------------------

    /// Starts an operation on `stream`: R6's barrier-in on the legacy stream, R1's join of the
    /// issuing host thread's clock, then a tick of the stream.
    fn begin_op(
        &mut self,
        record: &Record,
        stream: StreamId,
        out: &mut dyn FnMut(Finding),
    ) -> Result<Who, InputError> {
        let line = record.line;
        let host = self.thread_actor(record.thread);
        let host_version = self.actors[host as usize].version;
        let s = self.streams.get_mut(&stream).ok_or(InputError {
            line,
            kind: InputErrorKind::UndeclaredStream(stream),
        })?;
        if !s.used {
            s.used = true;
            self.stats.streams += 1;
        }
        let (actor, kind, owner, device, blocking) =
            (s.actor, s.info.kind, s.owner, s.info.device, s.blocking);
        // R1: join the issuing thread's clock, unless this stream already holds this version.
        let join_host = needs_join(&mut s.joined, host, host_version);
        let legacy = if blocking {
            self.legacy.get(&device).map(|id| self.streams[id].actor)
        } else {
            None
        };
        if kind == StreamKind::PerThreadDefault
            && owner != record.thread
            && self.foreign_warned.insert((stream, record.thread))
        {
            let message = format!(
                "thread {} uses the per-thread default stream {stream} of thread {owner}; each host thread has its own",
                record.thread
            );
            self.warn(out, WarningKind::ForeignPerThreadStream, line, message);
        }
        let via = (line, record.op.name());
        if kind == StreamKind::LegacyDefault {
            // R6: the legacy stream first waits for all work on the device's blocking streams.
            for b in self.blocking_streams(device) {
                self.join_actor(actor, b, via);
            }
        } else if let Some(legacy) = legacy {
            // R6: an operation on a blocking stream waits for the legacy stream's earlier work.
            // (Only operations enqueued after it: a sync of the blocking stream alone does not
            // cover legacy work, as nothing in that stream waits for it.)
            let version = self.actors[legacy as usize].version;
            let s = self.streams.get_mut(&stream).expect("checked");
            if needs_join(&mut s.joined, legacy, version) {
                self.join_actor(actor, legacy, via);
            }
        }
        if join_host {
            self.join_actor(actor, host, via);
        }
        self.tick(actor);
        Ok(Who {
            actor,
            on_stream: true,
        })
    }

    /// R5/R8: the calling host thread learns everything `stream` has done so far. With
    /// `legacy_covers_blocking`, synchronizing the legacy stream also covers the blocking
    /// streams' work (R6).
    fn host_joins_stream(
        &mut self,
        record: &Record,
        stream: StreamId,
        legacy_covers_blocking: bool,
    ) {
        let host = self.thread_actor(record.thread);
        let s = &self.streams[&stream];
        let (actor, kind, device) = (s.actor, s.info.kind, s.info.device);
        let via = (record.line, record.op.name());
        self.join_actor(host, actor, via);
        if legacy_covers_blocking && kind == StreamKind::LegacyDefault {
            for b in self.blocking_streams(device) {
                self.join_actor(host, b, via);
            }
        }
    }

    fn blocking_streams(&self, device: DeviceId) -> Vec<ActorIdx> {
        self.device_streams
            .get(&device)
            .map(|ids| {
                ids.iter()
                    .map(|id| &self.streams[id])
                    .filter(|s| s.blocking)
                    .map(|s| s.actor)
                    .collect()
            })
            .unwrap_or_default()
    }

    // ----- accesses -----------------------------------------------------------------------

    /// Validates ids and bounds of all accesses of a record before any state changes.
    fn check_accesses<'a>(
        &self,
        record: &Record,
        accesses: impl IntoIterator<Item = &'a Access>,
    ) -> Result<(), InputError> {
        for a in accesses {
            let b = self.buffers.get(&a.buf).ok_or(InputError {
                line: record.line,
                kind: InputErrorKind::UndeclaredBuffer(a.buf),
            })?;
            if let Some(r) = a.range {
                let bytes = b.info.bytes;
                if r.off.checked_add(r.len).is_none_or(|end| end > bytes) {
                    return Err(InputError {
                        line: record.line,
                        kind: InputErrorKind::OutOfBounds {
                            id: a.buf,
                            off: r.off,
                            len: r.len,
                            bytes,
                        },
                    });
                }
            }
        }
        Ok(())
    }

    fn touch_all(
        &mut self,
        record: &Record,
        who: Who,
        accesses: &[Access],
        kind: AccessKind,
        out: &mut dyn FnMut(Finding),
    ) -> Result<(), InputError> {
        for a in accesses {
            self.touch(record, who, a, kind, out)?;
        }
        Ok(())
    }

    /// Checks and records one access (R10, R11, R12). Returns the access's stamp, or `None`
    /// when the buffer was already freed (a use-after-free, reported here).
    fn touch(
        &mut self,
        record: &Record,
        who: Who,
        access: &Access,
        kind: AccessKind,
        out: &mut dyn FnMut(Finding),
    ) -> Result<Option<Stamp>, InputError> {
        let site = self.site_ref(record, who, kind, access.arg.as_deref());
        let stamp = Stamp {
            epoch: vclock::Epoch {
                actor: who.actor,
                tick: self.actors[who.actor as usize].clock.get(who.actor),
            },
            site,
        };
        let line = record.line;
        let b = self.buffers.get_mut(&access.buf).ok_or(InputError {
            line,
            kind: InputErrorKind::UndeclaredBuffer(access.buf),
        })?;
        let bytes = b.bytes;
        let (start, end) = match access.range {
            None => (0, bytes),
            Some(r) => match r.off.checked_add(r.len) {
                Some(end) if end <= bytes => (r.off, end),
                _ => {
                    return Err(InputError {
                        line,
                        kind: InputErrorKind::OutOfBounds {
                            id: access.buf,
                            off: r.off,
                            len: r.len,
                            bytes,
                        },
                    });
                }
            },
        };
        if let Some(freed) = b.freed {
            let c = Conflict {
                kind: RaceKind::UseAfterFree,
                previous: freed,
                start,
                end,
            };
            let info = b.info.clone();
            self.report(out, &info, c, stamp);
            return Ok(None);
        }
        let mut conflicts = std::mem::take(&mut self.conflicts);
        conflicts.clear();
        b.shadow.access(
            start,
            end,
            stamp,
            &self.actors[who.actor as usize].clock,
            &mut conflicts,
        );
        if !conflicts.is_empty() {
            let info = b.info.clone();
            for c in &conflicts {
                self.report(out, &info, *c, stamp);
            }
        }
        self.conflicts = conflicts;
        Ok(Some(stamp))
    }

    fn site_ref(
        &mut self,
        record: &Record,
        who: Who,
        access: AccessKind,
        arg: Option<&str>,
    ) -> SiteRef {
        SiteRef {
            line: record.line,
            actor: who.actor,
            host: self.thread_actor(record.thread),
            on_stream: who.on_stream,
            op: self.record_op,
            access,
            name: self.record_syms.0,
            arg: self.symbols.intern(arg),
            at: self.record_syms.1,
        }
    }

    fn space_of(&self, buf: BufId) -> MemSpace {
        self.buffers[&buf].info.space
    }

    // ----- findings (cold) ----------------------------------------------------------------

    #[cold]
    fn report(
        &mut self,
        out: &mut dyn FnMut(Finding),
        buffer: &BufferInfo,
        c: Conflict,
        current: Stamp,
    ) {
        let kind = if current.site.access == AccessKind::Free && c.kind != RaceKind::UseAfterFree {
            RaceKind::FreeWhileInUse
        } else {
            c.kind
        };
        let (cur, prev) = (current.site.actor, c.previous.site.actor);
        let known = self.actors[cur as usize].clock.get(prev);
        let last_sync = (kind != RaceKind::UseAfterFree && known > 0).then(|| {
            let (line, op) = self.actors[cur as usize].via[prev as usize];
            LastSync { line, op }
        });
        let race = Race {
            kind,
            buffer: buffer.clone(),
            range: (c.start, c.end),
            current: self.site(&current.site),
            previous: self.site(&c.previous.site),
            last_sync,
        };
        self.stats.races += 1;
        out(Finding::Race(Box::new(race)));
    }

    fn site(&self, s: &SiteRef) -> Site {
        let stream = match (s.on_stream, self.actors[s.actor as usize].kind) {
            (true, ActorKind::Stream(id)) => Some(self.streams[&id].info.clone()),
            _ => None,
        };
        Site {
            line: s.line,
            stream,
            thread: match self.actors[s.host as usize].kind {
                ActorKind::Host(t) => t,
                ActorKind::Stream(_) => 0,
            },
            op: crate::trace::OP_NAMES[s.op as usize],
            name: self.symbols.resolve(s.name),
            access: s.access,
            arg: self.symbols.resolve(s.arg),
            at: self.symbols.resolve(s.at),
        }
    }

    fn warn(
        &mut self,
        out: &mut dyn FnMut(Finding),
        kind: WarningKind,
        line: u64,
        message: String,
    ) {
        self.stats.warnings += 1;
        out(Finding::Warning(Warning {
            kind,
            line,
            message,
        }));
    }

    fn warn_unrecorded(
        &mut self,
        out: &mut dyn FnMut(Finding),
        line: u64,
        event: EventId,
        what: &str,
    ) {
        let message = format!(
            "{what} event {event}, which was never recorded, orders nothing (record it with cudaEventRecord first)"
        );
        self.warn(out, WarningKind::UnrecordedEvent, line, message);
    }

    // ----- actors and clocks --------------------------------------------------------------

    fn new_actor(&mut self, kind: ActorKind) -> ActorIdx {
        self.actors.push(Actor::new(kind));
        (self.actors.len() - 1) as ActorIdx
    }

    fn thread_actor(&mut self, thread: ThreadId) -> ActorIdx {
        if let Some((t, a)) = self.last_thread
            && t == thread
        {
            return a;
        }
        let a = match self.threads.get(&thread) {
            Some(&a) => a,
            None => {
                let a = self.new_actor(ActorKind::Host(thread));
                self.threads.insert(thread, a);
                a
            }
        };
        self.last_thread = Some((thread, a));
        a
    }

    fn stream(&self, id: StreamId) -> Result<&StreamState, InputErrorKind> {
        self.streams
            .get(&id)
            .ok_or(InputErrorKind::UndeclaredStream(id))
    }

    fn mark_used(&mut self, id: StreamId) {
        let s = self.streams.get_mut(&id).expect("checked");
        if !s.used {
            s.used = true;
            self.stats.streams += 1;
        }
    }

    fn tick(&mut self, actor: ActorIdx) {
        let a = &mut self.actors[actor as usize];
        a.clock.tick(actor);
        a.version += 1;
    }

    /// `dst` learns everything `src` knows.
    fn join_actor(&mut self, dst: ActorIdx, src: ActorIdx, via: Via) {
        if dst == src {
            return;
        }
        let clock = std::mem::take(&mut self.actors[src as usize].clock);
        self.join_clock(dst, &clock, via);
        self.actors[src as usize].clock = clock;
    }

    /// `dst` learns everything in `clock`, remembering `via` for each component that grew.
    fn join_clock(&mut self, dst: ActorIdx, clock: &VClock, via: Via) {
        let a = &mut self.actors[dst as usize];
        let mut changed = false;
        let vias = &mut a.via;
        a.clock.join_with(clock, |i| {
            let i = i as usize;
            if vias.len() <= i {
                vias.resize(i + 1, (0, ""));
            }
            vias[i] = via;
            changed = true;
        });
        if changed {
            a.version += 1;
        }
    }
}

/// Whether `joined` lacks `(actor, version)`; records it. Clocks only grow, so a stream that
/// joined an actor's clock at some version already knows everything up to that version.
fn needs_join(joined: &mut Vec<(ActorIdx, u64)>, actor: ActorIdx, version: u64) -> bool {
    match joined.iter_mut().find(|(a, _)| *a == actor) {
        Some((_, v)) if *v == version => false,
        Some((_, v)) => {
            *v = version;
            true
        }
        None => {
            joined.push((actor, version));
            true
        }
    }
}

/// `b3 "x"` style label used in warnings.
fn buffer_label(info: &BufferInfo) -> String {
    match &info.name {
        Some(n) => format!("b{} {n:?}", info.ordinal),
        None => format!("b{}", info.ordinal),
    }
}

#[cfg(test)]
mod tests;
