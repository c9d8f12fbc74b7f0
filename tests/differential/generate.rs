//! Random valid traces. A proptest strategy draws a [`Case`] of small numbers (which object,
//! which range, which op); [`build`] interprets it against the objects alive at that point, so
//! every shrink of a case (fewer ops, smaller numbers) is still a valid trace.

use proptest::prelude::*;
use streamsan::trace::record::Pool;
use streamsan::trace::record::{
    Access, BufId, DeviceId, EventId, MemSpace, Record, StreamFlags, StreamId, StreamKind,
};

use crate::build::Trace;

/// One access, resolved against the buffers that fit the operation.
#[derive(Clone, Debug)]
pub struct RawAcc {
    pub buf: u8,
    pub whole: bool,
    pub off: u8,
    pub len: u8,
    /// May pick a freed buffer (use-after-free); otherwise only live buffers (and the access is
    /// left out when none fits).
    pub freed_ok: bool,
}

#[derive(Clone, Debug)]
pub enum RawOp {
    Launch {
        s: u8,
        reads: Vec<RawAcc>,
        writes: Vec<RawAcc>,
    },
    Memcpy {
        s: u8,
        src: RawAcc,
        dst: RawAcc,
        blocking: bool,
    },
    Memset {
        s: u8,
        dst: RawAcc,
        blocking: bool,
    },
    HostFunc {
        s: u8,
        reads: Vec<RawAcc>,
        writes: Vec<RawAcc>,
    },
    HostAccess {
        reads: Vec<RawAcc>,
        writes: Vec<RawAcc>,
    },
    Record {
        e: u8,
        s: u8,
    },
    Wait {
        s: u8,
        e: u8,
    },
    EventSync {
        e: u8,
    },
    EventQuery {
        e: u8,
        done: bool,
    },
    StreamSync {
        s: u8,
    },
    StreamQuery {
        s: u8,
        done: bool,
    },
    DeviceSync {
        d: u8,
    },
    /// Frees a live buffer mid-trace, on a stream (stream-ordered) or by the host.
    Free {
        b: u8,
        s: Option<u8>,
    },
    /// Allocates a freed buffer id again (same size and space).
    Realloc {
        b: u8,
        s: Option<u8>,
    },
    /// `event_destroy` then `event` of the same id: a new, never-recorded event.
    RecreateEvent {
        e: u8,
    },
}

#[derive(Clone, Debug)]
pub struct RawStream {
    /// 0: created blocking, 1: created non-blocking, 2: per-thread default.
    pub kind: u8,
    pub device: u8,
    pub owner: u8,
}

#[derive(Clone, Debug)]
pub struct RawBuf {
    pub bytes: u64,
    pub space: MemSpace,
    pub device: u8,
    /// Stream-ordered allocation on this stream (device buffers only).
    pub ordered: Option<u8>,
    /// At the end of the trace: 0 leave allocated, 1 host free, 2 stream-ordered free.
    pub end: u8,
    pub end_stream: u8,
    pub end_thread: u8,
}

#[derive(Clone, Debug)]
pub struct Case {
    pub two_devices: bool,
    pub threads: u8,
    pub streams: Vec<RawStream>,
    pub events: u8,
    pub bufs: Vec<RawBuf>,
    /// Out of 4: how often an operation is preceded by synchronization with the stream used
    /// last (a record/wait pair before stream work, a stream sync before host work), so that
    /// cases range from chaotic to mostly ordered.
    pub sync_bias: u8,
    /// (issuing thread, guard, operation): the guard decides the synchronization before it.
    pub ops: Vec<(u8, u8, RawOp)>,
}

fn raw_acc() -> impl Strategy<Value = RawAcc> {
    (
        any::<u8>(),
        prop::bool::weighted(0.3),
        any::<u8>(),
        any::<u8>(),
        prop::bool::weighted(0.15),
    )
        .prop_map(|(buf, whole, off, len, freed_ok)| RawAcc {
            buf,
            whole,
            off,
            len,
            freed_ok,
        })
}

fn accs() -> impl Strategy<Value = Vec<RawAcc>> {
    prop::collection::vec(raw_acc(), 0..=2)
}

fn raw_op() -> impl Strategy<Value = RawOp> {
    let s = any::<u8>;
    let e = any::<u8>;
    prop_oneof![
        8 => (s(), accs(), accs()).prop_map(|(s, reads, writes)| RawOp::Launch { s, reads, writes }),
        5 => (s(), raw_acc(), raw_acc(), any::<bool>())
            .prop_map(|(s, src, dst, blocking)| RawOp::Memcpy { s, src, dst, blocking }),
        2 => (s(), raw_acc(), any::<bool>()).prop_map(|(s, dst, blocking)| RawOp::Memset { s, dst, blocking }),
        2 => (s(), accs(), accs()).prop_map(|(s, reads, writes)| RawOp::HostFunc { s, reads, writes }),
        3 => (accs(), accs()).prop_map(|(reads, writes)| RawOp::HostAccess { reads, writes }),
        4 => (e(), s()).prop_map(|(e, s)| RawOp::Record { e, s }),
        4 => (s(), e()).prop_map(|(s, e)| RawOp::Wait { s, e }),
        1 => e().prop_map(|e| RawOp::EventSync { e }),
        1 => (e(), any::<bool>()).prop_map(|(e, done)| RawOp::EventQuery { e, done }),
        2 => s().prop_map(|s| RawOp::StreamSync { s }),
        1 => (s(), any::<bool>()).prop_map(|(s, done)| RawOp::StreamQuery { s, done }),
        1 => any::<u8>().prop_map(|d| RawOp::DeviceSync { d }),
        1 => (any::<u8>(), prop::option::of(s())).prop_map(|(b, s)| RawOp::Free { b, s }),
        1 => (any::<u8>(), prop::option::of(s())).prop_map(|(b, s)| RawOp::Realloc { b, s }),
        1 => e().prop_map(|e| RawOp::RecreateEvent { e }),
    ]
}

fn raw_buf() -> impl Strategy<Value = RawBuf> {
    let space = prop_oneof![
        4 => Just(MemSpace::Device),
        3 => Just(MemSpace::Pinned),
        2 => Just(MemSpace::Managed),
        2 => Just(MemSpace::Host),
    ];
    (
        16u64..=64,
        space,
        any::<u8>(),
        prop::option::weighted(0.3, any::<u8>()),
        0u8..3,
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(
            |(bytes, space, device, ordered, end, end_stream, end_thread)| RawBuf {
                bytes,
                space,
                device,
                ordered,
                end,
                end_stream,
                end_thread,
            },
        )
}

pub fn case() -> impl Strategy<Value = Case> {
    let stream = (0u8..3, any::<u8>(), any::<u8>()).prop_map(|(kind, device, owner)| RawStream {
        kind,
        device,
        owner,
    });
    (
        prop::bool::weighted(0.2),
        1u8..=2,
        prop::collection::vec(stream, 1..=4),
        1u8..=4,
        prop::collection::vec(raw_buf(), 2..=5),
        0u8..=4,
        prop::collection::vec((any::<u8>(), any::<u8>(), raw_op()), 10..=60),
    )
        .prop_map(
            |(two_devices, threads, streams, events, bufs, sync_bias, ops)| Case {
                two_devices,
                threads,
                streams,
                events,
                bufs,
                sync_bias,
                ops,
            },
        )
}

/// What an operation may touch.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fits {
    /// Copies: anything.
    Any,
    /// Kernels and memsets: device, managed or pinned (mapped) memory, not pageable memory.
    Device,
    /// Host code: pinned, managed or pageable memory.
    Host,
}

struct Buf {
    id: BufId,
    bytes: u64,
    space: MemSpace,
    device: DeviceId,
    live: bool,
}

struct Stream {
    id: StreamId,
    device: DeviceId,
}

struct Builder {
    t: Trace,
    streams: Vec<Stream>,
    bufs: Vec<Buf>,
    events: Vec<EventId>,
    devices: u8,
    /// The stream of the latest stream operation that touched buffers.
    last_stream: Option<StreamId>,
    /// Set when the synchronization guard fires for the operation being built.
    guard: Option<u8>,
}

impl Builder {
    fn stream(&self, s: u8) -> StreamId {
        self.streams[s as usize % self.streams.len()].id
    }

    /// A stream of `device` (its legacy stream exists, so there is one).
    fn stream_on(&self, device: DeviceId, s: u8) -> StreamId {
        let on: Vec<&Stream> = self.streams.iter().filter(|x| x.device == device).collect();
        on[s as usize % on.len()].id
    }

    fn event(&self, e: u8) -> EventId {
        self.events[e as usize % self.events.len()]
    }

    fn access(&self, a: &RawAcc, fits: Fits) -> Option<Access> {
        let fit: Vec<&Buf> = self
            .bufs
            .iter()
            .filter(|b| match fits {
                Fits::Any => true,
                Fits::Device => b.space != MemSpace::Host,
                Fits::Host => b.space.host_visible(),
            })
            .collect();
        let pool = if a.freed_ok {
            fit
        } else {
            fit.into_iter().filter(|b| b.live).collect()
        };
        let b = *pool.get(a.buf as usize % pool.len().max(1))?;
        if a.whole {
            return Some(Access::whole(b.id));
        }
        let off = u64::from(a.off) % b.bytes;
        let len = 1 + u64::from(a.len) % (b.bytes - off);
        Some(Access::bytes(b.id, off, len))
    }

    fn accesses(&self, list: &[RawAcc], fits: Fits) -> Vec<Access> {
        list.iter().filter_map(|a| self.access(a, fits)).collect()
    }

    /// Stream-ordered alloc/free use a stream of the buffer's device; only device memory.
    fn ordered_stream(&self, b: usize, s: Option<u8>) -> Option<StreamId> {
        let buf = &self.bufs[b];
        match s {
            Some(s) if buf.space == MemSpace::Device => Some(self.stream_on(buf.device, s)),
            _ => None,
        }
    }

    fn alloc(&mut self, b: usize, s: Option<u8>) {
        let stream = self.ordered_stream(b, s);
        if stream.is_some() {
            self.before(stream);
        }
        let buf = &mut self.bufs[b];
        buf.live = true;
        let (id, bytes, space, device) = (buf.id, buf.bytes, buf.space, buf.device);
        self.t.push(streamsan::trace::record::Op::Alloc {
            buf: id,
            bytes,
            device,
            space,
            stream,
            addr: None,
            pool: Pool::Driver,
        });
    }

    fn free(&mut self, b: usize, s: Option<u8>) {
        let stream = self.ordered_stream(b, s);
        self.before(stream);
        self.bufs[b].live = false;
        let id = self.bufs[b].id;
        self.t.free(id, stream);
    }

    /// Called before work that touches buffers, on `stream` or by the host (`None`). When the
    /// case's guard fired for this operation, orders it after the latest stream operation: a
    /// record on that stream and a wait before stream work, a stream sync before host work.
    fn before(&mut self, stream: Option<StreamId>) {
        if let (Some(guard), Some(last)) = (self.guard.take(), self.last_stream) {
            match stream {
                Some(s) if s != last => {
                    let e = self.event(guard / 4);
                    self.t.record(e, last);
                    self.t.wait(s, e);
                }
                Some(_) => {}
                None => {
                    self.t.stream_sync(last);
                }
            }
        }
        if stream.is_some() {
            self.last_stream = stream;
        }
    }

    fn op(&mut self, op: &RawOp) {
        match op {
            RawOp::Launch { s, reads, writes } => {
                let (reads, writes) = (
                    self.accesses(reads, Fits::Device),
                    self.accesses(writes, Fits::Device),
                );
                let s = self.stream(*s);
                self.before(Some(s));
                self.t.launch(s, reads, writes);
            }
            RawOp::Memcpy {
                s,
                src,
                dst,
                blocking,
            } => {
                if let (Some(src), Some(dst)) =
                    (self.access(src, Fits::Any), self.access(dst, Fits::Any))
                {
                    let s = self.stream(*s);
                    self.before(Some(s));
                    self.t.memcpy(s, src, dst, *blocking);
                }
            }
            RawOp::Memset { s, dst, blocking } => {
                if let Some(dst) = self.access(dst, Fits::Device) {
                    let s = self.stream(*s);
                    self.before(Some(s));
                    self.t.memset(s, dst, *blocking);
                }
            }
            RawOp::HostFunc { s, reads, writes } => {
                let (reads, writes) = (
                    self.accesses(reads, Fits::Host),
                    self.accesses(writes, Fits::Host),
                );
                let s = self.stream(*s);
                self.before(Some(s));
                self.t.host_func(s, reads, writes);
            }
            RawOp::HostAccess { reads, writes } => {
                let (reads, writes) = (
                    self.accesses(reads, Fits::Host),
                    self.accesses(writes, Fits::Host),
                );
                if !reads.is_empty() || !writes.is_empty() {
                    self.before(None);
                    self.t.host_access(reads, writes);
                }
            }
            RawOp::Record { e, s } => {
                self.t.record(self.event(*e), self.stream(*s));
            }
            RawOp::Wait { s, e } => {
                self.t.wait(self.stream(*s), self.event(*e));
            }
            RawOp::EventSync { e } => {
                self.t.event_sync(self.event(*e));
            }
            RawOp::EventQuery { e, done } => {
                self.t.event_query(self.event(*e), *done);
            }
            RawOp::StreamSync { s } => {
                self.t.stream_sync(self.stream(*s));
            }
            RawOp::StreamQuery { s, done } => {
                self.t.stream_query(self.stream(*s), *done);
            }
            RawOp::DeviceSync { d } => {
                self.t.device_sync(DeviceId::from(*d % self.devices));
            }
            RawOp::Free { b, s } => {
                let live: Vec<usize> = (0..self.bufs.len())
                    .filter(|&i| self.bufs[i].live)
                    .collect();
                if !live.is_empty() {
                    self.free(live[*b as usize % live.len()], *s);
                }
            }
            RawOp::Realloc { b, s } => {
                let freed: Vec<usize> = (0..self.bufs.len())
                    .filter(|&i| !self.bufs[i].live)
                    .collect();
                if !freed.is_empty() {
                    self.alloc(freed[*b as usize % freed.len()], *s);
                }
            }
            RawOp::RecreateEvent { e } => {
                let e = self.event(*e);
                self.t.event_destroy(e);
                self.t.event(e);
            }
        }
    }
}

/// The id of the legacy default stream of device 1 when a case has two devices.
pub const LEGACY_STREAM_DEVICE1: StreamId = 100;

/// Interprets a case as a valid trace: streams and events first, then the allocations, the
/// operations, and the end-of-trace frees.
pub fn build(case: &Case) -> Vec<Record> {
    let devices: u8 = if case.two_devices { 2 } else { 1 };
    let mut b = Builder {
        t: Trace::new(),
        streams: vec![Stream { id: 0, device: 0 }],
        bufs: Vec::new(),
        events: Vec::new(),
        devices,
        last_stream: None,
        guard: None,
    };
    if case.two_devices {
        b.t.stream(
            LEGACY_STREAM_DEVICE1,
            1,
            StreamKind::LegacyDefault,
            StreamFlags::Blocking,
        );
        b.streams.push(Stream {
            id: LEGACY_STREAM_DEVICE1,
            device: 1,
        });
    }
    // Streams are all declared before any work, so that no stream is created after legacy-stream
    // work it would otherwise have to be ordered after.
    let mut per_thread: Vec<(u8, DeviceId)> = Vec::new();
    for (i, rs) in case.streams.iter().enumerate() {
        let id = i as StreamId + 1;
        let device = DeviceId::from(rs.device % devices);
        let owner = rs.owner % case.threads;
        let (kind, flags) = match rs.kind {
            2 if !per_thread.contains(&(owner, device)) => {
                per_thread.push((owner, device));
                (StreamKind::PerThreadDefault, StreamFlags::Blocking)
            }
            1 => (StreamKind::Created, StreamFlags::NonBlocking),
            _ => (StreamKind::Created, StreamFlags::Blocking),
        };
        let thread = if kind == StreamKind::PerThreadDefault {
            u64::from(owner)
        } else {
            0
        };
        b.t.on(thread).stream(id, device, kind, flags);
        b.streams.push(Stream { id, device });
    }
    b.t.on(0);
    for e in 1..=EventId::from(case.events) {
        b.t.event(e);
        b.events.push(e);
    }
    for (i, rb) in case.bufs.iter().enumerate() {
        b.bufs.push(Buf {
            id: i as BufId + 1,
            bytes: rb.bytes,
            space: rb.space,
            device: DeviceId::from(rb.device % devices),
            live: false,
        });
        b.alloc(i, rb.ordered);
    }
    for (thread, guard, op) in &case.ops {
        b.t.on(u64::from(thread % case.threads));
        b.guard = (guard % 4 < case.sync_bias).then_some(*guard);
        b.op(op);
    }
    for (i, rb) in case.bufs.iter().enumerate() {
        if b.bufs[i].live && rb.end != 0 {
            b.t.on(u64::from(rb.end_thread % case.threads));
            b.guard = (rb.end_stream % 4 < case.sync_bias).then_some(rb.end_stream);
            b.free(i, (rb.end == 2).then_some(rb.end_stream));
        }
    }
    b.t.records
}
