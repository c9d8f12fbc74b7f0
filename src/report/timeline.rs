//! The drawing model shared by the timeline exporters ([`super::perfetto`], [`super::html`]):
//! which track each record goes on, what its slice is called, and which synchronization edges
//! to draw between slices. A [`Timeline`] keeps only what drawing needs (one track per stream
//! and host thread, each stream's last operation, each event's latest record, a label per live
//! buffer) and hands every slice and edge to a [`Draw`] as it goes, so an exporter streams and
//! its memory is bounded by live state, as the engine's is.
//!
//! The edges (the mapping table of `docs/perfetto.md`): a record and a later wait on, sync of
//! or query (done) of its event; stream sync / query (done) from the stream's last operation,
//! for the legacy stream also from each blocking stream's; device sync from every stream of the
//! device; the legacy default stream's barriers in both directions. They are drawn from these
//! tables, not by replaying the ordering model: the engine decides races, this module only
//! shows where the calls were.
//!
//! The records are assumed to be valid (as [`crate::check::check_reader_with`] guarantees by
//! showing its tap only records the engine accepted).

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::names::stream_label;
use crate::engine::finding::{Site, StreamInfo};
use crate::trace::record::{
    Access, BufId, DeviceId, EventId, LEGACY_STREAM_DEVICE0, Op, Record, StreamFlags, StreamId,
    StreamKind, ThreadId,
};

/// Where a timeline goes: slices (one operation on one track) and edges between them, in the
/// order they are drawn.
pub(crate) trait Draw {
    /// An operation on track `tid` at trace line `line`; `cat` is `"host"` or `"stream"`.
    fn slice(&mut self, name: &str, cat: &'static str, tid: u32, line: u64, args: OpArgs<'_>);
    /// An edge from one slice to a later one; `cat` is `"sync"` (name: the op that orders, or
    /// `legacy barrier`) or `"race"`.
    fn flow(&mut self, name: &str, cat: &'static str, from: Slice, to: Slice);
}

/// One drawn operation: a slice on a track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slice {
    pub tid: u32,
    pub line: u64,
}

/// A track: a host thread or a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Track {
    pub tid: u32,
    /// `host thread 0`, `s1 "side" (created, non-blocking)`: as the text report names them.
    pub name: String,
    /// Host threads in order of appearance, then streams by report symbol.
    pub sort_index: u64,
}

/// The details of an operation's slice.
#[derive(Clone, Serialize)]
pub(crate) struct OpArgs<'a> {
    pub line: u64,
    pub op: &'static str,
    pub thread: ThreadId,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reads: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<EventId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocking: Option<bool>,
}

/// The tracks and what drawing the next record needs; see the module doc.
#[derive(Debug)]
pub(crate) struct Timeline {
    next_tid: u32,
    streams: FxHashMap<StreamId, StreamTrack>,
    /// 1, 2, ... in declaration order; stream 0 of device 0 is s0, as in reports.
    next_stream_ordinal: u32,
    /// Host threads in order of first appearance, with their `tid`s.
    threads: Vec<(ThreadId, u32)>,
    thread_index: FxHashMap<ThreadId, usize>,
    /// Each device's streams in declaration order (device syncs, legacy barriers).
    device_streams: FxHashMap<DeviceId, Vec<StreamId>>,
    /// Each device's legacy default stream.
    legacy: FxHashMap<DeviceId, StreamId>,
    /// Each live event's latest record, if any.
    events: FxHashMap<EventId, Option<Slice>>,
    /// Each live buffer's label (`b1 "x"`) and size.
    buffers: FxHashMap<BufId, (String, u64)>,
    next_buffer_ordinal: u32,
}

#[derive(Debug)]
struct StreamTrack {
    info: StreamInfo,
    tid: u32,
    /// Takes part in legacy-default-stream barriers (created blocking, or per-thread default).
    blocking: bool,
    /// The line of the stream's last operation.
    last_op: Option<u64>,
    /// The last operation of this stream already drawn into its legacy stream.
    drawn_to_legacy: u64,
    /// The last legacy-stream operation already drawn into this stream.
    legacy_seen: u64,
    /// Per host thread, the last operation of this stream already drawn into it by a sync.
    synced: Vec<(ThreadId, u64)>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            next_tid: 1,
            streams: FxHashMap::default(),
            next_stream_ordinal: 1,
            threads: Vec::new(),
            thread_index: FxHashMap::default(),
            device_streams: FxHashMap::default(),
            legacy: FxHashMap::default(),
            events: FxHashMap::default(),
            buffers: FxHashMap::default(),
            next_buffer_ordinal: 1,
        }
    }
}

impl Timeline {
    /// Draws one record into `d`; records must come in trace order.
    pub fn record(&mut self, r: &Record, d: &mut impl Draw) {
        let mut a = OpArgs {
            line: r.line,
            op: r.op.name(),
            thread: r.thread,
            stream: None,
            name: r.name.as_deref(),
            at: r.at.as_deref(),
            reads: Vec::new(),
            writes: Vec::new(),
            event: None,
            done: None,
            blocking: None,
        };
        match &r.op {
            Op::Stream {
                id,
                device,
                kind,
                flags,
            } => {
                // The declaring thread's track first: it usually comes first in a viewer too.
                self.thread_tid(r.thread);
                self.declare_stream(*id, *device, *kind, *flags, r.name.clone());
                let label = format!("stream {}", stream_label(&self.streams[id].info));
                a.stream = Some(*id);
                self.host_op(d, r, &label, a);
            }
            Op::Event { id } => {
                self.events.insert(*id, None);
                a.event = Some(*id);
                self.host_op(d, r, &format!("event {id}"), a);
            }
            Op::EventDestroy { id } => {
                self.events.remove(id);
                a.event = Some(*id);
                self.host_op(d, r, &format!("event_destroy {id}"), a);
            }
            Op::Alloc {
                buf, bytes, stream, ..
            } => {
                let label = match &r.name {
                    Some(name) => format!("b{} {name:?}", self.next_buffer_ordinal),
                    None => format!("b{}", self.next_buffer_ordinal),
                };
                self.next_buffer_ordinal += 1;
                self.buffers.insert(*buf, (label.clone(), *bytes));
                a.writes.push(self.access(&Access::whole(*buf)));
                let name = format!("alloc {label}");
                match stream {
                    Some(s) => {
                        self.stream_op(d, r, *s, &name, a);
                    }
                    None => {
                        self.host_op(d, r, &name, a);
                    }
                }
            }
            Op::Free { buf, stream } => {
                let access = self.access(&Access::whole(*buf));
                let name = format!("free {}", self.buffer_name(*buf));
                a.writes.push(access);
                match stream {
                    Some(s) => {
                        self.stream_op(d, r, *s, &name, a);
                    }
                    None => {
                        self.host_op(d, r, &name, a);
                    }
                }
                self.buffers.remove(buf);
            }
            Op::Launch {
                stream,
                reads,
                writes,
            } => {
                a.reads = reads.iter().map(|x| self.access(x)).collect();
                a.writes = writes.iter().map(|x| self.access(x)).collect();
                let name = r.name.as_deref().unwrap_or("launch");
                self.stream_op(d, r, *stream, name, a);
            }
            Op::HostFunc {
                stream,
                reads,
                writes,
            } => {
                a.reads = reads.iter().map(|x| self.access(x)).collect();
                a.writes = writes.iter().map(|x| self.access(x)).collect();
                let name = op_label("host_func", r);
                self.stream_op(d, r, *stream, &name, a);
            }
            Op::Memcpy {
                stream,
                src,
                dst,
                blocking,
            } => {
                a.reads = vec![self.access(src)];
                a.writes = vec![self.access(dst)];
                a.blocking = Some(*blocking);
                let name = op_label("memcpy", r);
                self.blocking_call(d, r, *stream, &name, a, *blocking);
            }
            Op::Memset {
                stream,
                dst,
                blocking,
            } => {
                a.writes = vec![self.access(dst)];
                a.blocking = Some(*blocking);
                let name = op_label("memset", r);
                self.blocking_call(d, r, *stream, &name, a, *blocking);
            }
            Op::HostAccess { reads, writes } => {
                a.reads = reads.iter().map(|x| self.access(x)).collect();
                a.writes = writes.iter().map(|x| self.access(x)).collect();
                self.host_op(d, r, &op_label("host_access", r), a);
            }
            Op::Record { event, stream } => {
                a.event = Some(*event);
                let slice = self.stream_op(d, r, *stream, &format!("record event {event}"), a);
                self.events.insert(*event, Some(slice));
            }
            Op::Wait { stream, event } => {
                a.event = Some(*event);
                let slice = self.stream_op(d, r, *stream, &format!("wait event {event}"), a);
                if let Some(Some(from)) = self.events.get(event).copied() {
                    d.flow("wait", "sync", from, slice);
                }
            }
            Op::EventSync { event } | Op::EventQuery { event, .. } => {
                let done = match &r.op {
                    Op::EventQuery { done, .. } => {
                        a.done = Some(*done);
                        *done
                    }
                    _ => true,
                };
                a.event = Some(*event);
                let op = r.op.name();
                let name = format!("{op} event {event}{}", query_suffix(&r.op));
                let slice = self.host_op(d, r, &name, a);
                if done && let Some(Some(from)) = self.events.get(event).copied() {
                    d.flow(op, "sync", from, slice);
                }
            }
            Op::StreamSync { stream } | Op::StreamQuery { stream, .. } => {
                let done = match &r.op {
                    Op::StreamQuery { done, .. } => {
                        a.done = Some(*done);
                        *done
                    }
                    _ => true,
                };
                a.stream = Some(*stream);
                self.ensure_stream(*stream);
                let op = r.op.name();
                let sym = format!("s{}", self.streams[stream].info.ordinal);
                let name = format!("{op} {sym}{}", query_suffix(&r.op));
                let slice = self.host_op(d, r, &name, a);
                if done {
                    self.sync_from(d, *stream, r.thread, op, slice);
                    let info = &self.streams[stream].info;
                    if info.kind == StreamKind::LegacyDefault {
                        // Synchronizing the legacy stream covers the blocking streams' work.
                        for b in self.blocking_streams(info.device) {
                            self.sync_from(d, b, r.thread, op, slice);
                        }
                    }
                }
            }
            Op::DeviceSync { device } => {
                let slice = self.host_op(d, r, &format!("device_sync {device}"), a);
                let streams = self.device_streams.get(device).cloned().unwrap_or_default();
                for s in streams {
                    self.sync_from(d, s, r.thread, "device_sync", slice);
                }
            }
        }
    }

    /// Every track, in `tid` order.
    pub fn tracks(&self) -> Vec<Track> {
        let hosts = self.threads.len() as u64;
        let mut tracks: Vec<Track> = self
            .threads
            .iter()
            .enumerate()
            .map(|(i, (thread, tid))| Track {
                tid: *tid,
                name: format!("host thread {thread}"),
                sort_index: i as u64,
            })
            .collect();
        tracks.extend(self.streams.values().map(|t| Track {
            tid: t.tid,
            name: stream_label(&t.info),
            sort_index: hosts + u64::from(t.info.ordinal),
        }));
        tracks.sort_by_key(|t| t.tid);
        tracks
    }

    /// The track of one side of a race.
    pub fn site_tid(&mut self, site: &Site) -> u32 {
        match &site.stream {
            Some(stream) => self.ensure_stream(stream.id),
            None => self.thread_tid(site.thread),
        }
    }

    // ----- tracks --------------------------------------------------------------------------

    fn new_tid(&mut self) -> u32 {
        let tid = self.next_tid;
        self.next_tid += 1;
        tid
    }

    fn thread_tid(&mut self, thread: ThreadId) -> u32 {
        if let Some(&i) = self.thread_index.get(&thread) {
            return self.threads[i].1;
        }
        let tid = self.new_tid();
        self.thread_index.insert(thread, self.threads.len());
        self.threads.push((thread, tid));
        tid
    }

    fn declare_stream(
        &mut self,
        id: StreamId,
        device: DeviceId,
        kind: StreamKind,
        flags: StreamFlags,
        name: Option<String>,
    ) -> u32 {
        if let Some(track) = self.streams.get_mut(&id) {
            // Only stream 0 exists before its declaration, which names it.
            track.info.name = name;
            return track.tid;
        }
        let ordinal = if id == LEGACY_STREAM_DEVICE0 {
            0
        } else {
            let o = self.next_stream_ordinal;
            self.next_stream_ordinal += 1;
            o
        };
        let tid = self.new_tid();
        if kind == StreamKind::LegacyDefault {
            self.legacy.insert(device, id);
        }
        self.device_streams.entry(device).or_default().push(id);
        self.streams.insert(
            id,
            StreamTrack {
                info: StreamInfo {
                    id,
                    ordinal,
                    device,
                    kind,
                    flags,
                    name,
                },
                tid,
                blocking: flags == StreamFlags::Blocking && kind != StreamKind::LegacyDefault,
                last_op: None,
                drawn_to_legacy: 0,
                legacy_seen: 0,
                synced: Vec::new(),
            },
        );
        tid
    }

    /// The track of `id`; stream 0 (and, defensively, any undeclared stream) is made on first
    /// use.
    fn ensure_stream(&mut self, id: StreamId) -> u32 {
        match self.streams.get(&id) {
            Some(track) => track.tid,
            None if id == LEGACY_STREAM_DEVICE0 => self.declare_stream(
                id,
                0,
                StreamKind::LegacyDefault,
                StreamFlags::Blocking,
                None,
            ),
            None => self.declare_stream(id, 0, StreamKind::Created, StreamFlags::Blocking, None),
        }
    }

    fn blocking_streams(&self, device: DeviceId) -> Vec<StreamId> {
        self.device_streams
            .get(&device)
            .map(|ids| {
                ids.iter()
                    .copied()
                    .filter(|id| self.streams[id].blocking)
                    .collect()
            })
            .unwrap_or_default()
    }

    // ----- operations ----------------------------------------------------------------------

    /// `b1 "x" [0, 4096) (arg "out")`; a buffer no longer allocated is `buffer 7 (freed)`.
    fn access(&self, a: &Access) -> String {
        let (label, bytes) = match self.buffers.get(&a.buf) {
            Some((label, bytes)) => (label.clone(), Some(*bytes)),
            None => (format!("buffer {} (freed)", a.buf), None),
        };
        let mut out = label;
        match (a.range, bytes) {
            (Some(r), _) => out.push_str(&format!(" [{}, {})", r.off, r.off.saturating_add(r.len))),
            (None, Some(bytes)) => out.push_str(&format!(" [0, {bytes})")),
            (None, None) => {}
        }
        if let Some(arg) = &a.arg {
            out.push_str(&format!(" (arg {arg:?})"));
        }
        out
    }

    fn buffer_name(&self, buf: BufId) -> String {
        match self.buffers.get(&buf) {
            Some((label, _)) => label.clone(),
            None => format!("buffer {buf} (freed)"),
        }
    }

    /// A complete event on the issuing host thread's track.
    fn host_op(&mut self, d: &mut impl Draw, r: &Record, name: &str, args: OpArgs<'_>) -> Slice {
        let tid = self.thread_tid(r.thread);
        d.slice(name, "host", tid, r.line, args);
        Slice { tid, line: r.line }
    }

    /// A complete event on `stream`'s track, with the legacy-stream barrier flows into it.
    fn stream_op(
        &mut self,
        d: &mut impl Draw,
        r: &Record,
        stream: StreamId,
        name: &str,
        mut args: OpArgs<'_>,
    ) -> Slice {
        let tid = self.ensure_stream(stream);
        args.stream = Some(stream);
        d.slice(name, "stream", tid, r.line, args);
        let here = Slice { tid, line: r.line };
        let (kind, device, blocking) = {
            let t = &self.streams[&stream];
            (t.info.kind, t.info.device, t.blocking)
        };
        if kind == StreamKind::LegacyDefault && self.legacy.get(&device) == Some(&stream) {
            // The legacy stream first waits for the work of every blocking stream.
            for b in self.blocking_streams(device) {
                let t = self.streams.get_mut(&b).expect("listed");
                if let Some(last) = t.last_op
                    && last > t.drawn_to_legacy
                {
                    t.drawn_to_legacy = last;
                    let from = Slice {
                        tid: t.tid,
                        line: last,
                    };
                    d.flow("legacy barrier", "sync", from, here);
                }
            }
        } else if blocking && let Some(legacy) = self.legacy.get(&device).copied() {
            // ... and every blocking stream's later work waits for the legacy stream.
            let l = &self.streams[&legacy];
            let (legacy_tid, legacy_last) = (l.tid, l.last_op);
            let t = self.streams.get_mut(&stream).expect("ensured");
            if let Some(last) = legacy_last
                && last > t.legacy_seen
            {
                t.legacy_seen = last;
                let from = Slice {
                    tid: legacy_tid,
                    line: last,
                };
                d.flow("legacy barrier", "sync", from, here);
            }
        }
        self.streams.get_mut(&stream).expect("ensured").last_op = Some(r.line);
        here
    }

    /// A `memcpy` / `memset` on its stream, and for the synchronous API variant also on the
    /// issuing host thread, which the call blocks.
    fn blocking_call(
        &mut self,
        d: &mut impl Draw,
        r: &Record,
        stream: StreamId,
        name: &str,
        args: OpArgs<'_>,
        blocking: bool,
    ) {
        if blocking {
            let mut host_args = args.clone();
            host_args.stream = Some(stream);
            let tid = self.thread_tid(r.thread);
            d.slice(
                &format!("{name} (synchronous call)"),
                "host",
                tid,
                r.line,
                host_args,
            );
        }
        let _ = self.stream_op(d, r, stream, name, args);
    }

    /// A flow from `stream`'s last operation into the host call `into`, unless that operation
    /// was already drawn into the same host thread.
    fn sync_from(
        &mut self,
        d: &mut impl Draw,
        stream: StreamId,
        thread: ThreadId,
        name: &str,
        into: Slice,
    ) {
        let Some(t) = self.streams.get_mut(&stream) else {
            return;
        };
        let Some(last) = t.last_op else {
            return;
        };
        match t.synced.iter_mut().find(|(th, _)| *th == thread) {
            Some((_, seen)) if *seen >= last => return,
            Some((_, seen)) => *seen = last,
            None => t.synced.push((thread, last)),
        }
        let from = Slice {
            tid: t.tid,
            line: last,
        };
        d.flow(name, "sync", from, into);
    }
}

/// `host_access "print y"`, or the op alone when the record has no name.
fn op_label(op: &str, r: &Record) -> String {
    match &r.name {
        Some(name) => format!("{op} {name:?}"),
        None => op.to_string(),
    }
}

/// ` (done)` / ` (not ready)` for queries.
fn query_suffix(op: &Op) -> &'static str {
    match op {
        Op::EventQuery { done: true, .. } | Op::StreamQuery { done: true, .. } => " (done)",
        Op::EventQuery { done: false, .. } | Op::StreamQuery { done: false, .. } => " (not ready)",
        _ => "",
    }
}
