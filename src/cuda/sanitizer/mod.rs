//! The sanitizer handle: one engine, one record counter, one optional trace, the findings so
//! far. Wrapped contexts, streams and buffers each hold an `Arc` to theirs; there is no global
//! instance, so several can coexist (one per context, or one shared by contexts).
//!
//! Every sanitized call runs as a [`Call`] (`call.rs`): take the lock, make the real cudarc call, then turn
//! the call's [`Step`]s into records — numbered, encoded for the trace, and queued for the
//! checker thread or applied to the engine within the call (`checker.rs`) — and hand the
//! call's trace lines to the trace at once (a copy into the mapped trace file, or one `write`:
//! see `trace_file.rs`), all before the lock is released. So the order of the records is the
//! order in which the calls were enqueued, whatever the number of host threads, and a crash
//! loses at most the call in progress (from the trace; findings not yet checked are not
//! printed then).
//!
//! The recording path allocates nothing in the steady state: the record being made, its strings
//! and its access lists, the step list and the trace line buffer are reused from call to call,
//! and the `file:line:col` of each call site is formatted once.
//!
//! `state.rs` is what the lock guards and how a step becomes a record (numbering, trace
//! line); `checker.rs` applies the records to the engine, on a checker thread unless
//! `halt_on_error` (or `checker_thread=0`) asks for it within the call.

mod call;
mod checker;
mod id_set;
mod state;
#[cfg(test)]
pub(crate) mod tests;
mod texts;

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Write};
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rustc_hash::FxHashMap;
use serde_json::{Map, json};

use super::error::Error;
use super::forked::Born;
use super::options::{Options, ReportTo};
use super::reporting;
use super::step::{Label, Step};
use super::threads::ThreadIds;
use super::trace_file::TraceSink;
use crate::engine::{Finding, Race, Stats, Warning};
use crate::report::{RenderOptions, Report, render_json, render_text};
use crate::suppress::Filters;
use crate::trace::TraceWriter;
use crate::trace::record::{Op, ThreadId};

pub(crate) use call::{AccessList, Call, StreamSlot};
use checker::{Checker, Verdicts};
pub(crate) use state::State;
use state::TraceOut;

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
    /// Not dropped in a child made by `fork` (see `Drop`).
    state: std::mem::ManuallyDrop<Mutex<State>>,
    /// The process that made it.
    born: Born,
    /// What calls share with the checker thread: the filling batch, locked once per call
    /// (`None`: checking within calls).
    checker: Option<Arc<checker::Shared>>,
}

/// Sanitizers with a checker thread, for the process's exit: what they queued is checked,
/// and its races printed, even when the program exits without ending them
/// (`std::process::exit` while contexts are alive).
static THREADED: Mutex<Vec<std::sync::Weak<Sanitizer>>> = Mutex::new(Vec::new());

/// How long the process's exit waits for each checker thread.
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The exit hook of [`THREADED`]: one deadline for all of them.
extern "C" fn check_queued_at_exit() {
    let live: Vec<Arc<Sanitizer>> = match THREADED.try_lock() {
        Ok(list) => list.iter().filter_map(std::sync::Weak::upgrade).collect(),
        Err(_) => return,
    };
    let deadline = std::time::Instant::now() + EXIT_WAIT;
    for san in live {
        if let Some(shared) = &san.checker {
            shared.check_queued_at_exit(deadline);
        }
        // Not dropped here: a sanitizer whose last other handle went meanwhile would end
        // inside this hook. The process is ending; it is left as it is.
        std::mem::forget(san);
    }
}

/// Standard error written with `write(2)` on the file descriptor, not through `io::stderr()`:
/// the checker thread prints there, and a program thread that holds `io::stderr()`'s lock
/// while it waits for the checker (a query, the exit) would otherwise wait forever.
#[cfg(unix)]
struct RawStderr;

#[cfg(unix)]
impl Write for RawStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        unsafe extern "C" {
            fn write(fd: std::ffi::c_int, buf: *const u8, count: usize) -> isize;
        }
        // SAFETY: writes `buf`'s bytes to file descriptor 2; the result is checked.
        let n = unsafe { write(2, buf.as_ptr(), buf.len()) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Where `ReportTo::Stderr` reports go: around `io::stderr()`'s lock when a checker thread
/// prints them (a race block can then land between two pieces of a line the program prints
/// at the same moment), through it otherwise.
pub(super) fn stderr_sink(threaded: bool) -> Sink {
    #[cfg(unix)]
    if threaded {
        return Box::new(RawStderr);
    }
    let _ = threaded;
    Box::new(io::stderr())
}

impl std::fmt::Debug for Sanitizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sanitizer")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Sanitizer {
    /// A sanitizer writing its reports and trace where `options` say (files are created now;
    /// the trace's header is written now).
    ///
    /// The suppressions and baseline files the options name are read now; a malformed one is
    /// [`Error::Filter`] (file, line, what was expected).
    pub fn new(options: Options) -> Result<Arc<Sanitizer>, Error> {
        let filters = reporting::load_filters(&options)?;
        let trace = match &options.trace {
            Some(path) => {
                let named = |source| Error::Output {
                    what: "trace file",
                    path: path.clone(),
                    source,
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
            ReportTo::Stderr => stderr_sink(Checker::threaded(&options)),
            ReportTo::Path(path) => {
                Box::new(File::create(path).map_err(|source| Error::Output {
                    what: "report file",
                    path: path.clone(),
                    source,
                })?)
            }
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
    ) -> Result<Arc<Sanitizer>, Error> {
        let filters = reporting::load_filters(&options)?;
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
            pending: crate::trace::writer::LineBuf::new(),
        });
        let trace_name = options.trace.as_ref().map(|p| p.display().to_string());
        let verdicts = Verdicts::new(&options, report, filters, trace_name);
        let mut checker = Checker::new(&options, verdicts);
        let shared = checker.start(&options);
        let state = State {
            checker,
            next_line: 2,
            trace,
            threads: ThreadIds::default(),
            recorded: Default::default(),
            legacy: FxHashMap::default(),
            per_thread: FxHashMap::default(),
            next_stream: 1,
            next_event: 1,
            next_buf: 1,
            next_graph: 1,
            captures: FxHashMap::default(),
            warned_foreign: false,
            rec: crate::trace::Record::default(),
            texts: Default::default(),
            steps_pool: Vec::new(),
            access_pool: Vec::new(),
            #[cfg(test)]
            captured: Vec::new(),
        };
        let san = Arc::new(Sanitizer {
            options,
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            state: std::mem::ManuallyDrop::new(Mutex::new(state)),
            born: Born::now(),
            checker: shared,
        });
        if san.checker.is_some() {
            let mut list = THREADED.lock().unwrap_or_else(|e| e.into_inner());
            if list.is_empty() {
                static HOOKED: std::sync::Once = std::sync::Once::new();
                // SAFETY: registers a plain function, which only checks what is queued.
                HOOKED.call_once(|| unsafe {
                    super::builder::atexit(check_queued_at_exit);
                });
            }
            list.retain(|w| w.strong_count() > 0);
            list.push(Arc::downgrade(&san));
        }
        san
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
        self.lock().checker.settled().findings.kept().to_vec()
    }

    /// The races among [`Sanitizer::findings`].
    pub fn races(&self) -> Vec<Race> {
        self.lock()
            .checker
            .settled()
            .findings
            .kept()
            .iter()
            .filter_map(Finding::as_race)
            .cloned()
            .collect()
    }

    /// The warnings among [`Sanitizer::findings`].
    pub fn warnings(&self) -> Vec<Warning> {
        self.lock()
            .checker
            .settled()
            .findings
            .kept()
            .iter()
            .filter_map(Finding::as_warning)
            .cloned()
            .collect()
    }

    /// Forgets the findings so far (the engine's state is kept).
    pub fn clear_findings(&self) {
        self.lock().checker.settled().findings = Default::default();
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
        self.lock().checker.settled().filtered().0
    }

    /// The suppressions that matched no race or warning so far (none without suppressions).
    pub fn unused_suppressions(&self) -> Vec<crate::suppress::Suppression> {
        let mut st = self.lock();
        let mut v = st.checker.settled();
        let (_, filtered) = v.filtered();
        match (v.filters.as_ref().and_then(Filters::suppressions), filtered) {
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
        self.lock().checker.settled().engine.stats().clone()
    }

    /// Records `op` as a call made at the caller's line by the calling thread, through the same
    /// path every wrapper takes (lock, numbering, trace, engine). Not part of the API: for tests
    /// and benchmarks of that path without CUDA. A `launch` needs a `name`.
    #[doc(hidden)]
    #[track_caller]
    pub fn record_op(&self, op: Op, name: Option<&'static str>) {
        self.record_labeled(op, name.map_or(Label::None, Label::Static));
    }

    /// [`Sanitizer::record_op`] for a wait on or a record of cudarc's read (`write` false) or
    /// write event of buffer `buf`, named as the wrappers name it. Not part of the API: for the
    /// benchmark of event tracking's records without CUDA.
    #[doc(hidden)]
    #[track_caller]
    pub fn record_event_op(&self, op: Op, buf: crate::trace::record::BufId, write: bool) {
        self.record_labeled(
            op,
            if write {
                Label::WriteEvent(buf)
            } else {
                Label::ReadEvent(buf)
            },
        );
    }

    /// One call that records `op`, labeled `name`, at the line that called the public method
    /// (every method on the way is `#[track_caller]`).
    #[track_caller]
    fn record_labeled(&self, op: Op, name: Label) {
        let mut call = self.begin(Some(Location::caller()));
        call.push(Step::labeled(op, name));
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

    /// Starts a call made at `at`: takes the lock until the call (or its [`Call::emit`]) is
    /// dropped, after [`Call::finish`] or without it.
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

impl Drop for Sanitizer {
    fn drop(&mut self) {
        if self.born.forked() {
            // A child made by `fork`: the parent ends this sanitizer, prints its summary and
            // closes its trace (which the child shares: cutting it would bring the parent a
            // SIGBUS); the child leaves all of it alone, its state included (its locks may
            // have been held by a parent thread at the fork).
            return;
        }
        let options = self.options.clone();
        let mut st = self.lock();
        st.checker.stop();
        let records = st.next_line - 2;
        let mut v = st.checker.verdicts();
        v.finish(&options);
        let text = if !options.check {
            match &v.trace_name {
                Some(t) => format!(
                    "streamsan: {records} records written to {t}; check them with `streamsan check {t}`\n"
                ),
                None => String::new(),
            }
        } else {
            v.summary(&options)
        };
        drop(v);
        st.close_trace();
        st.say(&text);
        drop(st);
        // SAFETY: dropped once, here, and not used after (this is `drop`).
        unsafe { std::mem::ManuallyDrop::drop(&mut self.state) };
    }
}
