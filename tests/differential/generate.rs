//! Random valid traces. A proptest strategy draws a [`Case`] of small numbers (which object,
//! which range, which op); [`build`] interprets it against the objects alive at that point, so
//! every shrink of a case (fewer ops, smaller numbers) is still a valid trace.
//!
//! About a third of the cases also use trace v1 minor 1: caching blocks (some of the initial
//! buffers, and blocks allocated mid-trace over the bytes of freed blocks, fully or partly, never
//! over a live one; `record_stream`; host frees; rarely a driver allocation at an address over
//! freed caching bytes, whose bytes no caching block takes again), graph captures (begun on a
//! created stream, forked to other streams by record/wait, joined back before `graph_end`) and
//! their launches on any stream. The builder keeps every capture valid: while a stream captures
//! no legacy stream is used, no device is synchronized, no capturing stream or captured event is
//! synchronized or queried, a capturing stream waits only on events recorded in its own
//! capture, and no stream-ordered allocation or free of an ordinary buffer goes to a capturing
//! stream; a buffer id a live graph names is not allocated again, and a caching block is not
//! freed while a stream its `record_stream` named captures (what "work enqueued on it" means
//! then is left open).
//!
//! Graph memory nodes (R17): while a stream captures, a stream-ordered `alloc` of a new buffer
//! id on a stream of the capture makes an allocation node; captured operations use it (on
//! streams ordered after the node by captured record/wait, or not: those race with its birth at
//! each launch), and a stream-ordered `free` on a stream of a capture makes a free node: of one
//! of the graph's own allocations (on any of its streams, or on the origin after the join at
//! `graph_end`), or of another graph's allocation that a launch has allocated. After launches
//! the program uses a live graph allocation like any buffer, may free it (host or
//! stream-ordered), and may use it after a free (use after free). The builder runs each launch's
//! memory nodes over the allocations' states and leaves out a launch that would be invalid: an
//! allocation node whose buffer a previous launch allocated and nothing freed since (CUDA fails
//! such a launch), a free node whose buffer is not live (double free). It also keeps these
//! valid: a graph frees an allocation once, an allocation its graph frees is freed by no other
//! graph nor by the program, nothing names a graph allocation outside a capture before a
//! launch allocated it, a capture names another graph's allocation only once a launch allocated
//! it, a free node names a freed allocation only while its graph exists, and graph allocation
//! ids are never allocated again.
//!
//! Trace v1 minor 3 (`stream_destroy`, R20): any case may destroy a created stream that is not
//! capturing (a `StreamDestroy` among its operations) and declare created streams mid-trace
//! (`StreamCreate`: a destroyed id again, a new stream, or a new id). About one case in eight
//! also churns: 20 to 60 `StreamCycle`s spread among its operations, each declaring a stream
//! (often a destroyed id again), launching on it and destroying it. Around each destroy, by its
//! `how` ([`Builder::destroy`]): nothing (the stream's work stays unordered, and races with
//! later work of other streams), a `stream_sync` before it (the fixed twin), an event recorded
//! on it before it that the next operation waits on or synchronizes, a `device_sync`, a
//! `stream_sync` of the legacy stream or a launch on the legacy stream after it (which R6 makes
//! wait for a blocking stream only), each followed by accesses of what the stream touched.
//! Graphs captured on a stream outlive its destroy and are launched like any other. The
//! builder keeps destroys valid: never stream 0, a legacy or a per-thread default stream, a
//! stream being captured, or one a live caching block's `record_stream` named (what the
//! block's free waits for then is not said); a destroyed id is named by nothing until it is
//! declared again (no caching pool, no stream-ordered alloc or free, no guard record/sync).
//!
//! Three patterns on which the engine once disagreed with the documented rules are generated like
//! any other (`disputed_traces` in tests/differential.rs pins each): a caching block taking over
//! bytes that a `record_stream` snapshot waits on but nothing accessed, a captured record right
//! after a captured wait on the same stream, and a wait on an event captured under a graph id
//! that is capturing again.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::strategy::Union;
use streamsan::trace::record::{
    Access, BufId, DeviceId, EventId, GraphId, MemSpace, Op, Pool, Record, StreamFlags, StreamId,
    StreamKind,
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
        /// Atomic updates (R19); empty in most launches.
        atomics: Vec<RawAcc>,
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
    /// Minor 1: a new caching block of `16 + bytes % 49` bytes, over the bytes of a freed block
    /// when `reuse % 4 != 0` and it fits (`shift` picks the same address, a higher or a lower
    /// one), else at fresh bytes; with `driver`, a driver allocation over freed caching bytes.
    CachingAlloc {
        bytes: u8,
        device: u8,
        pinned: bool,
        pool: u8,
        reuse: u8,
        shift: u8,
        driver: bool,
    },
    /// Minor 1: `record_stream` of a live caching block.
    RecordStream {
        b: u8,
        s: u8,
    },
    /// Minor 1: the host frees a live caching block.
    CachingFree {
        b: u8,
    },
    /// Minor 1: begins a capture on a created stream that is not capturing.
    GraphBegin {
        s: u8,
    },
    /// Minor 1: a stream of a capture records `e`, and a stream outside any capture waits on it.
    GraphFork {
        g: u8,
        from: u8,
        to: u8,
        e: u8,
    },
    /// Minor 1: a stream that joined a capture records `e`, and the origin waits on it.
    GraphJoin {
        g: u8,
        j: u8,
        e: u8,
    },
    /// Minor 1: joins every forked stream back to the origin (by `e`), then ends the capture;
    /// first, when `scratch % 3 != 0`, frees on the origin (free nodes after the join) those
    /// of the graph's own allocations it may free that the bits of `scratch` pick.
    GraphEnd {
        g: u8,
        e: u8,
        scratch: u8,
    },
    GraphLaunch {
        g: u8,
        s: u8,
    },
    GraphDestroy {
        g: u8,
    },
    /// Minor 1: a stream-ordered allocation of a new buffer id, `16 + bytes % 49` bytes, on a
    /// stream of a capture: an allocation node.
    GraphAlloc {
        g: u8,
        lane: u8,
        bytes: u8,
    },
    /// Minor 1: a stream-ordered free, on a stream of a capture, of a graph allocation that this
    /// capture may free: a free node.
    GraphFree {
        g: u8,
        lane: u8,
        b: u8,
    },
    /// Minor 1: the program frees a live graph allocation, on a stream (stream-ordered, not a
    /// capturing one) or by the host.
    GraphAllocFree {
        b: u8,
        s: Option<u8>,
    },
    /// Minor 1: a launch on a stream of a capture that reads (or writes) a graph allocation.
    GraphUse {
        g: u8,
        lane: u8,
        acc: RawAcc,
        write: bool,
    },
    /// Minor 3: destroys a created stream that is not capturing (nor named by the
    /// `record_stream` of a live caching block); `how` picks what comes right before or after
    /// it ([`Builder::destroy`]), which touches `follow`.
    StreamDestroy {
        s: u8,
        how: u8,
        follow: Vec<RawAcc>,
    },
    /// Minor 3: declares a created stream mid-trace ([`Builder::create_stream`]).
    StreamCreate {
        reuse: u8,
        blocking: bool,
        device: u8,
    },
    /// Minor 3: a whole life of a stream (churn cases): declared as by `StreamCreate`, used by
    /// one launch for each `(reads, writes)` of `work`, destroyed as by `StreamDestroy`, with
    /// what comes after touching what the work touched.
    StreamCycle {
        reuse: u8,
        blocking: bool,
        device: u8,
        work: Vec<(Vec<RawAcc>, Vec<RawAcc>)>,
        how: u8,
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
    /// A caching block (device or pinned space) in cases with caching blocks.
    pub caching: bool,
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
    /// Minor 1: the case uses caching blocks.
    pub caching: bool,
    /// Minor 1: the case captures and launches graphs.
    pub graphs: bool,
    /// Launch every graph not destroyed once more at the end, on the stream this picks.
    pub final_launch: Option<u8>,
    /// Minor 3, churn cases only: `StreamCycle` operations (issuing thread, guard, cycle),
    /// spread evenly among `ops`; empty in other cases.
    pub cycles: Vec<(u8, u8, RawOp)>,
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

/// The operations of a case; the minor-1 ones only where the case uses them.
fn raw_op(caching: bool, graphs: bool) -> impl Strategy<Value = RawOp> {
    let s = any::<u8>;
    let e = any::<u8>;
    let mut ops: Vec<(u32, BoxedStrategy<RawOp>)> = vec![
        (
            8,
            (s(), accs(), accs(), prop::collection::vec(raw_acc(), 0..=1))
                .prop_map(|(s, reads, writes, atomics)| RawOp::Launch {
                    s,
                    reads,
                    writes,
                    atomics,
                })
                .boxed(),
        ),
        (
            5,
            (s(), raw_acc(), raw_acc(), any::<bool>())
                .prop_map(|(s, src, dst, blocking)| RawOp::Memcpy {
                    s,
                    src,
                    dst,
                    blocking,
                })
                .boxed(),
        ),
        (
            2,
            (s(), raw_acc(), any::<bool>())
                .prop_map(|(s, dst, blocking)| RawOp::Memset { s, dst, blocking })
                .boxed(),
        ),
        (
            2,
            (s(), accs(), accs())
                .prop_map(|(s, reads, writes)| RawOp::HostFunc { s, reads, writes })
                .boxed(),
        ),
        (
            3,
            (accs(), accs())
                .prop_map(|(reads, writes)| RawOp::HostAccess { reads, writes })
                .boxed(),
        ),
        (
            4,
            (e(), s()).prop_map(|(e, s)| RawOp::Record { e, s }).boxed(),
        ),
        (
            4,
            (s(), e()).prop_map(|(s, e)| RawOp::Wait { s, e }).boxed(),
        ),
        (1, e().prop_map(|e| RawOp::EventSync { e }).boxed()),
        (
            1,
            (e(), any::<bool>())
                .prop_map(|(e, done)| RawOp::EventQuery { e, done })
                .boxed(),
        ),
        (2, s().prop_map(|s| RawOp::StreamSync { s }).boxed()),
        (
            1,
            (s(), any::<bool>())
                .prop_map(|(s, done)| RawOp::StreamQuery { s, done })
                .boxed(),
        ),
        (1, any::<u8>().prop_map(|d| RawOp::DeviceSync { d }).boxed()),
        (
            1,
            (any::<u8>(), prop::option::of(s()))
                .prop_map(|(b, s)| RawOp::Free { b, s })
                .boxed(),
        ),
        (
            1,
            (any::<u8>(), prop::option::of(s()))
                .prop_map(|(b, s)| RawOp::Realloc { b, s })
                .boxed(),
        ),
        (1, e().prop_map(|e| RawOp::RecreateEvent { e }).boxed()),
        // Minor 3.
        (
            1,
            (s(), any::<u8>(), accs())
                .prop_map(|(s, how, follow)| RawOp::StreamDestroy { s, how, follow })
                .boxed(),
        ),
        (
            1,
            (any::<u8>(), any::<bool>(), any::<u8>())
                .prop_map(|(reuse, blocking, device)| RawOp::StreamCreate {
                    reuse,
                    blocking,
                    device,
                })
                .boxed(),
        ),
    ];
    if caching {
        ops.extend([
            (
                5,
                (
                    (any::<u8>(), any::<u8>(), prop::bool::weighted(0.3), s()),
                    (any::<u8>(), any::<u8>(), prop::bool::weighted(0.08)),
                )
                    .prop_map(|((bytes, device, pinned, pool), (reuse, shift, driver))| {
                        RawOp::CachingAlloc {
                            bytes,
                            device,
                            pinned,
                            pool,
                            reuse,
                            shift,
                            driver,
                        }
                    })
                    .boxed(),
            ),
            (
                2,
                (any::<u8>(), s())
                    .prop_map(|(b, s)| RawOp::RecordStream { b, s })
                    .boxed(),
            ),
            (
                3,
                any::<u8>().prop_map(|b| RawOp::CachingFree { b }).boxed(),
            ),
        ]);
    }
    if graphs {
        let g = any::<u8>;
        ops.extend([
            (3, s().prop_map(|s| RawOp::GraphBegin { s }).boxed()),
            (
                3,
                (g(), s(), s(), e())
                    .prop_map(|(g, from, to, e)| RawOp::GraphFork { g, from, to, e })
                    .boxed(),
            ),
            (
                1,
                (g(), s(), e())
                    .prop_map(|(g, j, e)| RawOp::GraphJoin { g, j, e })
                    .boxed(),
            ),
            (
                4,
                (g(), e(), any::<u8>())
                    .prop_map(|(g, e, scratch)| RawOp::GraphEnd { g, e, scratch })
                    .boxed(),
            ),
            (
                6,
                (g(), s())
                    .prop_map(|(g, s)| RawOp::GraphLaunch { g, s })
                    .boxed(),
            ),
            (1, g().prop_map(|g| RawOp::GraphDestroy { g }).boxed()),
            // Minor 3: destroys a stream a graph was captured on, when there is one (R20 rule
            // 6: the graph may still be launched).
            (
                2,
                (s(), any::<u8>(), accs())
                    .prop_map(|(s, how, follow)| RawOp::StreamDestroy {
                        s,
                        how: how | 0x20,
                        follow,
                    })
                    .boxed(),
            ),
            (
                5,
                (g(), s(), any::<u8>())
                    .prop_map(|(g, lane, bytes)| RawOp::GraphAlloc { g, lane, bytes })
                    .boxed(),
            ),
            (
                3,
                (g(), s(), any::<u8>())
                    .prop_map(|(g, lane, b)| RawOp::GraphFree { g, lane, b })
                    .boxed(),
            ),
            (
                3,
                (any::<u8>(), prop::option::of(s()))
                    .prop_map(|(b, s)| RawOp::GraphAllocFree { b, s })
                    .boxed(),
            ),
            (
                8,
                (g(), s(), raw_acc(), any::<bool>())
                    .prop_map(|(g, lane, acc, write)| RawOp::GraphUse {
                        g,
                        lane,
                        acc,
                        write,
                    })
                    .boxed(),
            ),
        ]);
    }
    Union::new_weighted(ops)
}

/// Minor 3: a stream's whole life, for churn cases.
fn stream_cycle() -> impl Strategy<Value = RawOp> {
    (
        any::<u8>(),
        any::<bool>(),
        any::<u8>(),
        prop::collection::vec((accs(), accs()), 1..=3),
        any::<u8>(),
    )
        .prop_map(|(reuse, blocking, device, work, how)| RawOp::StreamCycle {
            reuse,
            blocking,
            device,
            work,
            how,
        })
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
        any::<bool>(),
    )
        .prop_map(
            |(bytes, space, device, ordered, end, end_stream, end_thread, caching)| RawBuf {
                bytes,
                space,
                device,
                ordered,
                end,
                end_stream,
                end_thread,
                caching,
            },
        )
}

pub fn case() -> impl Strategy<Value = Case> {
    // (caching blocks, graphs): about a third of the cases use minor 1.
    let minor1 = prop_oneof![
        13 => Just((false, false)),
        3 => Just((true, false)),
        6 => Just((false, true)),
        2 => Just((true, true)),
    ];
    // Minor 3: about one case in eight churns through many streams (20 to 60 created, used and
    // destroyed); the others may destroy and create streams now and then among their ops.
    let churn = prop::bool::weighted(0.125);
    (minor1, churn).prop_flat_map(|((caching, graphs), churn)| {
        let stream =
            (0u8..3, any::<u8>(), any::<u8>()).prop_map(|(kind, device, owner)| RawStream {
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
            prop::collection::vec((any::<u8>(), any::<u8>(), raw_op(caching, graphs)), 10..=60),
            prop::option::weighted(0.7, any::<u8>()),
            prop::collection::vec(
                (any::<u8>(), any::<u8>(), stream_cycle()),
                if churn { 20..=60 } else { 0..=0 },
            ),
        )
            .prop_map(
                move |(
                    two_devices,
                    threads,
                    streams,
                    events,
                    bufs,
                    sync_bias,
                    ops,
                    final_launch,
                    cycles,
                )| Case {
                    two_devices,
                    threads,
                    streams,
                    events,
                    bufs,
                    sync_bias,
                    ops,
                    caching,
                    graphs,
                    final_launch,
                    cycles,
                },
            )
    })
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
    /// A caching block (minor 1).
    caching: bool,
    /// Its address (caching blocks, and driver allocations made at an address).
    addr: Option<u64>,
    /// The streams `record_stream` named since the block's alloc.
    recorded: Vec<StreamId>,
    /// A graph allocation (an allocation node's buffer); `live` then follows its `state`.
    graph: Option<GraphAlloc>,
}

/// Where a graph allocation stands as launches run (the order the trace issues them in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    /// Declared by its capture; no launch of its graph has run yet.
    Never,
    /// Allocated by a launch's allocation node, not freed since.
    Live,
    /// Freed (by a free node or by the program) since.
    Dead,
}

struct GraphAlloc {
    /// The index in `Builder::graphs` of the graph whose allocation node it is.
    owner: usize,
    state: Life,
    /// The graphs (indices) with a free node for it: only the owner, or only other graphs.
    freers: Vec<usize>,
}

/// What a launch of a graph does to graph allocations, in capture order.
#[derive(Clone, Copy)]
enum MemNode {
    Alloc(usize),
    Free(usize),
    /// A captured access of it.
    Use(usize),
}

struct Stream {
    id: StreamId,
    device: DeviceId,
    legacy: bool,
    /// A created stream (not a default one): it may be destroyed (minor 3).
    created: bool,
}

/// The bytes of a freed caching block: where later blocks may go.
struct Freed {
    device: DeviceId,
    pinned: bool,
    addr: u64,
    bytes: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum GraphState {
    Capturing,
    Ended,
    Destroyed,
}

struct Graph {
    id: GraphId,
    origin: StreamId,
    state: GraphState,
    /// The streams that joined the capture, in the order they joined (not the origin).
    joined: Vec<StreamId>,
    /// The accesses of its captured operations.
    accs: Vec<Access>,
    /// Its memory nodes and its nodes' accesses of graph allocations, in capture order (buffer
    /// indices).
    mem: Vec<MemNode>,
}

/// Caching blocks of device memory start at this address, pinned ones at [`PINNED_BASE`]: the
/// two never share bytes.
const DEVICE_BASE: u64 = 0x1_0000;
const PINNED_BASE: u64 = 0x8_0000;

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
    /// Every caching block freed so far.
    freed: Vec<Freed>,
    /// Bytes a driver allocation took at an address, `(device, start, end)`: no caching block
    /// goes there again (whether a freed driver allocation's bytes keep a history is not said).
    driver_bytes: Vec<(DeviceId, u64, u64)>,
    /// The first never-used address of each (device, pinned) region.
    fresh: BTreeMap<(DeviceId, bool), u64>,
    graphs: Vec<Graph>,
    /// Capturing streams, with the index of their graph in `graphs`.
    capturing: BTreeMap<StreamId, usize>,
    /// Events whose latest record was captured, with the index of that capture's graph. After
    /// the capture ended such an event may be waited on outside a capture, where it orders
    /// nothing, but it is never synchronized or queried.
    captured_events: BTreeMap<EventId, usize>,
    /// Minor 3: destroyed stream ids not declared again since.
    destroyed: Vec<StreamId>,
    /// Minor 3: the id the next new stream gets.
    next_stream: StreamId,
    /// Minor 3: an event recorded on a stream right before its destroy, which the next
    /// operation that touches buffers waits on (a stream) or synchronizes (the host).
    pending_wait: Option<EventId>,
}

impl Builder {
    fn any_capture(&self) -> bool {
        !self.capturing.is_empty()
    }

    fn is_legacy(&self, s: StreamId) -> bool {
        self.streams.iter().any(|x| x.id == s && x.legacy)
    }

    /// Legacy streams are left alone while any stream captures.
    fn usable(&self, s: StreamId) -> bool {
        !(self.any_capture() && self.is_legacy(s))
    }

    fn capturing(&self, s: StreamId) -> bool {
        self.capturing.contains_key(&s)
    }

    fn stream(&self, s: u8) -> StreamId {
        let usable: Vec<StreamId> = self
            .streams
            .iter()
            .map(|x| x.id)
            .filter(|&x| self.usable(x))
            .collect();
        usable[s as usize % usable.len()]
    }

    /// A stream that neither captures nor is a legacy stream in use during a capture.
    fn free_stream(&self, s: u8, created: bool) -> Option<StreamId> {
        let ok: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|x| !(created && x.legacy))
            .map(|x| x.id)
            .filter(|&x| self.usable(x) && !self.capturing(x))
            .collect();
        ok.get(s as usize % ok.len().max(1)).copied()
    }

    /// The stream whose pool a caching block of `device` belongs to (any stream: naming it is
    /// no use of it).
    fn pool_stream(&self, device: DeviceId, s: u8) -> StreamId {
        let on: Vec<&Stream> = self.streams.iter().filter(|x| x.device == device).collect();
        on[s as usize % on.len()].id
    }

    fn event(&self, e: u8) -> EventId {
        self.events[e as usize % self.events.len()]
    }

    /// Whether an operation may name graph allocation `ga`: outside a capture (`graph` is
    /// `None`) once a launch allocated it (live, or with `freed_ok` freed since); in capture
    /// `graph` when it is that graph's own allocation or one a launch has allocated (live or
    /// freed now). So a launch never finds it not yet allocated (docs/ordering-model.md leaves
    /// an access before the first launch unmodelled).
    fn nameable(ga: &GraphAlloc, freed_ok: bool, graph: Option<usize>) -> bool {
        match graph {
            Some(g) => ga.owner == g || ga.state != Life::Never,
            None => ga.state == Life::Live || (freed_ok && ga.state == Life::Dead),
        }
    }

    /// A buffer for `a` among those that fit, for an operation captured into `graph` (`None`:
    /// not captured).
    fn access(&self, a: &RawAcc, fits: Fits, graph: Option<usize>) -> Option<Access> {
        let fit: Vec<&Buf> = self
            .bufs
            .iter()
            .filter(|b| match fits {
                Fits::Any => true,
                Fits::Device => b.space != MemSpace::Host,
                Fits::Host => b.space.host_visible(),
            })
            .collect();
        let pool: Vec<&Buf> = fit
            .into_iter()
            .filter(|b| match &b.graph {
                Some(ga) => Self::nameable(ga, a.freed_ok, graph),
                None => a.freed_ok || b.live,
            })
            .collect();
        let b = *pool.get(a.buf as usize % pool.len().max(1))?;
        Some(Self::range(a, b))
    }

    fn range(a: &RawAcc, b: &Buf) -> Access {
        if a.whole {
            return Access::whole(b.id);
        }
        let off = u64::from(a.off) % b.bytes;
        let len = 1 + u64::from(a.len) % (b.bytes - off);
        Access::bytes(b.id, off, len)
    }

    fn accesses(&self, list: &[RawAcc], fits: Fits, graph: Option<usize>) -> Vec<Access> {
        list.iter()
            .filter_map(|a| self.access(a, fits, graph))
            .collect()
    }

    /// The capture an operation on `s` goes into.
    fn graph_of(&self, s: StreamId) -> Option<usize> {
        self.capturing.get(&s).copied()
    }

    /// Stream-ordered alloc/free use a stream of the buffer's device; only device memory, and
    /// never a capturing stream (nor a legacy one during a capture).
    fn ordered_stream(&self, b: usize, s: Option<u8>) -> Option<StreamId> {
        let buf = &self.bufs[b];
        match s {
            Some(s) if buf.space == MemSpace::Device => {
                let on: Vec<StreamId> = self
                    .streams
                    .iter()
                    .filter(|x| x.device == buf.device)
                    .map(|x| x.id)
                    .filter(|&x| self.usable(x) && !self.capturing(x))
                    .collect();
                on.get(s as usize % on.len().max(1)).copied()
            }
            _ => None,
        }
    }

    /// The operation just built on `s` (`None`: by the host) makes `accs`: a captured one's
    /// accesses are the graph's (its buffer ids are then not allocated again).
    fn note<'a>(&mut self, s: Option<StreamId>, accs: impl IntoIterator<Item = &'a Access>) {
        if let Some(g) = s.and_then(|s| self.capturing.get(&s).copied()) {
            for a in accs {
                // Buffer ids are their index in `bufs` plus one.
                let b = a.buf as usize - 1;
                if self.bufs[b].graph.is_some() {
                    self.graphs[g].mem.push(MemNode::Use(b));
                }
                self.graphs[g].accs.push(a.clone());
            }
        }
    }

    /// True when a graph not destroyed names buffer id `id`: it is not allocated again, so
    /// that a launch's accesses name one object.
    fn in_graph(&self, id: BufId) -> bool {
        self.graphs
            .iter()
            .any(|g| g.state != GraphState::Destroyed && g.accs.iter().any(|a| a.buf == id))
    }

    fn record(&mut self, e: EventId, s: StreamId) {
        self.t.record(e, s);
        match self.capturing.get(&s) {
            Some(&g) => self.captured_events.insert(e, g),
            None => self.captured_events.remove(&e),
        };
    }

    /// A wait, unless it would break a capture rule; a stream outside any capture waiting on a
    /// captured event joins that capture.
    fn wait(&mut self, s: StreamId, e: EventId) -> bool {
        let captured = self.captured_events.get(&e).copied();
        let active = captured.filter(|&g| self.graphs[g].state == GraphState::Capturing);
        match (active, self.capturing.get(&s).copied()) {
            (Some(g), Some(h)) if g != h => return false,
            (Some(g), None) => {
                if !self.usable(s) {
                    return false;
                }
                self.capturing.insert(s, g);
                self.graphs[g].joined.push(s);
            }
            (None, Some(_)) => return false,
            _ => {}
        }
        self.t.wait(s, e);
        true
    }

    fn alloc(&mut self, b: usize, s: Option<u8>) {
        if self.bufs[b].caching {
            return self.caching_realloc(b, s.unwrap_or(0));
        }
        let stream = self.ordered_stream(b, s);
        if stream.is_some() {
            self.before(stream);
        }
        let buf = &mut self.bufs[b];
        buf.live = true;
        let (id, bytes, space, device) = (buf.id, buf.bytes, buf.space, buf.device);
        self.t.push(Op::Alloc {
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
        if self.bufs[b].caching {
            return self.caching_free(b);
        }
        let stream = self.ordered_stream(b, s);
        self.before(stream);
        self.bufs[b].live = false;
        if let Some(ga) = &mut self.bufs[b].graph {
            assert_eq!(
                ga.state,
                Life::Live,
                "the program frees a graph allocation not live"
            );
            ga.state = Life::Dead;
        }
        let id = self.bufs[b].id;
        self.t.free(id, stream);
    }

    /// Runs the memory nodes of a launch of graph `g` over the graph allocations' states, if
    /// that launch is valid: an allocation node finds its buffer not live (CUDA fails the
    /// launch of a graph whose allocation from a previous launch is unfreed), a free node finds
    /// it live (else a double free), and a node's access finds it allocated at least once.
    /// Returns false, changing nothing, when the launch would be invalid.
    fn run_memory_nodes(&mut self, g: usize) -> bool {
        let mut state: BTreeMap<usize, Life> = BTreeMap::new();
        for node in &self.graphs[g].mem {
            let b = match *node {
                MemNode::Alloc(b) | MemNode::Free(b) | MemNode::Use(b) => b,
            };
            let now = *state
                .entry(b)
                .or_insert_with(|| self.bufs[b].graph.as_ref().unwrap().state);
            let next = match (*node, now) {
                (MemNode::Alloc(_), Life::Never | Life::Dead) => Life::Live,
                (MemNode::Free(_), Life::Live) => Life::Dead,
                (MemNode::Use(_), Life::Live | Life::Dead) => now,
                _ => return false,
            };
            state.insert(b, next);
        }
        for (b, life) in state {
            self.bufs[b].graph.as_mut().unwrap().state = life;
            self.bufs[b].live = life == Life::Live;
        }
        true
    }

    /// A stream of capture `g` (picked by `lane`), with `g` picked among the captures going on.
    fn lane(&self, g: u8, lane: u8) -> Option<(usize, StreamId)> {
        let active = self.graphs_in(GraphState::Capturing);
        let g = *active.get(g as usize % active.len().max(1))?;
        let members: Vec<StreamId> = self
            .capturing
            .iter()
            .filter(|(_, x)| **x == g)
            .map(|(s, _)| *s)
            .collect();
        Some((g, members[lane as usize % members.len()]))
    }

    /// Whether capture `g` may add a free node for graph allocation `ga`: "These allocations
    /// cannot be freed outside the owning graph, and they can only be freed once in the owning
    /// graph" when its graph frees it; "Allocations which are not freed in the same graph can
    /// be freed by ... launching a graph with a free node for that allocation"
    /// (cuGraphAddMemAllocNode). A graph frees one allocation once, and one not its own only
    /// once a launch allocated it, while it is live or freed with its allocating graph not
    /// destroyed: "Graph destruction does not automatically free any live graph-allocated
    /// memory ... The allocation must subsequently be freed in another graph" ("Graph Memory
    /// Nodes"), but a freed one whose allocation node is gone is no graph allocation any more
    /// (the engine rejects a free node for it).
    fn may_free(&self, ga: &GraphAlloc, g: usize) -> bool {
        if ga.owner == g {
            return ga.freers.is_empty();
        }
        let when = match ga.state {
            Life::Live => true,
            Life::Dead => self.graphs[ga.owner].state != GraphState::Destroyed,
            Life::Never => false,
        };
        when && !ga.freers.contains(&ga.owner) && !ga.freers.contains(&g)
    }

    /// True when no live caching block and no driver allocation at an address has any of the
    /// bytes `[addr, addr + bytes)` of `device`.
    fn vacant(&self, device: DeviceId, addr: u64, bytes: u64, _driver: bool) -> bool {
        let end = addr + bytes;
        let clash = |d: DeviceId, a: u64, e: u64| d == device && a < end && addr < e;
        !self.bufs.iter().any(|b| {
            b.live && b.caching && clash(b.device, b.addr.unwrap(), b.addr.unwrap() + b.bytes)
        }) && !self.driver_bytes.iter().any(|&(d, a, e)| clash(d, a, e))
    }

    /// Where a new block of `bytes` goes: over a freed block (`reuse % 4 != 0`, or always for a
    /// driver allocation, which needs one) at its address, higher or lower by `shift`, if that
    /// is vacant; else (not for a driver allocation) at fresh bytes.
    fn place(
        &mut self,
        device: DeviceId,
        pinned: bool,
        bytes: u64,
        reuse: u8,
        shift: u8,
        driver: bool,
    ) -> Option<u64> {
        let base = if pinned { PINNED_BASE } else { DEVICE_BASE };
        let fresh = *self.fresh.entry((device, pinned)).or_insert(base);
        let old: Vec<(u64, u64)> = self
            .freed
            .iter()
            .filter(|f| f.device == device && f.pinned == pinned)
            .map(|f| (f.addr, f.bytes))
            .collect();
        if (driver || !reuse.is_multiple_of(4)) && !old.is_empty() {
            let (a, n) = old[reuse as usize / 4 % old.len()];
            let addr = match shift % 3 {
                0 => a,
                1 => a + u64::from(shift) % n,
                _ => a.saturating_sub(u64::from(shift) % bytes).max(base),
            };
            if self.vacant(device, addr, bytes, driver) {
                self.fresh.insert((device, pinned), fresh.max(addr + bytes));
                return Some(addr);
            }
        }
        if driver {
            return None;
        }
        let addr = fresh + 8 * u64::from(shift % 2);
        self.fresh.insert((device, pinned), addr + bytes);
        Some(addr)
    }

    fn push_caching_alloc(&mut self, b: usize, pool: u8) {
        let buf = &self.bufs[b];
        let (id, bytes, space, device, addr) = (buf.id, buf.bytes, buf.space, buf.device, buf.addr);
        let stream = Some(self.pool_stream(device, pool));
        self.t.push(Op::Alloc {
            buf: id,
            bytes,
            device,
            space,
            stream,
            addr,
            pool: Pool::Caching,
        });
    }

    /// A new caching block (or driver allocation at an address).
    fn caching_alloc(&mut self, op: &RawOp) {
        let RawOp::CachingAlloc {
            bytes,
            device,
            pinned,
            pool,
            reuse,
            shift,
            driver,
        } = *op
        else {
            unreachable!()
        };
        let device = DeviceId::from(device % self.devices);
        let bytes = 16 + u64::from(bytes) % 49;
        let Some(addr) = self.place(device, pinned, bytes, reuse, shift, driver) else {
            return;
        };
        let space = if pinned {
            MemSpace::Pinned
        } else {
            MemSpace::Device
        };
        let id = self.bufs.len() as BufId + 1;
        self.bufs.push(Buf {
            id,
            bytes,
            space,
            device,
            live: true,
            caching: !driver,
            addr: Some(addr),
            recorded: Vec::new(),
            graph: None,
        });
        if driver {
            self.driver_bytes.push((device, addr, addr + bytes));
            self.t.push(Op::Alloc {
                buf: id,
                bytes,
                device,
                space,
                stream: None,
                addr: Some(addr),
                pool: Pool::Driver,
            });
        } else {
            self.push_caching_alloc(self.bufs.len() - 1, pool);
        }
    }

    /// The id of a freed caching block, allocated again as a new block of the same size.
    fn caching_realloc(&mut self, b: usize, pick: u8) {
        let (device, pinned, bytes) = {
            let buf = &self.bufs[b];
            (buf.device, buf.space == MemSpace::Pinned, buf.bytes)
        };
        if let Some(addr) = self.place(device, pinned, bytes, pick, 0, false) {
            let buf = &mut self.bufs[b];
            buf.live = true;
            buf.addr = Some(addr);
            buf.recorded.clear();
            self.push_caching_alloc(b, pick);
        }
    }

    fn caching_free(&mut self, b: usize) {
        if self.bufs[b].recorded.iter().any(|&s| self.capturing(s)) {
            return;
        }
        self.before(None);
        let buf = &mut self.bufs[b];
        buf.live = false;
        self.freed.push(Freed {
            device: buf.device,
            pinned: buf.space == MemSpace::Pinned,
            addr: buf.addr.unwrap(),
            bytes: buf.bytes,
        });
        let id = buf.id;
        self.t.free(id, None);
    }

    /// Joins every stream that joined capture `g` back to its origin, and ends it.
    fn end_capture(&mut self, g: usize, e: EventId) {
        self.end_capture_freeing(g, e, 0);
    }

    /// [`Builder::end_capture`], with free nodes on the origin after the join for the graph's
    /// own allocations that `scratch` picks (none when `scratch % 3 == 0`).
    fn end_capture_freeing(&mut self, g: usize, e: EventId, scratch: u8) {
        let origin = self.graphs[g].origin;
        for j in self.graphs[g].joined.clone() {
            self.record(e, j);
            assert!(self.wait(origin, e));
        }
        if !scratch.is_multiple_of(3) {
            let own: Vec<usize> = (0..self.bufs.len())
                .filter(|&i| {
                    self.bufs[i]
                        .graph
                        .as_ref()
                        .is_some_and(|ga| ga.owner == g && self.may_free(ga, g))
                })
                .collect();
            for (k, b) in own.into_iter().enumerate() {
                if (scratch >> (k % 8)) & 1 == 1 {
                    self.bufs[b].graph.as_mut().unwrap().freers.push(g);
                    self.graphs[g].mem.push(MemNode::Free(b));
                    self.t.free(self.bufs[b].id, Some(origin));
                }
            }
        }
        self.t.graph_end(self.graphs[g].id, origin);
        self.capturing.retain(|_, x| *x != g);
        self.graphs[g].state = GraphState::Ended;
    }

    /// Minor 3: the streams that may be destroyed: created ones, not capturing (CUDA refuses
    /// to destroy a stream being captured), and not named by the `record_stream` of a live
    /// caching block (what its free then waits for is left open).
    fn destroyable(&self) -> Vec<StreamId> {
        self.streams
            .iter()
            .filter(|x| x.created && !self.capturing(x.id))
            .filter(|x| {
                !self
                    .bufs
                    .iter()
                    .any(|b| b.live && b.caching && b.recorded.contains(&x.id))
            })
            .map(|x| x.id)
            .collect()
    }

    /// Minor 3: declares a created stream on the device `device` picks, by the issuing thread:
    /// a destroyed id again (a new stream, R20) when `reuse` is even and there is one, else a
    /// new id. Returns its id.
    fn create_stream(&mut self, reuse: u8, blocking: bool, device: u8) -> StreamId {
        let id = if reuse.is_multiple_of(2) && !self.destroyed.is_empty() {
            let i = usize::from(reuse / 2) % self.destroyed.len();
            self.destroyed.remove(i)
        } else {
            if self.next_stream == LEGACY_STREAM_DEVICE1 {
                self.next_stream += 1;
            }
            self.next_stream += 1;
            self.next_stream - 1
        };
        let device = DeviceId::from(device % self.devices);
        let flags = if blocking {
            StreamFlags::Blocking
        } else {
            StreamFlags::NonBlocking
        };
        self.t.stream(id, device, StreamKind::Created, flags);
        self.streams.push(Stream {
            id,
            device,
            legacy: false,
            created: true,
        });
        id
    }

    /// Minor 3: destroys stream `s` (a [`Builder::destroyable`] one), with what `how % 8`
    /// picks around it; `touched` are accesses of buffers (device-fit) that what follows the
    /// destroy touches again (reads, or writes when `how & 8`):
    /// - 0, 1: nothing (the stream's work stays unordered with what was unordered with it);
    /// - 2: a `stream_sync` of it first (its work is known done);
    /// - 3: a `record` of an event on it first, which the next operation that touches buffers
    ///   waits on (a stream) or synchronizes (the host);
    /// - 4: a `device_sync` after it, then a host access of the host-visible `touched`;
    /// - 5: a `stream_sync` of its device's legacy stream after it (R6 covers it when it is
    ///   blocking), then the same host access;
    /// - 6: a launch on its device's legacy stream after it, touching `touched` (R6's barrier);
    /// - 7: a `record` of an event on it first, an `event_sync` of the event after it, then the
    ///   same host access.
    ///
    /// Whatever a capture going on forbids (the legacy stream, a device sync) is left out.
    fn destroy(&mut self, s: StreamId, how: u8, touched: Vec<Access>) {
        let device = self.streams.iter().find(|x| x.id == s).unwrap().device;
        let legacy = self
            .streams
            .iter()
            .find(|x| x.legacy && x.device == device)
            .map(|x| x.id)
            .filter(|&l| self.usable(l));
        let write = how & 8 != 0;
        let mut event = None;
        match how % 8 {
            2 => {
                self.t.stream_sync(s);
            }
            3 | 7 => {
                let e = self.event(how / 16);
                self.record(e, s);
                event = Some(e);
            }
            _ => {}
        }
        self.t.stream_destroy(s);
        self.streams.retain(|x| x.id != s);
        self.destroyed.push(s);
        if self.last_stream == Some(s) {
            self.last_stream = None;
        }
        let host: Vec<Access> = touched
            .iter()
            .filter(|a| self.bufs[a.buf as usize - 1].space.host_visible())
            .cloned()
            .collect();
        let host_access = |b: &mut Builder| {
            if !host.is_empty() {
                b.before(None);
                let (reads, writes) = if write {
                    (Vec::new(), host.clone())
                } else {
                    (host.clone(), Vec::new())
                };
                b.t.host_access(reads, writes);
            }
        };
        match how % 8 {
            3 => self.pending_wait = event,
            4 if !self.any_capture() => {
                self.t.device_sync(device);
                host_access(self);
            }
            5 => {
                if let Some(l) = legacy {
                    self.t.stream_sync(l);
                    host_access(self);
                }
            }
            6 => {
                if let (Some(l), false) = (legacy, touched.is_empty()) {
                    self.before(Some(l));
                    let (reads, writes) = if write {
                        (Vec::new(), touched)
                    } else {
                        (touched, Vec::new())
                    };
                    self.t.launch(l, reads, writes);
                }
            }
            7 => {
                self.t.event_sync(event.unwrap());
                host_access(self);
            }
            _ => {}
        }
    }

    fn graphs_in(&self, state: GraphState) -> Vec<usize> {
        (0..self.graphs.len())
            .filter(|&g| self.graphs[g].state == state)
            .collect()
    }

    /// Called before work that touches buffers, on `stream` or by the host (`None`). When the
    /// case's guard fired for this operation, orders it after the latest stream operation: a
    /// record on that stream and a wait before stream work, a stream sync before host work
    /// (each only where the capture rules allow it).
    fn before(&mut self, stream: Option<StreamId>) {
        if let Some(e) = self.pending_wait.take() {
            // Not if a capture recorded it since: a capture waits only on its own events, and
            // a captured event is never synchronized.
            if !self.captured_events.contains_key(&e) {
                match stream {
                    Some(s) if !self.capturing(s) => {
                        assert!(self.wait(s, e));
                    }
                    Some(_) => {}
                    None => {
                        self.t.event_sync(e);
                    }
                }
            }
        }
        if let (Some(guard), Some(last)) = (self.guard.take(), self.last_stream) {
            let free = self.usable(last);
            match stream {
                Some(s)
                    if s != last && free && self.capturing.get(&s) == self.capturing.get(&last) =>
                {
                    let e = self.event(guard / 4);
                    self.record(e, last);
                    assert!(self.wait(s, e));
                }
                Some(_) => {}
                None => {
                    if free && !self.capturing(last) {
                        self.t.stream_sync(last);
                    }
                }
            }
        }
        if stream.is_some() {
            self.last_stream = stream;
        }
    }

    fn op(&mut self, op: &RawOp) {
        match op {
            RawOp::Launch {
                s,
                reads,
                writes,
                atomics,
            } => {
                let s = self.stream(*s);
                let g = self.graph_of(s);
                let (reads, writes, atomics) = (
                    self.accesses(reads, Fits::Device, g),
                    self.accesses(writes, Fits::Device, g),
                    self.accesses(atomics, Fits::Device, g),
                );
                self.before(Some(s));
                self.note(Some(s), reads.iter().chain(&writes).chain(&atomics));
                self.t.launch_atomic(s, reads, writes, atomics);
            }
            RawOp::Memcpy {
                s,
                src,
                dst,
                blocking,
            } => {
                let s = self.stream(*s);
                let g = self.graph_of(s);
                if let (Some(src), Some(dst)) = (
                    self.access(src, Fits::Any, g),
                    self.access(dst, Fits::Any, g),
                ) {
                    self.before(Some(s));
                    self.note(Some(s), [&src, &dst]);
                    self.t.memcpy(s, src, dst, *blocking);
                }
            }
            RawOp::Memset { s, dst, blocking } => {
                let s = self.stream(*s);
                if let Some(dst) = self.access(dst, Fits::Device, self.graph_of(s)) {
                    self.before(Some(s));
                    self.note(Some(s), [&dst]);
                    self.t.memset(s, dst, *blocking);
                }
            }
            RawOp::HostFunc { s, reads, writes } => {
                let s = self.stream(*s);
                let g = self.graph_of(s);
                let (reads, writes) = (
                    self.accesses(reads, Fits::Host, g),
                    self.accesses(writes, Fits::Host, g),
                );
                self.before(Some(s));
                self.note(Some(s), reads.iter().chain(&writes));
                self.t.host_func(s, reads, writes);
            }
            RawOp::HostAccess { reads, writes } => {
                let (reads, writes) = (
                    self.accesses(reads, Fits::Host, None),
                    self.accesses(writes, Fits::Host, None),
                );
                if !reads.is_empty() || !writes.is_empty() {
                    self.before(None);
                    self.note(None, reads.iter().chain(&writes));
                    self.t.host_access(reads, writes);
                }
            }
            RawOp::Record { e, s } => {
                self.record(self.event(*e), self.stream(*s));
            }
            RawOp::Wait { s, e } => {
                self.wait(self.stream(*s), self.event(*e));
            }
            RawOp::EventSync { e } => {
                let e = self.event(*e);
                if !self.captured_events.contains_key(&e) {
                    self.t.event_sync(e);
                }
            }
            RawOp::EventQuery { e, done } => {
                let e = self.event(*e);
                if !self.captured_events.contains_key(&e) {
                    self.t.event_query(e, *done);
                }
            }
            RawOp::StreamSync { s } => {
                let s = self.stream(*s);
                if !self.capturing(s) {
                    self.t.stream_sync(s);
                }
            }
            RawOp::StreamQuery { s, done } => {
                let s = self.stream(*s);
                if !self.capturing(s) {
                    self.t.stream_query(s, *done);
                }
            }
            RawOp::DeviceSync { d } => {
                if !self.any_capture() {
                    self.t.device_sync(DeviceId::from(*d % self.devices));
                }
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
                    .filter(|&i| {
                        let b = &self.bufs[i];
                        !b.live && b.graph.is_none() && !self.in_graph(b.id)
                    })
                    .collect();
                if !freed.is_empty() {
                    self.alloc(freed[*b as usize % freed.len()], *s);
                }
            }
            RawOp::RecreateEvent { e } => {
                let e = self.event(*e);
                let g = self.captured_events.get(&e);
                if g.is_none_or(|&g| self.graphs[g].state != GraphState::Capturing) {
                    self.captured_events.remove(&e);
                    self.t.event_destroy(e);
                    self.t.event(e);
                }
            }
            RawOp::CachingAlloc { .. } => self.caching_alloc(op),
            RawOp::RecordStream { b, s } => {
                let live: Vec<usize> = (0..self.bufs.len())
                    .filter(|&i| self.bufs[i].live && self.bufs[i].caching)
                    .collect();
                if !live.is_empty() {
                    let b = live[*b as usize % live.len()];
                    let s = self.streams[*s as usize % self.streams.len()].id;
                    self.bufs[b].recorded.push(s);
                    self.t.record_stream(self.bufs[b].id, s);
                }
            }
            RawOp::CachingFree { b } => {
                let live: Vec<usize> = (0..self.bufs.len())
                    .filter(|&i| self.bufs[i].live && self.bufs[i].caching)
                    .collect();
                if !live.is_empty() {
                    self.caching_free(live[*b as usize % live.len()]);
                }
            }
            RawOp::GraphBegin { s } => {
                if let Some(s) = self.free_stream(*s, true) {
                    let id = (1..)
                        .find(|&id| {
                            !self
                                .graphs
                                .iter()
                                .any(|g| g.id == id && g.state != GraphState::Destroyed)
                        })
                        .unwrap();
                    self.t.graph_begin(id, s);
                    self.graphs.push(Graph {
                        id,
                        origin: s,
                        state: GraphState::Capturing,
                        joined: Vec::new(),
                        accs: Vec::new(),
                        mem: Vec::new(),
                    });
                    self.capturing.insert(s, self.graphs.len() - 1);
                }
            }
            RawOp::GraphFork { g, from, to, e } => {
                let active = self.graphs_in(GraphState::Capturing);
                if active.is_empty() {
                    return;
                }
                let g = active[*g as usize % active.len()];
                let members: Vec<StreamId> = self
                    .capturing
                    .iter()
                    .filter(|(_, x)| **x == g)
                    .map(|(s, _)| *s)
                    .collect();
                let from = members[*from as usize % members.len()];
                if let Some(to) = self.free_stream(*to, true) {
                    let e = self.event(*e);
                    self.record(e, from);
                    assert!(self.wait(to, e));
                }
            }
            RawOp::GraphJoin { g, j, e } => {
                let active = self.graphs_in(GraphState::Capturing);
                if active.is_empty() {
                    return;
                }
                let g = active[*g as usize % active.len()];
                let joined = &self.graphs[g].joined;
                if !joined.is_empty() {
                    let (j, origin) = (joined[*j as usize % joined.len()], self.graphs[g].origin);
                    let e = self.event(*e);
                    self.record(e, j);
                    assert!(self.wait(origin, e));
                }
            }
            RawOp::GraphEnd { g, e, scratch } => {
                let active = self.graphs_in(GraphState::Capturing);
                if !active.is_empty() {
                    let g = active[*g as usize % active.len()];
                    self.end_capture_freeing(g, self.event(*e), *scratch);
                }
            }
            RawOp::GraphAllocFree { b, s } => {
                let live: Vec<usize> = (0..self.bufs.len())
                    .filter(|&i| self.bufs[i].live && self.bufs[i].graph.is_some())
                    .collect();
                if let Some(&b) = live.get(*b as usize % live.len().max(1)) {
                    self.free(b, *s);
                }
            }
            RawOp::GraphLaunch { g, s } => {
                let ended = self.graphs_in(GraphState::Ended);
                if let (false, Some(s)) = (ended.is_empty(), self.free_stream(*s, false)) {
                    let g = ended[*g as usize % ended.len()];
                    if !self.run_memory_nodes(g) {
                        return;
                    }
                    self.before(Some(s));
                    self.t.graph_launch(self.graphs[g].id, s);
                }
            }
            RawOp::GraphDestroy { g } => {
                let ended = self.graphs_in(GraphState::Ended);
                if !ended.is_empty() {
                    let g = ended[*g as usize % ended.len()];
                    self.t.graph_destroy(self.graphs[g].id);
                    self.graphs[g].state = GraphState::Destroyed;
                }
            }
            RawOp::GraphAlloc { g, lane, bytes } => {
                let Some((g, s)) = self.lane(*g, *lane) else {
                    return;
                };
                self.before(Some(s));
                let device = self.streams.iter().find(|x| x.id == s).unwrap().device;
                let id = self.bufs.len() as BufId + 1;
                let bytes = 16 + u64::from(*bytes) % 49;
                self.bufs.push(Buf {
                    id,
                    bytes,
                    space: MemSpace::Device,
                    device,
                    live: false,
                    caching: false,
                    addr: None,
                    recorded: Vec::new(),
                    graph: Some(GraphAlloc {
                        owner: g,
                        state: Life::Never,
                        freers: Vec::new(),
                    }),
                });
                self.graphs[g].mem.push(MemNode::Alloc(self.bufs.len() - 1));
                self.t.push(Op::Alloc {
                    buf: id,
                    bytes,
                    device,
                    space: MemSpace::Device,
                    stream: Some(s),
                    addr: None,
                    pool: Pool::Driver,
                });
            }
            RawOp::GraphFree { g, lane, b } => {
                let Some((g, s)) = self.lane(*g, *lane) else {
                    return;
                };
                let can: Vec<usize> = (0..self.bufs.len())
                    .filter(|&i| {
                        self.bufs[i]
                            .graph
                            .as_ref()
                            .is_some_and(|ga| self.may_free(ga, g))
                    })
                    .collect();
                if let Some(&b) = can.get(*b as usize % can.len().max(1)) {
                    self.before(Some(s));
                    self.bufs[b].graph.as_mut().unwrap().freers.push(g);
                    self.graphs[g].mem.push(MemNode::Free(b));
                    self.t.free(self.bufs[b].id, Some(s));
                }
            }
            RawOp::StreamDestroy { s, how, follow } => {
                let mut can = self.destroyable();
                // Half the time, a stream a graph was captured on, if any: the graph is
                // launched after its stream's destroy (R20 rule 6).
                if how & 0x20 != 0 {
                    let captured: Vec<StreamId> = can
                        .iter()
                        .copied()
                        .filter(|s| {
                            self.graphs.iter().any(|g| {
                                g.state == GraphState::Ended
                                    && (g.origin == *s || g.joined.contains(s))
                            })
                        })
                        .collect();
                    if !captured.is_empty() {
                        can = captured;
                    }
                }
                if let Some(&id) = can.get(*s as usize % can.len().max(1)) {
                    let dev = self.accesses(follow, Fits::Device, None);
                    self.destroy(id, *how, dev);
                }
            }
            RawOp::StreamCreate {
                reuse,
                blocking,
                device,
            } => {
                // A few created streams at a time: more would rarely meet.
                if self.streams.iter().filter(|x| x.created).count() < 6 {
                    self.create_stream(*reuse, *blocking, *device);
                }
            }
            RawOp::StreamCycle {
                reuse,
                blocking,
                device,
                work,
                how,
            } => {
                let s = self.create_stream(*reuse, *blocking, *device);
                let mut touched = Vec::new();
                for (reads, writes) in work {
                    let (reads, writes) = (
                        self.accesses(reads, Fits::Device, None),
                        self.accesses(writes, Fits::Device, None),
                    );
                    self.before(Some(s));
                    touched.extend(reads.iter().chain(&writes).cloned());
                    self.t.launch(s, reads, writes);
                }
                self.destroy(s, *how, touched);
            }
            RawOp::GraphUse {
                g,
                lane,
                acc,
                write,
            } => {
                let Some((g, s)) = self.lane(*g, *lane) else {
                    return;
                };
                let can: Vec<usize> = (0..self.bufs.len())
                    .filter(|&i| {
                        self.bufs[i]
                            .graph
                            .as_ref()
                            .is_some_and(|ga| Self::nameable(ga, true, Some(g)))
                    })
                    .collect();
                if let Some(&b) = can.get(acc.buf as usize % can.len().max(1)) {
                    let a = vec![Self::range(acc, &self.bufs[b])];
                    self.before(Some(s));
                    self.note(Some(s), &a);
                    let (reads, writes) = if *write {
                        (Vec::new(), a)
                    } else {
                        (a, Vec::new())
                    };
                    self.t.launch(s, reads, writes);
                }
            }
        }
    }
}

/// The id of the legacy default stream of device 1 when a case has two devices.
pub const LEGACY_STREAM_DEVICE1: StreamId = 100;

/// Interprets a case as a valid trace: streams and events first, then the allocations, the
/// operations, the end of every capture still going on, and the end-of-trace frees.
pub fn build(case: &Case) -> Vec<Record> {
    let devices: u8 = if case.two_devices { 2 } else { 1 };
    let mut b = Builder {
        t: Trace::new(),
        streams: vec![Stream {
            id: 0,
            device: 0,
            legacy: true,
            created: false,
        }],
        bufs: Vec::new(),
        events: Vec::new(),
        devices,
        last_stream: None,
        guard: None,
        freed: Vec::new(),
        driver_bytes: Vec::new(),
        fresh: BTreeMap::new(),
        graphs: Vec::new(),
        capturing: BTreeMap::new(),
        captured_events: BTreeMap::new(),
        destroyed: Vec::new(),
        next_stream: case.streams.len() as StreamId + 1,
        pending_wait: None,
    };
    // Every thread issues a record first (an empty host access, which orders nothing): the
    // engine takes a host thread first seen after an ended actor's slot went to a new actor to
    // know that actor's work, as it takes one first seen after the caching pools' history
    // sweep to know the dropped history (docs/ordering-model.md, R16 and R20); the reference
    // knows neither bound, so the generator keeps every thread seen from the start.
    for thread in 0..case.threads {
        b.t.on(u64::from(thread))
            .host_access(Vec::new(), Vec::new());
    }
    b.t.on(0);
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
            legacy: true,
            created: false,
        });
    }
    // The case's streams are declared before any work. Streams declared later (minor 3,
    // `StreamCreate` and `StreamCycle`) may come after legacy-stream work: a blocking one's
    // first operation waits for it, as any blocking stream's next operation does (R6; the
    // reference's reading, which the engine shares).
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
        b.streams.push(Stream {
            id,
            device,
            legacy: false,
            created: kind == StreamKind::Created,
        });
    }
    b.t.on(0);
    for e in 1..=EventId::from(case.events) {
        b.t.event(e);
        b.events.push(e);
    }
    for (i, rb) in case.bufs.iter().enumerate() {
        let device = DeviceId::from(rb.device % devices);
        let caching =
            case.caching && rb.caching && matches!(rb.space, MemSpace::Device | MemSpace::Pinned);
        b.bufs.push(Buf {
            id: i as BufId + 1,
            bytes: rb.bytes,
            space: rb.space,
            device,
            live: false,
            caching,
            addr: None,
            recorded: Vec::new(),
            graph: None,
        });
        if caching {
            let pinned = rb.space == MemSpace::Pinned;
            let addr = b.place(device, pinned, rb.bytes, 0, rb.end_stream, false);
            b.bufs[i].addr = addr;
            b.bufs[i].live = true;
            b.push_caching_alloc(i, rb.ordered.unwrap_or(rb.end_stream));
        } else {
            b.alloc(i, rb.ordered);
        }
    }
    // Churn cases: the cycles spread evenly among the operations (cycle `j` after operation
    // `(j + 1) * ops / (cycles + 1)`), so that every shrink is still a valid trace.
    let (n, m) = (case.ops.len(), case.cycles.len());
    let mut cycles = case.cycles.iter().enumerate().peekable();
    for i in 0..=n {
        while let Some((_, (thread, guard, op))) =
            cycles.next_if(|(j, _)| (j + 1) * n / (m + 1) <= i)
        {
            b.t.on(u64::from(thread % case.threads));
            b.guard = (guard % 4 < case.sync_bias).then_some(*guard);
            b.op(op);
        }
        if let Some((thread, guard, op)) = case.ops.get(i) {
            b.t.on(u64::from(thread % case.threads));
            b.guard = (guard % 4 < case.sync_bias).then_some(*guard);
            b.op(op);
        }
    }
    for g in b.graphs_in(GraphState::Capturing) {
        let e = b.events[0];
        b.end_capture(g, e);
    }
    if let (true, Some(s)) = (case.graphs, case.final_launch) {
        for i in 0..b.graphs_in(GraphState::Ended).len() {
            b.op(&RawOp::GraphLaunch {
                g: i as u8,
                s: s.wrapping_add(i as u8),
            });
        }
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
