//! The sanitizer handle: one engine, one record counter, one optional trace, the findings so
//! far, behind one lock. Wrapped contexts, streams and buffers each hold an `Arc` to theirs; there
//! is no global instance, so several can coexist (one per context, or one shared by contexts).
//!
//! Every sanitized call runs as a [`Call`]: take the lock, make the real cudarc call, then turn
//! the call's [`Step`]s into records — numbered, written to the trace (flushed, so a crash loses
//! at most the call in progress) and applied to the engine — all before the lock is released, so
//! the order of the records is the order in which the calls were enqueued, whatever the number
//! of host threads.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::panic::Location;
use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::{Map, json};

use super::interim::report::{json_report, race_text, summary_text, warning_text};
use super::interim::writer::TraceWriter;
use super::model::Step;
use super::options::{Format, Options, ReportTo};
use super::threads::ThreadIds;
use crate::engine::{Engine, Finding, Race, Stats, Warning};
use crate::trace::record::{
    BufId, DeviceId, EventId, LEGACY_STREAM_DEVICE0, Op, Record, StreamFlags, StreamId, StreamKind,
    ThreadId,
};

/// Where a wrapped stream's id comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamSlot {
    /// A stream with one id: created streams and the legacy default stream.
    Fixed(StreamId),
    /// cudarc's per-thread stream handle (`0x2`, `CU_STREAM_PER_THREAD`): each host thread that
    /// uses it reaches its own per-thread default stream, so the id depends on the caller.
    PerThread,
}

type Sink = Box<dyn Write + Send>;

/// A sanitizer: owns the engine, the trace writer and the findings. See the module docs.
pub struct Sanitizer {
    options: Options,
    state: Mutex<State>,
}

impl std::fmt::Debug for Sanitizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sanitizer")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

pub(crate) struct State {
    engine: Engine,
    /// The line the next record gets (the header is line 1).
    next_line: u64,
    trace: Option<TraceWriter<Sink>>,
    /// The trace path as reports name it.
    trace_name: Option<String>,
    report: Sink,
    findings: Vec<Finding>,
    threads: ThreadIds,
    /// Events with a record in the trace and no `event_destroy` since: the events whose
    /// tracked waits and syncs order something (see [`Step::TrackedWait`]).
    recorded: FxHashSet<EventId>,
    legacy: FxHashMap<DeviceId, StreamId>,
    per_thread: FxHashMap<(ThreadId, DeviceId), StreamId>,
    next_stream: StreamId,
    next_event: EventId,
    next_buf: BufId,
    /// Feeding the engine: `options.check`, until the engine rejects a record.
    checking: bool,
    /// Calls skipped because they mixed sanitizers; warned about once.
    warned_foreign: bool,
    #[cfg(test)]
    pub(crate) captured: Vec<Record>,
}

impl Sanitizer {
    /// A sanitizer writing its reports and trace where `options` say (files are created now).
    pub fn new(options: Options) -> io::Result<Arc<Sanitizer>> {
        let trace: Option<Sink> = match &options.trace {
            Some(path) => Some(Box::new(BufWriter::new(File::create(path).map_err(
                |e| io::Error::new(e.kind(), format!("trace file {}: {e}", path.display())),
            )?))),
            None => None,
        };
        let report: Sink = match &options.report {
            ReportTo::Stderr => Box::new(io::stderr()),
            ReportTo::Path(path) => Box::new(File::create(path).map_err(|e| {
                io::Error::new(e.kind(), format!("report file {}: {e}", path.display()))
            })?),
        };
        Sanitizer::with_outputs(options, trace, report)
    }

    /// A sanitizer writing to the given sinks (`options.trace` and `options.report` only name
    /// them in reports). For tests and for programs that keep traces in memory.
    pub fn with_outputs(
        options: Options,
        trace: Option<Box<dyn Write + Send>>,
        report: Box<dyn Write + Send>,
    ) -> io::Result<Arc<Sanitizer>> {
        let mut header = Map::new();
        header.insert(
            "producer".into(),
            json!(concat!(
                "streamsan ",
                env!("CARGO_PKG_VERSION"),
                " online (cudarc 0.19.10)"
            )),
        );
        let trace = trace.map(|w| TraceWriter::new(w, header)).transpose()?;
        let state = State {
            engine: Engine::new(),
            next_line: 2,
            trace_name: options.trace.as_ref().map(|p| p.display().to_string()),
            trace,
            report,
            findings: Vec::new(),
            threads: ThreadIds::default(),
            recorded: FxHashSet::default(),
            legacy: FxHashMap::default(),
            per_thread: FxHashMap::default(),
            next_stream: 1,
            next_event: 1,
            next_buf: 1,
            checking: options.check,
            warned_foreign: false,
            #[cfg(test)]
            captured: Vec::new(),
        };
        Ok(Arc::new(Sanitizer {
            options,
            state: Mutex::new(state),
        }))
    }

    /// The options it runs with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Every finding so far, in the order found.
    pub fn findings(&self) -> Vec<Finding> {
        self.lock().findings.clone()
    }

    /// The races found so far.
    pub fn races(&self) -> Vec<Race> {
        self.lock()
            .findings
            .iter()
            .filter_map(|f| match f {
                Finding::Race(r) => Some((**r).clone()),
                Finding::Warning(_) => None,
            })
            .collect()
    }

    /// The warnings found so far.
    pub fn warnings(&self) -> Vec<Warning> {
        self.lock()
            .findings
            .iter()
            .filter_map(|f| match f {
                Finding::Warning(w) => Some(w.clone()),
                Finding::Race(_) => None,
            })
            .collect()
    }

    /// Forgets the findings so far (the engine's state is kept).
    pub fn clear_findings(&self) {
        self.lock().findings.clear();
    }

    /// Records made so far.
    pub fn records(&self) -> u64 {
        self.lock().next_line - 2
    }

    /// The engine's counts so far.
    pub fn stats(&self) -> Stats {
        self.lock().engine.stats().clone()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while recording leaves the state usable: records are applied whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a call made at `at`: takes the lock until [`Call::finish`] or drop.
    pub(crate) fn begin(&self, at: Option<&'static Location<'static>>) -> Call<'_> {
        let mut st = self.lock();
        let thread = st.threads.current();
        Call {
            san: self,
            st,
            thread,
            at: at.map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column())),
            steps: Vec::new(),
        }
    }

    /// True when `owner` (a `BufRef`'s) is this sanitizer.
    pub(crate) fn owns(&self, owner: usize) -> bool {
        std::ptr::eq(self as *const Sanitizer as *const u8, owner as *const u8)
    }

    /// The identity [`Sanitizer::owns`] compares.
    pub(crate) fn identity(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as *const u8 as usize
    }
}

impl Drop for Sanitizer {
    fn drop(&mut self) {
        let options = self.options.clone();
        let st = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        if st.checking {
            let mut found = Vec::new();
            st.engine.finish(&mut |f| found.push(f));
            for f in found {
                st.found(&options, f);
            }
        }
        let text = if !options.check {
            match &st.trace_name {
                Some(t) => format!(
                    "streamsan: {} records written to {t}; check them with `streamsan check {t}`\n",
                    st.next_line - 2
                ),
                None => String::new(),
            }
        } else {
            match options.format {
                Format::Text => {
                    summary_text(&st.findings, st.next_line - 2, st.trace_name.as_deref())
                }
                Format::Json => json_report(&st.findings, st.engine.stats()),
            }
        };
        st.say(&text);
        if let Some(w) = &mut st.trace {
            let _ = w.flush();
        }
    }
}

/// One sanitized call in progress; holds the lock.
pub(crate) struct Call<'a> {
    san: &'a Sanitizer,
    st: MutexGuard<'a, State>,
    /// The calling host thread's id.
    pub thread: ThreadId,
    at: Option<String>,
    /// What to record when the call succeeded, in order.
    pub steps: Vec<Step>,
}

impl Call<'_> {
    /// The id of the stream in `slot` for this caller; a per-thread stream is declared on its
    /// thread's first use.
    pub(crate) fn stream(&mut self, slot: StreamSlot, device: DeviceId) -> StreamId {
        match slot {
            StreamSlot::Fixed(id) => id,
            StreamSlot::PerThread => {
                if let Some(&id) = self.st.per_thread.get(&(self.thread, device)) {
                    return id;
                }
                let id = self.new_stream_id();
                self.st.per_thread.insert((self.thread, device), id);
                self.declare_now(
                    Op::Stream {
                        id,
                        device,
                        kind: StreamKind::PerThreadDefault,
                        flags: StreamFlags::Blocking,
                    },
                    Some(format!(
                        "per-thread default stream of thread {}",
                        self.thread
                    )),
                );
                id
            }
        }
    }

    /// The legacy default stream of `device`: id 0 for device 0 (never declared, as the format
    /// allows), else declared on first use.
    pub(crate) fn legacy_stream(&mut self, device: DeviceId) -> StreamId {
        if device == 0 {
            return LEGACY_STREAM_DEVICE0;
        }
        if let Some(&id) = self.st.legacy.get(&device) {
            return id;
        }
        let id = self.new_stream_id();
        self.st.legacy.insert(device, id);
        self.declare_now(
            Op::Stream {
                id,
                device,
                kind: StreamKind::LegacyDefault,
                flags: StreamFlags::Blocking,
            },
            Some(format!("legacy default stream of device {device}")),
        );
        id
    }

    fn declare_now(&mut self, op: Op, name: Option<String>) {
        let record = Record {
            line: 0,
            thread: self.thread,
            at: self.at.clone(),
            name,
            op,
        };
        self.st.emit(&self.san.options, record);
    }

    pub(crate) fn new_stream_id(&mut self) -> StreamId {
        let id = self.st.next_stream;
        self.st.next_stream += 1;
        id
    }

    pub(crate) fn new_event_id(&mut self) -> EventId {
        let id = self.st.next_event;
        self.st.next_event += 1;
        id
    }

    pub(crate) fn new_buf_id(&mut self) -> BufId {
        let id = self.st.next_buf;
        self.st.next_buf += 1;
        id
    }

    /// True when every owner in `owners` is this call's sanitizer; otherwise warns once that
    /// calls mixing sanitizers are not recorded.
    pub(crate) fn same_sanitizer(&mut self, owners: &[usize]) -> bool {
        if owners.iter().all(|&o| self.san.owns(o)) {
            return true;
        }
        if !self.st.warned_foreign {
            self.st.warned_foreign = true;
            self.st.say(
                "streamsan: a call used memory of another sanitizer (or of an unsanitized \
                 context); such calls are not recorded. Share one sanitizer between contexts \
                 with `ContextBuilder::sanitizer`.\n",
            );
        }
        false
    }

    pub(crate) fn push(&mut self, step: Step) {
        self.steps.push(step);
    }

    /// Records the steps. Called once the cudarc call succeeded; a failed call records nothing.
    pub(crate) fn finish(mut self) {
        let steps = std::mem::take(&mut self.steps);
        for step in steps {
            self.st
                .apply(&self.san.options, step, self.thread, self.at.as_deref());
        }
    }
}

impl State {
    /// Turns one step into a record (or none: see [`Step::TrackedWait`]).
    fn apply(&mut self, options: &Options, step: Step, thread: ThreadId, at: Option<&str>) {
        let (op, name) = match step {
            Step::Op { op, name } => {
                match op {
                    Op::Record { event, .. } => {
                        self.recorded.insert(event);
                    }
                    Op::EventDestroy { id } => {
                        self.recorded.remove(&id);
                    }
                    _ => {}
                }
                (op, name)
            }
            Step::TrackedWait {
                stream,
                event,
                name,
            } => {
                if !self.recorded.contains(&event) {
                    return;
                }
                (Op::Wait { stream, event }, Some(name))
            }
            Step::TrackedRecord {
                event,
                stream,
                name,
            } => {
                self.recorded.insert(event);
                (Op::Record { event, stream }, Some(name))
            }
            Step::TrackedSync { event, name } => {
                if !self.recorded.contains(&event) {
                    return;
                }
                (Op::EventSync { event }, Some(name))
            }
        };
        let record = Record {
            line: 0,
            thread,
            at: at.map(str::to_string),
            name,
            op,
        };
        self.emit(options, record);
    }

    /// Numbers the record, writes it to the trace, checks it.
    fn emit(&mut self, options: &Options, mut record: Record) {
        record.line = self.next_line;
        self.next_line += 1;
        if let Some(w) = &mut self.trace
            && let Err(e) = w.write(&record).and_then(|()| w.flush())
        {
            self.trace = None;
            self.say(&format!(
                "streamsan: writing the trace failed at line {}: {e}; the trace stops here\n",
                record.line
            ));
        }
        if self.checking {
            let mut found = Vec::new();
            if let Err(e) = self.engine.apply(&record, &mut |f| found.push(f)) {
                self.checking = false;
                self.say(&format!(
                    "streamsan: internal error, the engine rejected a record: {e}; online \
                     checking stops here (the trace goes on)\n"
                ));
            }
            for f in found {
                self.found(options, f);
            }
        }
        #[cfg(test)]
        self.captured.push(record);
    }

    /// Prints a finding as it is found (text), keeps it, and halts on a race if asked to.
    fn found(&mut self, options: &Options, finding: Finding) {
        if options.format == Format::Text {
            let text = match &finding {
                Finding::Race(r) => race_text(r, self.trace_name.as_deref()),
                Finding::Warning(w) => warning_text(w),
            };
            self.say(&text);
        }
        let race = matches!(finding, Finding::Race(_));
        self.findings.push(finding);
        if race && options.halt_on_error {
            if options.format == Format::Json {
                let text = json_report(&self.findings, self.engine.stats());
                self.say(&text);
            }
            self.say(&format!(
                "streamsan: halt_on_error: exiting with status {}\n",
                options.exitcode
            ));
            if let Some(w) = &mut self.trace {
                let _ = w.flush();
            }
            std::process::exit(options.exitcode);
        }
    }

    fn say(&mut self, text: &str) {
        if !text.is_empty() {
            let _ = self.report.write_all(text.as_bytes());
            let _ = self.report.flush();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cuda::model;

    /// A sanitizer that records without the engine, into memory.
    pub(crate) fn recording() -> Arc<Sanitizer> {
        let options = Options {
            check: false,
            ..Options::default()
        };
        Sanitizer::with_outputs(options, None, Box::new(io::sink())).unwrap()
    }

    pub(crate) fn captured(san: &Sanitizer) -> Vec<Record> {
        san.lock().captured.clone()
    }

    #[test]
    fn lines_count_from_two_and_carry_thread_and_location() {
        let san = recording();
        let here = Location::caller();
        let mut call = san.begin(Some(here));
        call.push(Step::op(Op::DeviceSync { device: 0 }, None));
        call.push(Step::op(Op::DeviceSync { device: 1 }, Some("x".into())));
        call.finish();
        let records = captured(&san);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].line, 2);
        assert_eq!(records[1].line, 3);
        assert_eq!(records[1].name.as_deref(), Some("x"));
        assert_eq!(records[0].thread, 0);
        let at = records[0].at.as_deref().unwrap();
        assert!(at.starts_with("src/cuda/sanitizer.rs:"), "{at}");
        assert_eq!(san.records(), 2);
    }

    #[test]
    fn a_call_dropped_before_finish_records_nothing() {
        let san = recording();
        let mut call = san.begin(None);
        call.push(Step::op(Op::DeviceSync { device: 0 }, None));
        drop(call);
        assert!(captured(&san).is_empty());
    }

    #[test]
    fn tracked_waits_on_unrecorded_events_are_left_out() {
        let san = recording();
        let ev = model::SliceEvents {
            buf: 1,
            read: 1,
            write: 2,
        };
        let mut call = san.begin(None);
        // A writer: waits on read and write (both unrecorded: left out), records write.
        model::plan_memset(
            &mut call.steps,
            0,
            Some(ev),
            true,
            Step::op(Op::DeviceSync { device: 0 }, None),
        );
        // A second writer: now the write event is recorded, so its wait is kept.
        model::plan_memset(
            &mut call.steps,
            0,
            Some(ev),
            true,
            Step::op(Op::DeviceSync { device: 0 }, None),
        );
        call.finish();
        let ops: Vec<_> = captured(&san).into_iter().map(|r| r.op).collect();
        assert_eq!(
            ops,
            [
                Op::DeviceSync { device: 0 },
                Op::Record {
                    event: 2,
                    stream: 0
                },
                Op::Wait {
                    stream: 0,
                    event: 2
                },
                Op::DeviceSync { device: 0 },
                Op::Record {
                    event: 2,
                    stream: 0
                },
            ]
        );
        // Once destroyed, the event counts as unrecorded again (its id may be reused).
        let mut call = san.begin(None);
        call.push(Step::op(Op::EventDestroy { id: 2 }, None));
        call.push(Step::TrackedSync {
            event: 2,
            name: "x".into(),
        });
        call.finish();
        assert_eq!(captured(&san).len(), 6);
    }

    #[test]
    fn per_thread_streams_are_per_caller_and_declared_once() {
        let san = recording();
        let mut call = san.begin(None);
        let a = call.stream(StreamSlot::PerThread, 0);
        let again = call.stream(StreamSlot::PerThread, 0);
        let other_device = call.stream(StreamSlot::PerThread, 1);
        call.finish();
        assert_eq!(a, again);
        assert_ne!(a, other_device);
        let san2 = san.clone();
        let b = std::thread::spawn(move || {
            let mut call = san2.begin(None);
            let b = call.stream(StreamSlot::PerThread, 0);
            call.finish();
            b
        })
        .join()
        .unwrap();
        assert_ne!(a, b);
        let decls: Vec<_> = captured(&san)
            .into_iter()
            .map(|r| (r.thread, r.op))
            .collect();
        assert_eq!(decls.len(), 3);
        assert_eq!(
            decls[2],
            (
                1,
                Op::Stream {
                    id: b,
                    device: 0,
                    kind: StreamKind::PerThreadDefault,
                    flags: StreamFlags::Blocking
                }
            )
        );
    }

    #[test]
    fn legacy_stream_of_device_zero_is_stream_zero() {
        let san = recording();
        let mut call = san.begin(None);
        assert_eq!(call.legacy_stream(0), 0);
        let one = call.legacy_stream(1);
        assert_eq!(call.legacy_stream(1), one);
        call.finish();
        let records = captured(&san);
        assert_eq!(records.len(), 1);
        assert!(matches!(
            records[0].op,
            Op::Stream {
                device: 1,
                kind: StreamKind::LegacyDefault,
                ..
            }
        ));
    }

    #[test]
    fn trace_is_written_and_flushed_per_record() {
        #[derive(Clone, Default)]
        struct Shared(Arc<Mutex<Vec<u8>>>);
        impl Write for Shared {
            fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let buf = Shared::default();
        let options = Options {
            check: false,
            trace: Some("t.jsonl".into()),
            ..Options::default()
        };
        let report = Shared::default();
        let san = Sanitizer::with_outputs(
            options,
            Some(Box::new(buf.clone())),
            Box::new(report.clone()),
        )
        .unwrap();
        let mut call = san.begin(None);
        call.push(Step::op(Op::DeviceSync { device: 0 }, None));
        call.finish();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].contains("\"streamsan_trace\":1"));
        assert!(lines[1].contains("\"op\":\"device_sync\""));
        drop(san);
        let said = String::from_utf8(report.0.lock().unwrap().clone()).unwrap();
        assert!(said.contains("streamsan check t.jsonl"), "{said}");
    }
}
