//! What the engine finds: races and warnings as typed facts, with everything a report needs
//! already resolved (names, stream kinds, allocation site, the synchronization that came
//! closest), so the report layer words them without looking back into engine state, and
//! findings survive the objects they mention. The engine writes no sentences: `report` does.

use crate::trace::record::{
    BufId, DeviceId, EventId, GraphId, MemSpace, OpKind, Pool, StreamFlags, StreamId, StreamKind,
    ThreadId,
};

/// One finding, in the order the engine made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    Race(Box<Race>),
    Warning(Warning),
}

impl Finding {
    /// The race, if this is one.
    pub fn as_race(&self) -> Option<&Race> {
        match self {
            Finding::Race(race) => Some(race),
            Finding::Warning(_) => None,
        }
    }

    /// The warning, if this is one.
    pub fn as_warning(&self) -> Option<&Warning> {
        match self {
            Finding::Warning(warning) => Some(warning),
            Finding::Race(_) => None,
        }
    }
}

/// The kinds of race, as spelled in the JSON report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RaceKind {
    /// A read unordered with the last write.
    ReadAfterWrite,
    /// A write unordered with a read since the last write.
    WriteAfterRead,
    /// A write unordered with the last write.
    WriteAfterWrite,
    /// A free unordered with an earlier use.
    FreeWhileInUse,
    /// Any access after the buffer was freed.
    UseAfterFree,
}

impl RaceKind {
    /// Every race kind, in declaration order (report summary and SARIF rule order).
    pub const ALL: [RaceKind; 5] = [
        RaceKind::ReadAfterWrite,
        RaceKind::WriteAfterRead,
        RaceKind::WriteAfterWrite,
        RaceKind::FreeWhileInUse,
        RaceKind::UseAfterFree,
    ];

    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RaceKind::ReadAfterWrite => "read-after-write",
            RaceKind::WriteAfterRead => "write-after-read",
            RaceKind::WriteAfterWrite => "write-after-write",
            RaceKind::FreeWhileInUse => "free-while-in-use",
            RaceKind::UseAfterFree => "use-after-free",
        }
    }
}

/// How an operation touched the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AccessKind {
    Read,
    Write,
    /// An atomic read-modify-write (R19): races with unordered plain accesses, never with
    /// another atomic.
    Atomic,
    /// A stream-ordered allocation's "birth": a write, as far as ordering goes (R12).
    Allocate,
    /// A free: a write over the whole buffer that every earlier use must precede (R12).
    Free,
}

impl AccessKind {
    /// How many kinds there are (the discriminants are `0..COUNT`).
    pub const COUNT: usize = 5;

    /// The JSON report's spelling (`docs/report-format.md`): an allocation is a `write` whose
    /// `op` is `alloc`.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessKind::Read => "read",
            AccessKind::Write | AccessKind::Atomic | AccessKind::Allocate => "write",
            AccessKind::Free => "free",
        }
    }

    /// True for every kind but [`AccessKind::Read`]: what races with reads.
    pub fn is_write(self) -> bool {
        self != AccessKind::Read
    }

    /// True for the kinds that leave the bytes in one state whatever they held (the access
    /// becomes the last write, and no read or atomic since remains): not reads or atomics.
    pub fn writes_plainly(self) -> bool {
        matches!(
            self,
            AccessKind::Write | AccessKind::Allocate | AccessKind::Free
        )
    }
}

/// A stream as reports name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StreamInfo {
    /// The id in the trace.
    pub id: StreamId,
    /// 0 for the legacy default stream of device 0, then 1, 2, ... in order of declaration:
    /// reports call it `s{ordinal}`.
    pub ordinal: u32,
    pub device: DeviceId,
    pub kind: StreamKind,
    pub flags: StreamFlags,
    /// The `name` given at declaration.
    pub name: Option<String>,
}

/// A buffer as reports name it, with where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BufferInfo {
    /// The id in the trace.
    pub id: BufId,
    /// 1, 2, ... in order of allocation (a reused id gets a new ordinal): reports call it
    /// `b{ordinal}`.
    pub ordinal: u32,
    pub name: Option<String>,
    pub bytes: u64,
    pub space: MemSpace,
    pub device: DeviceId,
    /// The `alloc` record's line.
    pub alloc_line: u64,
    /// The `alloc` record's source location.
    pub alloc_at: Option<String>,
    /// The stream of a stream-ordered allocation.
    pub alloc_stream: Option<StreamInfo>,
    /// The `addr` the recorder gave, if any (JSON / verbose output only).
    pub addr: Option<u64>,
    /// Where the memory came from; for a caching block `alloc_stream` is its pool's stream.
    pub pool: Pool,
}

/// One side of a race: the operation, who issued it and how it touched the bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Site {
    /// The record's line in the trace.
    pub line: u64,
    /// The stream the operation ran on; `None` for host code (`host_access`, a host `free`).
    pub stream: Option<StreamInfo>,
    /// The host thread that issued the call.
    pub thread: ThreadId,
    /// The trace `op` (`launch`, `memcpy`, `alloc`, ...).
    pub op: OpKind,
    /// Kernel name or label.
    pub name: Option<String>,
    pub access: AccessKind,
    /// The kernel argument, where declared.
    pub arg: Option<String>,
    /// Source location.
    pub at: Option<String>,
    /// For a node of a captured graph: the graph and the launch that ran it. `line`, `at`,
    /// `stream` and `thread` are then those of the record where the node was captured.
    pub graph: Option<GraphSite>,
}

/// The graph launch a node's access belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GraphSite {
    /// The graph's id in the trace.
    pub graph: GraphId,
    /// 1, 2, ... in order of capture: reports call it `g{ordinal}`.
    pub ordinal: u32,
    /// The `graph_launch` record's line.
    pub launch: u64,
    /// The stream the graph was launched on, when still known.
    pub launch_stream: Option<StreamInfo>,
}

/// A call through which one actor learned of another's work: a wait, a sync, an enqueue by a
/// host thread that had synchronized, a legacy-stream barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LastSync {
    /// The call's trace line.
    pub line: u64,
    /// The call's `op`.
    pub op: OpKind,
}

/// Why nothing orders the previous access before the current one: what the "why" sentence of
/// a report says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unordered {
    /// The current actor never learned anything of the previous actor's work.
    NeverSynchronized,
    /// It last learned of the previous actor's work through this call, made before the
    /// previous access.
    SyncBefore(LastSync),
    /// It last learned of the previous actor's work through this call, made after the previous
    /// access but carrying older knowledge (a wait on an event recorded before that access).
    SyncNotCovering(LastSync),
    /// The buffer was freed before the current access: nothing can order a use after a free.
    Freed,
}

impl Unordered {
    /// The last synchronization between the two actors, if there was one.
    pub fn last_sync(self) -> Option<LastSync> {
        match self {
            Unordered::SyncBefore(s) | Unordered::SyncNotCovering(s) => Some(s),
            Unordered::NeverSynchronized | Unordered::Freed => None,
        }
    }
}

/// Two accesses to overlapping bytes with nothing ordering them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Race {
    pub kind: RaceKind,
    pub buffer: BufferInfo,
    /// Bytes `[start, end)` where the two accesses overlap.
    pub range: (u64, u64),
    pub current: Site,
    pub previous: Site,
    /// The ordering that is missing.
    pub why: Unordered,
    /// When the previous access was to an earlier caching block on the same bytes: that block.
    pub reused: Option<Reuse>,
}

/// The earlier occupant of a caching block's bytes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reuse {
    /// The buffer the previous access was to.
    pub buffer: BufferInfo,
    /// Its `free`'s line and source location.
    pub freed_line: u64,
    pub freed_at: Option<String>,
}

impl Race {
    /// The line of the graph launch involved: the current side's when it is a node, else the
    /// previous side's.
    pub fn graph_launch(&self) -> Option<u64> {
        self.current
            .graph
            .as_ref()
            .or(self.previous.graph.as_ref())
            .map(|g| g.launch)
    }
}

/// Things worth telling a user that are not races.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WarningKind {
    /// A wait on, sync of or query of an event that was never recorded: it orders nothing.
    UnrecordedEvent,
    /// A per-thread default stream used by a host thread other than its owner.
    ForeignPerThreadStream,
    /// A host access to device memory, which the host cannot touch.
    HostAccessToDevice,
    /// Buffers still allocated at the end of the trace.
    Leak,
    /// A record the engine skipped (unknown op of a newer minor version).
    Skipped,
    /// A caching block freed while another stream may still use it, with no `record_stream`.
    CachingFreeInUse,
    /// Something the recording could not see (`streamsan run`'s limitations): not checked.
    NotChecked,
    /// An access to a buffer freed so long before that the engine had let its details go: a
    /// use after free it cannot report as a race.
    ForgottenBuffer,
}

impl WarningKind {
    /// Every warning kind, in declaration order (SARIF rule order).
    pub const ALL: [WarningKind; 8] = [
        WarningKind::UnrecordedEvent,
        WarningKind::ForeignPerThreadStream,
        WarningKind::HostAccessToDevice,
        WarningKind::Leak,
        WarningKind::Skipped,
        WarningKind::CachingFreeInUse,
        WarningKind::NotChecked,
        WarningKind::ForgottenBuffer,
    ];

    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            WarningKind::UnrecordedEvent => "unrecorded-event",
            WarningKind::ForeignPerThreadStream => "foreign-per-thread-stream",
            WarningKind::HostAccessToDevice => "host-access-to-device",
            WarningKind::Leak => "leak",
            WarningKind::Skipped => "skipped-record",
            WarningKind::CachingFreeInUse => "caching-free-in-use",
            WarningKind::NotChecked => "not-checked",
            WarningKind::ForgottenBuffer => "forgotten-buffer",
        }
    }
}

/// A warning: the line it is about and what was seen there.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Warning {
    pub line: u64,
    pub fact: WarningFact,
}

impl Warning {
    /// Its kind, as the JSON report and suppressions name it.
    pub fn kind(&self) -> WarningKind {
        match self.fact {
            WarningFact::UnrecordedEvent { .. } => WarningKind::UnrecordedEvent,
            WarningFact::ForeignPerThreadStream { .. } => WarningKind::ForeignPerThreadStream,
            WarningFact::HostAccessToDevice { .. } => WarningKind::HostAccessToDevice,
            WarningFact::Leak { .. } => WarningKind::Leak,
            WarningFact::Skipped { .. } => WarningKind::Skipped,
            WarningFact::CachingFreeInUse { .. } => WarningKind::CachingFreeInUse,
            WarningFact::NotChecked { .. } => WarningKind::NotChecked,
            WarningFact::ForgottenBuffer { .. } => WarningKind::ForgottenBuffer,
        }
    }
}

/// What a warning is about, with its data; `report` words it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum WarningFact {
    /// `call` used `event`, which was never recorded (R4), or whose latest record was captured
    /// into a graph (at line `captured`, R17): it orders nothing.
    UnrecordedEvent {
        event: EventId,
        call: OpKind,
        captured: Option<u64>,
    },
    /// `thread` used the per-thread default stream of host thread `owner` (R7).
    ForeignPerThreadStream {
        stream: StreamId,
        thread: ThreadId,
        owner: ThreadId,
    },
    /// Host code read or wrote device memory (R13); nothing was checked for it.
    HostAccessToDevice {
        buffer: BufferInfo,
        access: AccessKind,
    },
    /// Buffers still allocated at the end of the trace: the first few, and how many in all.
    Leak { first: Vec<BufferInfo>, count: u64 },
    /// A caching block freed while `streams` (which made the uses at `lines`, one each) may
    /// still use it, with no `record_stream` for them: a new block on these bytes would race.
    CachingFreeInUse {
        buffer: BufferInfo,
        streams: Vec<StreamInfo>,
        lines: Vec<u64>,
    },
    /// Records of ops this reader does not know (the header declares a newer minor version),
    /// skipped: their ops in order of first appearance, and how many records in all.
    Skipped { ops: Vec<String>, count: u64 },
    /// What the recording of a run could not see, in one sentence (`streamsan run` adds these
    /// from its tool's summary; the engine never makes them).
    NotChecked { what: String },
    /// The record accesses buffer `id`, freed before the engine's last `kept` frees, whose
    /// state it no longer keeps (memory stays bounded by live state): that access is not
    /// checked; the record's others are.
    ForgottenBuffer { id: BufId, kept: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ALL` lists every variant once, in declaration order: the exhaustive matches break the
    /// build when a variant is added, the loops catch a wrong order.
    #[test]
    fn kind_lists_are_complete() {
        fn race_index(kind: RaceKind) -> usize {
            match kind {
                RaceKind::ReadAfterWrite => 0,
                RaceKind::WriteAfterRead => 1,
                RaceKind::WriteAfterWrite => 2,
                RaceKind::FreeWhileInUse => 3,
                RaceKind::UseAfterFree => 4,
            }
        }
        fn warning_index(kind: WarningKind) -> usize {
            match kind {
                WarningKind::UnrecordedEvent => 0,
                WarningKind::ForeignPerThreadStream => 1,
                WarningKind::HostAccessToDevice => 2,
                WarningKind::Leak => 3,
                WarningKind::Skipped => 4,
                WarningKind::CachingFreeInUse => 5,
                WarningKind::NotChecked => 6,
                WarningKind::ForgottenBuffer => 7,
            }
        }
        for (i, kind) in RaceKind::ALL.iter().enumerate() {
            assert_eq!(race_index(*kind), i);
        }
        for (i, kind) in WarningKind::ALL.iter().enumerate() {
            assert_eq!(warning_index(*kind), i);
        }
    }
}
