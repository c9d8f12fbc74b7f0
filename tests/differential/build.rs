//! A small trace builder (records numbered as in a trace file: the header is line 1, the first
//! record line 2) and a one-line-per-record printer for failure messages.

use streamsan::trace::record::{
    Access, BufId, DeviceId, EventId, GraphId, MemSpace, Op, Pool, Record, StreamFlags, StreamId,
    StreamKind, ThreadId,
};

/// Builds a trace record by record; every method returns the line of the record it added.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    pub records: Vec<Record>,
    /// The host thread the next records are issued by.
    pub thread: ThreadId,
}

impl Trace {
    pub fn new() -> Trace {
        Trace::default()
    }

    /// Issues the following records from host thread `t`.
    pub fn on(&mut self, t: ThreadId) -> &mut Trace {
        self.thread = t;
        self
    }

    pub fn push(&mut self, op: Op) -> u64 {
        let line = self.records.len() as u64 + 2;
        let name = match op {
            Op::Launch { .. } => Some(format!("k{line}")),
            _ => None,
        };
        self.records.push(Record {
            line,
            thread: self.thread,
            at: None,
            name,
            op,
        });
        line
    }

    pub fn stream(
        &mut self,
        id: StreamId,
        device: DeviceId,
        kind: StreamKind,
        flags: StreamFlags,
    ) -> u64 {
        self.push(Op::Stream {
            id,
            device,
            kind,
            flags,
        })
    }

    /// A created stream on device 0.
    pub fn created(&mut self, id: StreamId, blocking: bool) -> u64 {
        let flags = if blocking {
            StreamFlags::Blocking
        } else {
            StreamFlags::NonBlocking
        };
        self.stream(id, 0, StreamKind::Created, flags)
    }

    /// `stream_destroy` (minor 3).
    pub fn stream_destroy(&mut self, id: StreamId) -> u64 {
        self.push(Op::StreamDestroy { id })
    }

    pub fn event(&mut self, id: EventId) -> u64 {
        self.push(Op::Event { id })
    }

    pub fn event_destroy(&mut self, id: EventId) -> u64 {
        self.push(Op::EventDestroy { id })
    }

    pub fn alloc(&mut self, buf: BufId, bytes: u64, space: MemSpace) -> u64 {
        self.push(Op::Alloc {
            buf,
            bytes,
            device: 0,
            space,
            stream: None,
            addr: None,
            pool: Pool::Driver,
        })
    }

    pub fn alloc_async(&mut self, buf: BufId, bytes: u64, stream: StreamId) -> u64 {
        self.push(Op::Alloc {
            buf,
            bytes,
            device: 0,
            space: MemSpace::Device,
            stream: Some(stream),
            addr: None,
            pool: Pool::Driver,
        })
    }

    /// A caching block of device memory on device 0 at `addr`, in the pool of `stream` (minor 1).
    pub fn caching_alloc(&mut self, buf: BufId, bytes: u64, stream: StreamId, addr: u64) -> u64 {
        self.push(Op::Alloc {
            buf,
            bytes,
            device: 0,
            space: MemSpace::Device,
            stream: Some(stream),
            addr: Some(addr),
            pool: Pool::Caching,
        })
    }

    /// A driver allocation of device memory on device 0 at a known `addr`.
    pub fn alloc_at(&mut self, buf: BufId, bytes: u64, addr: u64) -> u64 {
        self.push(Op::Alloc {
            buf,
            bytes,
            device: 0,
            space: MemSpace::Device,
            stream: None,
            addr: Some(addr),
            pool: Pool::Driver,
        })
    }

    pub fn record_stream(&mut self, buf: BufId, stream: StreamId) -> u64 {
        self.push(Op::RecordStream { buf, stream })
    }

    pub fn graph_begin(&mut self, graph: GraphId, stream: StreamId) -> u64 {
        self.push(Op::GraphBegin { graph, stream })
    }

    pub fn graph_end(&mut self, graph: GraphId, stream: StreamId) -> u64 {
        self.push(Op::GraphEnd { graph, stream })
    }

    pub fn graph_launch(&mut self, graph: GraphId, stream: StreamId) -> u64 {
        self.push(Op::GraphLaunch { graph, stream })
    }

    pub fn graph_destroy(&mut self, graph: GraphId) -> u64 {
        self.push(Op::GraphDestroy { graph })
    }

    pub fn free(&mut self, buf: BufId, stream: Option<StreamId>) -> u64 {
        self.push(Op::Free { buf, stream })
    }

    pub fn launch(&mut self, stream: StreamId, reads: Vec<Access>, writes: Vec<Access>) -> u64 {
        self.launch_atomic(stream, reads, writes, Vec::new())
    }

    /// A launch that also updates `atomics` with atomic read-modify-writes (R19).
    pub fn launch_atomic(
        &mut self,
        stream: StreamId,
        reads: Vec<Access>,
        writes: Vec<Access>,
        atomics: Vec<Access>,
    ) -> u64 {
        self.push(Op::Launch {
            stream,
            reads,
            writes,
            atomics,
        })
    }

    pub fn memcpy(&mut self, stream: StreamId, src: Access, dst: Access, blocking: bool) -> u64 {
        self.push(Op::Memcpy {
            stream,
            src,
            dst,
            blocking,
        })
    }

    pub fn memset(&mut self, stream: StreamId, dst: Access, blocking: bool) -> u64 {
        self.push(Op::Memset {
            stream,
            dst,
            blocking,
        })
    }

    pub fn host_func(&mut self, stream: StreamId, reads: Vec<Access>, writes: Vec<Access>) -> u64 {
        self.push(Op::HostFunc {
            stream,
            reads,
            writes,
        })
    }

    pub fn host_access(&mut self, reads: Vec<Access>, writes: Vec<Access>) -> u64 {
        self.push(Op::HostAccess { reads, writes })
    }

    pub fn record(&mut self, event: EventId, stream: StreamId) -> u64 {
        self.push(Op::Record { event, stream })
    }

    pub fn wait(&mut self, stream: StreamId, event: EventId) -> u64 {
        self.push(Op::Wait { stream, event })
    }

    pub fn event_sync(&mut self, event: EventId) -> u64 {
        self.push(Op::EventSync { event })
    }

    pub fn event_query(&mut self, event: EventId, done: bool) -> u64 {
        self.push(Op::EventQuery { event, done })
    }

    pub fn stream_sync(&mut self, stream: StreamId) -> u64 {
        self.push(Op::StreamSync { stream })
    }

    pub fn stream_query(&mut self, stream: StreamId, done: bool) -> u64 {
        self.push(Op::StreamQuery { stream, done })
    }

    pub fn device_sync(&mut self, device: DeviceId) -> u64 {
        self.push(Op::DeviceSync { device })
    }
}

/// `b{buf}` or `b{buf}[off,end)`.
pub fn fmt_access(a: &Access) -> String {
    match a.range {
        None => format!("b{}", a.buf),
        Some(r) => format!("b{}[{},{})", a.buf, r.off, r.off + r.len),
    }
}

fn fmt_list(list: &[Access]) -> String {
    let items: Vec<String> = list.iter().map(fmt_access).collect();
    format!("[{}]", items.join(" "))
}

fn fmt_opt_stream(s: Option<StreamId>) -> String {
    s.map_or_else(|| "host".to_string(), |s| format!("s{s}"))
}

/// One record on one line: `line tThread op operands`.
pub fn fmt_record(r: &Record) -> String {
    let body = match &r.op {
        Op::Stream {
            id,
            device,
            kind,
            flags,
        } => format!(
            "stream s{id} dev{device} {} {}",
            kind.as_str(),
            flags.as_str()
        ),
        Op::StreamDestroy { id } => format!("stream_destroy s{id}"),
        Op::Event { id } => format!("event e{id}"),
        Op::EventDestroy { id } => format!("event_destroy e{id}"),
        Op::Alloc {
            buf,
            bytes,
            device,
            space,
            stream,
            addr,
            pool,
        } => format!(
            "alloc b{buf} {bytes}B dev{device} {} on {}{}{}",
            space.as_str(),
            fmt_opt_stream(*stream),
            if *pool == Pool::Caching {
                " caching"
            } else {
                ""
            },
            addr.map_or_else(String::new, |a| format!(" @{a:#x}"))
        ),
        Op::Free { buf, stream } => format!("free b{buf} on {}", fmt_opt_stream(*stream)),
        Op::Launch {
            stream,
            reads,
            writes,
            atomics,
        } => format!(
            "launch s{stream} reads={} writes={} atomics={}",
            fmt_list(reads),
            fmt_list(writes),
            fmt_list(atomics)
        ),
        Op::Memcpy {
            stream,
            src,
            dst,
            blocking,
        } => format!(
            "memcpy{} s{stream} {} -> {}",
            if *blocking { "" } else { "_async" },
            fmt_access(src),
            fmt_access(dst)
        ),
        Op::Memset {
            stream,
            dst,
            blocking,
        } => format!(
            "memset{} s{stream} {}",
            if *blocking { "" } else { "_async" },
            fmt_access(dst)
        ),
        Op::HostFunc {
            stream,
            reads,
            writes,
        } => format!(
            "host_func s{stream} reads={} writes={}",
            fmt_list(reads),
            fmt_list(writes)
        ),
        Op::HostAccess { reads, writes } => format!(
            "host_access reads={} writes={}",
            fmt_list(reads),
            fmt_list(writes)
        ),
        Op::Record { event, stream } => format!("record e{event} s{stream}"),
        Op::Wait { stream, event } => format!("wait s{stream} e{event}"),
        Op::EventSync { event } => format!("event_sync e{event}"),
        Op::EventQuery { event, done } => format!("event_query e{event} done={done}"),
        Op::StreamSync { stream } => format!("stream_sync s{stream}"),
        Op::StreamQuery { stream, done } => format!("stream_query s{stream} done={done}"),
        Op::DeviceSync { device } => format!("device_sync dev{device}"),
        Op::RecordStream { buf, stream } => format!("record_stream b{buf} s{stream}"),
        Op::GraphBegin { graph, stream } => format!("graph_begin g{graph} s{stream}"),
        Op::GraphEnd { graph, stream } => format!("graph_end g{graph} s{stream}"),
        Op::GraphLaunch { graph, stream } => format!("graph_launch g{graph} s{stream}"),
        Op::GraphDestroy { graph } => format!("graph_destroy g{graph}"),
    };
    format!("{:>3} t{} {body}", r.line, r.thread)
}

/// The whole trace, one record per line, with the spaces of the buffers noted by `alloc` lines.
pub fn fmt_trace(records: &[Record]) -> String {
    let mut s = String::new();
    for r in records {
        s.push_str(&fmt_record(r));
        s.push('\n');
    }
    s
}
