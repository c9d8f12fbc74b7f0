//! Trace ids for CUDA's handles: streams by what the API tells of them, events by handle,
//! buffers by address range. Declaring records (`stream`, `event`, the pageable pseudo-buffer)
//! are emitted the first time an id is needed, so every id is declared before its first use.

use std::collections::{HashMap, HashSet};

use streamsan::trace::record::{
    BufId, DeviceId, EventId, MemSpace, Op, Pool, StreamFlags, StreamId, StreamKind,
};

use crate::fold::{Allocation, Allocations};

/// Bytes of the pageable pseudo-buffer: more than any user-space address, so an ordinary host
/// address is its own offset into it. It is never freed: the program's pageable memory
/// outlives its CUDA work (a free at exit would be a free-while-in-use of every copy the
/// program never waited for, which is not the program's bug).
const PAGEABLE_BYTES: u64 = 1 << 56;

/// A stream as the trace knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKey {
    /// The legacy default stream of a device (`0` / `cudaStreamLegacy`).
    Legacy(DeviceId),
    /// The per-thread default stream of a (host thread, device).
    PerThread(u64, DeviceId),
    /// A created stream, by its public handle (a handle is reused only after its destroy).
    Created(usize),
}

/// The public handle values `cuda.h` gives special meanings.
const NULL: usize = 0;

#[derive(Default)]
pub struct Ids {
    next: u64,
    streams: HashMap<StreamKey, StreamId>,
    /// Created streams' non-blocking flag, from the create call's parameters.
    nonblocking: HashMap<usize, bool>,
    /// Created streams' device, from their context.
    created_device: HashMap<usize, DeviceId>,
    /// Sanitizer stream handles of per-thread default streams, with their thread and context.
    per_thread_handles: HashMap<usize, (u64, usize)>,
    /// Contexts whose creation finished, with their device: a stream with a null public handle
    /// created after that is some thread's per-thread default stream.
    contexts: HashMap<usize, DeviceId>,
    /// Host threads inside a context's creation: the streams with a null public handle made
    /// then are the context's own (its legacy stream among them), not a per-thread one, even
    /// where the new context reuses a destroyed one's handle (a primary context released and
    /// retained again, as cudarc's threading example does).
    creating: HashSet<u64>,
    events: HashMap<usize, EventId>,
    pub live: Allocations,
    /// The synthetic event that orders each executable graph's launches one after another.
    graph_exec_events: HashMap<usize, EventId>,
    /// The pageable pseudo-buffer of each host thread.
    pageable: HashMap<u64, BufId>,
    /// Streams being captured into a graph, with the stream the capture began on (a stream
    /// that waits on an event recorded in a capture joins it, and leaves it when it ends).
    pub capturing: HashMap<StreamKey, StreamKey>,
    /// Events last recorded inside a capture, with the capture's origin stream: waiting on
    /// them is a graph edge (and joins the capture), not an order.
    pub captured_events: HashMap<EventId, StreamKey>,
}

impl Ids {
    fn fresh(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    pub fn context_creation_starting(&mut self, thread: u64) {
        self.creating.insert(thread);
    }

    pub fn context_created(&mut self, ctx: usize, device: i32, thread: u64) {
        self.creating.remove(&thread);
        self.contexts.insert(ctx, device.max(0) as DeviceId);
    }

    /// A context is being destroyed: its per-thread streams end with it (a context created
    /// later may reuse its handles).
    pub fn context_destroyed(&mut self, ctx: usize) {
        self.per_thread_handles.retain(|_, (_, c)| *c != ctx);
    }

    pub fn device_of(&self, ctx: usize) -> DeviceId {
        self.contexts.get(&ctx).copied().unwrap_or(0)
    }

    /// A `STREAM_CREATED` callback: a null public handle after the context exists is the
    /// calling thread's per-thread default stream (seen on CUDA 13: created lazily on the
    /// thread's first use, where the legacy stream and CUDA's internal ones are made while the
    /// context is created).
    pub fn stream_created(&mut self, ctx: usize, public: usize, handle: usize, thread: u64) {
        if public == NULL && self.contexts.contains_key(&ctx) && !self.creating.contains(&thread) {
            self.per_thread_handles.insert(handle, (thread, ctx));
        } else if public != NULL {
            self.created_device.insert(public, self.device_of(ctx));
        }
    }

    /// A stream is being destroyed; a created stream the trace declared gives its id, for its
    /// `stream_destroy`. Its handles may then be reused by a new stream.
    pub fn stream_destroyed(&mut self, public: usize, handle: usize) -> Option<StreamId> {
        self.per_thread_handles.remove(&handle);
        if public == NULL {
            return None;
        }
        self.nonblocking.remove(&public);
        self.created_device.remove(&public);
        // CUDA lets a stream that joined a capture be destroyed before the capture ends; a
        // later stream given the same handle is not capturing.
        self.capturing.remove(&StreamKey::Created(public));
        self.streams.remove(&StreamKey::Created(public))
    }

    pub fn stream_flags(&mut self, public: usize, nonblocking: bool) {
        self.nonblocking.insert(public, nonblocking);
    }

    /// The stream of a callback's data: its context, public handle and Sanitizer handle.
    pub fn key_from_data(
        &self,
        ctx: usize,
        public: usize,
        handle: usize,
        thread: u64,
    ) -> StreamKey {
        let device = self.device_of(ctx);
        match public {
            NULL | crate::sys::STREAM_LEGACY => match self.per_thread_handles.get(&handle) {
                Some(&(owner, _)) => StreamKey::PerThread(owner, device),
                None => StreamKey::Legacy(device),
            },
            crate::sys::STREAM_PER_THREAD => StreamKey::PerThread(thread, device),
            p => StreamKey::Created(p),
        }
    }

    /// [`Ids::key_from_data`], then [`Ids::stream`].
    pub fn data_stream(
        &mut self,
        (ctx, public, handle): (usize, usize, usize),
        thread: u64,
        out: &mut Vec<(Option<String>, Op)>,
    ) -> StreamId {
        let key = self.key_from_data(ctx, public, handle, thread);
        self.stream(key, out)
    }

    /// The stream an API call names: `public` as passed, `ptsz` for the per-thread-default
    /// entry points (code built with `--default-stream per-thread`).
    pub fn key_from_call(&self, ctx: usize, public: usize, ptsz: bool, thread: u64) -> StreamKey {
        let device = self.device_of(ctx);
        match public {
            NULL if ptsz => StreamKey::PerThread(thread, device),
            NULL | crate::sys::STREAM_LEGACY => StreamKey::Legacy(device),
            crate::sys::STREAM_PER_THREAD => StreamKey::PerThread(thread, device),
            p => StreamKey::Created(p),
        }
    }

    /// The id of `key`, declaring it (into `out`) the first time. The legacy stream of device
    /// 0 is the trace's implicit stream 0.
    pub fn stream(&mut self, key: StreamKey, out: &mut Vec<(Option<String>, Op)>) -> StreamId {
        if key == StreamKey::Legacy(0) {
            return 0;
        }
        if let Some(&id) = self.streams.get(&key) {
            return id;
        }
        let id = self.fresh();
        let (device, kind, flags, name) = match key {
            StreamKey::Legacy(d) => (d, StreamKind::LegacyDefault, StreamFlags::Blocking, None),
            StreamKey::PerThread(_, d) => {
                (d, StreamKind::PerThreadDefault, StreamFlags::Blocking, None)
            }
            StreamKey::Created(p) => {
                // A stream whose create call was not seen is taken as blocking, CUDA's default.
                let nb = self.nonblocking.get(&p).copied().unwrap_or(false);
                let flags = if nb {
                    StreamFlags::NonBlocking
                } else {
                    StreamFlags::Blocking
                };
                let device = self.created_device.get(&p).copied().unwrap_or(0);
                (
                    device,
                    StreamKind::Created,
                    flags,
                    Some(format!("stream {p:#x}")),
                )
            }
        };
        out.push((
            name,
            Op::Stream {
                id,
                device,
                kind,
                flags,
            },
        ));
        self.streams.insert(key, id);
        id
    }

    /// The id of event handle `h`, declaring it the first time.
    pub fn event(&mut self, h: usize, out: &mut Vec<(Option<String>, Op)>) -> EventId {
        if let Some(&id) = self.events.get(&h) {
            return id;
        }
        let id = self.fresh();
        out.push((None, Op::Event { id }));
        self.events.insert(h, id);
        id
    }

    /// The synthetic event of executable graph `exec`, and whether it is new (to be declared;
    /// no launch of the graph came before).
    pub fn graph_exec_event(&mut self, exec: usize) -> (EventId, bool) {
        if let Some(&e) = self.graph_exec_events.get(&exec) {
            return (e, false);
        }
        let e = self.fresh();
        self.graph_exec_events.insert(exec, e);
        (e, true)
    }

    /// An executable graph is destroyed: a new one may get its handle.
    pub fn graph_exec_destroyed(&mut self, exec: usize) -> Option<EventId> {
        self.graph_exec_events.remove(&exec)
    }

    /// The capture `event` was last recorded in, if it was.
    pub fn capture_of_event(&self, event: EventId) -> Option<StreamKey> {
        self.captured_events.get(&event).copied()
    }

    /// `cudaStreamEndCapture` on `origin`, successful or not: every stream of that capture
    /// leaves it.
    pub fn end_capture(&mut self, origin: StreamKey) {
        self.capturing.retain(|_, o| *o != origin);
    }

    pub fn event_destroyed(&mut self, h: usize) -> Option<EventId> {
        let id = self.events.remove(&h)?;
        self.captured_events.remove(&id);
        Some(id)
    }

    /// A new allocation at `[addr, addr + bytes)`; live allocations it overlaps (whose free
    /// was not seen) are forgotten.
    pub fn alloc(
        &mut self,
        addr: u64,
        bytes: u64,
        device: DeviceId,
        space: MemSpace,
        stream: Option<StreamId>,
    ) -> Op {
        let stale: Vec<u64> = self
            .live
            .range(..addr + bytes)
            .rev()
            .take_while(|(b, a)| **b + a.bytes > addr)
            .map(|(b, _)| *b)
            .collect();
        for b in stale {
            self.live.remove(&b);
        }
        let buf = self.fresh();
        self.live.insert(addr, Allocation { buf, bytes });
        Op::Alloc {
            buf,
            bytes,
            device,
            space,
            stream,
            addr: Some(addr),
            pool: Pool::Driver,
        }
    }

    /// The buffer allocated at exactly `addr`, forgotten.
    pub fn free(&mut self, addr: u64) -> Option<BufId> {
        self.live.remove(&addr).map(|a| a.buf)
    }

    /// The allocation holding `addr`: (buffer, offset, bytes left in it).
    pub fn find(&self, addr: u64) -> Option<(BufId, u64, u64)> {
        let (base, a) = self.live.range(..=addr).next_back()?;
        (addr < base + a.bytes).then(|| (a.buf, addr - base, base + a.bytes - addr))
    }

    /// The pseudo-buffer for ordinary (pageable) host memory of host thread `thread`,
    /// declared the first time. One per thread: threads' heaps reuse each other's freed
    /// addresses, and nothing in a trace orders one thread's use of an address before another
    /// thread's, so a shared one would make races of memory the threads never share.
    pub fn pageable(&mut self, thread: u64, out: &mut Vec<(Option<String>, Op)>) -> BufId {
        if let Some(&b) = self.pageable.get(&thread) {
            return b;
        }
        let buf = self.fresh();
        out.push((
            Some(format!("pageable host memory of thread {thread}")),
            Op::Alloc {
                buf,
                bytes: PAGEABLE_BYTES,
                device: 0,
                space: MemSpace::Host,
                stream: None,
                addr: None,
                pool: Pool::Driver,
            },
        ));
        self.pageable.insert(thread, buf);
        buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_null_stream_is_the_legacy_one_unless_its_handle_is_a_threads_own() {
        let mut ids = Ids::default();
        // Made while the context is created: CUDA's own streams, the legacy one among them.
        ids.context_creation_starting(1);
        ids.stream_created(0xc0, 0, 0x10, 1);
        ids.context_created(0xc0, 0, 1);
        ids.stream_created(0xc0, 0, 0x20, 7);
        assert_eq!(ids.key_from_data(0xc0, 0, 0x10, 1), StreamKey::Legacy(0));
        assert_eq!(
            ids.key_from_data(0xc0, 0, 0x20, 1),
            StreamKey::PerThread(7, 0)
        );
        assert_eq!(
            ids.key_from_call(0xc0, 0, true, 3),
            StreamKey::PerThread(3, 0)
        );
        assert_eq!(ids.key_from_call(0xc0, 0, false, 3), StreamKey::Legacy(0));
        assert_eq!(
            ids.key_from_call(0xc0, 2, false, 3),
            StreamKey::PerThread(3, 0)
        );
    }

    #[test]
    fn a_context_created_again_at_the_same_handle_makes_its_own_streams_again() {
        let mut ids = Ids::default();
        ids.context_creation_starting(1);
        ids.context_created(0xc0, 0, 1);
        ids.stream_created(0xc0, 0, 0x20, 1); // thread 1's per-thread stream
        assert_eq!(
            ids.key_from_data(0xc0, 0, 0x20, 1),
            StreamKey::PerThread(1, 0)
        );
        // Released and retained again by thread 2, at the same address: the streams made while
        // it is created are its own, not thread 2's per-thread stream.
        ids.context_destroyed(0xc0);
        ids.context_creation_starting(2);
        ids.stream_created(0xc0, 0, 0x30, 2);
        ids.context_created(0xc0, 0, 2);
        assert_eq!(ids.key_from_data(0xc0, 0, 0x30, 2), StreamKey::Legacy(0));
        assert_eq!(ids.key_from_data(0xc0, 0, 0x20, 2), StreamKey::Legacy(0));
    }

    #[test]
    fn ending_a_capture_releases_every_stream_that_joined_it() {
        let mut ids = Ids::default();
        let (a, b, c) = (
            StreamKey::Created(1),
            StreamKey::Created(2),
            StreamKey::Created(3),
        );
        ids.capturing.insert(a, a);
        ids.capturing.insert(b, a); // joined a's capture through an event wait
        ids.capturing.insert(c, c);
        ids.end_capture(a);
        assert_eq!(ids.capturing.keys().collect::<Vec<_>>(), vec![&c]);
    }

    #[test]
    fn streams_are_declared_once_with_their_flags_and_again_after_a_destroy() {
        let mut ids = Ids::default();
        let mut out = Vec::new();
        ids.stream_flags(0x500, true);
        let a = ids.stream(StreamKey::Created(0x500), &mut out);
        assert_eq!(ids.stream(StreamKey::Created(0x500), &mut out), a);
        assert_eq!(out.len(), 1);
        assert!(matches!(
            out[0].1,
            Op::Stream {
                flags: StreamFlags::NonBlocking,
                ..
            }
        ));
        ids.capturing
            .insert(StreamKey::Created(0x500), StreamKey::Created(0x700));
        assert_eq!(ids.stream_destroyed(0x500, 0x9), Some(a));
        assert!(
            ids.capturing.is_empty(),
            "a destroyed stream captures nothing"
        );
        assert_eq!(ids.stream_destroyed(0x500, 0x9), None, "destroyed once");
        let b = ids.stream(StreamKey::Created(0x500), &mut out);
        assert_ne!(a, b);
        assert!(matches!(
            out[1].1,
            Op::Stream {
                flags: StreamFlags::Blocking,
                ..
            }
        ));
        assert_eq!(ids.stream(StreamKey::Legacy(0), &mut out), 0);
    }

    #[test]
    fn only_a_declared_created_stream_has_an_id_to_destroy() {
        let mut ids = Ids::default();
        let mut out = Vec::new();
        ids.context_creation_starting(1);
        ids.context_created(0xc0, 0, 1);
        // Created but never used: the trace never declared it.
        ids.stream_created(0xc0, 0x600, 0x21, 1);
        assert_eq!(ids.stream_destroyed(0x600, 0x21), None);
        // A per-thread default stream (null public handle) is not destroyed by the program.
        ids.stream_created(0xc0, 0, 0x20, 1);
        let pt = ids.data_stream((0xc0, 0, 0x20), 1, &mut out);
        assert_ne!(pt, 0);
        assert_eq!(ids.stream_destroyed(0, 0x20), None);
        assert_eq!(ids.key_from_data(0xc0, 0, 0x20, 1), StreamKey::Legacy(0));
    }

    #[test]
    fn addresses_find_their_allocation_and_a_reused_range_is_a_new_buffer() {
        let mut ids = Ids::default();
        let Op::Alloc { buf: a, .. } = ids.alloc(0x1000, 0x100, 0, MemSpace::Device, None) else {
            panic!()
        };
        assert_eq!(ids.find(0x1010), Some((a, 0x10, 0xf0)));
        assert_eq!(ids.find(0x1100), None);
        // Its free was missed: a new allocation over it replaces it.
        let Op::Alloc { buf: b, .. } = ids.alloc(0x1080, 0x100, 0, MemSpace::Device, None) else {
            panic!()
        };
        assert_eq!(ids.find(0x1010), None);
        assert_eq!(ids.find(0x1080), Some((b, 0, 0x100)));
        assert_eq!(ids.free(0x1080), Some(b));
        assert_eq!(ids.find(0x1080), None);
    }
}
