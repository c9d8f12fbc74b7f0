//! The Session's records, checked within the call or on a checker thread.
//!
//! Why a thread: the engine's work per record (about a microsecond for an operator's three
//! records) is most of what the native recorder still adds to an operator (issue 13's cost
//! target, docs/performance.md). With the thread, a record costs the program's thread a push
//! onto a queue; the thread applies the queue in order in batches, within [`WAKE`] of a push.
//!
//! What stays exact: every query (races, reports, `records`, `finish`) first applies what is
//! queued, on the asking thread if need be, so its answer is what checking each record at once
//! gives. A caching alloc over a live block is still refused at once (the recorder ends a stale
//! block on that error and retries): the queue keeps the live caching blocks with the engine's
//! own rule ([`LiveBlocks`]). Any other refusal can only come later; it is kept and handed to
//! the program by [`Core::late_errors`].
//!
//! Not threaded: with a trace file (a record is written when it is checked, and a trace must
//! hold every record up to a crash) and with `halt_on_error` (the racing call itself raises).

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use streamsan::engine::{InputErrorKind, LiveBlocks};
use streamsan::live::{Applied, Live, LiveError};
use streamsan::trace::record::{Op, Pool, Record};

/// Records that wake the thread at once.
const BATCH: usize = 256;
/// The longest a queued record waits while the program runs.
const WAKE: Duration = Duration::from_millis(10);
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
    fn apply_queued(&mut self, batch: &mut Vec<Record>) {
        for mut rec in batch.drain(..) {
            // A panic (an engine bug) must not end the thread and every later check with it;
            // it is told like a refusal, as a call checking it at once would raise it.
            let applied = catch_unwind(AssertUnwindSafe(|| self.live.apply(&mut rec)));
            let text = match applied {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => refusal_text(&e, &rec.op),
                Err(_) => format!(
                    "streamsan: the engine panicked checking a record (a bug; record {:?})",
                    rec.op
                ),
            };
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
    /// The live caching blocks once the queued records are applied.
    blocks: LiveBlocks,
    /// Each live caching block's device and start address, for its free.
    block_at: HashMap<u64, (u32, u64)>,
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
                addr: Some(addr),
                pool: Pool::Caching,
                ..
            } if bytes > 0 => {
                let Some(end) = addr.checked_add(bytes) else {
                    return Ok(()); // the engine says what is wrong with it
                };
                if let Some(other) = self.blocks.overlapping(device, addr, end) {
                    return Err(InputErrorKind::CachingOverlap {
                        buf,
                        addr,
                        end,
                        other,
                        device,
                    });
                }
                self.blocks.insert(device, addr, end, buf);
                self.block_at.insert(buf, (device, addr));
            }
            Op::Free { buf, .. } => {
                if let Some((device, addr)) = self.block_at.remove(&buf) {
                    self.blocks.remove(device, addr);
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
    wake: Condvar,
    checked: Mutex<Checked>,
    threaded: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock leaves the engine as it was between records.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Core {
    /// Applies what is queued and returns the engine: every query goes through here.
    pub fn checked(&self) -> MutexGuard<'_, Checked> {
        let mut queue = lock(&self.queue);
        let mut batch = std::mem::take(&mut queue.records);
        // Taken while the queue is held: whoever took earlier records applies them first.
        let mut checked = lock(&self.checked);
        drop(queue);
        checked.apply_queued(&mut batch);
        checked
    }

    /// Takes `rec`: applied now, or queued for the thread. `Ok(applied)` with `raced` only
    /// when it was checked now.
    pub fn take(&self, mut rec: Record) -> Result<Applied, Box<Refused>> {
        if !self.threaded {
            let mut checked = self.checked();
            return checked
                .live
                .apply(&mut rec)
                .map_err(|error| Box::new(Refused { error, op: rec.op }));
        }
        let mut queue = lock(&self.queue);
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
        if queue.records.len() == BATCH {
            self.wake.notify_one();
        }
        Ok(Applied::default())
    }

    /// Ends the session: applies the queue, finishes the engine, refuses later records.
    pub fn finish(&self) -> u64 {
        let mut checked = self.checked();
        lock(&self.queue).finished = true;
        checked.live.finish().summary.races
    }

    /// Refusals of records checked on the thread since the last call: (count, the first
    /// messages).
    pub fn late_errors(&self) -> (u64, Vec<String>) {
        let mut checked = self.checked();
        let count = std::mem::take(&mut checked.late_count);
        (count, std::mem::take(&mut checked.late))
    }

    /// The thread's loop: applies the queue when [`BATCH`] records wait or [`WAKE`] passed.
    fn run(&self) {
        let mut spare: Vec<Record> = Vec::with_capacity(BATCH);
        loop {
            let mut queue = lock(&self.queue);
            while !queue.closing && queue.records.len() < BATCH {
                let (q, timeout) = self
                    .wake
                    .wait_timeout(queue, WAKE)
                    .unwrap_or_else(|e| e.into_inner());
                queue = q;
                if timeout.timed_out() && !queue.records.is_empty() {
                    break;
                }
            }
            if queue.closing {
                return; // what is left is applied by `checked` (finish, a query)
            }
            let mut batch = std::mem::replace(&mut queue.records, std::mem::take(&mut spare));
            let mut checked = lock(&self.checked);
            drop(queue);
            checked.apply_queued(&mut batch);
            drop(checked);
            spare = batch;
        }
    }
}

/// A session's engine with its checker thread, if any.
pub(crate) struct Checker {
    pub core: Arc<Core>,
    thread: Option<JoinHandle<()>>,
    /// The process that started the thread: a forked child has no such thread to end.
    pid: u32,
}

impl Checker {
    /// `threaded`: check on a thread of its own (see the module docs for when not to).
    pub fn new(live: Live, threaded: bool) -> std::io::Result<Checker> {
        let core = Arc::new(Core {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            checked: Mutex::new(Checked {
                live,
                late: Vec::new(),
                late_count: 0,
            }),
            threaded,
        });
        let thread = if threaded {
            let core = Arc::clone(&core);
            Some(
                std::thread::Builder::new()
                    .name("streamsan-checker".into())
                    .spawn(move || core.run())?,
            )
        } else {
            None
        };
        Ok(Checker {
            core,
            thread,
            pid: std::process::id(),
        })
    }

    /// Whether records are checked on a thread.
    pub fn threaded(&self) -> bool {
        self.core.threaded
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        lock(&self.core.queue).closing = true;
        self.core.wake.notify_one();
        if std::process::id() == self.pid {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;
    use streamsan::live::{LiveFormat, Sink};
    use streamsan::report::Api;
    use streamsan::trace::record::{Access, ByteRange, MemSpace};

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
            kind: streamsan::trace::record::StreamKind::Created,
            flags: streamsan::trace::record::StreamFlags::NonBlocking,
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

    fn run(threaded: bool) -> (u64, u64, String) {
        let checker = Checker::new(live(), threaded).unwrap();
        assert_eq!(checker.threaded(), threaded);
        for op in program() {
            checker
                .core
                .take(rec(op))
                .map_err(|r| refusal_text(&r.error, &r.op))
                .unwrap();
        }
        let checked = checker.core.checked();
        let report = checked.live.report();
        let text = streamsan::report::render_json(&report, &checked.live.render_options());
        (report.summary.races, checked.live.records(), text)
    }

    #[test]
    fn the_thread_finds_what_checking_within_the_call_finds() {
        let inline = run(false);
        let threaded = run(true);
        assert_eq!(inline.1, 7001);
        assert!(inline.0 >= 1);
        assert_eq!(inline, threaded);
    }

    #[test]
    fn a_caching_alloc_over_a_live_block_is_refused_at_once_and_a_freed_one_is_not() {
        let checker = Checker::new(live(), true).unwrap();
        checker.core.take(rec(block(1, 0x1000))).ok().unwrap();
        let refused = checker.core.take(rec(block(2, 0x1020))).err().unwrap();
        let text = refusal_text(&refused.error, &refused.op);
        assert!(text.contains("overlaps the live block 1"), "{text}");
        checker
            .core
            .take(rec(Op::Free {
                buf: 1,
                stream: None,
            }))
            .ok()
            .unwrap();
        checker.core.take(rec(block(2, 0x1020))).ok().unwrap();
        assert_eq!(checker.core.checked().live.records(), 3);
        assert_eq!(checker.core.late_errors().0, 0);
    }

    #[test]
    fn other_refusals_are_kept_for_late_errors_and_counted() {
        let checker = Checker::new(live(), true).unwrap();
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
        let checker = Checker::new(live(), true).unwrap();
        checker.core.take(rec(block(1, 0x1000))).ok().unwrap();
        checker.core.finish();
        let refused = checker.core.take(rec(block(2, 0x2000))).err().unwrap();
        assert!(matches!(refused.error, LiveError::Finished));
    }

    #[test]
    fn the_thread_applies_records_without_a_query() {
        let checker = Checker::new(live(), true).unwrap();
        checker.core.take(rec(block(1, 0x1000))).ok().unwrap();
        // Within WAKE the thread takes it; poll the queue, not the engine (a query applies).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !lock(&checker.core.queue).records.is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the thread never took the record"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(checker.core.checked().live.records(), 1);
    }
}
