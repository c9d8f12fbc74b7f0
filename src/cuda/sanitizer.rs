//! The sanitizer handle: one engine, one record counter, one optional trace, the findings so
//! far, behind one lock. Wrapped contexts, streams and buffers each hold an `Arc` to theirs; there
//! is no global instance, so several can coexist (one per context, or one shared by contexts).
//!
//! Every sanitized call runs as a [`Call`]: take the lock, make the real cudarc call, then turn
//! the call's [`Step`]s into records — numbered, encoded for the trace and applied to the
//! engine — and hand the call's trace lines to the trace at once (a copy into the mapped trace
//! file, or one `write`: see `trace_file.rs`), all before the lock is released. So the order of
//! the records is the order in which the calls were enqueued, whatever the number of host
//! threads, and a crash loses at most the call in progress.
//!
//! The recording path allocates nothing in the steady state: the record being made, its strings
//! and its access lists, the step list and the trace line buffer are reused from call to call,
//! and the `file:line:col` of each call site is formatted once.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Write};
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::{FxHashMap, FxHashSet};
use serde_json::{Map, json};

use super::model::{Label, Step};
use super::options::{Format, Options, ReportTo};
use super::reporting::{self, Findings};
use super::threads::ThreadIds;
use super::trace_file::TraceSink;
use crate::engine::{Engine, Finding, Race, Stats, Warning};
use crate::report::{RenderOptions, Report, render_json, render_text};
use crate::suppress::{Filters, Tally};
use crate::trace::TraceWriter;
use crate::trace::record::{
    Access, BufId, ByteRange, DeviceId, EventId, LEGACY_STREAM_DEVICE0, Op, Record, StreamFlags,
    StreamId, StreamKind, ThreadId,
};
use crate::trace::writer::encode;

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

/// Serial numbers of sanitizers, for the per-thread id cache (0: none).
static NEXT_SERIAL: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The calling thread's id in the sanitizer it last called: (serial, id).
    static THREAD_ID: Cell<(u64, ThreadId)> = const { Cell::new((0, 0)) };
}

/// The header line's fields beyond the version.
fn header() -> Map<String, serde_json::Value> {
    let mut header = Map::new();
    header.insert(
        "producer".into(),
        json!(concat!(
            "streamsan ",
            env!("CARGO_PKG_VERSION"),
            " online (cudarc 0.19.10)"
        )),
    );
    header
}

/// A sanitizer: owns the engine, the trace and the findings. See the module docs.
pub struct Sanitizer {
    options: Options,
    serial: u64,
    state: Mutex<State>,
}

impl std::fmt::Debug for Sanitizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sanitizer")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The trace being written: the header went out at creation; each call's lines are encoded into
/// `pending` and appended to `out` at once when the call ends.
struct TraceOut {
    out: TraceSink,
    pending: Vec<u8>,
}

pub(crate) struct State {
    engine: Engine,
    /// The line the next record gets (the header is line 1).
    next_line: u64,
    trace: Option<TraceOut>,
    /// The trace path as reports name it.
    trace_name: Option<String>,
    report: Sink,
    findings: Findings,
    /// Suppressions and baseline, when the options name some.
    filters: Option<Filters>,
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
    /// The record being made, reused: its strings and access lists keep their capacity.
    rec: Record,
    /// Spare strings for `rec.name` and `rec.at` while those are `None`.
    spare_name: String,
    spare_at: String,
    /// `file:line:col` of every call site seen, by the address of its `Location`.
    at_cache: FxHashMap<usize, Box<str>>,
    /// A step list and access lists of earlier calls, reused.
    steps_pool: Vec<Step>,
    access_pool: Vec<Vec<Access>>,
    /// Findings of the record being applied, reused.
    new_findings: Vec<Finding>,
    #[cfg(test)]
    pub(crate) captured: Vec<Record>,
}

impl Sanitizer {
    /// A sanitizer writing its reports and trace where `options` say (files are created now;
    /// the trace's header is written now).
    ///
    /// The suppressions and baseline files the options name are read now; a malformed one is an
    /// error of kind `InvalidData` whose inner error is the [`FilterError`] (file, line, what
    /// was expected).
    ///
    /// [`FilterError`]: crate::suppress::FilterError
    pub fn new(options: Options) -> io::Result<Arc<Sanitizer>> {
        let filters = load_filters(&options)?;
        let trace = match &options.trace {
            Some(path) => {
                let named = |e: io::Error| {
                    io::Error::new(e.kind(), format!("trace file {}: {e}", path.display()))
                };
                let file = super::trace_file::create(path).map_err(named)?;
                let file = TraceWriter::new(file, header())
                    .map_err(named)?
                    .into_inner();
                Some(TraceSink::file(file))
            }
            None => None,
        };
        let report: Sink = match &options.report {
            ReportTo::Stderr => Box::new(io::stderr()),
            ReportTo::Path(path) => Box::new(File::create(path).map_err(|e| {
                io::Error::new(e.kind(), format!("report file {}: {e}", path.display()))
            })?),
        };
        Ok(Sanitizer::build(options, trace, report, filters))
    }

    /// A sanitizer writing to the given sinks (`options.trace` and `options.report` only name
    /// them in reports). For tests and for programs that keep traces in memory. The header is
    /// written now; then each call's trace lines are passed to `trace` in one `write_all`,
    /// followed by a `flush`.
    pub fn with_outputs(
        options: Options,
        trace: Option<Box<dyn Write + Send>>,
        report: Box<dyn Write + Send>,
    ) -> io::Result<Arc<Sanitizer>> {
        let filters = load_filters(&options)?;
        let trace = match trace {
            Some(out) => {
                let mut out = TraceWriter::new(out, header())?.into_inner();
                out.flush()?;
                Some(TraceSink::Writer(out))
            }
            None => None,
        };
        Ok(Sanitizer::build(options, trace, report, filters))
    }

    fn build(
        options: Options,
        trace: Option<TraceSink>,
        report: Sink,
        filters: Option<Filters>,
    ) -> Arc<Sanitizer> {
        let trace = trace.map(|out| TraceOut {
            out,
            pending: Vec::with_capacity(4096),
        });
        let state = State {
            engine: Engine::new(),
            next_line: 2,
            trace_name: options.trace.as_ref().map(|p| p.display().to_string()),
            trace,
            report,
            findings: Findings::default(),
            filters,
            threads: ThreadIds::default(),
            recorded: FxHashSet::default(),
            legacy: FxHashMap::default(),
            per_thread: FxHashMap::default(),
            next_stream: 1,
            next_event: 1,
            next_buf: 1,
            checking: options.check,
            warned_foreign: false,
            rec: Record {
                line: 0,
                thread: 0,
                at: None,
                name: None,
                op: Op::DeviceSync { device: 0 },
            },
            spare_name: String::new(),
            spare_at: String::new(),
            at_cache: FxHashMap::default(),
            steps_pool: Vec::new(),
            access_pool: Vec::new(),
            new_findings: Vec::new(),
            #[cfg(test)]
            captured: Vec::new(),
        };
        Arc::new(Sanitizer {
            options,
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            state: Mutex::new(state),
        })
    }

    /// The options it runs with.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The findings so far, in the order found (the first
    /// [`MAX_KEPT_FINDINGS`](crate::cuda::MAX_KEPT_FINDINGS); [`Sanitizer::report`]
    /// counts all of them). Findings that a suppression or the baseline took out are not
    /// among them; the report's summary counts them.
    pub fn findings(&self) -> Vec<Finding> {
        self.lock().findings.kept().to_vec()
    }

    /// The races among [`Sanitizer::findings`].
    pub fn races(&self) -> Vec<Race> {
        self.lock()
            .findings
            .kept()
            .iter()
            .filter_map(|f| match f {
                Finding::Race(r) => Some((**r).clone()),
                Finding::Warning(_) => None,
            })
            .collect()
    }

    /// The warnings among [`Sanitizer::findings`].
    pub fn warnings(&self) -> Vec<Warning> {
        self.lock()
            .findings
            .kept()
            .iter()
            .filter_map(|f| match f {
                Finding::Warning(w) => Some(w.clone()),
                Finding::Race(_) => None,
            })
            .collect()
    }

    /// Forgets the findings so far (the engine's state is kept).
    pub fn clear_findings(&self) {
        self.lock().findings = Findings::default();
    }

    /// The report so far, folded as `streamsan check` folds it (repeats of a pair of sites are
    /// one entry with a count), summary counts from the engine. It is what `streamsan check`
    /// reports for the trace written so far, except for the end-of-trace warnings (buffers
    /// still allocated), which only the end of the run adds.
    ///
    /// With suppressions or a baseline, it is the report they leave (as
    /// [`suppress::apply`](crate::suppress::apply) leaves it): the summary counts what they
    /// took out.
    pub fn folded_report(&self) -> Report {
        self.lock().filtered().0
    }

    /// The suppressions that matched no race or warning so far (none without suppressions).
    pub fn unused_suppressions(&self) -> Vec<crate::suppress::Suppression> {
        let mut st = self.lock();
        let (_, filtered) = st.filtered();
        match (
            st.filters.as_ref().and_then(Filters::suppressions),
            filtered,
        ) {
            (Some(suppressions), Some(tally)) => suppressions
                .unused(&tally.hits)
                .into_iter()
                .cloned()
                .collect(),
            _ => Vec::new(),
        }
    }

    /// [`Sanitizer::folded_report`] as text, every race block with its count, the warnings and
    /// the `SUMMARY` line. Deterministic (no addresses, pids, paths of this run or times): fit
    /// for snapshots.
    pub fn report(&self) -> String {
        render_text(&self.folded_report(), &RenderOptions::default())
    }

    /// [`Sanitizer::folded_report`] as the JSON report of `streamsan check --format json`.
    pub fn report_json(&self) -> String {
        render_json(&self.folded_report(), &RenderOptions::default())
    }

    /// Records made so far.
    pub fn records(&self) -> u64 {
        self.lock().next_line - 2
    }

    /// The engine's counts so far.
    pub fn stats(&self) -> Stats {
        self.lock().engine.stats().clone()
    }

    /// Records `op` as a call made at the caller's line by the calling thread, through the same
    /// path every wrapper takes (lock, numbering, trace, engine). Not part of the API: for tests
    /// and benchmarks of that path without CUDA. A `launch` needs a `name`.
    #[doc(hidden)]
    #[track_caller]
    pub fn record_op(&self, op: Op, name: Option<&'static str>) {
        let mut call = self.begin(Some(Location::caller()));
        call.push(Step::labeled(op, name.map_or(Label::None, Label::Static)));
        call.finish();
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while recording leaves the state usable: records are applied whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The calling thread's id, cached per thread for the sanitizer it last called.
    fn thread_id(&self, st: &mut State) -> ThreadId {
        let (serial, id) = THREAD_ID.get();
        if serial == self.serial {
            return id;
        }
        let id = st.threads.current();
        THREAD_ID.set((self.serial, id));
        id
    }

    /// Starts a call made at `at`: takes the lock until [`Call::finish`] or drop.
    pub(crate) fn begin(&self, at: Option<&'static Location<'static>>) -> Call<'_> {
        let mut st = self.lock();
        let thread = self.thread_id(&mut st);
        let steps = std::mem::take(&mut st.steps_pool);
        Call {
            san: self,
            st,
            thread,
            at,
            steps,
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

/// The filters `options` name, read now; a bad file is an `InvalidData` error around the
/// [`FilterError`](crate::suppress::FilterError).
fn load_filters(options: &Options) -> io::Result<Option<Filters>> {
    reporting::load_filters(options).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
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
            let (report, filtered) = st.filtered();
            let mut text = match options.format {
                Format::Text => reporting::summary(&report, st.trace_name.as_deref()),
                Format::Json => render_json(
                    &report,
                    &RenderOptions {
                        source: st.trace_name.clone(),
                        max_reports: None,
                    },
                ),
            };
            if let (Some(filters), Some(tally)) = (&st.filters, &filtered) {
                let closing = filters.closing(tally);
                if options.format == Format::Json && options.report != ReportTo::Stderr {
                    // The report file holds one JSON document; notes go to stderr.
                    eprint!("{closing}");
                } else {
                    text.push_str(&closing);
                }
            }
            text
        };
        st.close_trace();
        st.say(&text);
    }
}

/// One sanitized call in progress; holds the lock. Its trace lines are written when it ends.
pub(crate) struct Call<'a> {
    san: &'a Sanitizer,
    st: MutexGuard<'a, State>,
    /// The calling host thread's id.
    pub thread: ThreadId,
    at: Option<&'static Location<'static>>,
    /// What to record when the call succeeded, in order.
    pub steps: Vec<Step>,
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        // The lines of the records made (all of them, or those before a panic: they are
        // numbered already).
        self.st.write_trace();
        let mut steps = std::mem::take(&mut self.steps);
        steps.clear();
        if steps.capacity() > self.st.steps_pool.capacity() {
            self.st.steps_pool = steps;
        }
    }
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
                    format!("per-thread default stream of thread {}", self.thread),
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
            format!("legacy default stream of device {device}"),
        );
        id
    }

    fn declare_now(&mut self, op: Op, name: String) {
        let (thread, at) = (self.thread, self.at);
        self.st
            .emit(&self.san.options, op, &Label::Owned(name), thread, at);
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
    pub(crate) fn same_sanitizer(&mut self, owners: impl IntoIterator<Item = usize>) -> bool {
        if owners.into_iter().all(|o| self.san.owns(o)) {
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

    /// An empty list of accesses for an op of this call, reusing an earlier record's.
    pub(crate) fn access_list(&mut self) -> AccessList {
        AccessList {
            list: self.st.access_pool.pop().unwrap_or_default(),
            len: 0,
        }
    }

    pub(crate) fn push(&mut self, step: Step) {
        self.steps.push(step);
    }

    /// Records the steps. Called once the cudarc call succeeded; a failed call records nothing.
    pub(crate) fn finish(mut self) {
        let mut steps = std::mem::take(&mut self.steps);
        for step in steps.drain(..) {
            self.st.apply(&self.san.options, step, self.thread, self.at);
        }
        self.steps = steps;
    }
}

/// A list of accesses being filled in place: a reused list keeps the accesses (and their
/// argument names' strings) of an earlier record, which are overwritten, so a launch with the
/// same arguments as the last one allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct AccessList {
    list: Vec<Access>,
    /// Accesses filled so far; those after them are stale.
    len: usize,
}

impl AccessList {
    /// Appends an access to `buf` (`range`: `None` for the whole buffer) through `arg`.
    pub(crate) fn push(&mut self, buf: BufId, range: Option<ByteRange>, arg: Option<&str>) {
        match self.list.get_mut(self.len) {
            Some(a) => {
                a.buf = buf;
                a.range = range;
                match (arg, &mut a.arg) {
                    (Some(text), Some(s)) => {
                        s.clear();
                        s.push_str(text);
                    }
                    (arg, slot) => *slot = arg.map(str::to_string),
                }
            }
            None => self.list.push(Access {
                buf,
                range,
                arg: arg.map(str::to_string),
            }),
        }
        self.len += 1;
    }

    /// The accesses pushed.
    pub(crate) fn done(mut self) -> Vec<Access> {
        self.list.truncate(self.len);
        self.list
    }
}

/// Sets `slot` to `text`, reusing the string in `slot` or `spare`.
fn set_text(slot: &mut Option<String>, spare: &mut String, text: Option<&str>) {
    let mut s = slot.take().unwrap_or_else(|| std::mem::take(spare));
    match text {
        Some(text) => {
            s.clear();
            s.push_str(text);
            *slot = Some(s);
        }
        None => *spare = s,
    }
}

/// Sets `slot` to `label`, reusing the string in `slot` or `spare`.
fn set_label(slot: &mut Option<String>, spare: &mut String, label: &Label) {
    let mut s = slot.take().unwrap_or_else(|| std::mem::take(spare));
    if label.write_into(&mut s) {
        *slot = Some(s);
    } else {
        *spare = s;
    }
}

/// At most this many access lists are kept for reuse.
const ACCESS_POOL: usize = 16;

impl State {
    /// Turns one step into a record (or none: see [`Step::TrackedWait`]).
    fn apply(
        &mut self,
        options: &Options,
        step: Step,
        thread: ThreadId,
        at: Option<&'static Location<'static>>,
    ) {
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
                (Op::Wait { stream, event }, name)
            }
            Step::TrackedRecord {
                event,
                stream,
                name,
            } => {
                self.recorded.insert(event);
                (Op::Record { event, stream }, name)
            }
            Step::TrackedSync { event, name } => {
                if !self.recorded.contains(&event) {
                    return;
                }
                (Op::EventSync { event }, name)
            }
        };
        self.emit(options, op, &name, thread, at);
    }

    /// Makes the record: numbers it, encodes its trace line, checks it.
    fn emit(
        &mut self,
        options: &Options,
        op: Op,
        name: &Label,
        thread: ThreadId,
        at: Option<&'static Location<'static>>,
    ) {
        let old = std::mem::replace(&mut self.rec.op, op);
        self.recycle(old);
        self.rec.line = self.next_line;
        self.next_line += 1;
        self.rec.thread = thread;
        set_label(&mut self.rec.name, &mut self.spare_name, name);
        let at = at.map(|l| {
            &**self
                .at_cache
                .entry(l as *const Location<'static> as usize)
                .or_insert_with(|| format!("{}:{}:{}", l.file(), l.line(), l.column()).into())
        });
        set_text(&mut self.rec.at, &mut self.spare_at, at);
        if let Some(t) = &mut self.trace
            && let Err(e) = encode(&self.rec, &mut t.pending)
        {
            // Only a record the format cannot express (a launch without a kernel name): the
            // trace would no longer match the numbering.
            let line = self.rec.line;
            self.write_trace();
            self.trace = None;
            self.say(&format!(
                "streamsan: cannot write record {line} to the trace: {e}; the trace stops before it\n"
            ));
        }
        if self.checking {
            let mut found = std::mem::take(&mut self.new_findings);
            if let Err(e) = self.engine.apply(&self.rec, &mut |f| found.push(f)) {
                self.checking = false;
                self.say(&format!(
                    "streamsan: internal error, the engine rejected a record: {e}; online \
                     checking stops here (the trace goes on)\n"
                ));
            }
            for f in found.drain(..) {
                self.found(options, f);
            }
            self.new_findings = found;
        }
        #[cfg(test)]
        self.captured.push(self.rec.clone());
    }

    /// Keeps the access lists of a finished record for [`Call::access_list`].
    fn recycle(&mut self, op: Op) {
        if let Op::Launch { reads, writes, .. }
        | Op::HostFunc { reads, writes, .. }
        | Op::HostAccess { reads, writes } = op
        {
            for list in [reads, writes] {
                if list.capacity() > 0 && self.access_pool.len() < ACCESS_POOL {
                    self.access_pool.push(list);
                }
            }
        }
    }

    /// Writes the trace lines made so far, in one `write_all`.
    fn write_trace(&mut self) {
        let Some(t) = &mut self.trace else {
            return;
        };
        if t.pending.is_empty() {
            return;
        }
        let result = t.out.append(&t.pending);
        t.pending.clear();
        if let Err(e) = result {
            self.trace = None;
            let line = self.next_line;
            self.say(&format!(
                "streamsan: writing the trace failed before line {line}: {e}; the trace stops here\n"
            ));
        }
    }

    /// Writes the pending lines and ends the trace.
    fn close_trace(&mut self) {
        self.write_trace();
        if let Some(t) = &mut self.trace
            && let Err(e) = t.out.close()
        {
            self.trace = None;
            self.say(&format!("streamsan: closing the trace failed: {e}\n"));
        }
    }

    /// The folded report so far with the filters applied, and what they matched (`None`
    /// without filters, when the report is left as it is).
    fn filtered(&mut self) -> (Report, Option<Tally>) {
        let report = self.findings.report(self.engine.stats());
        match &self.filters {
            Some(filters) => {
                let mut tally = Tally::default();
                let report = filters.apply(report, &mut tally);
                (report, Some(tally))
            }
            None => (report, None),
        }
    }

    /// Keeps a finding, prints it as it is found (text), and halts on a race if asked to.
    /// A finding the suppressions or the baseline take out is only counted.
    fn found(&mut self, options: &Options, finding: Finding) {
        let removed = self.filters.as_ref().is_some_and(|f| f.removes(&finding));
        let race = matches!(finding, Finding::Race(_)) && !removed;
        if let Some(text) = self
            .findings
            .add(finding, options.format == Format::Text, removed)
        {
            self.say(&text);
        }
        if race && options.halt_on_error {
            // The racing record's line is pending: the trace reproduces the race.
            self.close_trace();
            let report = self.filtered().0;
            let text = match options.format {
                Format::Text => reporting::summary(&report, self.trace_name.as_deref()),
                Format::Json => render_json(
                    &report,
                    &RenderOptions {
                        source: self.trace_name.clone(),
                        max_reports: None,
                    },
                ),
            };
            self.say(&text);
            self.say(&format!(
                "streamsan: halt_on_error: exiting with status {}\n",
                options.exitcode
            ));
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
            name: Label::Static("x"),
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

    /// A sink that keeps what it is given and counts the `write` calls (each a syscall for
    /// an unbuffered `File`).
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<(Vec<u8>, usize)>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let mut inner = self.0.lock().unwrap();
            inner.0.extend_from_slice(b);
            inner.1 += 1;
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().0.clone()).unwrap()
        }
        fn writes(&self) -> usize {
            self.0.lock().unwrap().1
        }
    }

    fn with_trace(check: bool) -> (Arc<Sanitizer>, Shared, Shared) {
        let (trace, report) = (Shared::default(), Shared::default());
        let options = Options {
            check,
            trace: Some("t.jsonl".into()),
            ..Options::default()
        };
        let san = Sanitizer::with_outputs(
            options,
            Some(Box::new(trace.clone())),
            Box::new(report.clone()),
        )
        .unwrap();
        (san, trace, report)
    }

    #[test]
    fn trace_is_written_per_call_in_one_write() {
        let (san, trace, report) = with_trace(false);
        // The header goes out at creation.
        assert_eq!(trace.writes(), 1);
        assert!(
            trace
                .text()
                .starts_with("{\"streamsan_trace\":1,\"producer\":")
        );
        let mut call = san.begin(None);
        call.push(Step::op(Op::DeviceSync { device: 0 }, None));
        call.push(Step::op(Op::DeviceSync { device: 1 }, None));
        call.finish();
        assert_eq!(trace.writes(), 2, "one write for the call's two lines");
        san.record_op(Op::DeviceSync { device: 2 }, None);
        assert_eq!(trace.writes(), 3);
        let text = trace.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[1].contains("\"op\":\"device_sync\""));
        assert!(lines[3].contains("\"device\":2"));
        assert!(lines[3].contains("\"at\":\"src/cuda/sanitizer.rs:"));
        // A failed call (dropped before `finish`) writes nothing.
        let mut call = san.begin(None);
        call.push(Step::op(Op::DeviceSync { device: 0 }, None));
        drop(call);
        assert_eq!(trace.writes(), 3);
        drop(san);
        let said = report.text();
        assert!(said.contains("streamsan check t.jsonl"), "{said}");
    }

    #[test]
    fn a_panic_in_a_call_leaves_the_sanitizer_usable_and_the_trace_whole() {
        let (san, trace, _) = with_trace(true);
        san.record_op(Op::DeviceSync { device: 0 }, None);
        let other = san.clone();
        let panicked = std::thread::spawn(move || {
            let mut call = other.begin(None);
            call.push(Step::op(Op::DeviceSync { device: 0 }, None));
            panic!("the cudarc call failed badly");
        })
        .join();
        assert!(panicked.is_err());
        assert!(san.state.is_poisoned());
        san.record_op(Op::DeviceSync { device: 0 }, None);
        assert_eq!(san.records(), 2);
        let text = trace.text();
        let records: Vec<Record> = crate::trace::TraceReader::new(text.as_bytes(), "t")
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(records.iter().map(|r| r.line).collect::<Vec<_>>(), [2, 3]);
        assert_eq!(san.stats().records, 2);
    }

    /// Two streams, one buffer, written on one and read on the other, `n` times: a
    /// read-after-write, then in each later round a write-after-read and a read-after-write
    /// too, always from the same two call sites.
    fn racy_rounds(san: &Sanitizer, n: usize) {
        for id in [1, 2] {
            san.record_op(
                Op::Stream {
                    id,
                    device: 0,
                    kind: StreamKind::Created,
                    flags: StreamFlags::NonBlocking,
                },
                Some(["", "producer", "consumer"][id as usize]),
            );
        }
        san.record_op(
            Op::Alloc {
                buf: 1,
                bytes: 64,
                device: 0,
                space: crate::trace::record::MemSpace::Device,
                stream: None,
                addr: None,
            },
            Some("x"),
        );
        for _ in 0..n {
            for (stream, write) in [(1, true), (2, false)] {
                let access = vec![Access::whole(1).arg("x")];
                let (reads, writes) = if write {
                    (vec![], access)
                } else {
                    (access, vec![])
                };
                san.record_op(
                    Op::Launch {
                        stream,
                        reads,
                        writes,
                    },
                    Some(if write { "fill" } else { "sum" }),
                );
            }
        }
    }

    #[test]
    fn races_are_printed_once_per_pair_of_sites_and_folded_in_reports() {
        let (san, trace, report) = with_trace(true);
        racy_rounds(&san, 5);
        let said = report.text();
        assert_eq!(said.matches("RACE ").count(), 2, "{said}");
        assert!(
            said.starts_with("RACE read-after-write on buffer b1 \"x\""),
            "{said}"
        );
        assert_eq!(san.races().len(), 9);
        let folded = san.folded_report();
        assert_eq!(folded.races.len(), 2);
        assert_eq!(
            folded
                .races
                .iter()
                .map(|r| r.occurrences)
                .collect::<Vec<_>>(),
            [5, 4]
        );
        let text = san.report();
        assert!(text.contains("(5 occurrences)"), "{text}");
        assert!(
            text.contains("SUMMARY: 2 races (1 read-after-write, 1 write-after-read; 9 occurrences) in 13 records"),
            "{text}"
        );
        assert_eq!(san.report(), text, "asking again changes nothing");
        let json: serde_json::Value = serde_json::from_str(&san.report_json()).unwrap();
        assert_eq!(json["summary"]["races"], 2);
        // The online verdict is the offline one.
        let checked = crate::check::check_reader(
            crate::trace::TraceReader::new(
                Box::new(io::Cursor::new(trace.text().into_bytes())) as Box<dyn io::BufRead + Send>,
                "t.jsonl",
            )
            .unwrap(),
            |_| {},
        )
        .unwrap();
        let mut offline = checked.report;
        // The end-of-trace warning (x is never freed) is the offline run's only extra.
        assert_eq!(offline.summary.warnings, 1);
        offline.warnings.clear();
        offline.summary.warnings = 0;
        assert_eq!(folded, offline);
        drop(san);
        let said = report.text();
        assert!(said.contains("warning[leak]"), "{said}");
        assert!(
            said.ends_with(
                "SUMMARY: 2 races (1 read-after-write, 1 write-after-read; 9 occurrences), 1 warning in 13 records, 2 streams, 1 buffer\nreproduce: streamsan check t.jsonl\n"
            ),
            "{said}"
        );
    }

    #[test]
    fn json_format_prints_one_report_at_the_end() {
        let report = Shared::default();
        let options = Options {
            format: Format::Json,
            ..Options::default()
        };
        let san = Sanitizer::with_outputs(options, None, Box::new(report.clone())).unwrap();
        racy_rounds(&san, 2);
        assert_eq!(report.text(), "");
        drop(san);
        let json: serde_json::Value = serde_json::from_str(&report.text()).unwrap();
        assert_eq!(json["version"], 1);
        assert_eq!(json["races"].as_array().unwrap().len(), 2);
        assert_eq!(json["races"][0]["occurrences"], 2);
        assert_eq!(json["summary"]["records"], 7);
    }

    #[test]
    fn access_lists_are_reused_in_place() {
        let (san, _, _) = with_trace(true);
        let mut call = san.begin(None);
        let mut list = call.access_list();
        list.push(1, None, Some("a"));
        list.push(2, Some(ByteRange { off: 4, len: 4 }), None);
        list.push(3, None, Some("c"));
        let first = list.done();
        call.st.recycle(Op::HostAccess {
            reads: first,
            writes: vec![],
        });
        let mut list = call.access_list();
        list.push(4, None, Some("d"));
        list.push(5, None, Some("e"));
        assert_eq!(
            list.done(),
            [Access::whole(4).arg("d"), Access::whole(5).arg("e")]
        );
    }

    #[test]
    fn call_sites_are_formatted_once_and_threads_numbered_per_sanitizer() {
        let (san, _, _) = with_trace(false);
        let other = recording();
        for _ in 0..3 {
            san.record_op(Op::DeviceSync { device: 0 }, None);
            other.record_op(Op::DeviceSync { device: 0 }, None);
        }
        let records = captured(&san);
        assert!(records.windows(2).all(|w| w[0].at == w[1].at));
        assert_eq!(san.lock().at_cache.len(), 1);
        let san2 = san.clone();
        std::thread::spawn(move || {
            san2.record_op(Op::DeviceSync { device: 0 }, None);
            san2.record_op(Op::DeviceSync { device: 0 }, None);
        })
        .join()
        .unwrap();
        san.record_op(Op::DeviceSync { device: 0 }, None);
        let threads: Vec<u64> = captured(&san).iter().map(|r| r.thread).collect();
        assert_eq!(threads, [0, 0, 0, 1, 1, 0]);
        assert!(captured(&other).iter().all(|r| r.thread == 0));
    }
}
