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
/// A captured graph's id as written in the trace (minor 1).
pub type GraphId = u64;

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

/// A `device_sync` of device 0 on line 0, with nothing allocated: a record for
/// [`TraceReader::read_into`] to fill, or a placeholder.
///
/// [`TraceReader::read_into`]: crate::trace::TraceReader::read_into
impl Default for Record {
    fn default() -> Record {
        Record {
            line: 0,
            thread: 0,
            at: None,
            name: None,
            op: Op::DeviceSync { device: 0 },
        }
    }
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
    /// Destroys a stream (minor 3); its id may be declared again afterwards.
    StreamDestroy { id: StreamId },
    /// Allocates a buffer. From the driver: with `stream` it is stream-ordered
    /// (`cudaMallocAsync`). From a caching allocator (minor 1): a block at `addr`, in the pool
    /// of `stream`; no access at all.
    Alloc {
        buf: BufId,
        bytes: u64,
        device: DeviceId,
        space: MemSpace,
        stream: Option<StreamId>,
        addr: Option<u64>,
        pool: Pool,
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
        /// Memory the kernel updates only with atomic read-modify-writes (`atomicAdd`, ...):
        /// unordered atomics do not race with each other, only with plain accesses.
        atomics: Vec<Access>,
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
    /// Minor 1. `Tensor.record_stream(stream)`: the caching allocator will not reuse `buf`'s
    /// bytes until the work enqueued on `stream` before the block's free has completed.
    RecordStream { buf: BufId, stream: StreamId },
    /// Minor 1. `cudaStreamBeginCapture(stream)`: work enqueued on `stream` from now on is
    /// captured into graph `graph` instead of running.
    GraphBegin { graph: GraphId, stream: StreamId },
    /// Minor 1. `cudaStreamEndCapture(stream)`: ends the capture of `graph`, begun on `stream`.
    GraphEnd { graph: GraphId, stream: StreamId },
    /// Minor 1. `cudaGraphLaunch(graph, stream)`: runs every node of `graph` in stream order.
    GraphLaunch { graph: GraphId, stream: StreamId },
    /// Minor 1. `cudaGraphDestroy`: the id may be captured again afterwards.
    GraphDestroy { graph: GraphId },
}

/// Which of an op's access lists an access is in: what the op does to those bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessRole {
    Read,
    Write,
    /// Atomic read-modify-writes only ([`Op::Launch`]'s `atomics`).
    Atomic,
}

impl Op {
    /// Calls `f` with each access of the op's lists and its role, in order (reads, writes,
    /// atomic updates; a copy's source, then its destination), until `f` fails. In plain
    /// loops: the engine calls it on hot paths.
    #[inline]
    pub fn try_for_each_access<'a, E>(
        &'a self,
        mut f: impl FnMut(&'a Access, AccessRole) -> Result<(), E>,
    ) -> Result<(), E> {
        let (reads, writes, atomics): (&[Access], &[Access], &[Access]) = match self {
            Op::Launch {
                reads,
                writes,
                atomics,
                ..
            } => (reads, writes, atomics),
            Op::HostFunc { reads, writes, .. } | Op::HostAccess { reads, writes } => {
                (reads, writes, &[])
            }
            Op::Memcpy { src, dst, .. } => {
                f(src, AccessRole::Read)?;
                return f(dst, AccessRole::Write);
            }
            Op::Memset { dst, .. } => return f(dst, AccessRole::Write),
            _ => return Ok(()),
        };
        for a in reads {
            f(a, AccessRole::Read)?;
        }
        for a in writes {
            f(a, AccessRole::Write)?;
        }
        for a in atomics {
            f(a, AccessRole::Atomic)?;
        }
        Ok(())
    }

    /// The `op` string of trace format v1.
    pub fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    /// Which op this is, without its fields.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Stream { .. } => OpKind::Stream,
            Op::Event { .. } => OpKind::Event,
            Op::EventDestroy { .. } => OpKind::EventDestroy,
            Op::Alloc { .. } => OpKind::Alloc,
            Op::Free { .. } => OpKind::Free,
            Op::Launch { .. } => OpKind::Launch,
            Op::Memcpy { .. } => OpKind::Memcpy,
            Op::Memset { .. } => OpKind::Memset,
            Op::HostFunc { .. } => OpKind::HostFunc,
            Op::HostAccess { .. } => OpKind::HostAccess,
            Op::Record { .. } => OpKind::Record,
            Op::Wait { .. } => OpKind::Wait,
            Op::EventSync { .. } => OpKind::EventSync,
            Op::EventQuery { .. } => OpKind::EventQuery,
            Op::StreamSync { .. } => OpKind::StreamSync,
            Op::StreamQuery { .. } => OpKind::StreamQuery,
            Op::DeviceSync { .. } => OpKind::DeviceSync,
            Op::RecordStream { .. } => OpKind::RecordStream,
            Op::GraphBegin { .. } => OpKind::GraphBegin,
            Op::GraphEnd { .. } => OpKind::GraphEnd,
            Op::GraphLaunch { .. } => OpKind::GraphLaunch,
            Op::GraphDestroy { .. } => OpKind::GraphDestroy,
            Op::StreamDestroy { .. } => OpKind::StreamDestroy,
        }
    }
}

/// The `op` of a record without its fields: what reports and findings name, a byte to store.
/// Declared in the order of the spec (`docs/trace-format.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Stream,
    Event,
    EventDestroy,
    Alloc,
    Free,
    Launch,
    Memcpy,
    Memset,
    HostFunc,
    HostAccess,
    Record,
    Wait,
    EventSync,
    EventQuery,
    StreamSync,
    StreamQuery,
    DeviceSync,
    RecordStream,
    GraphBegin,
    GraphEnd,
    GraphLaunch,
    GraphDestroy,
    StreamDestroy,
}

impl OpKind {
    /// Every op of the format, in the order of the spec (minor 0, then minor 1).
    pub const ALL: [OpKind; 23] = [
        OpKind::Stream,
        OpKind::Event,
        OpKind::EventDestroy,
        OpKind::Alloc,
        OpKind::Free,
        OpKind::Launch,
        OpKind::Memcpy,
        OpKind::Memset,
        OpKind::HostFunc,
        OpKind::HostAccess,
        OpKind::Record,
        OpKind::Wait,
        OpKind::EventSync,
        OpKind::EventQuery,
        OpKind::StreamSync,
        OpKind::StreamQuery,
        OpKind::DeviceSync,
        OpKind::RecordStream,
        OpKind::GraphBegin,
        OpKind::GraphEnd,
        OpKind::GraphLaunch,
        OpKind::GraphDestroy,
        OpKind::StreamDestroy,
    ];

    /// The trace spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Stream => "stream",
            OpKind::Event => "event",
            OpKind::EventDestroy => "event_destroy",
            OpKind::Alloc => "alloc",
            OpKind::Free => "free",
            OpKind::Launch => "launch",
            OpKind::Memcpy => "memcpy",
            OpKind::Memset => "memset",
            OpKind::HostFunc => "host_func",
            OpKind::HostAccess => "host_access",
            OpKind::Record => "record",
            OpKind::Wait => "wait",
            OpKind::EventSync => "event_sync",
            OpKind::EventQuery => "event_query",
            OpKind::StreamSync => "stream_sync",
            OpKind::StreamQuery => "stream_query",
            OpKind::DeviceSync => "device_sync",
            OpKind::RecordStream => "record_stream",
            OpKind::GraphBegin => "graph_begin",
            OpKind::GraphEnd => "graph_end",
            OpKind::GraphLaunch => "graph_launch",
            OpKind::GraphDestroy => "graph_destroy",
            OpKind::StreamDestroy => "stream_destroy",
        }
    }

    /// The minor version of the format that introduced the op.
    pub fn minor(self) -> u64 {
        match self {
            OpKind::RecordStream
            | OpKind::GraphBegin
            | OpKind::GraphEnd
            | OpKind::GraphLaunch
            | OpKind::GraphDestroy => 1,
            OpKind::StreamDestroy => 3,
            _ => 0,
        }
    }

    /// The op spelled `s`, if the format has one.
    pub fn parse(s: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// True for the ops that touch buffer bytes, and so can be one side of a race.
    pub fn accesses_memory(self) -> bool {
        matches!(
            self,
            OpKind::Alloc
                | OpKind::Free
                | OpKind::Launch
                | OpKind::Memcpy
                | OpKind::Memset
                | OpKind::HostFunc
                | OpKind::HostAccess
        )
    }
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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

    /// The kind spelled `s`.
    pub fn parse(s: &str) -> Option<StreamKind> {
        [
            StreamKind::LegacyDefault,
            StreamKind::PerThreadDefault,
            StreamKind::Created,
        ]
        .into_iter()
        .find(|k| k.as_str() == s)
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

    /// The flags spelled `s`.
    pub fn parse(s: &str) -> Option<StreamFlags> {
        [StreamFlags::Blocking, StreamFlags::NonBlocking]
            .into_iter()
            .find(|f| f.as_str() == s)
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

    /// The space spelled `s`.
    pub fn parse(s: &str) -> Option<MemSpace> {
        [
            MemSpace::Device,
            MemSpace::Pinned,
            MemSpace::Managed,
            MemSpace::Host,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
    }

    /// True for memory the host may touch directly.
    pub fn host_visible(self) -> bool {
        !matches!(self, MemSpace::Device)
    }
}

/// Where an allocation's memory comes from (minor 1): the driver (`cudaMalloc`,
/// `cudaMallocAsync`, `cudaMallocHost`, ...), or a caching allocator that hands out blocks of
/// memory it keeps (PyTorch's, or any user pool).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Pool {
    #[default]
    Driver,
    Caching,
}

impl Pool {
    /// The trace spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Pool::Driver => "driver",
            Pool::Caching => "caching",
        }
    }

    /// The pool spelled `s`.
    pub fn parse(s: &str) -> Option<Pool> {
        [Pool::Driver, Pool::Caching]
            .into_iter()
            .find(|p| p.as_str() == s)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every access with its role, through [`Op::try_for_each_access`].
    fn walk(op: &Op) -> Vec<(BufId, AccessRole)> {
        let mut seen = vec![];
        let _ = op.try_for_each_access(|a, role| {
            seen.push((a.buf, role));
            Ok::<(), ()>(())
        });
        seen
    }

    /// A launch on stream 1 of whole-buffer accesses.
    fn launch(reads: &[BufId], writes: &[BufId], atomics: &[BufId]) -> Op {
        let list = |ids: &[BufId]| ids.iter().map(|&b| Access::whole(b)).collect();
        Op::Launch {
            stream: 1,
            reads: list(reads),
            writes: list(writes),
            atomics: list(atomics),
        }
    }

    #[test]
    fn an_ops_accesses_come_in_list_order_with_their_roles() {
        use AccessRole::{Atomic, Read, Write};
        assert_eq!(
            walk(&launch(&[1, 2], &[3], &[4])),
            [(1, Read), (2, Read), (3, Write), (4, Atomic)]
        );
        let copy = Op::Memcpy {
            stream: 1,
            src: Access::whole(5),
            dst: Access::whole(6),
            blocking: false,
        };
        assert_eq!(walk(&copy), [(5, Read), (6, Write)]);
        let host = Op::HostAccess {
            reads: vec![Access::whole(7)],
            writes: vec![Access::whole(8)],
        };
        assert_eq!(walk(&host), [(7, Read), (8, Write)]);
        let set = Op::Memset {
            stream: 1,
            dst: Access::whole(9),
            blocking: false,
        };
        assert_eq!(walk(&set), [(9, Write)]);
        assert_eq!(
            walk(&Op::Free {
                buf: 1,
                stream: None
            }),
            []
        );
    }

    #[test]
    fn the_walk_stops_at_the_first_error() {
        let mut seen = vec![];
        let result = launch(&[1, 2], &[3], &[]).try_for_each_access(|a, _| {
            seen.push(a.buf);
            if a.buf == 2 { Err("stop") } else { Ok(()) }
        });
        assert_eq!((result, seen), (Err("stop"), vec![1, 2]));
    }
}
