//! One sanitized call: the lock held from the real cudarc call until its records are made,
//! the ids it hands out, and the access lists it fills in place.

use std::panic::Location;
use std::sync::MutexGuard;

use crate::cuda::model::Steps;
use crate::cuda::step::{Label, Step};
use crate::trace::record::{
    Access, BufId, ByteRange, DeviceId, EventId, GraphId, LEGACY_STREAM_DEVICE0, Op, StreamFlags,
    StreamId, StreamKind, ThreadId,
};

use super::checker::Filling;
use super::{Sanitizer, State};

/// Where a wrapped stream's id comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamSlot {
    /// A stream with one id: created streams and the legacy default stream.
    Fixed(StreamId),
    /// cudarc's per-thread stream handle (`0x2`, `CU_STREAM_PER_THREAD`): each host thread that
    /// uses it reaches its own per-thread default stream, so the id depends on the caller.
    PerThread,
}

/// One sanitized call in progress; holds the lock. Its trace lines are written when it ends.
pub(crate) struct Call<'a> {
    pub(super) san: &'a Sanitizer,
    pub(super) st: MutexGuard<'a, State>,
    /// The calling host thread's id.
    pub thread: ThreadId,
    pub(super) at: Option<&'static Location<'static>>,
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

impl<'a> Call<'a> {
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
        self.st.emit(
            &self.san.options,
            op,
            Label::Owned(name),
            (thread, at),
            None,
        );
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

    /// A new graph id, capturing on `stream` from now on.
    pub(crate) fn begin_capture(&mut self, stream: StreamId) -> GraphId {
        let id = self.st.next_graph;
        self.st.next_graph += 1;
        self.st.captures.insert(stream, id);
        id
    }

    /// The graph `stream` was capturing into, which it no longer does; `None` when no capture
    /// began on it (one begun through cudarc directly).
    pub(crate) fn end_capture(&mut self, stream: StreamId) -> Option<GraphId> {
        self.st.captures.remove(&stream)
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
            self.st.note(
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

    /// [`Call::finish`] for steps not planned yet: the steps pushed before are recorded, then
    /// each step as it is planned, into the checker's filling batch locked once for all.
    /// Called once the cudarc call succeeded.
    pub(crate) fn emit(mut self) -> Emit<'a> {
        let mut steps = std::mem::take(&mut self.steps);
        let mut emit = Emit {
            filling: self.san.checker.as_deref().map(|c| c.filling()),
            call: self,
        };
        for step in steps.drain(..) {
            emit.push(step);
        }
        emit.call.steps = steps; // its capacity goes back to the pool when the call ends
        emit
    }

    /// Records the steps. Called once the cudarc call succeeded; a failed call records nothing.
    pub(crate) fn finish(self) {
        drop(self.emit());
    }
}

/// A call whose steps become records as they are planned ([`Call::emit`]).
pub(crate) struct Emit<'a> {
    /// Declared first: released before the call's own lock and before `Call::drop` writes
    /// the call's trace lines.
    filling: Option<MutexGuard<'a, Filling>>,
    call: Call<'a>,
}

impl Steps for Emit<'_> {
    #[inline]
    fn push(&mut self, step: Step) {
        let call = &mut self.call;
        let at = (call.thread, call.at);
        call.st
            .apply(&call.san.options, step, at, self.filling.as_deref_mut());
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
                    (None, None) => {}
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
