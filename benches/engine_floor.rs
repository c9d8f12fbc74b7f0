//! How fast could any checker apply the benchmark workload on this machine? The engine beside
//! a deliberately minimal checker of the same records (issue 12's "engine alone" target), and
//! beside a loop that only reads the records. A benchmark, not a timed test: it prints medians
//! and ratios and never fails on a number.
//!
//!     cargo bench --bench engine_floor                  # 1M records, 8 alternated repeats
//!     cargo bench --bench engine_floor -- 2000000 10    # records, repeats
//!     SYNTH_BUFFERS=100 cargo bench --bench engine_floor   # ... with 100 live buffers
//!
//! The minimal checker (`Floor`) is a measuring stick, not a second engine: nothing but this
//! benchmark uses it. It keeps, per buffer, the last write and one read per stream, as the
//! engine does, and vector clocks with the enqueue rule, event record and wait, and stream,
//! event and device synchronization; it leaves out everything else the engine does per record:
//! byte ranges (a view counts as the whole buffer), the legacy default stream's barriers,
//! graphs, caching pools, tombstones and the facts a report names (the last synchronization
//! between two actors, each actor's latest line, call sites beyond one number per record). It
//! is not a correct checker of traces in general; on this race-free workload it finds what the
//! engine finds (nothing), and on a racy one it finds a race (checked before timing).

#[path = "common/machine.rs"]
mod machine;
use machine::machine;
use std::hash::{Hash, Hasher};
use std::time::Instant;

use smallvec::SmallVec;
use streamsan::engine::{Engine, Finding, prefetch};
use streamsan::trace::Record;
use streamsan::trace::record::{Access, MemSpace, Op, Pool, StreamFlags, StreamKind};
use streamsan_demos::synth::{SynthConfig, records};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let num =
        |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (n, repeats) = (num(0, 1_000_000), num(1, 8));
    let mut config = SynthConfig::default();
    if let Some(buffers) = std::env::var("SYNTH_BUFFERS")
        .ok()
        .and_then(|b| b.parse().ok())
    {
        config.buffers = buffers;
    }
    floor_finds_a_race();
    println!("machine: {}", machine());
    println!(
        "workload: streamsan_demos::synth, {} live buffers, {n} records, {repeats} repeats",
        config.buffers
    );
    let recs: Vec<Record> = records(config.clone()).take(n).collect();
    let names = [
        "the engine (as `check` applies records, with its prefetch)",
        "the minimal checker",
        "reading the records only",
    ];
    let mut from_memory = vec![Vec::new(); names.len()];
    let mut fresh = vec![Vec::new(); names.len()];
    for repeat in 0..repeats {
        // Each way goes first in turn, so drift in the machine's speed affects all alike.
        for k in 0..names.len() {
            let which = (repeat + k) % names.len();
            let mut way = Way::new(which);
            let t = Instant::now();
            way.apply(&recs);
            from_memory[which].push(n as f64 / t.elapsed().as_secs_f64() / 1e6);
            way.assert_race_free();
            fresh[which].push(fresh_in_cache(Way::new(which), config.clone(), n));
        }
    }
    for (title, rates) in [
        (
            "records in memory (all made before timing, as `throughput --engine` does)",
            &mut from_memory,
        ),
        (
            "records fresh in cache (made in batches of `check`'s size, only applying timed)",
            &mut fresh,
        ),
    ] {
        println!("{title}:");
        let medians: Vec<f64> = rates.iter_mut().map(|r| median(r)).collect();
        for (name, (m, r)) in names.iter().zip(medians.iter().zip(rates.iter())) {
            let (lo, hi) = (r[0], r[r.len() - 1]);
            println!(
                "  {name}: median {m:.2} M records/s ({lo:.2}..{hi:.2}), {:.2}x the engine",
                m / medians[0]
            );
        }
    }
}

/// Records handed over at a time in the fresh-in-cache mode: `check`'s batch.
const BATCH: usize = 4096;

/// The rate of `way` over `n` records of `config`, made a batch at a time just before they are
/// applied (as `check`'s parsing thread hands them over, here on the same core), timing only
/// the applying.
fn fresh_in_cache(mut way: Way, config: SynthConfig, n: usize) -> f64 {
    let mut source = records(config).take(n);
    let mut batch: Vec<Record> = Vec::with_capacity(BATCH);
    let mut spent = 0.0;
    loop {
        batch.clear();
        batch.extend(source.by_ref().take(BATCH));
        if batch.is_empty() {
            break;
        }
        let t = Instant::now();
        way.apply(&batch);
        spent += t.elapsed().as_secs_f64();
    }
    way.assert_race_free();
    n as f64 / spent / 1e6
}

fn median(rates: &mut [f64]) -> f64 {
    rates.sort_by(f64::total_cmp);
    let n = rates.len();
    if n % 2 == 1 {
        rates[n / 2]
    } else {
        (rates[n / 2 - 1] + rates[n / 2]) / 2.0
    }
}

/// One of the three ways of going through the records, with its state.
enum Way {
    Engine { engine: Box<Engine>, races: u64 },
    Floor(Box<Floor>),
    Walk(u64),
}

impl Way {
    fn new(which: usize) -> Way {
        match which {
            0 => Way::Engine {
                engine: Box::new(Engine::new()),
                races: 0,
            },
            1 => Way::Floor(Box::new(Floor::new())),
            _ => Way::Walk(0),
        }
    }

    /// Applies `recs`, the next records of the trace, prefetching as `check` does within a
    /// batch: the parts of the records 8 ahead, the buffer states of the record 4 ahead.
    fn apply(&mut self, recs: &[Record]) {
        match self {
            Way::Engine { engine, races } => {
                for (i, r) in recs.iter().enumerate() {
                    if let Some(ahead) = recs.get(i + prefetch::RECORD_PARTS_AHEAD) {
                        prefetch::record_parts(ahead);
                    }
                    engine.prefetch(recs, i, |r| Some(&r.op));
                    engine
                        .apply(r, &mut |f| {
                            if let Finding::Race(_) = f {
                                *races += 1
                            }
                        })
                        .expect("synthetic traces are valid");
                }
            }
            Way::Floor(floor) => {
                for (i, r) in recs.iter().enumerate() {
                    if let Some(ahead) = recs.get(i + prefetch::RECORD_PARTS_AHEAD) {
                        prefetch::record_parts(ahead);
                    }
                    if let Some(ahead) = recs.get(i + streamsan::engine::PREFETCH_AHEAD) {
                        floor.prefetch(ahead);
                    }
                    floor.apply(r);
                }
            }
            Way::Walk(sum) => *sum = sum.wrapping_add(walk(recs)),
        }
    }

    fn assert_race_free(&self) {
        let races = match self {
            Way::Engine { races, .. } => *races,
            Way::Floor(floor) => floor.races,
            Way::Walk(sum) => {
                std::hint::black_box(sum);
                0
            }
        };
        assert_eq!(
            races, 0,
            "the synthetic workload is race-free by construction"
        );
    }
}

/// Reads what any checker must read of each record: its line, name and accesses.
fn walk(recs: &[Record]) -> u64 {
    let mut sum = 0u64;
    for r in recs {
        sum = sum.wrapping_add(r.line);
        sum = sum.wrapping_add(r.name.as_deref().map_or(0, |n| n.len() as u64));
        if let Op::Launch { reads, writes, .. } = &r.op {
            for a in reads.iter().chain(writes) {
                sum = sum.wrapping_add(a.buf);
            }
        }
    }
    sum
}

/// A racy pair (a write on one stream, a read on another, nothing between) is found, and its
/// fixed twin (an event recorded and waited on) is not: the minimal checker checks, and agrees
/// with the engine there.
fn floor_finds_a_race() {
    let rec = |line, name: Option<&str>, op| Record {
        line,
        thread: 0,
        at: None,
        name: name.map(str::to_owned),
        op,
    };
    let trace = |fixed: bool| {
        let mut t = vec![
            rec(
                2,
                None,
                Op::Stream {
                    id: 1,
                    device: 0,
                    kind: StreamKind::Created,
                    flags: StreamFlags::NonBlocking,
                },
            ),
            rec(
                3,
                None,
                Op::Stream {
                    id: 2,
                    device: 0,
                    kind: StreamKind::Created,
                    flags: StreamFlags::NonBlocking,
                },
            ),
            rec(4, None, Op::Event { id: 1 }),
            rec(
                5,
                None,
                Op::Alloc {
                    buf: 1,
                    bytes: 64,
                    device: 0,
                    space: MemSpace::Device,
                    stream: None,
                    addr: None,
                    pool: Pool::Driver,
                },
            ),
            rec(
                6,
                Some("produce"),
                Op::Launch {
                    stream: 1,
                    reads: vec![],
                    writes: vec![Access::whole(1)],
                    atomics: vec![],
                },
            ),
        ];
        if fixed {
            t.push(rec(
                7,
                None,
                Op::Record {
                    event: 1,
                    stream: 1,
                },
            ));
            t.push(rec(
                8,
                None,
                Op::Wait {
                    stream: 2,
                    event: 1,
                },
            ));
        }
        t.push(rec(
            9,
            Some("consume"),
            Op::Launch {
                stream: 2,
                reads: vec![Access::whole(1)],
                writes: vec![],
                atomics: vec![],
            },
        ));
        t
    };
    let races = |t: &[Record]| {
        let mut floor = Floor::new();
        t.iter().for_each(|r| floor.apply(r));
        let lines = floor
            .last_race
            .map(|(_, earlier, _, later)| (earlier, later));
        (floor.races, lines)
    };
    assert_eq!(
        races(&trace(false)),
        (1, Some((6, 9))),
        "the minimal checker finds the race, the write at line 6 and the read at 9"
    );
    assert_eq!(races(&trace(true)), (0, None), "and not in the fixed twin");
    for fixed in [false, true] {
        let findings = Engine::check_all(&trace(fixed)).expect("a valid trace");
        let engine_races = findings
            .iter()
            .filter(|f| matches!(f, Finding::Race(_)))
            .count() as u64;
        assert_eq!(engine_races, races(&trace(fixed)).0, "the engine agrees");
    }
}

/// An access's stamp: who, at which of its operations, from which call site and line.
#[derive(Clone, Copy)]
struct Stamp {
    actor: u32,
    tick: u32,
    site: u32,
    line: u64,
}

/// A buffer's state: its size, the last write, and the latest read of each stream since.
#[derive(Default)]
struct Buf {
    bytes: u64,
    write: Option<Stamp>,
    reads: SmallVec<[Stamp; 2]>,
}

struct Stream {
    actor: u32,
    clock: Vec<u32>,
    /// The host clock's version this stream last joined (the enqueue rule).
    host_version: u64,
}

/// The minimal checker (see the file's comment). Actor 0 is the one host thread; stream `s`
/// is actor `s + 1`.
struct Floor {
    streams: Vec<Option<Stream>>,
    host: Vec<u32>,
    host_version: u64,
    events: Vec<Vec<u32>>,
    bufs: Vec<Buf>,
    /// Call sites by a hash of the record's name, location, op and thread, direct-mapped.
    recent: Vec<Option<(u64, u32)>>,
    /// The name of each call site (one per name, location, op and thread).
    sites: Vec<(Option<String>, Option<String>, u8, u64)>,
    races: u64,
    /// The sites and lines of the last race found: (earlier, later).
    last_race: Option<(u32, u64, u32, u64)>,
}

impl Floor {
    fn new() -> Floor {
        let mut floor = Floor {
            streams: Vec::new(),
            host: vec![1],
            host_version: 0,
            events: Vec::new(),
            bufs: Vec::new(),
            recent: vec![None; 256],
            sites: Vec::new(),
            races: 0,
            last_race: None,
        };
        floor.declare_stream(0);
        floor
    }

    fn declare_stream(&mut self, id: u64) {
        let i = id as usize;
        if self.streams.len() <= i {
            self.streams.resize_with(i + 1, || None);
        }
        self.streams[i] = Some(Stream {
            actor: i as u32 + 1,
            clock: Vec::new(),
            host_version: u64::MAX,
        });
    }

    fn prefetch(&self, r: &Record) {
        if let Op::Launch { reads, writes, .. } = &r.op {
            for a in reads.iter().chain(writes) {
                if let Some(b) = self.bufs.get(a.buf as usize) {
                    prefetch_lines(b);
                }
            }
        }
    }

    /// The call site of `r`: one number per name, location, op and thread.
    fn site(&mut self, r: &Record, op: u8) -> u32 {
        let mut h = rustc_hash::FxHasher::default();
        (&r.name, &r.at, op, r.thread).hash(&mut h);
        let hash = h.finish();
        let slot = (hash >> 56) as usize;
        if let Some((seen, site)) = self.recent[slot] {
            let (name, at, o, thread) = &self.sites[site as usize];
            if seen == hash && *o == op && *thread == r.thread && *name == r.name && *at == r.at {
                return site;
            }
        }
        let site = self.sites.len() as u32;
        self.sites
            .push((r.name.clone(), r.at.clone(), op, r.thread));
        self.recent[slot] = Some((hash, site));
        site
    }

    /// An operation enqueued on `stream`: it learns the host's clock once per version, and
    /// ticks.
    fn begin(&mut self, stream: u64) -> (u32, u32) {
        let s = self.streams[stream as usize].as_mut().expect("declared");
        if s.host_version != self.host_version {
            join(&mut s.clock, &self.host);
            s.host_version = self.host_version;
        }
        let a = s.actor as usize;
        if s.clock.len() <= a {
            s.clock.resize(a + 1, 0);
        }
        s.clock[a] += 1;
        (s.actor, s.clock[a])
    }

    /// Record `r` (of `op`) enqueued on `stream`: the stamp of its accesses.
    fn enqueue(&mut self, r: &Record, op: u8, stream: u64) -> Stamp {
        let site = self.site(r, op);
        let (actor, tick) = self.begin(stream);
        Stamp {
            actor,
            tick,
            site,
            line: r.line,
        }
    }

    fn touch(&mut self, stream: u64, access: &Access, write: bool, stamp: Stamp) {
        let clock = &self.streams[stream as usize]
            .as_ref()
            .expect("declared")
            .clock;
        let b = &mut self.bufs[access.buf as usize];
        if let Some(r) = access.range {
            assert!(r.off.checked_add(r.len).is_some_and(|end| end <= b.bytes));
        }
        let mut earlier = None;
        if let Some(w) = &b.write
            && !covers(clock, w)
        {
            earlier = Some(*w);
        }
        if write {
            if let Some(r) = b.reads.iter().find(|r| !covers(clock, r)) {
                earlier = Some(*r);
            }
            b.write = Some(stamp);
            b.reads.clear();
        } else if let Some(r) = b.reads.iter_mut().find(|r| r.actor == stamp.actor) {
            *r = stamp;
        } else {
            b.reads.push(stamp);
        }
        if let Some(e) = earlier {
            // A report would name both sites; this keeps the last pair found.
            self.races += 1;
            self.last_race = Some((e.site, e.line, stamp.site, stamp.line));
        }
    }

    fn host_learns(&mut self, clock: &[u32]) {
        join(&mut self.host, clock);
        self.host[0] += 1;
        self.host_version += 1;
    }

    fn apply(&mut self, r: &Record) {
        match &r.op {
            Op::Launch {
                stream,
                reads,
                writes,
                ..
            } => {
                let stamp = self.enqueue(r, 1, *stream);
                reads
                    .iter()
                    .for_each(|a| self.touch(*stream, a, false, stamp));
                writes
                    .iter()
                    .for_each(|a| self.touch(*stream, a, true, stamp));
            }
            Op::Stream { id, .. } => self.declare_stream(*id),
            Op::Event { id } => {
                let i = *id as usize;
                if self.events.len() <= i {
                    self.events.resize(i + 1, Vec::new());
                }
            }
            Op::Alloc { buf, bytes, .. } => {
                let i = *buf as usize;
                if self.bufs.len() <= i {
                    self.bufs.resize_with(i + 1, Buf::default);
                }
                self.bufs[i] = Buf {
                    bytes: *bytes,
                    ..Buf::default()
                };
            }
            Op::Free {
                buf,
                stream: Some(stream),
            } => {
                let stamp = self.enqueue(r, 2, *stream);
                self.touch(*stream, &Access::whole(*buf), true, stamp);
            }
            Op::Record { event, stream } => {
                self.begin(*stream);
                let s = self.streams[*stream as usize].as_ref().expect("declared");
                self.events[*event as usize].clone_from(&s.clock);
            }
            Op::Wait { stream, event } => {
                self.begin(*stream);
                let s = self.streams[*stream as usize].as_mut().expect("declared");
                join(&mut s.clock, &self.events[*event as usize]);
            }
            Op::StreamSync { stream } => {
                let s = self.streams[*stream as usize].as_ref().expect("declared");
                let clock = s.clock.clone();
                self.host_learns(&clock);
            }
            Op::EventSync { event } => {
                let clock = std::mem::take(&mut self.events[*event as usize]);
                self.host_learns(&clock);
                self.events[*event as usize] = clock;
            }
            Op::DeviceSync { .. } => {
                let mut all = Vec::new();
                for s in self.streams.iter().flatten() {
                    join(&mut all, &s.clock);
                }
                self.host_learns(&all);
            }
            other => panic!("the minimal checker does not know {:?}", other.kind()),
        }
    }
}

/// Starts loading the first two cache lines of `value`, as the engine's prefetch does.
fn prefetch_lines<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = (value as *const T).cast::<i8>();
        // SAFETY: a prefetch has no architectural effect: it cannot fault, whatever the
        // address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

fn covers(clock: &[u32], s: &Stamp) -> bool {
    clock.get(s.actor as usize).is_some_and(|&t| t >= s.tick)
}

fn join(dst: &mut Vec<u32>, src: &[u32]) {
    if dst.len() < src.len() {
        dst.resize(src.len(), 0);
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d = (*d).max(*s);
    }
}
