//! Who applies the records to the engine: the calling thread, inside its call, or a checker
//! thread of the sanitizer's own.
//!
//! Why a thread: the engine's work is most of what a record costs, and a launching thread
//! that only numbers a record, encodes its trace line and queues it gives the program back
//! its launch sooner. The records go to the checker in batches, in the order they were
//! numbered, so the engine sees exactly what it would see inline. Findings come a little
//! later: once a batch fills; about [`LATENCY`] after the last record when the program makes
//! no more (the checker takes the batch still filling, under a lock of the batch's own that a
//! call holds only while it queues, so a call blocked in the driver does not hold it back); at
//! once whenever the program asks the sanitizer for findings, a report or counts (every such
//! query first waits for the checker); and at the process's exit, for every sanitizer still
//! alive. `halt_on_error` checks inline, so that the halt comes at the racing
//! call, as does `checker_thread=0`.
//!
//! The calling thread's cost per record is kept small in two more ways: a batch handed over
//! wakes no one while batches keep coming (the checker thread looks at its queue every
//! [`POLL`] then), and the batch slots and access lists it writes again, which the checker
//! thread read last, are asked for ahead with `PREFETCHW` ([`crate::cuda::prefetch`]).

use std::io::Write;
use std::mem::ManuallyDrop;
use std::panic::Location;
use std::sync::mpsc::{
    Receiver, RecvTimeoutError, SyncSender, TryRecvError, TrySendError, sync_channel,
};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, TryLockError};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::cuda::forked::Born;
use crate::cuda::options::{Options, ReportFormat};
use crate::cuda::prefetch;
use crate::cuda::reporting::{self, Findings};
use crate::cuda::step::Label;
use crate::engine::{Engine, Finding};
use crate::report::{Api, RenderOptions, Report, render_json};
use crate::suppress::{Filters, Tally};
use crate::trace::record::{Access, Op, Record, ThreadId};

use super::Sink;
use super::state::keep_lists;
use super::texts::Texts;

/// Records per batch handed to the checker thread: large enough that the hand-over (a wake-up
/// of the other thread, a system call, where the checker sleeps: see [`POLL`]) is a small part
/// of a record's cost.
const BATCH: usize = 1024;
/// Batches queued for the checker before a caller waits for it: a bound on memory.
const QUEUED: usize = 4;
/// The longest a record waits in a batch still filling while the checker is idle.
pub(super) const LATENCY: Duration = Duration::from_millis(20);
/// While batches keep coming (one within [`LATENCY`]), the checker thread looks at its queue
/// this often instead of sleeping in it: a batch handed over then wakes no one, and the
/// calling thread makes no system call for it. Waking the sleeping thread took about 30 µs
/// of the calling thread's time per batch in a VM (`futex` and what the hypervisor does for
/// it), 0.1 µs or more per launch with cudarc's tracking on.
const POLL: Duration = Duration::from_micros(500);

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
    /// The sanitizer's notes go to standard error, not to the report: a JSON report written
    /// to a file must stay one JSON document.
    notes_to_stderr: bool,
    /// Written around `io::stderr()`'s lock (see `RawStderr`), when a checker thread may print.
    raw_stderr: bool,
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
            notes_to_stderr: options.format == ReportFormat::Json
                && options.report != crate::cuda::options::ReportTo::Stderr,
            raw_stderr: Checker::threaded(options),
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
            self.note(&format!(
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
            if self.notes_to_stderr {
                // The report file holds one JSON document.
                self.note(&closing);
            } else {
                text.push_str(&closing);
            }
        }
        text
    }

    /// A note of the sanitizer's (not a finding): with the report, or on standard error when
    /// the report is a JSON file.
    pub(super) fn note(&mut self, text: &str) {
        if !self.notes_to_stderr {
            self.say(text);
        } else if self.raw_stderr {
            let _ = super::stderr_sink(true).write_all(text.as_bytes());
        } else {
            eprint!("{text}");
        }
    }

    pub(super) fn say(&mut self, text: &str) {
        if !text.is_empty() {
            let _ = self.report.write_all(text.as_bytes());
            let _ = self.report.flush();
        }
    }
}

/// A record numbered and not yet checked, with its texts unwritten: the checker thread writes
/// them where the engine reads them, so the calling thread does not.
struct Queued {
    line: u64,
    thread: ThreadId,
    at: Option<&'static Location<'static>>,
    name: Label,
    op: Op,
}

/// How many records ahead of the one being queued a batch slot is asked for to be written
/// ([`prefetch`]): about two launches with cudarc's tracking on (five records each).
const WRITE_AHEAD: usize = 8;

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
        // The slot written a few records from now, which the checker thread read last.
        if let Some(ahead) = self.queued.get(self.len + WRITE_AHEAD) {
            prefetch::for_write(ahead, std::mem::size_of::<Queued>());
        }
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

/// What the calling threads and the checker thread share.
pub(crate) struct Shared {
    verdicts: Mutex<Verdicts>,
    /// The batch being filled, locked once per call and by the checker when idle: apart from
    /// the sanitizer's lock, which a call holds while it blocks in the driver.
    filling: Mutex<Filling>,
    /// Batches checked so far (`u64::MAX` once the checker has stopped), and its signal.
    checked: Mutex<u64>,
    progress: Condvar,
    /// Checked batches, for reuse.
    spare: Mutex<Vec<Batch>>,
    /// The checker thread, woken where a caller waits for it rather than [`POLL`] later.
    thread: OnceLock<Thread>,
    /// The process the checker thread runs in: a child made by `fork` has none.
    born: Born,
}

/// The batch being filled, and the way to the checker thread.
pub(crate) struct Filling {
    batch: Batch,
    /// Batches handed to the checker so far.
    handed: u64,
    /// `None` before the thread starts and once the sanitizer is ending.
    to_checker: Option<SyncSender<Batch>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while recording or checking leaves the state usable: records are applied whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// True in a child made by `fork`, where the checker thread does not exist: nothing can be
    /// checked there, and nothing may wait for it.
    pub(super) fn forked(&self) -> bool {
        self.born.forked()
    }

    /// The filling batch, locked.
    pub(super) fn filling(&self) -> MutexGuard<'_, Filling> {
        lock(&self.filling)
    }

    /// Takes the filling batch out for the checker, counted as handed over, and starts a new
    /// one from the spare batches.
    fn take(&self, f: &mut Filling) -> Batch {
        let next = lock(&self.spare).pop().unwrap_or_default();
        f.handed += 1;
        std::mem::replace(&mut f.batch, next)
    }

    /// Hands the filling batch to the checker (waiting while [`QUEUED`] batches are ahead of
    /// it) and starts a new one.
    fn hand_over(&self, f: &mut Filling) {
        if f.batch.len == 0 {
            return;
        }
        if self.forked() {
            // Dropped: no one would check it, and the channel would fill up and block.
            f.batch.len = 0;
            return;
        }
        let batch = self.take(f);
        if let Some(tx) = &f.to_checker {
            // An error: the checker thread is gone (it panicked, and said so as it ended); the
            // batch can only be dropped.
            if let Err(TrySendError::Full(batch)) = tx.try_send(batch) {
                // The checker is behind: it is woken (it may be between two looks at its
                // queue) and this call waits for room.
                self.wake();
                let _ = tx.send(batch);
            }
        }
    }

    /// Wakes the checker thread if it sleeps between two looks at its queue.
    fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// Hands over the filling batch and waits until the checker has checked every batch, or
    /// until `deadline`; `false` when the deadline came first.
    fn settle(&self, deadline: Option<Instant>) -> bool {
        let target = {
            let mut f = self.filling();
            self.hand_over(&mut f);
            f.handed
        };
        if self.forked() {
            return true;
        }
        self.wake();
        let mut checked = lock(&self.checked);
        while *checked < target {
            checked = match deadline {
                None => self
                    .progress
                    .wait(checked)
                    .unwrap_or_else(|e| e.into_inner()),
                Some(d) => {
                    let Some(left) = d.checked_duration_since(Instant::now()) else {
                        return false;
                    };
                    self.progress
                        .wait_timeout(checked, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        true
    }

    /// At the process's exit: hands over what is queued and waits, until `deadline`, for it
    /// to be checked (and its races printed). Nothing in a child made by `fork`.
    pub(super) fn check_queued_at_exit(&self, deadline: Instant) {
        if !self.forked() {
            self.settle(Some(deadline));
        }
    }
}

/// Where a sanitizer's records are checked.
pub(crate) enum Checker {
    /// By the calling thread, within its call.
    Inline(Box<Verdicts>),
    /// By the checker thread.
    Thread(Arc<Shared>, Option<JoinHandle<()>>),
}

impl Checker {
    /// True when `options` ask for a checker thread: checking, without `halt_on_error`, unless
    /// `checker_thread=0`.
    pub(super) fn threaded(options: &Options) -> bool {
        options.check && options.checker_thread && !options.halt_on_error
    }

    /// The checker `options` ask for, its thread not started yet ([`Checker::start`]).
    pub(super) fn new(options: &Options, verdicts: Verdicts) -> Checker {
        if !Checker::threaded(options) {
            return Checker::Inline(Box::new(verdicts));
        }
        let shared = Arc::new(Shared {
            verdicts: Mutex::new(verdicts),
            filling: Mutex::new(Filling {
                batch: Batch::default(),
                handed: 0,
                to_checker: None,
            }),
            checked: Mutex::new(0),
            progress: Condvar::new(),
            spare: Mutex::new(Vec::new()),
            thread: OnceLock::new(),
            born: Born::now(),
        });
        Checker::Thread(shared, None)
    }

    /// Starts the checker thread (a `Thread` checker only); returns what the calls and the
    /// process's exit share with it.
    pub(super) fn start(&mut self, options: &Options) -> Option<Arc<Shared>> {
        let Checker::Thread(shared, handle) = self else {
            return None;
        };
        let (tx, rx) = sync_channel(QUEUED);
        let (for_thread, options) = (shared.clone(), options.clone());
        let spawned = std::thread::Builder::new()
            .name("streamsan-checker".into())
            .spawn(move || run(&for_thread, &rx, &options));
        match spawned {
            Ok(h) => {
                let _ = shared.thread.set(h.thread().clone());
                shared.filling().to_checker = Some(tx);
                *handle = Some(h);
                Some(shared.clone())
            }
            Err(_) => {
                // No thread to be had: check inline.
                let verdicts = std::mem::replace(&mut *lock(&shared.verdicts), dead());
                *self = Checker::Inline(Box::new(verdicts));
                None
            }
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
            Checker::Thread(..) => unreachable!("a checker thread's records are queued"),
        }
    }

    /// Queues a record (line, thread, call site) for the checker thread, into `filling` (the
    /// call's, locked once for all its records) or the filling batch locked now; the access
    /// lists of the earlier record whose place it takes go to `pool`.
    #[inline]
    pub(super) fn queue(
        &mut self,
        filling: Option<&mut Filling>,
        numbered: (u64, ThreadId, Option<&'static Location<'static>>),
        name: Label,
        op: Op,
        pool: &mut Vec<Vec<Access>>,
    ) {
        let Checker::Thread(shared, _) = self else {
            unreachable!("an inline checker checks within the call");
        };
        let mut locked;
        let f = match filling {
            Some(f) => f,
            None => {
                locked = shared.filling();
                &mut *locked
            }
        };
        f.batch.push(numbered, name, op, pool);
        if f.batch.len == BATCH {
            shared.hand_over(f);
        }
    }

    /// The verdicts as they stand, without waiting for records still queued.
    pub(super) fn verdicts(&mut self) -> VerdictsRef<'_> {
        match self {
            Checker::Inline(v) => VerdictsRef::Inline(v),
            Checker::Thread(shared, _) => VerdictsRef::Locked(lock(&shared.verdicts)),
        }
    }

    /// The verdicts once every record made so far is checked.
    pub(super) fn settled(&mut self) -> VerdictsRef<'_> {
        if let Checker::Thread(shared, _) = self {
            shared.settle(None);
        }
        self.verdicts()
    }

    /// Checks what is queued and stops the checker thread (the sanitizer is ending).
    pub(super) fn stop(&mut self) {
        let Checker::Thread(shared, handle) = self else {
            return;
        };
        if shared.forked() {
            // The thread is the parent's; this process has none to wait for or join.
            if let Some(h) = handle.take() {
                std::mem::forget(h);
            }
            return;
        }
        shared.settle(None);
        shared.filling().to_checker = None;
        // It finds its queue closed at its next look.
        shared.wake();
        if let Some(h) = handle.take() {
            // A panic of the thread was said by the thread itself as it ended (`Stopped`).
            let _ = h.join();
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
    let off = Options {
        check: false,
        ..Options::default()
    };
    Verdicts::new(&off, Box::new(std::io::sink()), None, None)
}

/// Marks the checker stopped when its thread ends, however it ends, so that no caller waits
/// for it forever; a panic (a bug of the engine's) stops checking, and says so, so that the
/// summary does not look like a clean run.
struct Stopped<'a>(&'a Shared);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        let panicked = std::thread::panicking() && {
            let mut v = lock(&self.0.verdicts);
            std::mem::replace(&mut v.checking, false)
        };
        // Waiters first: printing may wait (a full pipe), and none of them should.
        *lock(&self.0.checked) = u64::MAX;
        self.0.progress.notify_all();
        if panicked {
            lock(&self.0.verdicts).note(
                "streamsan: internal error, the checker thread stopped (a panic); online \
                 checking stops here, what follows is not checked (the trace goes on)\n",
            );
        }
    }
}

/// The checker thread: checks batches in the order they were handed over. While they keep
/// coming it looks at its queue every [`POLL`]; once none came for [`LATENCY`], it takes the
/// batch still filling and sleeps in the queue (an idle program has no thread polling every
/// [`POLL`]), woken by the next batch, or after [`LATENCY`] to take the filling batch again.
fn run(shared: &Shared, rx: &Receiver<Batch>, options: &Options) {
    let _stopped = Stopped(shared);
    let mut maker = Maker {
        texts: Texts::default(),
        rec: ManuallyDrop::new(Record::default()),
    };
    let mut last_batch = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(batch) => {
                maker.check_batch(shared, options, batch);
                last_batch = Instant::now();
                continue;
            }
            Err(TryRecvError::Disconnected) => return,
            Err(TryRecvError::Empty) => {}
        }
        if last_batch.elapsed() < LATENCY {
            std::thread::park_timeout(POLL);
            continue;
        }
        for batch in take_filling(shared, rx) {
            maker.check_batch(shared, options, batch);
        }
        match rx.recv_timeout(LATENCY) {
            Ok(batch) => {
                maker.check_batch(shared, options, batch);
                last_batch = Instant::now();
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// The batches handed over since the last receive and then the batch still filling, taken
/// unless a call is queueing records right now.
fn take_filling(shared: &Shared, rx: &Receiver<Batch>) -> Vec<Batch> {
    let mut batches = Vec::new();
    let mut f = match shared.filling.try_lock() {
        Ok(f) => f,
        // A panic while queueing leaves the batch usable (records are queued whole).
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        // A call is queueing; the next idle turn takes what it leaves.
        Err(TryLockError::WouldBlock) => return batches,
    };
    // While the lock is held nothing more is handed over: what is queued came before the
    // filling batch.
    batches.extend(rx.try_iter());
    if f.batch.len > 0 && f.to_checker.is_some() {
        batches.push(shared.take(&mut f));
    }
    batches
}

/// The checker thread's record, made from each queued one: whole where the engine reads its
/// texts ([`Engine::reads_texts`]), else without them.
///
/// Its op is a bitwise copy of the queued op, borrowed for one [`Verdicts::check`] and never
/// dropped: the checker only reads the batch, so it never dirties the queued records' cache
/// lines (the calling thread's next writes to them need only the checker's copies dropped,
/// which `Batch::push` asks for ahead, [`prefetch`]), and the access lists go back untouched.
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
            let queued = &batch.queued[..batch.len];
            for (i, q) in queued.iter().enumerate() {
                if v.checking {
                    v.engine.prefetch(queued, i, |q| Some(&q.op));
                }
                let rec = &mut *self.rec;
                if Engine::reads_texts(q.op.kind()) {
                    self.texts.fill(rec, q.line, q.thread, &q.name, q.at);
                } else {
                    self.texts.fill_bare(rec, q.line, q.thread);
                }
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
