//! A synthetic trace generator for benchmarks: a deterministic, race-free workload shaped like
//! a multi-stream program (DESIGN.md's performance targets: 8 streams, 10k live buffers, one
//! synchronization per ~20 operations, events and frees mixed in).
//!
//! Every buffer has an owner stream that alone writes it; a set of read-only tables, written
//! once before a device synchronization, is read from every stream; hand-offs between streams
//! go through event record/wait pairs. The trace is race-free by construction, so the benchmark
//! measures the engine's common path, not report building.

use streamsan::trace::record::Pool;
use streamsan::trace::record::{Access, MemSpace, Op, Record, StreamFlags, StreamKind};

/// The shape of a synthetic trace.
#[derive(Clone, Debug)]
pub struct SynthConfig {
    /// Created streams (besides the legacy default stream 0).
    pub streams: u64,
    /// Buffers kept alive throughout (owned by streams round-robin).
    pub buffers: u64,
    /// Read-only buffers shared by all streams.
    pub shared: u64,
    /// Events.
    pub events: u64,
    /// Operations per synchronization (record + wait, or a stream/event sync).
    pub ops_per_sync: u64,
    /// Bytes per buffer.
    pub bytes: u64,
    /// Seed of the deterministic generator.
    pub seed: u64,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            streams: 8,
            buffers: 10_000,
            shared: 64,
            events: 16,
            ops_per_sync: 20,
            bytes: 4096,
            seed: 0x5eed,
        }
    }
}

/// An endless iterator of records following `config`; take as many as you need.
pub fn records(config: SynthConfig) -> impl Iterator<Item = Record> {
    Synth::new(config)
}

struct Synth {
    c: SynthConfig,
    rng: u64,
    line: u64,
    /// Records of the prologue still to emit.
    prologue: std::vec::IntoIter<Op>,
    step: u64,
    /// The free just emitted, whose buffer is allocated again next.
    pending_alloc: Option<Op>,
    kernels: [&'static str; 4],
}

impl Synth {
    fn new(c: SynthConfig) -> Synth {
        let mut ops = Vec::new();
        for s in 1..=c.streams {
            let flags = if s % 2 == 0 {
                StreamFlags::Blocking
            } else {
                StreamFlags::NonBlocking
            };
            ops.push(Op::Stream {
                id: s,
                device: 0,
                kind: StreamKind::Created,
                flags,
            });
        }
        for e in 1..=c.events {
            ops.push(Op::Event { id: e });
        }
        for b in 0..c.buffers + c.shared {
            ops.push(Op::Alloc {
                buf: b,
                bytes: c.bytes,
                device: 0,
                space: MemSpace::Device,
                stream: None,
                addr: None,
                pool: Pool::Driver,
            });
        }
        for b in c.buffers..c.buffers + c.shared {
            ops.push(Op::Launch {
                stream: 0,
                reads: vec![],
                writes: vec![Access::whole(b)],
                atomics: Vec::new(),
            });
        }
        ops.push(Op::DeviceSync { device: 0 });
        Synth {
            rng: c.seed | 1,
            c,
            line: 1,
            prologue: ops.into_iter(),
            step: 0,
            pending_alloc: None,
            kernels: ["gemm", "axpy", "reduce", "softmax"],
        }
    }

    fn next_u64(&mut self) -> u64 {
        // xorshift64*: deterministic and dependency-free.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A buffer owned by stream `s` (1-based).
    fn owned(&mut self, s: u64) -> u64 {
        let per = self.c.buffers / self.c.streams;
        (s - 1) + self.c.streams * self.below(per.max(1))
    }

    /// The whole buffer, or a random aligned view of it.
    fn view(&mut self, buf: u64) -> Access {
        if self.below(4) == 0 {
            let quarter = self.c.bytes / 4;
            let off = quarter * self.below(4);
            Access::bytes(buf, off, quarter)
        } else {
            Access::whole(buf)
        }
    }

    fn body(&mut self) -> (Op, Option<&'static str>) {
        self.step += 1;
        let s = 1 + self.below(self.c.streams);
        if self.step.is_multiple_of(self.c.ops_per_sync) {
            let e = 1 + self.below(self.c.events);
            return match self.below(4) {
                0 => (Op::StreamSync { stream: s }, None),
                1 => (Op::EventSync { event: e }, None),
                _ => (
                    Op::Record {
                        event: e,
                        stream: s,
                    },
                    None,
                ),
            };
        }
        match self.below(100) {
            0..=5 => {
                let e = 1 + self.below(self.c.events);
                (
                    Op::Wait {
                        stream: s,
                        event: e,
                    },
                    None,
                )
            }
            6..=7 => {
                // Free and re-allocate one of s's buffers in stream order on s.
                let b = self.owned(s);
                (
                    Op::Free {
                        buf: b,
                        stream: Some(s),
                    },
                    Some("realloc"),
                )
            }
            _ => {
                let w = self.owned(s);
                let r = self.owned(s);
                let mut reads = vec![self.view(r)];
                if self.below(3) == 0 {
                    let shared = self.c.buffers + self.below(self.c.shared);
                    reads.push(Access::whole(shared));
                }
                let writes = vec![self.view(w)];
                let k = self.kernels[self.below(4) as usize];
                (
                    Op::Launch {
                        stream: s,
                        reads,
                        writes,
                        atomics: Vec::new(),
                    },
                    Some(k),
                )
            }
        }
    }
}

impl Iterator for Synth {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        self.line += 1;
        let (op, name) = match self.prologue.next() {
            Some(op @ Op::Launch { .. }) => (op, Some("init")),
            Some(op) => (op, None),
            None => {
                if let Some(Op::Free { buf, stream }) = self.pending_alloc.take() {
                    let op = Op::Alloc {
                        buf,
                        bytes: self.c.bytes,
                        device: 0,
                        space: MemSpace::Device,
                        stream,
                        addr: None,
                        pool: Pool::Driver,
                    };
                    (op, None)
                } else {
                    let (op, name) = self.body();
                    if let Op::Free { .. } = op {
                        self.pending_alloc = Some(op.clone());
                    }
                    (op, name)
                }
            }
        };
        Some(Record {
            line: self.line,
            thread: 0,
            at: None,
            name: name.map(str::to_string),
            op,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamsan::engine::{Engine, Finding};

    /// The workload is valid, race-free by construction, and writable as trace format v1.
    #[test]
    fn synthetic_trace_is_valid_race_free_and_writable() {
        let mut engine = Engine::new();
        let mut races = 0;
        let mut out = Vec::new();
        let mut writer = streamsan::trace::TraceWriter::new(&mut out, Default::default()).unwrap();
        let config = SynthConfig {
            buffers: 200,
            ..SynthConfig::default()
        };
        for r in records(config).take(20_000) {
            engine
                .apply(&r, &mut |f| {
                    if let Finding::Race(_) = f {
                        races += 1
                    }
                })
                .unwrap();
            writer.write(&r).unwrap();
        }
        assert_eq!(races, 0);
        assert!(engine.stats().syncs > 500, "{:?}", engine.stats());
        assert!(
            engine.stats().buffers > 200,
            "frees and re-allocations happen"
        );
    }
}
