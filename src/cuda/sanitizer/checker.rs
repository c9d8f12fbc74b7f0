//! Who applies the records to the engine: the calling thread, inside its call, or a checker
//! thread of the sanitizer's own.
//!
//! Why a thread: the engine's work is most of what a record costs, and a launching thread
//! that only numbers a record, encodes its trace line and queues it gives the program back
//! its launch sooner. The records go to the checker in batches, in the order they were
//! numbered, so the engine sees exactly what it would see inline. Findings come a little
//! later: once a batch fills; when a call is about to block in the driver (a synchronization,
//! a blocking copy: the batch is handed over first); at most [`LATENCY`] after a call when the
//! program makes no more (the checker takes a batch still filling when it has nothing else to
//! do); at once whenever the program asks the sanitizer for findings, a report or counts
//! (every such query first waits for the checker); and at the process's exit, for every
//! sanitizer still alive. `halt_on_error` checks inline, so that the halt comes at the racing
//! call, as does `checker_thread=0`.

use std::mem::ManuallyDrop;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cuda::options::{Options, ReportFormat};
use crate::cuda::reporting::{self, Findings};
use crate::cuda::step::Label;
use crate::engine::{Engine, Finding};
use crate::report::{Api, RenderOptions, Report, render_json};
use crate::suppress::{Filters, Tally};
use crate::trace::record::{Access, Op, Record, ThreadId};

use super::state::keep_lists;
use super::texts::Texts;
use super::{Sink, State};

/// Records per batch handed to the checker thread: large enough that the hand-over (a wake-up
/// of the other thread, a system call) is a small part of a record's cost.
const BATCH: usize = 1024;
/// Batches queued for the checker before a caller waits for it: a bound on memory.
const QUEUED: usize = 4;
/// The longest a record waits in a batch still filling while the checker is idle.
pub(super) const LATENCY: Duration = Duration::from_millis(20);

/// What checking produces, and where it goes: the engine, the findings it made, their filters
/// and the report sink.
pub(crate) struct Verdicts {
    pub(super) engine: Engine,
    pub(super) findings: Findings,
    /// Suppressions and baseline, when the options name some.
    pub(super) filters: Option<Filters>,
    pub(super) report: Sink,
    /// The trace path as reports name it.
    pub(super) trace_name: Option<String>,
    /// Feeding the engine: `options.check`, until the engine rejects a record.
    pub(super) checking: bool,
    /// Findings of the record being applied, reused.
    new_findings: Vec<Finding>,
}

impl Verdicts {
    pub(super) fn new(
        options: &Options,
        report: Sink,
        filters: Option<Filters>,
        trace_name: Option<String>,
    ) -> Verdicts {
        Verdicts {
            engine: Engine::new(),
            findings: Findings::default(),
            filters,
            report,
            trace_name,
            checking: options.check,
            new_findings: Vec::new(),
        }
    }

    /// Applies one record; true when a race asks for a halt (`halt_on_error`).
    pub(super) fn check(&mut self, options: &Options, rec: &Record) -> bool {
        if !self.checking {
            return false;
        }
        let mut found = std::mem::take(&mut self.new_findings);
        if let Err(e) = self.engine.apply(rec, &mut |f| found.push(f)) {
            self.checking = false;
            self.say(&format!(
                "streamsan: internal error, the engine rejected a record: {e}; online \
                 checking stops here (the trace goes on)\n"
            ));
        }
        let mut halt = false;
        for f in found.drain(..) {
            halt |= self.found(options, f);
        }
        self.new_findings = found;
        halt
    }

    /// Keeps a finding and prints it as it is found (text); true for a race that halts. A
    /// finding the suppressions or the baseline take out is only counted.
    fn found(&mut self, options: &Options, finding: Finding) -> bool {
        let removed = self.filters.as_ref().is_some_and(|f| f.removes(&finding));
        let race = matches!(finding, Finding::Race(_)) && !removed;
        if let Some(text) =
            self.findings
                .add(finding, options.format == ReportFormat::Text, removed)
        {
            self.say(&text);
        }
        race && options.halt_on_error
    }

    /// The end of the run: the engine's last findings (buffers still allocated).
    pub(super) fn finish(&mut self, options: &Options) {
        if self.checking {
            let mut found = Vec::new();
            self.engine.finish(&mut |f| found.push(f));
            for f in found {
                self.found(options, f);
            }
        }
    }

    /// The folded report so far with the filters applied, and what they matched (`None`
    /// without filters, when the report is left as it is).
    pub(super) fn filtered(&mut self) -> (Report, Option<Tally>) {
        let report = self.findings.report(self.engine.stats());
        Filters::apply_optional(self.filters.as_ref(), report)
    }

    /// The summary (text) or the whole report (JSON) the sanitizer prints when it ends.
    pub(super) fn summary(&mut self, options: &Options) -> String {
        let (report, filtered) = self.filtered();
        let mut text = match options.format {
            ReportFormat::Text => reporting::summary(&report, self.trace_name.as_deref()),
            ReportFormat::Json => render_json(
                &report,
                &RenderOptions {
                    source: self.trace_name.clone(),
                    max_reports: None,
                    api: Api::Cuda,
                },
            ),
        };
        if let (Some(filters), Some(tally)) = (&self.filters, &filtered) {
            let closing = filters.closing(tally);
            if options.format == ReportFormat::Json
                && options.report != crate::cuda::options::ReportTo::Stderr
            {
                // The report file holds one JSON document; notes go to stderr.
                eprint!("{closing}");
            } else {
                text.push_str(&closing);
            }
        }
        text
    }

    pub(super) fn say(&mut self, text: &str) {
        if !text.is_empty() {
            let _ = self.report.write_all(text.as_bytes());
            let _ = self.report.flush();
        }
    }
}

/// A record numbered and not yet checked, with its texts unwritten: the checker thread writes
/// them, so the calling thread does not.
struct Queued {
    line: u64,
    thread: ThreadId,
    at: Option<&'static Location<'static>>,
    name: Label,
    op: Op,
}

/// Records numbered and not yet checked, in order.
#[derive(Default)]
pub(super) struct Batch {
    queued: Vec<Queued>,
    /// Records in use; those after them are kept for their ops' access lists.
    len: usize,
}

impl Batch {
    /// Adds a record, written in place over an earlier one, whose access lists go to `pool`.
    #[inline]
    fn push(
        &mut self,
        (line, thread, at): (u64, ThreadId, Option<&'static Location<'static>>),
        name: Label,
        op: Op,
        pool: &mut Vec<Vec<Access>>,
    ) {
        match self.queued.get_mut(self.len) {
            Some(slot) => {
                keep_lists(&mut slot.op, pool);
                slot.op = op;
                slot.name = name;
                slot.line = line;
                slot.thread = thread;
                slot.at = at;
            }
            None => self.queued.push(Queued {
                line,
                thread,
                at,
                name,
                op,
            }),
        }
        self.len += 1;
    }
}

/// A record with nothing allocated.
pub(super) fn blank() -> Record {
    Record {
        line: 0,
        thread: 0,
        at: None,
        name: None,
        op: Op::DeviceSync { device: 0 },
    }
}

/// What the calling threads and the checker thread share.
pub(super) struct Shared {
    verdicts: Mutex<Verdicts>,
    /// Batches checked so far (`u64::MAX` once the checker has stopped), and its signal.
    checked: Mutex<u64>,
    progress: Condvar,
    /// Batches handed to the checker so far (written under the sanitizer's lock; read without
    /// it at the process's exit).
    handed: AtomicU64,
    /// Checked batches, for reuse.
    spare: Mutex<Vec<Batch>>,
}

impl Shared {
    /// Waits until the checker has checked `target` batches, or until `deadline`.
    fn wait_checked(&self, target: u64, deadline: Option<Instant>) {
        let mut checked = lock(&self.checked);
        while *checked < target {
            checked = match deadline {
                None => self
                    .progress
                    .wait(checked)
                    .unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let Some(left) = d.checked_duration_since(Instant::now()) else {
                        return;
                    };
                    self.progress
                        .wait_timeout(checked, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }

    /// At the process's exit, when a call holds the sanitizer's lock (blocked in the driver):
    /// waits, until `deadline`, for what was handed over.
    pub(super) fn wait_handed(&self, deadline: Instant) {
        self.wait_checked(self.handed.load(Ordering::Acquire), Some(deadline));
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while checking leaves the state usable: records are applied whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The calling side of a checker thread: the batch being filled and the way to the thread.
pub(super) struct Queue {
    shared: Arc<Shared>,
    /// `None` once the sanitizer is ending.
    to_checker: Option<SyncSender<Batch>>,
    filling: Batch,
    /// Batches handed to the checker so far.
    handed: u64,
    thread: Option<JoinHandle<()>>,
    /// The process the checker thread runs in: a child made by `fork` has none.
    pid: u32,
}

/// Where a sanitizer's records are checked.
pub(crate) enum Checker {
    /// By the calling thread, within its call.
    Inline(Box<Verdicts>),
    /// By the checker thread.
    Thread(Queue),
}

impl Checker {
    /// The checker `options` ask for: a thread when checking without `halt_on_error`, unless
    /// `checker_thread=0`.
    pub(super) fn new(options: &Options, verdicts: Verdicts) -> Checker {
        if options.check && options.checker_thread && !options.halt_on_error {
            let shared = Arc::new(Shared {
                verdicts: Mutex::new(verdicts),
                checked: Mutex::new(0),
                progress: Condvar::new(),
                handed: AtomicU64::new(0),
                spare: Mutex::new(Vec::new()),
            });
            Checker::Thread(Queue {
                shared,
                to_checker: None,
                filling: Batch::default(),
                handed: 0,
                thread: None,
                pid: std::process::id(),
            })
        } else {
            Checker::Inline(Box::new(verdicts))
        }
    }

    /// Starts the checker thread (a `Thread` checker only), which takes a filling batch from
    /// `state` when it has been idle for [`LATENCY`]. Returns what the process's exit needs to
    /// wait for it (see [`Shared::wait_handed`]).
    pub(super) fn start(state: &Arc<Mutex<State>>, options: &Options) -> Option<Arc<Shared>> {
        let mut st = lock(state);
        let Checker::Thread(q) = &mut st.checker else {
            return None;
        };
        let (tx, rx) = sync_channel(QUEUED);
        let (shared, weak, options) = (q.shared.clone(), Arc::downgrade(state), options.clone());
        let spawned = std::thread::Builder::new()
            .name("streamsan-checker".into())
            .spawn(move || run(&shared, &rx, &weak, &options));
        match spawned {
            Ok(handle) => {
                q.to_checker = Some(tx);
                q.thread = Some(handle);
                Some(q.shared.clone())
            }
            Err(_) => {
                // No thread to be had: check inline.
                let verdicts = std::mem::replace(&mut *lock(&q.shared.verdicts), dead());
                st.checker = Checker::Inline(Box::new(verdicts));
                None
            }
        }
    }

    /// A call is about to block in the driver (a synchronization, a blocking copy): what
    /// earlier calls recorded goes to the checker now, not after the call (which holds the
    /// lock the checker would take it under, and may never return).
    pub(super) fn before_blocking(&mut self) {
        if let Checker::Thread(q) = self {
            q.hand_over();
        }
    }

    /// True when records are checked within the call.
    pub(super) fn is_inline(&self) -> bool {
        matches!(self, Checker::Inline(_))
    }

    /// Applies `rec` (inline); true when a race asks for a halt.
    pub(super) fn check(&mut self, options: &Options, rec: &Record) -> bool {
        match self {
            Checker::Inline(v) => v.check(options, rec),
            Checker::Thread(_) => unreachable!("a checker thread's records are queued"),
        }
    }

    /// Queues a record (line, thread, call site) for the checker thread; the access lists of
    /// the earlier record whose place it takes go to `pool`.
    #[inline]
    pub(super) fn queue(
        &mut self,
        numbered: (u64, ThreadId, Option<&'static Location<'static>>),
        name: Label,
        op: Op,
        pool: &mut Vec<Vec<Access>>,
    ) {
        let Checker::Thread(q) = self else {
            unreachable!("an inline checker checks within the call");
        };
        q.filling.push(numbered, name, op, pool);
        if q.filling.len == BATCH {
            q.hand_over();
        }
    }

    /// The verdicts as they stand, without waiting for records still queued.
    pub(super) fn verdicts(&mut self) -> VerdictsRef<'_> {
        match self {
            Checker::Inline(v) => VerdictsRef::Inline(v),
            Checker::Thread(q) => VerdictsRef::Locked(lock(&q.shared.verdicts)),
        }
    }

    /// The verdicts once every record made so far is checked.
    pub(super) fn settled(&mut self) -> VerdictsRef<'_> {
        if let Checker::Thread(q) = self {
            q.settle(None);
        }
        self.verdicts()
    }

    /// Hands over what is queued and waits, until `deadline`, for it to be checked (the
    /// process is exiting: its races are printed).
    pub(super) fn settle_until(&mut self, deadline: Instant) {
        if let Checker::Thread(q) = self {
            q.settle(Some(deadline));
        }
    }

    /// Checks what is queued and stops the checker thread (the sanitizer is ending).
    pub(super) fn stop(&mut self) {
        if let Checker::Thread(q) = self {
            q.settle(None);
            q.to_checker = None;
            if let Some(handle) = q.thread.take() {
                // A panic of the thread was said by the thread itself as it ended (`Stopped`).
                let _ = handle.join();
            }
        }
    }
}

/// [`Verdicts`] borrowed from either kind of checker.
pub(super) enum VerdictsRef<'a> {
    Inline(&'a mut Verdicts),
    Locked(MutexGuard<'a, Verdicts>),
}

impl std::ops::Deref for VerdictsRef<'_> {
    type Target = Verdicts;
    fn deref(&self) -> &Verdicts {
        match self {
            VerdictsRef::Inline(v) => v,
            VerdictsRef::Locked(v) => v,
        }
    }
}

impl std::ops::DerefMut for VerdictsRef<'_> {
    fn deref_mut(&mut self) -> &mut Verdicts {
        match self {
            VerdictsRef::Inline(v) => v,
            VerdictsRef::Locked(v) => v,
        }
    }
}

/// Verdicts left behind where a checker moved out: no engine work, no output.
fn dead() -> Verdicts {
    Verdicts {
        engine: Engine::new(),
        findings: Findings::default(),
        filters: None,
        report: Box::new(std::io::sink()),
        trace_name: None,
        checking: false,
        new_findings: Vec::new(),
    }
}

impl Queue {
    /// True in a child made by `fork`, where the checker thread does not exist: nothing can
    /// be checked there, and nothing must wait for it.
    fn forked(&self) -> bool {
        std::process::id() != self.pid
    }

    /// Hands the filling batch to the checker (waiting while [`QUEUED`] batches are ahead of
    /// it) and starts a new one.
    fn hand_over(&mut self) {
        if self.filling.len == 0 {
            return;
        }
        if self.forked() {
            // Dropped: no one would check it, and the channel would fill up and block.
            self.filling.len = 0;
            return;
        }
        let next = lock(&self.shared.spare).pop().unwrap_or_default();
        let batch = std::mem::replace(&mut self.filling, next);
        self.handed += 1;
        self.shared.handed.store(self.handed, Ordering::Release);
        if let Some(tx) = &self.to_checker {
            // An error: the checker thread is gone (it panicked, and said so as it ended); the
            // batch can only be dropped.
            let _ = tx.send(batch);
        }
    }

    /// Hands over the filling batch and waits until the checker has checked every batch, or
    /// until `deadline`.
    fn settle(&mut self, deadline: Option<Instant>) {
        self.hand_over();
        if !self.forked() {
            self.shared.wait_checked(self.handed, deadline);
        }
    }
}

/// Marks the checker stopped when its thread ends, however it ends, so that no caller waits
/// for it forever; a panic (a bug of the engine's) stops checking, and says so, so that the
/// summary does not look like a clean run.
struct Stopped<'a>(&'a Shared);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut v = lock(&self.0.verdicts);
            if v.checking {
                v.checking = false;
                v.say(
                    "streamsan: internal error, the checker thread stopped (a panic); online \
                     checking stops here, what follows is not checked (the trace goes on)\n",
                );
            }
        }
        *lock(&self.0.checked) = u64::MAX;
        self.0.progress.notify_all();
    }
}

/// The checker thread: checks batches in the order they were handed over; when idle for
/// [`LATENCY`], takes the batch still filling.
fn run(shared: &Shared, rx: &Receiver<Batch>, state: &Weak<Mutex<State>>, options: &Options) {
    let _stopped = Stopped(shared);
    let mut maker = Maker {
        texts: Texts::default(),
        rec: ManuallyDrop::new(blank()),
    };
    loop {
        match rx.recv_timeout(LATENCY) {
            Ok(batch) => maker.check_batch(shared, options, batch),
            Err(RecvTimeoutError::Timeout) => {
                for batch in take_filling(rx, state) {
                    maker.check_batch(shared, options, batch);
                }
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// The batches handed over since the last receive and then the batch still filling, taken
/// while no call is in progress (none is taken if one is).
fn take_filling(rx: &Receiver<Batch>, state: &Weak<Mutex<State>>) -> Vec<Batch> {
    let Some(state) = state.upgrade() else {
        return Vec::new();
    };
    let mut batches = Vec::new();
    let mut st = match state.try_lock() {
        Ok(st) => st,
        // A panic while recording leaves the state usable (records are made whole).
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        // A call in progress; it hands over what it makes, or the next idle turn takes it.
        Err(TryLockError::WouldBlock) => return batches,
    };
    // While the lock is held nothing more is handed over: what is queued came before the
    // filling batch.
    batches.extend(rx.try_iter());
    if let Checker::Thread(q) = &mut st.checker
        && q.filling.len > 0
        && q.to_checker.is_some()
    {
        let next = lock(&q.shared.spare).pop().unwrap_or_default();
        batches.push(std::mem::replace(&mut q.filling, next));
        q.handed += 1;
        q.shared.handed.store(q.handed, Ordering::Release);
    }
    batches
}

/// The checker thread's record, made whole from each queued one.
///
/// Its op is a bitwise copy of the queued op, borrowed for one [`Verdicts::check`] and never
/// dropped: the checker only reads the batch, so the cache lines of the queued records stay
/// clean in the calling thread's cache, and the access lists go back to it untouched.
struct Maker {
    texts: Texts,
    rec: ManuallyDrop<Record>,
}

impl Drop for Maker {
    fn drop(&mut self) {
        // SAFETY: `rec.op` is a bitwise copy of an op the batch owns (or the blank op), which
        // must not be dropped here: it is overwritten without dropping it, then the record
        // (its own strings) is dropped once.
        unsafe {
            std::ptr::write(&mut self.rec.op, Op::DeviceSync { device: 0 });
            ManuallyDrop::drop(&mut self.rec);
        }
    }
}

impl Maker {
    fn check_batch(&mut self, shared: &Shared, options: &Options, mut batch: Batch) {
        {
            let mut v = lock(&shared.verdicts);
            for q in &batch.queued[..batch.len] {
                let rec = &mut *self.rec;
                self.texts.fill(rec, q.line, q.thread, &q.name, q.at);
                // SAFETY: a bitwise copy of `q.op`, which lives (unchanged: `q` is borrowed
                // shared) until after the copy's last use, the shared borrow `check` takes;
                // the copy is never dropped (`Maker` holds it in a `ManuallyDrop` and its
                // `Drop` overwrites it), so the lists are owned and freed by the batch alone.
                unsafe { std::ptr::write(&mut rec.op, std::ptr::read(&q.op)) };
                // No halt here: halt_on_error checks inline.
                v.check(options, rec);
            }
        }
        batch.len = 0;
        let mut spare = lock(&shared.spare);
        // More than ever exist at once (filling, queued, being checked, one taken while
        // idle): batches are dropped here only if that bound is wrong, not in the usual run,
        // so their memory is freed by the thread that allocated it.
        if spare.len() < QUEUED + 4 {
            spare.push(batch);
        }
        drop(spare);
        *lock(&shared.checked) += 1;
        shared.progress.notify_all();
    }
}
