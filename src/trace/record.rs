//! The record types of trace format v1: one [`Record`] per line after the header.
//!
//! These types are the contract between every layer: the reader produces them from JSON Lines,
//! the online layer (`cuda`) builds them from real calls, the engine consumes them. The format is
//! specified in `docs/trace-format.md`; DESIGN.md fixes it.

/// A stream id as written in the trace (global across devices).
pub type StreamId = u64;
/// An event id as written in the trace.
pub type EventId = u64;
/// A buffer (allocation) id as written in the trace.
pub type BufId = u64;
/// A host thread id as written in the trace.
pub type ThreadId = u64;
/// A device ordinal.
pub type DeviceId = u32;

/// The id of the legacy default stream of device 0, which traces need not declare.
pub const LEGACY_STREAM_DEVICE0: StreamId = 0;

/// One call, with the fields every record may carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The record's identity: its line number in the trace file (the header is line 1). The
    /// online layer numbers its records the same way, as if it wrote a trace.
    pub line: u64,
    /// The host thread that made the call (default 0).
    pub thread: ThreadId,
    /// Source location `"file:line:col"`, where known.
    pub at: Option<String>,
    /// Human label; for `launch` it is the kernel name (required there).
    pub name: Option<String>,
    /// What the call did.
    pub op: Op,
}

/// The operation of a record, one variant per `op` of trace format v1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Declares a stream.
    Stream {
        id: StreamId,
        device: DeviceId,
        kind: StreamKind,
        flags: StreamFlags,
    },
    /// Declares (creates) an event.
    Event { id: EventId },
    /// Destroys an event; its id may be declared again afterwards.
    EventDestroy { id: EventId },
    /// Allocates a buffer. With `stream` it is stream-ordered (`cudaMallocAsync`).
    Alloc {
        buf: BufId,
        bytes: u64,
        device: DeviceId,
        space: MemSpace,
        stream: Option<StreamId>,
        addr: Option<u64>,
    },
    /// Frees a buffer. With `stream` it is stream-ordered (`cudaFreeAsync`), else a host action.
    Free {
        buf: BufId,
        stream: Option<StreamId>,
    },
    /// A kernel launch; the kernel name is [`Record::name`].
    Launch {
        stream: StreamId,
        reads: Vec<Access>,
        writes: Vec<Access>,
    },
    /// A copy. `blocking` is true for the synchronous API variant (`cudaMemcpy`), false for the
    /// async one (`cudaMemcpyAsync`); the engine applies the documented per-direction rules.
    Memcpy {
        stream: StreamId,
        src: Access,
        dst: Access,
        blocking: bool,
    },
    /// A memset; `blocking` as for [`Op::Memcpy`].
    Memset {
        stream: StreamId,
        dst: Access,
        blocking: bool,
    },
    /// A host function (`cudaLaunchHostFunc`) run in stream order.
    HostFunc {
        stream: StreamId,
        reads: Vec<Access>,
        writes: Vec<Access>,
    },
    /// Host code touching pinned / managed / host memory.
    HostAccess {
        reads: Vec<Access>,
        writes: Vec<Access>,
    },
    /// `cudaEventRecord(event, stream)`.
    Record { event: EventId, stream: StreamId },
    /// `cudaStreamWaitEvent(stream, event)`.
    Wait { stream: StreamId, event: EventId },
    /// `cudaEventSynchronize(event)`.
    EventSync { event: EventId },
    /// `cudaEventQuery(event)`; `done` is true when it returned `cudaSuccess`.
    EventQuery { event: EventId, done: bool },
    /// `cudaStreamSynchronize(stream)`.
    StreamSync { stream: StreamId },
    /// `cudaStreamQuery(stream)`; `done` is true when it returned `cudaSuccess`.
    StreamQuery { stream: StreamId, done: bool },
    /// `cudaDeviceSynchronize()` on `device`.
    DeviceSync { device: DeviceId },
}

impl Op {
    /// The `op` string of trace format v1.
    pub fn name(&self) -> &'static str {
        crate::trace::OP_NAMES[self.code() as usize]
    }

    /// The index of this op in [`crate::trace::OP_NAMES`] (the order of the spec): a small
    /// number to store where the name is needed later.
    pub fn code(&self) -> u8 {
        match self {
            Op::Stream { .. } => 0,
            Op::Event { .. } => 1,
            Op::EventDestroy { .. } => 2,
            Op::Alloc { .. } => 3,
            Op::Free { .. } => 4,
            Op::Launch { .. } => 5,
            Op::Memcpy { .. } => 6,
            Op::Memset { .. } => 7,
            Op::HostFunc { .. } => 8,
            Op::HostAccess { .. } => 9,
            Op::Record { .. } => 10,
            Op::Wait { .. } => 11,
            Op::EventSync { .. } => 12,
            Op::EventQuery { .. } => 13,
            Op::StreamSync { .. } => 14,
            Op::StreamQuery { .. } => 15,
            Op::DeviceSync { .. } => 16,
        }
    }
}

/// How a stream was made; decides its part in legacy-default-stream synchronization.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamKind {
    /// The legacy default stream (`0` / `cudaStreamLegacy`), one per device context.
    LegacyDefault,
    /// The per-thread default stream (`cudaStreamPerThread`) of one (host thread, device).
    PerThreadDefault,
    /// A stream made with `cudaStreamCreate[WithFlags]`.
    Created,
}

impl StreamKind {
    /// The trace spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamKind::LegacyDefault => "legacy_default",
            StreamKind::PerThreadDefault => "per_thread_default",
            StreamKind::Created => "created",
        }
    }
}

/// `cudaStreamDefault` (blocking: synchronizes with the legacy default stream) or
/// `cudaStreamNonBlocking`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamFlags {
    Blocking,
    NonBlocking,
}

impl StreamFlags {
    /// The trace spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamFlags::Blocking => "blocking",
            StreamFlags::NonBlocking => "non_blocking",
        }
    }
}

/// Where an allocation lives; decides which copies and memsets the host waits for, and which
/// host accesses are legal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemSpace {
    /// Device memory (`cudaMalloc`, `cudaMallocAsync`).
    Device,
    /// Page-locked host memory (`cudaMallocHost`, `cudaHostAlloc`).
    Pinned,
    /// Unified memory (`cudaMallocManaged`).
    Managed,
    /// Ordinary pageable host memory.
    Host,
}

impl MemSpace {
    /// The trace spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            MemSpace::Device => "device",
            MemSpace::Pinned => "pinned",
            MemSpace::Managed => "managed",
            MemSpace::Host => "host",
        }
    }

    /// True for memory the host may touch directly.
    pub fn host_visible(self) -> bool {
        !matches!(self, MemSpace::Device)
    }
}

/// Bytes `[off, off + len)` of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ByteRange {
    pub off: u64,
    pub len: u64,
}

/// One access by an operation: a buffer, optionally a byte range of it (else the whole buffer),
/// and the kernel argument it was passed as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub buf: BufId,
    /// `None` means the whole buffer.
    pub range: Option<ByteRange>,
    /// The kernel argument's name, for reports.
    pub arg: Option<String>,
}

impl Access {
    /// An access to the whole buffer.
    pub fn whole(buf: BufId) -> Self {
        Access {
            buf,
            range: None,
            arg: None,
        }
    }

    /// An access to bytes `[off, off + len)`.
    pub fn bytes(buf: BufId, off: u64, len: u64) -> Self {
        Access {
            buf,
            range: Some(ByteRange { off, len }),
            arg: None,
        }
    }

    /// The same access, labelled with a kernel argument name.
    pub fn arg(mut self, name: impl Into<String>) -> Self {
        self.arg = Some(name.into());
        self
    }
}
