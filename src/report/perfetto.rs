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
//! [`PerfettoWriter`] streams: each record is written out as it is shown. Which track a record
//! goes on and which edges are drawn is `report::timeline`'s, shared with the HTML page
//! ([`super::html`]); memory is bounded by live state, as the engine's is.
//!
//! The records are assumed to be valid (as [`crate::check::check_reader_with`] guarantees by
//! showing its tap only records the engine accepted).

use std::io::{self, Write};

use serde::Serialize;

use super::hints::{fix_hint_for, why};
use super::names::{buffer_label, describe_site};
use super::timeline::{Draw, OpArgs, Slice, Timeline};
use super::{FoldedRace, Report};
use crate::engine::Resolved;
use crate::engine::finding::Warning;
use crate::trace::record::Record;

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
///     streamsan::check::check_reader_with(reader, &mut |r, resolved| writer.record(r, resolved))
///         .unwrap();
/// let json = writer.finish(&checked.report).unwrap();
/// let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
/// assert!(value["traceEvents"].as_array().unwrap().iter().any(|e| e["name"] == "k"));
/// ```
#[derive(Debug)]
pub struct PerfettoWriter<W: Write> {
    out: JsonOut<W>,
    title: String,
    timeline: Timeline,
    api: super::Api,
}

/// The event writer: the [`Draw`] side of the exporter.
#[derive(Debug)]
struct JsonOut<W: Write> {
    out: W,
    /// The first write error; later writes are skipped and [`PerfettoWriter::finish`] returns
    /// it (the tap of `check_reader_with` cannot return one).
    error: Option<io::Error>,
    /// Whether an event was written (separators).
    wrote_event: bool,
    next_flow: u64,
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
struct WarningArgs {
    kind: &'static str,
    line: u64,
    message: String,
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
            out: JsonOut {
                out,
                error: None,
                wrote_event: false,
                next_flow: 1,
            },
            title: format!("streamsan: {title}"),
            timeline: Timeline::default(),
            api: super::Api::Cuda,
        })
    }

    /// Names fix hints in `api`'s calls (a trace's header says which: [`super::Api::of_header`]).
    pub fn set_api(&mut self, api: super::Api) {
        self.api = api;
    }

    /// Draws one record; records must come in trace order. A write error is kept and returned
    /// by [`PerfettoWriter::finish`].
    pub fn record(&mut self, r: &Record, resolved: &Resolved) {
        if self.out.error.is_none() {
            self.timeline.record(r, resolved, &mut self.out);
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
        let mut out = self.out;
        if let Some(e) = out.error.take() {
            return Err(e);
        }
        out.out.write_all(b"\n]}\n")?;
        out.out.flush()?;
        Ok(out.out)
    }

    // ----- findings and metadata -----------------------------------------------------------

    fn race(&mut self, folded: &FoldedRace) {
        let race = &folded.race;
        let to = self.timeline.site_slice(&race.current);
        let from = self.timeline.site_slice(&race.previous);
        let name = format!(
            "RACE {} on {}",
            race.kind.as_str(),
            buffer_label(&race.buffer)
        );
        let mut ev = Event::new(&name, "race", "i");
        ev.ts = Some(mid(to.line));
        ev.tid = Some(to.tid);
        ev.s = Some("t");
        ev.args = Some(RaceArgs {
            kind: race.kind.as_str(),
            buffer: buffer_label(&race.buffer),
            range: [race.range.0, race.range.1],
            line: to.line,
            previous_line: from.line,
            current: describe_site(&race.current),
            previous: describe_site(&race.previous),
            why: why(race),
            fix: fix_hint_for(race, self.api),
            occurrences: folded.occurrences,
            at: race.current.at.as_deref(),
        });
        self.out.emit(&ev);
        self.out.flow("race", "race", from, to);
    }

    fn warning(&mut self, w: &Warning) {
        let name = format!("WARNING {}", w.kind().as_str());
        let mut ev = Event::new(&name, "warning", "i");
        ev.ts = Some(mid(w.line));
        ev.s = Some("p");
        ev.args = Some(WarningArgs {
            kind: w.kind().as_str(),
            line: w.line,
            message: super::warning_message(w),
        });
        self.out.emit(&ev);
    }

    /// `process_name`, then per track `thread_name` and `thread_sort_index` (host threads in
    /// order of appearance, then streams by report symbol), in `tid` order.
    fn metadata(&mut self) {
        let title = std::mem::take(&mut self.title);
        let mut ev = Event::new("process_name", "", "M");
        ev.args = Some(NameArgs { name: &title });
        self.out.emit(&ev);
        for track in self.timeline.tracks() {
            let mut ev = Event::new("thread_name", "", "M");
            ev.tid = Some(track.tid);
            ev.args = Some(NameArgs { name: &track.name });
            self.out.emit(&ev);
            let mut ev = Event::new("thread_sort_index", "", "M");
            ev.tid = Some(track.tid);
            ev.args = Some(SortArgs {
                sort_index: track.sort_index,
            });
            self.out.emit(&ev);
        }
    }
}

impl<W: Write> Draw for JsonOut<W> {
    fn slice(&mut self, name: &str, cat: &'static str, tid: u32, line: u64, args: OpArgs<'_>) {
        let mut ev = Event::new(name, cat, "X");
        ev.ts = Some(line as f64);
        ev.dur = Some(1.0);
        ev.tid = Some(tid);
        ev.args = Some(args);
        self.emit(&ev);
    }

    fn flow(&mut self, name: &str, cat: &'static str, from: Slice, to: Slice) {
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
}

impl<W: Write> JsonOut<W> {
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
