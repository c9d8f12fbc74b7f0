//! What the sanitizer's lock guards, and how a step becomes a record: numbered, encoded for
//! the trace, and handed to the checker (`checker.rs`), which applies it to the engine.

use std::panic::Location;

use rustc_hash::FxHashMap;

use crate::cuda::options::Options;
use crate::cuda::prefetch;
use crate::cuda::step::{Label, Step};
use crate::cuda::threads::ThreadIds;
use crate::cuda::trace_file::TraceSink;
use crate::trace::record::{
    Access, BufId, DeviceId, EventId, GraphId, Op, Record, StreamId, ThreadId,
};
use crate::trace::writer::LineBuf;

use super::checker::{Checker, Filling};
use super::texts::Texts;

/// The trace being written: the header went out at creation; each call's lines are encoded into
/// `pending` and appended to `out` at once when the call ends.
pub(super) struct TraceOut {
    pub(super) out: TraceSink,
    pub(super) pending: LineBuf,
}

pub(crate) struct State {
    /// The engine and the findings, here or on the checker thread.
    pub(super) checker: Checker,
    /// The line the next record gets (the header is line 1).
    pub(super) next_line: u64,
    pub(super) trace: Option<TraceOut>,
    pub(super) threads: ThreadIds,
    /// Events with a record in the trace and no `event_destroy` since: the events whose
    /// tracked waits and syncs order something (see [`Step::TrackedWait`]).
    pub(super) recorded: super::id_set::IdSet,
    pub(super) legacy: FxHashMap<DeviceId, StreamId>,
    pub(super) per_thread: FxHashMap<(ThreadId, DeviceId), StreamId>,
    pub(super) next_stream: StreamId,
    pub(super) next_event: EventId,
    pub(super) next_buf: BufId,
    pub(super) next_graph: GraphId,
    /// The graph each capturing stream (the one `begin_capture` was called on) captures into.
    pub(super) captures: FxHashMap<StreamId, GraphId>,
    /// Calls skipped because they mixed sanitizers; warned about once.
    pub(super) warned_foreign: bool,
    /// The record being made, reused: its strings and access lists keep their capacity.
    pub(super) rec: Record,
    /// Writes `rec`'s name and location.
    pub(super) texts: Texts,
    /// A step list and access lists of earlier calls, reused.
    pub(super) steps_pool: Vec<Step>,
    pub(super) access_pool: Vec<Vec<Access>>,
    #[cfg(test)]
    pub(crate) captured: Vec<Record>,
}

/// At most this many access lists are kept for reuse.
const ACCESS_POOL: usize = 16;
/// The accesses of a kept list asked for to be written: a launch's lists hold a few.
const KEPT_AHEAD: usize = 4;

/// Moves the access lists of a finished record's `op` into `pool`, for
/// [`Call::access_list`](super::Call::access_list). A list kept is refilled by one of the
/// next calls, in place: its first accesses are asked for to be written ([`prefetch`]), as
/// the checker thread read them last.
pub(super) fn keep_lists(op: &mut Op, pool: &mut Vec<Vec<Access>>) {
    let mut keep = |list: &mut Vec<Access>| {
        if list.capacity() > 0 && pool.len() < ACCESS_POOL {
            prefetch::for_write(
                list.as_ptr(),
                list.len().min(KEPT_AHEAD) * size_of::<Access>(),
            );
            pool.push(std::mem::take(list));
        }
    };
    match op {
        Op::Launch {
            reads,
            writes,
            atomics,
            ..
        } => {
            keep(reads);
            keep(writes);
            keep(atomics);
        }
        Op::HostFunc { reads, writes, .. } | Op::HostAccess { reads, writes } => {
            keep(reads);
            keep(writes);
        }
        _ => {}
    }
}

impl State {
    /// Turns one step into a record (or none: see [`Step::TrackedWait`]).
    pub(super) fn apply(
        &mut self,
        options: &Options,
        step: Step,
        (thread, at): (ThreadId, Option<&'static Location<'static>>),
        filling: Option<&mut Filling>,
    ) {
        let (op, name) = match step {
            Step::Op { op, name } => {
                match op {
                    Op::Record { event, .. } => {
                        self.recorded.insert(event);
                    }
                    Op::EventDestroy { id } => {
                        self.recorded.remove(id);
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
                if !self.recorded.contains(event) {
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
                if !self.recorded.contains(event) {
                    return;
                }
                (Op::EventSync { event }, name)
            }
        };
        self.emit(options, op, name, (thread, at), filling);
    }

    /// Makes the record: numbers it, encodes its trace line, checks it or queues it for the
    /// checker thread. The record is made whole here only when something here reads it
    /// (inline checking, the tests' capture); the checker thread makes its own, and the trace
    /// line is written from the record's parts.
    #[inline]
    pub(super) fn emit(
        &mut self,
        options: &Options,
        op: Op,
        name: Label,
        (thread, at): (ThreadId, Option<&'static Location<'static>>),
        filling: Option<&mut Filling>,
    ) {
        let line = self.next_line;
        self.next_line += 1;
        if self.checker.is_inline() || self.trace.is_some() || cfg!(test) {
            self.emit_full(options, op, name, (line, thread, at), filling);
        } else {
            self.checker
                .queue(filling, (line, thread, at), name, op, &mut self.access_pool);
        }
    }

    /// [`State::emit`] with a trace, inline checking or the tests' capture, out of the common
    /// path (checking on the checker thread, no trace), which stays as small as it was. The
    /// record is made whole only for inline checking and the tests.
    #[inline(never)]
    fn emit_full(
        &mut self,
        options: &Options,
        op: Op,
        name: Label,
        (line, thread, at): (u64, ThreadId, Option<&'static Location<'static>>),
        filling: Option<&mut Filling>,
    ) {
        if self.trace.is_some() {
            self.trace_line(&op, &name, (line, thread, at));
        }
        if !self.checker.is_inline() && !cfg!(test) {
            self.checker
                .queue(filling, (line, thread, at), name, op, &mut self.access_pool);
            return;
        }
        let old = std::mem::replace(&mut self.rec.op, op);
        self.recycle(old);
        self.texts.fill(&mut self.rec, line, thread, &name, at);
        #[cfg(test)]
        self.captured.push(self.rec.clone());
        if self.checker.is_inline() {
            if self.checker.check(options, &self.rec) {
                self.halt(options);
            }
            return;
        }
        let op = std::mem::replace(&mut self.rec.op, Op::DeviceSync { device: 0 });
        self.checker
            .queue(filling, (line, thread, at), name, op, &mut self.access_pool);
    }

    /// Adds a record's line to the call's pending trace lines. A record the format cannot
    /// express (a launch without a kernel name) ends the trace before it: the trace would no
    /// longer match the numbering.
    #[inline(never)]
    fn trace_line(
        &mut self,
        op: &Op,
        name: &Label,
        (line, thread, at): (u64, ThreadId, Option<&'static Location<'static>>),
    ) {
        let Some(t) = &mut self.trace else {
            return;
        };
        if let Err(e) = self.texts.encode(op, name, thread, at, &mut t.pending) {
            self.write_trace();
            self.trace = None;
            self.note(&format!(
                "streamsan: cannot write record {line} to the trace: {e}; the trace stops before it\n"
            ));
        }
    }

    /// Keeps the access lists of a finished record for [`Call::access_list`].
    pub(super) fn recycle(&mut self, mut op: Op) {
        keep_lists(&mut op, &mut self.access_pool);
    }

    /// Writes the trace lines made so far, in one `write_all`.
    pub(super) fn write_trace(&mut self) {
        let Some(t) = &mut self.trace else {
            return;
        };
        if t.pending.is_empty() {
            return;
        }
        let result = t.out.append(t.pending.as_bytes());
        t.pending.clear();
        if let Err(e) = result {
            self.trace = None;
            let line = self.next_line;
            self.note(&format!(
                "streamsan: writing the trace failed before line {line}: {e}; the trace stops here\n"
            ));
        }
    }

    /// Writes the pending lines and ends the trace.
    pub(super) fn close_trace(&mut self) {
        self.write_trace();
        if let Some(t) = &mut self.trace
            && let Err(e) = t.out.close()
        {
            self.trace = None;
            self.note(&format!("streamsan: closing the trace failed: {e}\n"));
        }
    }

    /// Ends the process at a race, as `halt_on_error` asks: the trace closed, the summary
    /// printed.
    fn halt(&mut self, options: &Options) -> ! {
        // The racing record's line is pending: the trace reproduces the race.
        self.close_trace();
        let mut v = self.checker.verdicts();
        let text = v.summary(options);
        v.say(&text);
        v.note(&format!(
            "streamsan: halt_on_error: exiting with status {}\n",
            options.exitcode
        ));
        std::process::exit(options.exitcode);
    }

    /// Prints the end of the run (the summary, or the JSON report) to the report, after what
    /// every record found. Not on the recording path: it waits for the checker thread.
    pub(super) fn say(&mut self, text: &str) {
        self.checker.settled().say(text);
    }

    /// Prints a note of the sanitizer's (not a finding). It does not wait for the checker
    /// (a call may hold the filling batch), so it can come before races of earlier records
    /// still being checked.
    pub(super) fn note(&mut self, text: &str) {
        self.checker.verdicts().note(text);
    }
}
