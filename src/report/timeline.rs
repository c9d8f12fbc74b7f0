//! The drawing model shared by the timeline exporters ([`super::perfetto`], [`super::html`]):
//! which track each record goes on, what its slice is called, and which synchronization edges
//! to draw between slices. It draws what the engine resolved ([`Resolved`]): the stream each
//! record ran on, the buffers it touched, and the ordering edges the rules applied (an event
//! wait, a host synchronization, a legacy-stream barrier), each only when it taught its
//! destination something new. So a drawn arrow is exactly an ordering the engine used; nothing
//! here replays the ordering model.
//!
//! A [`Timeline`] keeps only what naming tracks needs (one track per stream and host thread)
//! and hands every slice and edge to a [`Draw`] as it goes, so an exporter streams and its
//! memory is bounded by the number of streams and threads.

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::names::{buffer_label, stream_label, stream_sym};
use crate::engine::finding::{Site, StreamInfo};
use crate::engine::{EdgeKind, Place, Resolved};
use crate::trace::record::{Access, EventId, Op, Record, StreamId, ThreadId};

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
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub atomics: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<EventId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocking: Option<bool>,
}

/// The tracks; see the module doc.
#[derive(Debug)]
pub(crate) struct Timeline {
    next_tid: u32,
    /// Each stream's track and how reports name it.
    streams: FxHashMap<StreamId, (u32, StreamInfo)>,
    /// Host threads in order of first appearance, with their `tid`s.
    threads: Vec<(ThreadId, u32)>,
    thread_index: FxHashMap<ThreadId, usize>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            next_tid: 1,
            streams: FxHashMap::default(),
            threads: Vec::new(),
            thread_index: FxHashMap::default(),
        }
    }
}

impl Timeline {
    /// Draws one record, with what the engine resolved about it, into `d`; records must come
    /// in trace order.
    pub fn record(&mut self, r: &Record, resolved: &Resolved, d: &mut impl Draw) {
        if let Some(info) = &resolved.stream {
            self.stream_track(info);
        }
        let a = OpArgs {
            line: r.line,
            op: r.op.name(),
            thread: r.thread,
            stream: resolved.stream.as_ref().map(|s| s.id),
            name: r.name.as_deref(),
            at: r.at.as_deref(),
            reads: Vec::new(),
            writes: Vec::new(),
            atomics: Vec::new(),
            event: None,
            done: None,
            blocking: None,
        };
        let mut labels = Labels { resolved, next: 0 };
        let on_stream = resolved.stream.is_some();
        // A stream-ordered alloc or free resolves a graph only when captured as a memory node.
        let node = crate::engine::node_stream(&r.op).is_some()
            || matches!(r.op, Op::Alloc { .. } | Op::Free { .. });
        if let (Some(g), true) = (resolved.graph, node) {
            // Captured into a graph: drawn where it was captured; it runs at each launch.
            let name = match &r.op {
                Op::Launch { .. } => r.name.clone().unwrap_or_else(|| "launch".into()),
                _ => op_label(r),
            };
            self.stream_slice(d, r, resolved, &format!("{name} (captured into g{g})"), a);
        } else {
            self.draw_op(r, resolved, a, &mut labels, on_stream, d);
        }
        self.draw_edges(r, resolved, d);
    }

    /// The slice (or slices) of a record that ran, or of a host-side call.
    fn draw_op(
        &mut self,
        r: &Record,
        resolved: &Resolved,
        mut a: OpArgs<'_>,
        labels: &mut Labels<'_>,
        on_stream: bool,
        d: &mut impl Draw,
    ) {
        match &r.op {
            Op::Stream { .. } => {
                // The declaring thread's track first: it usually comes first in a viewer too.
                let info = resolved
                    .stream
                    .as_ref()
                    .expect("a declaration resolves its stream");
                let label = format!("stream {}", stream_label(info));
                a.stream = None;
                self.host_slice(d, r, &label, a)
            }
            Op::Event { id } | Op::EventDestroy { id } => {
                a.event = Some(*id);
                self.host_slice(d, r, &format!("{} {id}", r.op.name()), a)
            }
            Op::Alloc { .. } | Op::Free { .. } => {
                let buffer = labels.buffer();
                let name = format!("{} {buffer}", r.op.name());
                a.writes.push(labels.access_whole(&buffer));
                if on_stream {
                    self.stream_slice(d, r, resolved, &name, a)
                } else {
                    self.host_slice(d, r, &name, a)
                }
            }
            Op::Launch {
                reads,
                writes,
                atomics,
                ..
            } => {
                a.reads = reads.iter().map(|x| labels.access(x)).collect();
                a.writes = writes.iter().map(|x| labels.access(x)).collect();
                a.atomics = atomics.iter().map(|x| labels.access(x)).collect();
                let name = r.name.as_deref().unwrap_or("launch");
                self.stream_slice(d, r, resolved, name, a)
            }
            Op::HostFunc { reads, writes, .. } => {
                a.reads = reads.iter().map(|x| labels.access(x)).collect();
                a.writes = writes.iter().map(|x| labels.access(x)).collect();
                self.stream_slice(d, r, resolved, &op_label(r), a)
            }
            Op::Memcpy {
                src, dst, blocking, ..
            } => {
                a.reads = vec![labels.access(src)];
                a.writes = vec![labels.access(dst)];
                a.blocking = Some(*blocking);
                self.host_waiting_call(d, r, resolved, a, *blocking)
            }
            Op::Memset { dst, blocking, .. } => {
                a.writes = vec![labels.access(dst)];
                a.blocking = Some(*blocking);
                self.host_waiting_call(d, r, resolved, a, *blocking)
            }
            Op::HostAccess { reads, writes } => {
                a.reads = reads.iter().map(|x| labels.access(x)).collect();
                a.writes = writes.iter().map(|x| labels.access(x)).collect();
                self.host_slice(d, r, &op_label(r), a)
            }
            Op::Record { event, .. } | Op::Wait { event, .. } => {
                a.event = Some(*event);
                let name = format!("{} event {event}", r.op.name());
                self.stream_slice(d, r, resolved, &name, a)
            }
            Op::EventSync { event } | Op::EventQuery { event, .. } => {
                a.event = Some(*event);
                a.done = query_done(&r.op);
                let name = format!("{} event {event}{}", r.op.name(), query_suffix(&r.op));
                self.host_slice(d, r, &name, a)
            }
            Op::StreamSync { .. } | Op::StreamQuery { .. } => {
                a.done = query_done(&r.op);
                let sym = resolved.stream.as_ref().map(stream_sym).unwrap_or_default();
                let name = format!("{} {sym}{}", r.op.name(), query_suffix(&r.op));
                self.host_slice(d, r, &name, a)
            }
            Op::StreamDestroy { .. } => {
                let sym = resolved.stream.as_ref().map(stream_sym).unwrap_or_default();
                self.host_slice(d, r, &format!("stream_destroy {sym}"), a)
            }
            Op::DeviceSync { device } => self.host_slice(d, r, &format!("device_sync {device}"), a),
            Op::RecordStream { .. } => {
                let buffer = labels.buffer();
                let sym = resolved.stream.as_ref().map(stream_sym).unwrap_or_default();
                a.stream = None;
                self.host_slice(d, r, &format!("record_stream {buffer} on {sym}"), a)
            }
            Op::GraphBegin { .. } | Op::GraphEnd { .. } | Op::GraphDestroy { .. } => {
                let g = resolved.graph.map(|g| format!(" g{g}")).unwrap_or_default();
                let on = (resolved.stream.as_ref().map(stream_sym))
                    .map(|s| format!(" on {s}"))
                    .unwrap_or_default();
                a.stream = None;
                self.host_slice(d, r, &format!("{}{g}{on}", r.op.name()), a)
            }
            Op::GraphLaunch { .. } => {
                let g = resolved.graph.map(|g| format!(" g{g}")).unwrap_or_default();
                self.stream_slice(d, r, resolved, &format!("graph_launch{g}"), a)
            }
        };
    }

    /// The synchronization edges the engine applied for the record.
    fn draw_edges(&mut self, r: &Record, resolved: &Resolved, d: &mut impl Draw) {
        for edge in &resolved.edges {
            let name = match edge.kind {
                EdgeKind::Call(op) => op.as_str(),
                EdgeKind::LegacyBarrier => "legacy barrier",
            };
            let from = Slice {
                tid: self.place_tid(edge.from),
                line: edge.from_line,
            };
            let to = Slice {
                tid: self.place_tid(edge.to),
                line: r.line,
            };
            d.flow(name, "sync", from, to);
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
        tracks.extend(self.streams.values().map(|(tid, info)| Track {
            tid: *tid,
            name: stream_label(info),
            sort_index: hosts + u64::from(info.ordinal),
        }));
        tracks.sort_by_key(|t| t.tid);
        tracks
    }

    /// Where one side of a race is drawn: its operation's slice, or for a graph node the
    /// slice of the launch that ran it (its own line is where it was captured).
    pub fn site_slice(&mut self, site: &Site) -> Slice {
        if let Some(g) = &site.graph
            && let Some(stream) = &g.launch_stream
        {
            return Slice {
                tid: self.stream_track(stream),
                line: g.launch,
            };
        }
        let tid = match &site.stream {
            Some(stream) => self.stream_track(stream),
            None => self.thread_tid(site.thread),
        };
        Slice {
            tid,
            line: site.line,
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

    /// The track of a stream, made on first sight; a later sight may name it (stream 0's
    /// declaration).
    fn stream_track(&mut self, info: &StreamInfo) -> u32 {
        if let Some((tid, known)) = self.streams.get_mut(&info.id) {
            known.clone_from(info);
            return *tid;
        }
        let tid = self.new_tid();
        self.streams.insert(info.id, (tid, info.clone()));
        tid
    }

    fn place_tid(&mut self, place: Place) -> u32 {
        match place {
            Place::Stream(id) => self.streams.get(&id).map_or(0, |(tid, _)| *tid),
            Place::Host(thread) => self.thread_tid(thread),
        }
    }

    // ----- operations ----------------------------------------------------------------------

    /// A slice on the issuing host thread's track.
    fn host_slice(&mut self, d: &mut impl Draw, r: &Record, name: &str, args: OpArgs<'_>) -> Slice {
        let tid = self.thread_tid(r.thread);
        d.slice(name, "host", tid, r.line, args);
        Slice { tid, line: r.line }
    }

    /// A slice on the track of the stream the record ran on.
    fn stream_slice(
        &mut self,
        d: &mut impl Draw,
        r: &Record,
        resolved: &Resolved,
        name: &str,
        args: OpArgs<'_>,
    ) -> Slice {
        let info = resolved
            .stream
            .as_ref()
            .expect("a stream operation resolves its stream");
        let tid = self.stream_track(info);
        d.slice(name, "stream", tid, r.line, args);
        Slice { tid, line: r.line }
    }

    /// A `memcpy` / `memset` on its stream, and also on the issuing host thread when the call
    /// blocks it (the synchronous API variant) or the host waits for it (an edge into the
    /// host).
    fn host_waiting_call(
        &mut self,
        d: &mut impl Draw,
        r: &Record,
        resolved: &Resolved,
        args: OpArgs<'_>,
        blocking: bool,
    ) -> Slice {
        let name = op_label(r);
        let host_waits = resolved
            .edges
            .iter()
            .any(|e| matches!(e.to, Place::Host(_)));
        if blocking || host_waits {
            let what = if blocking {
                "synchronous call"
            } else {
                "the host waits"
            };
            self.host_slice(d, r, &format!("{name} ({what})"), args.clone());
        }
        self.stream_slice(d, r, resolved, &name, args)
    }
}

/// How a record's accesses are labelled: `b1 "x" [0, 4096) (arg "out")`, from the buffers the
/// engine resolved for them, in order.
struct Labels<'r> {
    resolved: &'r Resolved,
    next: usize,
}

impl Labels<'_> {
    /// The next resolved buffer's label.
    fn buffer(&mut self) -> String {
        let label = self
            .resolved
            .buffers
            .get(self.next)
            .map(|b| buffer_label(b))
            .unwrap_or_default();
        self.next += 1;
        label
    }

    /// A whole-buffer access to the buffer just labelled.
    fn access_whole(&self, label: &str) -> String {
        let bytes = self
            .next
            .checked_sub(1)
            .and_then(|i| self.resolved.buffers.get(i))
            .map_or(0, |b| b.bytes);
        format!("{label} [0, {bytes})")
    }

    /// The next access's label.
    fn access(&mut self, a: &Access) -> String {
        let bytes = self.resolved.buffers.get(self.next).map_or(0, |b| b.bytes);
        let mut out = self.buffer();
        let (start, end) = match a.range {
            Some(r) => (r.off, r.off.saturating_add(r.len)),
            None => (0, bytes),
        };
        out.push_str(&format!(" [{start}, {end})"));
        if let Some(arg) = &a.arg {
            out.push_str(&format!(" (arg {arg:?})"));
        }
        out
    }
}

/// `host_access "print y"`, or the op alone when the record has no name.
fn op_label(r: &Record) -> String {
    match &r.name {
        Some(name) => format!("{} {name:?}", r.op.name()),
        None => r.op.name().to_string(),
    }
}

/// A query's answer.
fn query_done(op: &Op) -> Option<bool> {
    match op {
        Op::EventQuery { done, .. } | Op::StreamQuery { done, .. } => Some(*done),
        _ => None,
    }
}

/// ` (done)` / ` (not ready)` for queries.
fn query_suffix(op: &Op) -> &'static str {
    match query_done(op) {
        Some(true) => " (done)",
        Some(false) => " (not ready)",
        None => "",
    }
}
