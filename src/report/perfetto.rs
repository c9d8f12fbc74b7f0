//! The trace drawn for a timeline viewer: Chrome's trace-event JSON (the "JSON Object Format" of
//! the Trace Event Format document), which <https://ui.perfetto.dev> and `chrome://tracing`
//! open. `streamsan check --perfetto out.json` writes it; `docs/perfetto.md` is the reference.
//!
//! # Mapping
//!
//! | trace | trace event |
//! | --- | --- |
//! | the trace | one process (`pid` [`PID`]), named by `process_name` |
//! | a stream, a host thread | a thread track (`tid`), named by `thread_name` (`s1 "side" (created, non-blocking)`, `host thread 0`), ordered by `thread_sort_index`: host threads first, then streams by report symbol |
//! | a stream operation (`launch`, `memcpy`, `memset`, `host_func`, `record`, `wait`, stream-ordered `alloc` / `free`) | a complete event (`X`) on the stream's track; a synchronous `memcpy` / `memset` also gets one on the host thread's track, which the call blocks |
//! | a host call (declarations, host `alloc` / `free`, `host_access`, syncs and queries) | a complete event on the issuing host thread's track |
//! | a record and a later wait on, sync of or query (done) of its event | a flow (`s` → `f`) from the record to the waiting operation |
//! | stream sync / stream query (done) | a flow from the stream's last operation into the host call; for the legacy stream also from the last operation of each blocking stream of its device |
//! | device sync | a flow from the last operation of each stream of the device |
//! | legacy default stream barrier | a flow from the last operation of each blocking stream of the device into the legacy operation, and from the legacy operation into the next operation of each blocking stream |
//! | a race (folded, as in the report) | an instant event (`i`, thread scope) `RACE read-after-write on b1 "x"` on the current access's track, with the report's `why` and `fix`, and a flow named `race` from the previous access to it |
//! | a warning | a process-scoped instant event `WARNING unrecorded-event` |
//!
//! # Clock
//!
//! Traces have no timestamps, so time is the trace line: an operation on line `L` is the
//! complete event `[L, L + 1)` (`ts` in microseconds, as the format has it; `dur` 1), and flow
//! ends and instants sit in the middle of their operation, at `L + 0.5`, where viewers bind them
//! to the enclosing slice. Issue order reads left to right; the width of a slice means nothing.
//!
//! # Cost
//!
//! [`PerfettoWriter`] streams: each record is written out as it is shown, and the writer keeps
//! only what drawing needs (one track per stream and host thread, each stream's last operation,
//! each event's latest record, a label per live buffer), so memory is bounded by live state, as
//! the engine's is. It draws the edges named above from those tables, not by replaying the
//! ordering model: the engine decides races, this module only shows where the calls were.
//!
//! The records are assumed to be valid (as [`crate::check::check_reader_with`] guarantees by
//! showing its tap only records the engine accepted).

use std::io::{self, Write};

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::hints::{fix_hint, why};
use super::names::{buffer_label, describe_site, stream_label};
use super::{FoldedRace, Report};
use crate::engine::finding::{Site, StreamInfo, Warning};
use crate::trace::record::{
    Access, BufId, DeviceId, EventId, LEGACY_STREAM_DEVICE0, Op, Record, StreamFlags, StreamId,
    StreamKind, ThreadId,
};

/// The `pid` of every event: one process for the whole trace.
pub const PID: u32 = 1;

/// Streams a trace into trace-event JSON: [`PerfettoWriter::record`] for every record in trace
/// order, then [`PerfettoWriter::finish`] with the report.
///
/// ```
/// # use streamsan::report::perfetto::PerfettoWriter;
/// # use streamsan::trace::reader::TraceReader;
/// let trace = "{\"streamsan_trace\": 1}\n\
///              {\"op\": \"launch\", \"name\": \"k\", \"stream\": 0}\n";
/// let reader = TraceReader::new(trace.as_bytes(), "t.jsonl").unwrap();
/// let mut writer = PerfettoWriter::new(Vec::new(), "t.jsonl").unwrap();
/// let checked =
///     streamsan::check::check_reader_with(reader, |_| {}, |r| writer.record(r)).unwrap();
/// let json = writer.finish(&checked.report).unwrap();
/// let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
/// assert!(value["traceEvents"].as_array().unwrap().iter().any(|e| e["name"] == "k"));
/// ```
#[derive(Debug)]
pub struct PerfettoWriter<W: Write> {
    out: W,
    /// The first write error; later writes are skipped and [`PerfettoWriter::finish`] returns
    /// it (the tap of `check_reader_with` cannot return one).
    error: Option<io::Error>,
    /// Whether an event was written (separators).
    wrote_event: bool,
    title: String,
    next_tid: u32,
    next_flow: u64,
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

/// One drawn operation: a complete event on a track.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slice {
    tid: u32,
    line: u64,
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

/// One trace event; keys in the order the format document lists them.
#[derive(Serialize)]
struct Event<'a, A: Serialize> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    cat: &'a str,
    ph: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<f64>,
    pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<A>,
}

impl<'a, A: Serialize> Event<'a, A> {
    fn new(name: &'a str, cat: &'a str, ph: &'static str) -> Self {
        Event {
            name,
            cat,
            ph,
            ts: None,
            dur: None,
            pid: PID,
            tid: None,
            id: None,
            bp: None,
            s: None,
            args: None,
        }
    }
}

/// The `args` of an operation's complete event.
#[derive(Clone, Serialize)]
struct OpArgs<'a> {
    line: u64,
    op: &'static str,
    thread: ThreadId,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<StreamId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    reads: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    writes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    event: Option<EventId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    done: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    blocking: Option<bool>,
}

/// The `args` of a race's instant event.
#[derive(Serialize)]
struct RaceArgs<'a> {
    kind: &'static str,
    buffer: String,
    range: [u64; 2],
    line: u64,
    previous_line: u64,
    current: String,
    previous: String,
    why: String,
    fix: String,
    occurrences: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<&'a str>,
}

#[derive(Serialize)]
struct WarningArgs<'a> {
    kind: &'static str,
    line: u64,
    message: &'a str,
}

#[derive(Serialize)]
struct NameArgs<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct SortArgs {
    sort_index: u64,
}

/// `otherData`: how to read the file.
#[derive(Serialize)]
struct OtherData<'a> {
    producer: String,
    trace: &'a str,
    clock: &'static str,
}

const CLOCK: &str =
    "ts = trace line (an operation on line L spans [L, L+1)); flows and instants at L+0.5";

/// Where flow ends and instants of the operation on `line` sit.
fn mid(line: u64) -> f64 {
    line as f64 + 0.5
}

impl<W: Write> PerfettoWriter<W> {
    /// Starts the file; `title` names the process (the trace file, typically).
    pub fn new(mut out: W, title: &str) -> io::Result<Self> {
        let other = OtherData {
            producer: format!("streamsan {}", env!("CARGO_PKG_VERSION")),
            trace: title,
            clock: CLOCK,
        };
        // displayTimeUnit first: Perfetto reads it only before the events.
        out.write_all(b"{\"displayTimeUnit\":\"ns\",\"otherData\":")?;
        serde_json::to_writer(&mut out, &other)?;
        out.write_all(b",\"traceEvents\":[\n")?;
        Ok(PerfettoWriter {
            out,
            error: None,
            wrote_event: false,
            title: format!("streamsan: {title}"),
            next_tid: 1,
            next_flow: 1,
            streams: FxHashMap::default(),
            next_stream_ordinal: 1,
            threads: Vec::new(),
            thread_index: FxHashMap::default(),
            device_streams: FxHashMap::default(),
            legacy: FxHashMap::default(),
            events: FxHashMap::default(),
            buffers: FxHashMap::default(),
            next_buffer_ordinal: 1,
        })
    }

    /// Draws one record; records must come in trace order. A write error is kept and returned
    /// by [`PerfettoWriter::finish`].
    pub fn record(&mut self, r: &Record) {
        if self.error.is_some() {
            return;
        }
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
                self.host_op(r, &label, a);
            }
            Op::Event { id } => {
                self.events.insert(*id, None);
                a.event = Some(*id);
                self.host_op(r, &format!("event {id}"), a);
            }
            Op::EventDestroy { id } => {
                self.events.remove(id);
                a.event = Some(*id);
                self.host_op(r, &format!("event_destroy {id}"), a);
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
                        self.stream_op(r, *s, &name, a);
                    }
                    None => {
                        self.host_op(r, &name, a);
                    }
                }
            }
            Op::Free { buf, stream } => {
                let access = self.access(&Access::whole(*buf));
                let name = format!("free {}", self.buffer_name(*buf));
                a.writes.push(access);
                match stream {
                    Some(s) => {
                        self.stream_op(r, *s, &name, a);
                    }
                    None => {
                        self.host_op(r, &name, a);
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
                self.stream_op(r, *stream, name, a);
            }
            Op::HostFunc {
                stream,
                reads,
                writes,
            } => {
                a.reads = reads.iter().map(|x| self.access(x)).collect();
                a.writes = writes.iter().map(|x| self.access(x)).collect();
                let name = op_label("host_func", r);
                self.stream_op(r, *stream, &name, a);
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
                self.blocking_call(r, *stream, &name, a, *blocking);
            }
            Op::Memset {
                stream,
                dst,
                blocking,
            } => {
                a.writes = vec![self.access(dst)];
                a.blocking = Some(*blocking);
                let name = op_label("memset", r);
                self.blocking_call(r, *stream, &name, a, *blocking);
            }
            Op::HostAccess { reads, writes } => {
                a.reads = reads.iter().map(|x| self.access(x)).collect();
                a.writes = writes.iter().map(|x| self.access(x)).collect();
                self.host_op(r, &op_label("host_access", r), a);
            }
            Op::Record { event, stream } => {
                a.event = Some(*event);
                let slice = self.stream_op(r, *stream, &format!("record event {event}"), a);
                self.events.insert(*event, Some(slice));
            }
            Op::Wait { stream, event } => {
                a.event = Some(*event);
                let slice = self.stream_op(r, *stream, &format!("wait event {event}"), a);
                if let Some(Some(from)) = self.events.get(event).copied() {
                    self.flow("wait", from, slice);
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
                let slice = self.host_op(r, &name, a);
                if done && let Some(Some(from)) = self.events.get(event).copied() {
                    self.flow(op, from, slice);
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
                let slice = self.host_op(r, &name, a);
                if done {
                    self.sync_from(*stream, r.thread, op, slice);
                    let info = &self.streams[stream].info;
                    if info.kind == StreamKind::LegacyDefault {
                        // Synchronizing the legacy stream covers the blocking streams' work.
                        for b in self.blocking_streams(info.device) {
                            self.sync_from(b, r.thread, op, slice);
                        }
                    }
                }
            }
            Op::DeviceSync { device } => {
                let slice = self.host_op(r, &format!("device_sync {device}"), a);
                let streams = self.device_streams.get(device).cloned().unwrap_or_default();
                for s in streams {
                    self.sync_from(s, r.thread, "device_sync", slice);
                }
            }
        }
    }

    /// Ends the file: the report's races and warnings, the track names, the closing brackets.
    /// Returns the writer, or the first write error.
    pub fn finish(mut self, report: &Report) -> io::Result<W> {
        for folded in &report.races {
            self.race(folded);
        }
        for warning in &report.warnings {
            self.warning(warning);
        }
        self.metadata();
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()?;
        Ok(self.out)
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

    /// The track of one side of a race.
    fn site_tid(&mut self, site: &Site) -> u32 {
        match &site.stream {
            Some(stream) => self.ensure_stream(stream.id),
            None => self.thread_tid(site.thread),
        }
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
    fn host_op(&mut self, r: &Record, name: &str, args: OpArgs<'_>) -> Slice {
        let tid = self.thread_tid(r.thread);
        self.complete(name, "host", tid, r.line, args);
        Slice { tid, line: r.line }
    }

    /// A complete event on `stream`'s track, with the legacy-stream barrier flows into it.
    fn stream_op(
        &mut self,
        r: &Record,
        stream: StreamId,
        name: &str,
        mut args: OpArgs<'_>,
    ) -> Slice {
        let tid = self.ensure_stream(stream);
        args.stream = Some(stream);
        self.complete(name, "stream", tid, r.line, args);
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
                    self.flow("legacy barrier", from, here);
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
                self.flow("legacy barrier", from, here);
            }
        }
        self.streams.get_mut(&stream).expect("ensured").last_op = Some(r.line);
        here
    }

    /// A `memcpy` / `memset` on its stream, and for the synchronous API variant also on the
    /// issuing host thread, which the call blocks.
    fn blocking_call(
        &mut self,
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
            self.complete(
                &format!("{name} (synchronous call)"),
                "host",
                tid,
                r.line,
                host_args,
            );
        }
        let _ = self.stream_op(r, stream, name, args);
    }

    /// A flow from `stream`'s last operation into the host call `into`, unless that operation
    /// was already drawn into the same host thread.
    fn sync_from(&mut self, stream: StreamId, thread: ThreadId, name: &str, into: Slice) {
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
        self.flow(name, from, into);
    }

    // ----- findings and metadata -----------------------------------------------------------

    fn race(&mut self, folded: &FoldedRace) {
        let race = &folded.race;
        let cur_tid = self.site_tid(&race.current);
        let prev_tid = self.site_tid(&race.previous);
        let name = format!(
            "RACE {} on {}",
            race.kind.as_str(),
            buffer_label(&race.buffer)
        );
        let mut ev = Event::new(&name, "race", "i");
        ev.ts = Some(mid(race.current.line));
        ev.tid = Some(cur_tid);
        ev.s = Some("t");
        ev.args = Some(RaceArgs {
            kind: race.kind.as_str(),
            buffer: buffer_label(&race.buffer),
            range: [race.range.0, race.range.1],
            line: race.current.line,
            previous_line: race.previous.line,
            current: describe_site(&race.current),
            previous: describe_site(&race.previous),
            why: why(race),
            fix: fix_hint(race),
            occurrences: folded.occurrences,
            at: race.current.at.as_deref(),
        });
        self.emit(&ev);
        let from = Slice {
            tid: prev_tid,
            line: race.previous.line,
        };
        let to = Slice {
            tid: cur_tid,
            line: race.current.line,
        };
        self.flow_in("race", "race", from, to);
    }

    fn warning(&mut self, w: &Warning) {
        let name = format!("WARNING {}", w.kind.as_str());
        let mut ev = Event::new(&name, "warning", "i");
        ev.ts = Some(mid(w.line));
        ev.s = Some("p");
        ev.args = Some(WarningArgs {
            kind: w.kind.as_str(),
            line: w.line,
            message: &w.message,
        });
        self.emit(&ev);
    }

    /// `process_name`, then per track `thread_name` and `thread_sort_index` (host threads in
    /// order of appearance, then streams by report symbol), in `tid` order.
    fn metadata(&mut self) {
        let title = std::mem::take(&mut self.title);
        let mut ev = Event::new("process_name", "", "M");
        ev.args = Some(NameArgs { name: &title });
        self.emit(&ev);
        let hosts = self.threads.len() as u64;
        let mut tracks: Vec<(u32, String, u64)> = self
            .threads
            .iter()
            .enumerate()
            .map(|(i, (thread, tid))| (*tid, format!("host thread {thread}"), i as u64))
            .collect();
        tracks.extend(self.streams.values().map(|t| {
            (
                t.tid,
                stream_label(&t.info),
                hosts + u64::from(t.info.ordinal),
            )
        }));
        tracks.sort_by_key(|t| t.0);
        for (tid, name, sort_index) in tracks {
            let mut ev = Event::new("thread_name", "", "M");
            ev.tid = Some(tid);
            ev.args = Some(NameArgs { name: &name });
            self.emit(&ev);
            let mut ev = Event::new("thread_sort_index", "", "M");
            ev.tid = Some(tid);
            ev.args = Some(SortArgs { sort_index });
            self.emit(&ev);
        }
    }

    // ----- writing -------------------------------------------------------------------------

    fn complete(&mut self, name: &str, cat: &str, tid: u32, line: u64, args: OpArgs<'_>) {
        let mut ev = Event::new(name, cat, "X");
        ev.ts = Some(line as f64);
        ev.dur = Some(1.0);
        ev.tid = Some(tid);
        ev.args = Some(args);
        self.emit(&ev);
    }

    /// A synchronization flow (category `sync`).
    fn flow(&mut self, name: &str, from: Slice, to: Slice) {
        self.flow_in(name, "sync", from, to);
    }

    fn flow_in(&mut self, name: &str, cat: &str, from: Slice, to: Slice) {
        let id = self.next_flow;
        self.next_flow += 1;
        let mut start: Event<'_, ()> = Event::new(name, cat, "s");
        start.ts = Some(mid(from.line));
        start.tid = Some(from.tid);
        start.id = Some(id);
        self.emit(&start);
        let mut end: Event<'_, ()> = Event::new(name, cat, "f");
        end.ts = Some(mid(to.line));
        end.tid = Some(to.tid);
        end.id = Some(id);
        end.bp = Some("e");
        self.emit(&end);
    }

    fn emit<A: Serialize>(&mut self, ev: &Event<'_, A>) {
        if self.error.is_some() {
            return;
        }
        let result = (|| {
            if self.wrote_event {
                self.out.write_all(b",\n")?;
            }
            serde_json::to_writer(&mut self.out, ev)?;
            Ok::<_, io::Error>(())
        })();
        self.wrote_event = true;
        if let Err(e) = result {
            self.error = Some(e);
        }
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
