//! Hand-built findings for the report tests: one per situation the "why" sentence and the fix
//! hint distinguish. Trace ids differ from ordinals on purpose, so tests can tell which one a
//! renderer printed.

use crate::engine::Stats;
use crate::engine::finding::{
    AccessKind, BufferInfo, LastSync, Race, RaceKind, Site, StreamInfo, Unordered, Warning,
    WarningFact,
};
use crate::trace::record::{MemSpace, OpKind, Pool, StreamFlags, StreamKind};

pub(crate) fn stats() -> Stats {
    Stats {
        records: 12,
        streams: 2,
        events: 1,
        buffers: 3,
        syncs: 2,
        caching_blocks: 0,
        graphs: 0,
        graph_launches: 0,
        races: 4,
        warnings: 1,
    }
}

/// `s0`: the legacy default stream of device 0 (trace id 0).
pub(crate) fn stream_legacy() -> StreamInfo {
    StreamInfo {
        id: 0,
        ordinal: 0,
        device: 0,
        kind: StreamKind::LegacyDefault,
        flags: StreamFlags::Blocking,
        name: None,
    }
}

/// `s1 "side"`: a created non-blocking stream (trace id 7).
pub(crate) fn stream_side() -> StreamInfo {
    StreamInfo {
        id: 7,
        ordinal: 1,
        device: 0,
        kind: StreamKind::Created,
        flags: StreamFlags::NonBlocking,
        name: Some("side".into()),
    }
}

/// `s2`: a created blocking stream without a name (trace id 9).
pub(crate) fn stream_created_blocking() -> StreamInfo {
    StreamInfo {
        id: 9,
        ordinal: 2,
        device: 0,
        kind: StreamKind::Created,
        flags: StreamFlags::Blocking,
        name: None,
    }
}

/// `b1 "x"`: 4096 bytes of device memory (trace id 100).
pub(crate) fn buffer_x() -> BufferInfo {
    BufferInfo {
        id: 100,
        ordinal: 1,
        name: Some("x".into()),
        bytes: 4096,
        space: MemSpace::Device,
        device: 0,
        alloc_line: 3,
        alloc_at: Some("examples/sum.rs:20:5".into()),
        alloc_stream: None,
        addr: Some(0x7f00_0000_0000),
        pool: Pool::Driver,
    }
}

/// `b2 "staging"`: 4096 bytes of pinned host memory (trace id 200), no source location.
pub(crate) fn buffer_pinned() -> BufferInfo {
    BufferInfo {
        id: 200,
        ordinal: 2,
        name: Some("staging".into()),
        bytes: 4096,
        space: MemSpace::Pinned,
        device: 0,
        alloc_line: 4,
        alloc_at: None,
        alloc_stream: None,
        addr: None,
        pool: Pool::Driver,
    }
}

fn site(line: u64, stream: Option<StreamInfo>, op: OpKind, access: AccessKind) -> Site {
    Site {
        line,
        stream,
        thread: 0,
        op,
        name: None,
        access,
        arg: None,
        at: None,
        graph: None,
    }
}

fn launch(line: u64, stream: StreamInfo, kernel: &str, arg: &str, access: AccessKind) -> Site {
    Site {
        name: Some(kernel.into()),
        arg: Some(arg.into()),
        ..site(line, Some(stream), OpKind::Launch, access)
    }
}

/// `randn` writes `x` on s0 (line 5), `sum` reads it on s1 (line 9); they never synchronized.
pub(crate) fn stream_stream_never_synced() -> Race {
    Race {
        kind: RaceKind::ReadAfterWrite,
        buffer: buffer_x(),
        range: (0, 4096),
        current: Site {
            at: Some("examples/sum.rs:31:5".into()),
            ..launch(9, stream_side(), "sum", "x", AccessKind::Read)
        },
        previous: Site {
            at: Some("examples/sum.rs:30:5".into()),
            ..launch(5, stream_legacy(), "randn", "out", AccessKind::Write)
        },
        why: Unordered::NeverSynchronized,
        reused: None,
    }
}

/// s1 waited on s0 at line 7, but s0 wrote again at line 8 before s1 read at line 9.
pub(crate) fn stream_stream_last_synced() -> Race {
    Race {
        kind: RaceKind::ReadAfterWrite,
        buffer: buffer_x(),
        range: (0, 1024),
        current: launch(9, stream_side(), "sum", "x", AccessKind::Read),
        previous: launch(8, stream_legacy(), "scale", "x", AccessKind::Write),
        why: Unordered::SyncBefore(LastSync {
            line: 7,
            op: OpKind::Wait,
        }),
        reused: None,
    }
}

/// The host reads pinned memory (line 11) that an async copy on s1 wrote (line 10).
pub(crate) fn host_reader_after_device_write() -> Race {
    Race {
        kind: RaceKind::ReadAfterWrite,
        buffer: buffer_pinned(),
        range: (0, 4096),
        current: Site {
            name: Some("check".into()),
            arg: Some("x".into()),
            at: Some("examples/sum.rs:40:9".into()),
            ..site(11, None, OpKind::HostAccess, AccessKind::Read)
        },
        previous: site(10, Some(stream_side()), OpKind::Memcpy, AccessKind::Write),
        why: Unordered::NeverSynchronized,
        reused: None,
    }
}

/// Host thread 1 writes pinned memory (line 13); host thread 0 enqueues a kernel reading it on
/// s1 (line 14).
pub(crate) fn device_after_host_write() -> Race {
    Race {
        kind: RaceKind::ReadAfterWrite,
        buffer: buffer_pinned(),
        range: (0, 64),
        current: launch(14, stream_side(), "scale", "input", AccessKind::Read),
        previous: Site {
            thread: 1,
            ..site(13, None, OpKind::HostAccess, AccessKind::Write)
        },
        why: Unordered::NeverSynchronized,
        reused: None,
    }
}

/// Host thread 1 reads pinned memory (line 20) that host thread 0 wrote (line 18).
pub(crate) fn host_host() -> Race {
    Race {
        kind: RaceKind::ReadAfterWrite,
        buffer: buffer_pinned(),
        range: (0, 4096),
        current: Site {
            thread: 1,
            ..site(20, None, OpKind::HostAccess, AccessKind::Read)
        },
        previous: site(18, None, OpKind::HostAccess, AccessKind::Write),
        why: Unordered::NeverSynchronized,
        reused: None,
    }
}

/// `cudaFree` on the host (line 12) while `sum` on s1 (line 9) may still read.
pub(crate) fn free_while_in_use_host_free() -> Race {
    Race {
        kind: RaceKind::FreeWhileInUse,
        buffer: buffer_x(),
        range: (0, 4096),
        current: Site {
            at: Some("examples/sum.rs:45:5".into()),
            ..site(12, None, OpKind::Free, AccessKind::Free)
        },
        previous: launch(9, stream_side(), "sum", "x", AccessKind::Read),
        why: Unordered::NeverSynchronized,
        reused: None,
    }
}

/// `cudaFreeAsync` on s2 (line 12) after s2 last waited on s1 at line 6, before s1's read at
/// line 9.
pub(crate) fn free_while_in_use_stream_free() -> Race {
    Race {
        kind: RaceKind::FreeWhileInUse,
        buffer: buffer_x(),
        range: (0, 4096),
        current: site(
            12,
            Some(stream_created_blocking()),
            OpKind::Free,
            AccessKind::Free,
        ),
        previous: launch(9, stream_side(), "sum", "x", AccessKind::Read),
        why: Unordered::SyncBefore(LastSync {
            line: 6,
            op: OpKind::Wait,
        }),
        reused: None,
    }
}

/// `sum` on s1 reads `x` (line 15) after the host freed it (line 12).
pub(crate) fn use_after_free() -> Race {
    Race {
        kind: RaceKind::UseAfterFree,
        buffer: buffer_x(),
        range: (0, 4096),
        current: launch(15, stream_side(), "sum", "x", AccessKind::Read),
        previous: site(12, None, OpKind::Free, AccessKind::Free),
        why: Unordered::Freed,
        reused: None,
    }
}

/// `cudaMallocAsync` on s2 (line 4), then `sum` reads the buffer on s1 (line 6) with no wait.
pub(crate) fn stream_ordered_alloc_on_other_stream() -> Race {
    Race {
        kind: RaceKind::ReadAfterWrite,
        buffer: BufferInfo {
            id: 400,
            ordinal: 4,
            name: Some("tmp".into()),
            bytes: 1,
            space: MemSpace::Device,
            device: 0,
            alloc_line: 4,
            alloc_at: None,
            alloc_stream: Some(stream_created_blocking()),
            addr: None,
            pool: Pool::Driver,
        },
        range: (0, 1),
        current: launch(6, stream_side(), "sum", "x", AccessKind::Read),
        previous: site(
            4,
            Some(stream_created_blocking()),
            OpKind::Alloc,
            AccessKind::Allocate,
        ),
        why: Unordered::NeverSynchronized,
        reused: None,
    }
}

pub(crate) fn unrecorded_event_warning() -> Warning {
    Warning {
        line: 7,
        fact: WarningFact::UnrecordedEvent {
            event: 3,
            call: OpKind::Wait,
            captured: None,
        },
    }
}
