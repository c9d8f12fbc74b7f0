//! The Session's records, checked within the call or on a checker thread.
//!
//! Why a thread: the engine's work per record (about a microsecond for an operator's three
//! records) is most of what the native recorder still adds to an operator (issue 13's cost
//! target, docs/performance.md). With the thread, a record costs the program's thread a push
//! onto a queue; the thread applies the queue in order, in batches.
//!
//! What stays exact: every query (races, reports, `records`, `finish`) first applies what is
//! queued, on the asking thread if need be, so its answer is what checking each record at once
//! gives. A caching alloc over a live block is still refused at once (the recorder ends a stale
//! block on that error and retries): the queue keeps the live caching blocks with the engine's
//! own rule ([`LiveBlocks`]). Any other refusal can only come later; it is kept and handed to
//! the program by [`Core::late_errors`].
//!
//! The thread's life: it wakes when [`BATCH`] records wait, and every [`WAKE`] while records
//! come; idle for a [`WAKE`], it sleeps until the next record. `finish` ends it, and so does
//! [`Checker::pause`], which `fork.rs` calls before every `fork()`: a child must not inherit a
//! lock held by a thread it does not have. A session dropped unfinished still checks what it
//! had queued. Once the engine refuses a queued alloc or free, the queue's blocks may differ
//! from the engine's, and the session checks within each call from then on.
//!
//! Not threaded: with a trace file (a record is written when it is checked, and a trace must
//! hold every record up to a crash) and with `halt_on_error` (the racing call itself raises).

use std::collections::hash_map::Entry;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use rustc_hash::FxHashMap;
use streamsan::engine::{InputErrorKind, LiveBlocks};
use streamsan::live::{Applied, Live, LiveError};
use streamsan::trace::record::{Op, Pool, Record};

use crate::parts::Parts;

/// Records that wake the thread at once.
const BATCH: usize = 256;
/// While records come, the longest one waits before the thread takes it; idle this long, the
/// thread sleeps until a record comes.
const WAKE: Duration = Duration::from_millis(10);
/// Records queued beyond which the program's thread checks them itself (the engine fell
/// behind: memory stays bounded).
const MAX_QUEUED: usize = 1 << 16;
/// Refusal messages kept (all are counted).
const LATE_KEPT: usize = 64;

/// A record not taken: why, and the record's op for the message.
pub(crate) struct Refused {
    pub error: LiveError,
    pub op: Op,
}

/// The engine's side: the session and what it refused on the thread.
pub(crate) struct Checked {
    pub live: Live,
    late: Vec<String>,
    late_count: u64,
}

impl Checked {
    /// Applies `batch` in order; the records stay in it, to be dropped by the caller. A
    /// refused alloc or free sets `drifted`: the queue's blocks may no longer be the engine's.
    fn apply_queued(&mut self, batch: &mut [Record], drifted: &AtomicBool) {
        for rec in batch.iter_mut() {
            // A panic (an engine bug) must not end the thread and every later check with it;
            // it is told like a refusal, as a call checking it at once would raise it.
            let applied = catch_unwind(AssertUnwindSafe(|| self.live.apply(rec)));
            let text = match applied {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => refusal_text(&e, &rec.op),
                Err(_) => format!(
                    "streamsan: the engine panicked checking a record (a bug; record {:?})",
                    rec.op
                ),
            };
            if matches!(rec.op, Op::Alloc { .. } | Op::Free { .. }) {
                drifted.store(true, Ordering::Release);
            }
            self.late_count += 1;
            if self.late.len() < LATE_KEPT {
                self.late.push(text);
            }
        }
    }
}

/// The message of a refused record, as the Python methods raise it.
pub(crate) fn refusal_text(error: &LiveError, op: &Op) -> String {
    match error {
        LiveError::Input(e) => format!("streamsan: record not taken: {} (record {op:?})", e.kind),
        LiveError::Finished => error.to_string(),
    }
}

/// The program's side: records not yet applied.
#[derive(Default)]
struct Queue {
    records: Vec<Record>,
    /// Records the thread applied, dropped by the program's thread: their strings and lists
    /// were allocated there, and freeing them on the thread would leave the program's
    /// allocator cache empty (every allocation then goes to the shared arena).
    spent: Vec<Record>,
    /// The live caching blocks once the queued records are applied.
    blocks: LiveBlocks,
    /// Buffers allocated and not freed, of every pool (an alloc of one of them is refused by
    /// the engine, allocated again, so it must not enter `blocks`), with each caching block's
    /// device and start address, for its free. Fx-hashed: one lookup per alloc and free on the
    /// program's thread.
    live: FxHashMap<u64, Option<(u32, u64)>>,
    /// The thread sleeps until a record comes (it was idle for a [`WAKE`]).
    sleeping: bool,
    closing: bool,
    finished: bool,
}

impl Queue {
    /// Refuses a caching alloc over a live block, as the engine would; keeps the blocks.
    fn admit(&mut self, op: &Op) -> Result<(), InputErrorKind> {
        match *op {
            Op::Alloc {
                buf,
                bytes,
                device,
                addr,
                pool,
                ..
            } => {
                let Entry::Vacant(slot) = self.live.entry(buf) else {
                    return Ok(()); // the engine refuses it (allocated again): not a block
                };
                let block = match (pool, addr) {
                    // No bytes to overlap, or the engine says what is wrong: not a block.
                    (Pool::Caching, Some(addr)) => addr
                        .checked_add(bytes)
                        .filter(|_| bytes > 0)
                        .map(|end| (addr, end)),
                    _ => None,
                };
                if let Some((addr, end)) = block {
                    self.blocks.check(buf, device, addr, end)?;
                    self.blocks.insert(device, addr, end, buf);
                }
                slot.insert(block.map(|(addr, _)| (device, addr)));
            }
            Op::Free { buf, .. } => {
                if let Some(Some((device, addr))) = self.live.remove(&buf) {
                    self.blocks.remove(device, addr, buf);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// One session's engine, and its queue where records are checked on a thread.
pub(crate) struct Core {
    queue: Mutex<Queue>,
    /// The parts of records checked, for the next ones (taken alone, or after the others).
    parts: Mutex<Parts>,
    wake: Condvar,
    checked: Mutex<Checked>,
    /// Records go to the queue (the thread runs); else they are checked within the call.
    threaded: AtomicBool,
    /// The engine refused a queued alloc or free (see [`Checked::apply_queued`]).
    drifted: AtomicBool,
    /// Whether the session was asked to check on a thread, and still may (not after a drift,
    /// nor in a forked child).
    wanted: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock leaves the engine as it was between records.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Core {
    /// Applies what is queued and returns the engine: every query goes through here. Locks
    /// are always taken queue first, then the engine.
    pub fn checked(&self) -> MutexGuard<'_, Checked> {
        let mut queue = lock(&self.queue);
        let mut batch = std::mem::take(&mut queue.records);
        // Taken while the queue is held: whoever took earlier records applies them first.
        let mut checked = lock(&self.checked);
        drop(queue);
        checked.apply_queued(&mut batch, &self.drifted);
        checked
    }

    /// The parts of records checked, for new records to fill (see [`Parts`]).
    pub fn parts(&self) -> MutexGuard<'_, Parts> {
        lock(&self.parts)
    }

    /// Takes `rec`: applied now, or queued for the thread. `Ok(applied)` with `raced` only
    /// when it was checked now.
    pub fn take(&self, mut rec: Record) -> Result<Applied, Box<Refused>> {
        let mut queue = lock(&self.queue);
        if !self.threaded.load(Ordering::Acquire) {
            // Checked now, after anything still queued; the blocks stay known for a thread
            // started later (after a fork).
            let mut batch = std::mem::take(&mut queue.records);
            let mut checked = lock(&self.checked);
            checked.apply_queued(&mut batch, &self.drifted);
            let applied = checked.live.apply(&mut rec);
            if applied.is_ok() && self.wanted.load(Ordering::Acquire) {
                let _ = queue.admit(&rec.op);
            }
            drop(checked);
            drop(queue);
            let mut parts = self.parts();
            parts.keep_all(&mut batch);
            return match applied {
                Ok(applied) => {
                    parts.keep(rec);
                    Ok(applied)
                }
                Err(error) => Err(Box::new(Refused { error, op: rec.op })),
            };
        }
        if queue.finished {
            return Err(Box::new(Refused {
                error: LiveError::Finished,
                op: rec.op,
            }));
        }
        if let Err(kind) = queue.admit(&rec.op) {
            let error = LiveError::Input(streamsan::engine::InputError { line: 0, kind });
            return Err(Box::new(Refused { error, op: rec.op }));
        }
        queue.records.push(rec);
        let n = queue.records.len();
        if n == BATCH || (n == 1 && queue.sleeping) {
            queue.sleeping = false;
            self.wake.notify_one();
        } else if n >= MAX_QUEUED {
            drop(queue);
            drop(self.checked());
            return Ok(Applied::default());
        }
        // Here, not on the thread (see `spent`), and outside the lock.
        let mut spent = std::mem::take(&mut queue.spent);
        drop(queue);
        if !spent.is_empty() {
            self.parts().keep_all(&mut spent);
        }
        Ok(Applied::default())
    }

    /// Refusals of records checked on the thread since the last call: (count, the first
    /// messages).
    pub fn late_errors(&self) -> (u64, Vec<String>) {
        let mut checked = self.checked();
        let count = std::mem::take(&mut checked.late_count);
        (count, std::mem::take(&mut checked.late))
    }

    /// The thread's loop: applies the queue when [`BATCH`] records wait or a [`WAKE`] passed;
    /// returns once `closing` is set (the rest is applied by whoever set it).
    fn run(&self) {
        let mut spare: Vec<Record> = Vec::with_capacity(BATCH);
        let mut queue = lock(&self.queue);
        loop {
            if queue.closing {
                return;
            }
            if queue.records.len() < BATCH {
                if queue.records.is_empty() && queue.sleeping {
                    queue = self.wake.wait(queue).unwrap_or_else(|e| e.into_inner());
                    continue;
                }
                let (q, timeout) = self
                    .wake
                    .wait_timeout(queue, WAKE)
                    .unwrap_or_else(|e| e.into_inner());
                queue = q;
                if queue.closing {
                    return;
                }
                if queue.records.is_empty() {
                    // Idle for a WAKE: sleep until `take` wakes the thread.
                    queue.sleeping = timeout.timed_out();
                    continue;
                }
                if !timeout.timed_out() && queue.records.len() < BATCH {
                    continue; // woken early (spuriously): wait out the WAKE
                }
            }
            let mut batch = std::mem::replace(&mut queue.records, std::mem::take(&mut spare));
            let mut checked = lock(&self.checked);
            drop(queue);
            checked.apply_queued(&mut batch, &self.drifted);
            drop(checked);
            queue = lock(&self.queue);
            if queue.spent.is_empty() {
                spare = std::mem::replace(&mut queue.spent, batch);
            } else {
                queue.spent.append(&mut batch); // the program has not come by since
                spare = batch;
            }
            if spare.capacity() == 0 {
                spare.reserve(BATCH);
            }
        }
    }
}

/// A session's engine with its checker thread, if any.
pub(crate) struct Checker {
    pub core: Arc<Core>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The process whose thread it is: a forked child has no such thread to end.
    pid: u32,
}

impl Checker {
    /// `threaded`: check on a thread of its own (see the module docs for when not to). Where
    /// no thread can be started, records are checked within each call.
    pub fn new(live: Live, threaded: bool) -> Arc<Checker> {
        let core = Arc::new(Core {
            queue: Mutex::new(Queue::default()),
            parts: Mutex::new(Parts::default()),
            wake: Condvar::new(),
            checked: Mutex::new(Checked {
                live,
                late: Vec::new(),
                late_count: 0,
            }),
            threaded: AtomicBool::new(false),
            drifted: AtomicBool::new(false),
            wanted: AtomicBool::new(threaded),
        });
        let checker = Arc::new(Checker {
            core,
            thread: Mutex::new(None),
            pid: std::process::id(),
        });
        if threaded {
            crate::fork::register(&checker);
            let _ = checker.start();
        }
        checker
    }

    /// Whether records are checked on a thread now.
    pub fn threaded(&self) -> bool {
        self.core.threaded.load(Ordering::Acquire)
    }

    /// Takes a record (see [`Core::take`]). Once the engine refused a queued alloc or free,
    /// the queue's blocks may be wrong, so the session checks within each call from then on.
    pub fn take(&self, rec: Record) -> Result<Applied, Box<Refused>> {
        if self.core.drifted.load(Ordering::Acquire) && self.core.wanted.load(Ordering::Acquire) {
            self.core.wanted.store(false, Ordering::Release);
            self.pause();
        }
        self.core.take(rec)
    }

    fn start(&self) -> std::io::Result<()> {
        let mut thread = lock(&self.thread);
        if thread.is_some() || !self.core.wanted.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut queue = lock(&self.core.queue);
        if queue.finished {
            return Ok(());
        }
        queue.closing = false;
        queue.sleeping = false;
        let core = Arc::clone(&self.core);
        *thread = Some(
            std::thread::Builder::new()
                .name("streamsan-checker".into())
                .spawn(move || core.run())?,
        );
        self.core.threaded.store(true, Ordering::Release);
        Ok(())
    }

    /// Ends the thread (records are checked within each call from now on) and applies what
    /// it had queued; true when a thread ran. Before `fork()` (`fork.rs`): afterwards no
    /// thread holds a lock.
    pub fn pause(&self) -> bool {
        if std::process::id() != self.pid {
            return false; // a forked child: the thread is the parent's
        }
        let mut handle = lock(&self.thread);
        let Some(thread) = handle.take() else {
            return false;
        };
        {
            let mut queue = lock(&self.core.queue);
            queue.closing = true;
            self.core.threaded.store(false, Ordering::Release);
            self.core.wake.notify_one();
        }
        let _ = thread.join();
        drop(handle);
        drop(self.core.checked());
        let spent = std::mem::take(&mut lock(&self.core.queue).spent);
        drop(spent);
        true
    }

    /// Starts the thread again after [`Checker::pause`] (in the process that paused it).
    pub fn resume(&self) -> std::io::Result<()> {
        if std::process::id() != self.pid {
            return Ok(()); // a forked child checks within each call
        }
        self.start()
    }

    /// In a forked child: never a thread here.
    pub fn forked(&self) {
        self.core.wanted.store(false, Ordering::Release);
        self.core.threaded.store(false, Ordering::Release);
    }

    /// Ends the session: ends the thread, applies the queue, finishes the engine, refuses
    /// later records. Returns the folded races.
    pub fn finish(&self) -> u64 {
        self.pause();
        lock(&self.core.queue).finished = true;
        self.core.checked().live.finish().summary.races
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        // What was queued is checked (its races printed) even without `finish`.
        self.pause();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;
    use streamsan::live::{LiveFormat, Sink};
    use streamsan::report::Api;
    use streamsan::trace::record::{Access, ByteRange, MemSpace, StreamFlags, StreamKind};

    fn live() -> Live {
        let sink: Sink = Box::new(std::io::sink());
        Live::new(None, Map::new(), sink, LiveFormat::Text, Api::Torch, None).unwrap()
    }

    fn rec(op: Op) -> Record {
        Record {
            line: 0,
            thread: 0,
            at: Some("prog.py:1".into()),
            name: None,
            op,
        }
    }

    fn block(buf: u64, addr: u64) -> Op {
        Op::Alloc {
            buf,
            bytes: 64,
            device: 0,
            space: MemSpace::Device,
            stream: Some(0),
            addr: Some(addr),
            pool: Pool::Caching,
        }
    }

    fn launch(stream: u64, reads: &[u64], writes: &[u64]) -> Op {
        let acc = |b: &u64| Access {
            buf: *b,
            range: Some(ByteRange { off: 0, len: 64 }),
            arg: None,
        };
        Op::Launch {
            stream,
            reads: reads.iter().map(acc).collect(),
            writes: writes.iter().map(acc).collect(),
            atomics: Vec::new(),
        }
    }

    /// A program with one race per round: written on the default stream, read on stream 7.
    fn program() -> Vec<Op> {
        let mut ops = vec![Op::Stream {
            id: 7,
            device: 0,
            kind: StreamKind::Created,
            flags: StreamFlags::NonBlocking,
        }];
        for i in 0..1000u64 {
            let (a, b) = (2 * i + 1, 2 * i + 2);
            ops.push(block(a, 0x1000));
            ops.push(block(b, 0x2000));
            ops.push(launch(0, &[], &[a]));
            ops.push(launch(7, &[a], &[b]));
            ops.push(Op::DeviceSync { device: 0 });
            ops.push(Op::Free {
                buf: a,
                stream: None,
            });
            ops.push(Op::Free {
                buf: b,
                stream: None,
            });
        }
        ops
    }

    #[test]
    fn records_checked_within_the_call_leave_their_strings_for_the_next() {
        let checker = Checker::new(live(), false);
        for op in program().into_iter().take(20) {
            assert!(checker.take(rec(op)).is_ok());
        }
        // Each record's call site, emptied; the access lists of the six launches but the three
        // that were empty from the start (no room to keep).
        let mut parts = checker.core.parts();
        assert_eq!(parts.kept(), (20, 9));
        assert_eq!(parts.string("next.py:2"), "next.py:2");
    }

    /// (races, records) every 333 records, and the final JSON report.
    fn run(threaded: bool) -> (Vec<(u64, u64)>, String) {
        let checker = Checker::new(live(), threaded);
        assert_eq!(checker.threaded(), threaded);
        let mut seen = Vec::new();
        for (i, op) in program().into_iter().enumerate() {
            let taken = checker.core.take(rec(op));
            taken.map_err(|r| refusal_text(&r.error, &r.op)).unwrap();
            if i % 333 == 0 {
                let checked = checker.core.checked();
                seen.push((checked.live.report().summary.races, checked.live.records()));
            }
        }
        let checked = checker.core.checked();
        let report = checked.live.report();
        (
            seen,
            streamsan::report::render_json(&report, &checked.live.render_options()),
        )
    }

    #[test]
    fn the_thread_finds_what_checking_within_the_call_finds() {
        let inline = run(false);
        let threaded = run(true);
        assert!(inline.0.iter().any(|&(races, _)| races == 0));
        // One race per round of 7 records: 999 rounds after the stream's record.
        assert_eq!(inline.0.last(), Some(&(999, 1 + 7 * 999)));
        assert_eq!(inline, threaded);
    }

    #[test]
    fn a_caching_alloc_over_a_live_block_is_refused_at_once_and_a_freed_one_is_not() {
        let checker = Checker::new(live(), true);
        checker.core.take(rec(block(1, 0x1000))).ok().unwrap();
        let refused = checker.core.take(rec(block(2, 0x1020))).err().unwrap();
        let text = refusal_text(&refused.error, &refused.op);
        assert!(text.contains("overlaps the live block 1"), "{text}");
        let free = Op::Free {
            buf: 1,
            stream: None,
        };
        checker.core.take(rec(free)).ok().unwrap();
        checker.core.take(rec(block(2, 0x1020))).ok().unwrap();
        assert_eq!(checker.core.checked().live.records(), 3);
        assert_eq!(checker.core.late_errors().0, 0);
    }

    #[test]
    fn after_the_engine_refuses_a_queued_alloc_each_record_is_checked_within_its_call() {
        let checker = Checker::new(live(), true);
        // Stream 99 was never declared: the engine refuses the block, the queue took it.
        let mut op = block(1, 0x1000);
        if let Op::Alloc { stream, .. } = &mut op {
            *stream = Some(99);
        }
        checker.take(rec(op)).ok().unwrap();
        drop(checker.core.checked());
        // The queue's blocks hold buffer 1, the engine's do not: checked by the engine now.
        checker.take(rec(block(2, 0x1000))).ok().unwrap();
        assert!(!checker.threaded());
        assert_eq!(checker.core.late_errors().0, 1);
        let refused = checker.take(rec(block(3, 0x1010))).err().unwrap();
        let text = refusal_text(&refused.error, &refused.op);
        assert!(text.contains("live block 2"), "{text}");
        checker.resume().unwrap();
        assert!(!checker.threaded()); // for good
    }

    #[test]
    fn an_alloc_the_engine_refuses_leaves_no_block_behind() {
        let checker = Checker::new(live(), true);
        checker.core.take(rec(block(1, 0x1000))).ok().unwrap();
        // Buffer 1 is live: the engine refuses this one (later), not the queue.
        checker.core.take(rec(block(1, 0x2000))).ok().unwrap();
        let free = Op::Free {
            buf: 1,
            stream: None,
        };
        checker.core.take(rec(free)).ok().unwrap();
        assert_eq!(checker.core.late_errors().0, 1);
        // 0x1000 is free now, and nothing was ever live at 0x2000.
        checker.core.take(rec(block(2, 0x1000))).ok().unwrap();
        checker.core.take(rec(block(3, 0x2000))).ok().unwrap();
        assert_eq!(checker.core.late_errors().0, 0);
    }

    #[test]
    fn other_refusals_are_kept_for_late_errors_and_counted() {
        let checker = Checker::new(live(), true);
        for _ in 0..(LATE_KEPT + 3) {
            // Buffer 9 was never declared: queued, then refused by the engine.
            checker.core.take(rec(launch(0, &[9], &[]))).ok().unwrap();
        }
        let (count, texts) = checker.core.late_errors();
        assert_eq!(count, LATE_KEPT as u64 + 3);
        assert_eq!(texts.len(), LATE_KEPT);
        assert!(
            texts[0].starts_with("streamsan: record not taken: "),
            "{}",
            texts[0]
        );
        assert_eq!(checker.core.late_errors(), (0, Vec::new()));
    }

    #[test]
    fn records_after_finish_are_refused_at_once() {
        let checker = Checker::new(live(), true);
        checker.core.take(rec(block(1, 0x1000))).ok().unwrap();
        checker.finish();
        let refused = checker.core.take(rec(block(2, 0x2000))).err().unwrap();
        assert!(matches!(refused.error, LiveError::Finished));
    }

    #[test]
    fn finish_ends_the_thread() {
        let checker = Checker::new(live(), true);
        checker.core.take(rec(block(1, 0x1000))).ok().unwrap();
        checker.finish();
        assert!(!checker.threaded());
        assert!(lock(&checker.thread).is_none());
        checker.resume().unwrap(); // a finished session takes nothing more
        assert!(!checker.threaded());
    }

    #[test]
    fn pause_checks_the_queue_and_resume_keeps_the_blocks_known() {
        let checker = Checker::new(live(), true);
        checker.core.take(rec(block(1, 0x1000))).ok().unwrap();
        checker.pause();
        assert!(!checker.threaded());
        assert!(lock(&checker.core.queue).records.is_empty());
        assert_eq!(lock(&checker.core.checked).live.records(), 1);
        checker.core.take(rec(block(2, 0x2000))).ok().unwrap(); // checked within the call
        checker.resume().unwrap();
        assert!(checker.threaded());
        let refused = checker.core.take(rec(block(3, 0x2010))).err().unwrap();
        let text = refusal_text(&refused.error, &refused.op);
        assert!(text.contains("live block 2"), "{text}");
        assert_eq!(checker.core.checked().live.records(), 2);
    }

    /// A report sink the test can read.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_session_dropped_unfinished_still_checks_what_it_queued() {
        let out = Shared::default();
        let sink: Sink = Box::new(out.clone());
        let live = Live::new(None, Map::new(), sink, LiveFormat::Text, Api::Torch, None).unwrap();
        let checker = Checker::new(live, true);
        for op in program().into_iter().take(5) {
            checker.core.take(rec(op)).ok().unwrap();
        }
        drop(checker);
        let text = String::from_utf8(lock(&out.0).clone()).unwrap();
        assert!(text.contains("RACE"), "{text}");
    }

    /// Waits until the thread took every queued record (polling the queue: a query would
    /// apply them itself).
    fn taken(checker: &Checker) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !lock(&checker.core.queue).records.is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the records were never taken"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_thread_applies_records_without_a_query_and_sleeps_when_idle() {
        let checker = Checker::new(live(), true);
        checker.core.take(rec(block(1, 0x1000))).ok().unwrap();
        taken(&checker);
        assert_eq!(checker.core.checked().live.records(), 1);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !lock(&checker.core.queue).sleeping {
            assert!(
                std::time::Instant::now() < deadline,
                "the thread never slept"
            );
            std::thread::sleep(WAKE);
        }
        // Asleep, it is woken by the next record.
        checker.core.take(rec(block(2, 0x2000))).ok().unwrap();
        taken(&checker);
        assert_eq!(checker.core.checked().live.records(), 2);
    }
}
