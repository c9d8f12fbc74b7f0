//! Offline throughput benchmark (DESIGN.md, "Performance targets"): the engine alone on
//! in-memory records, reading alone and end to end for both encodings (JSON Lines, and the same
//! trace converted to the binary encoding), and peak memory on a long trace. A benchmark, not
//! a timed test: it prints medians and never fails on a number.
//!
//!     cargo bench --bench throughput                 # 1M records x 5 repeats, memory at 10M
//!     cargo bench --bench throughput -- 200000 3 1000000   # records, repeats, memory records
//!     cargo bench --bench throughput -- --engine 2000000   # only the engine, twice each way
//!     SYNTH_BUFFERS=100 cargo bench --bench throughput -- --engine   # ... with 100 live buffers
//!     cargo bench --bench throughput -- --write t.jsonl 10000000  # only write the workload
//!     cargo bench --bench throughput -- --write t.sstb 10000000   # ... in the binary encoding
//!
//! The workload is `streamsan_demos::synth` (8 streams, 10k live buffers, one sync per 20 ops).
//! The end-to-end and read-only rows of the two encodings alternate, repeat by repeat, so drift
//! in the machine's speed affects both alike; so do the engine's rows with and without
//! `Engine::prefetch` and `engine::prefetch::record_parts` (as `streamsan check` calls them, and
//! not at all).

#[path = "common/machine.rs"]
mod machine;
use machine::machine;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use streamsan::check::check_reader;
use streamsan::engine::{Engine, Finding};
use streamsan::trace::Record;
use streamsan::trace::binary::{self, BinaryWriter, convert};
use streamsan::trace::reader::TraceReader;
use streamsan::trace::writer::TraceWriter;
use streamsan_demos::synth::{SynthConfig, records};

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("--check-memory") {
        return check_memory_child(&args[1]);
    }
    if args.first().map(String::as_str) == Some("--engine") {
        let n = args
            .get(1)
            .and_then(|a| a.parse().ok())
            .unwrap_or(1_000_000);
        // Each way twice, each first once.
        let [with, without] = engine_only(n, 2);
        let mean = |r: &[Rate]| r.iter().map(|r| r.wall).sum::<f64>() / r.len() as f64 / 1e6;
        return println!(
            "engine only: {:.2} M records/s (without prefetch: {:.2})",
            mean(&with),
            mean(&without)
        );
    }
    if args.first().map(String::as_str) == Some("--write") {
        let n = args
            .get(2)
            .and_then(|a| a.parse().ok())
            .unwrap_or(1_000_000);
        let bytes = write_trace(Path::new(&args[1]), n);
        return println!("wrote {n} records ({bytes} bytes) to {}", args[1]);
    }
    let num = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (n, repeats, mem_n) = (num(0, 1_000_000), num(1, 5) as usize, num(2, 10_000_000));
    let dir = std::env::temp_dir().join(format!("streamsan-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");

    println!("machine: {}", machine());
    println!(
        "workload: streamsan_demos::synth defaults (8 streams, 10k live buffers, 1 sync / 20 ops)"
    );

    // 1. Engine alone, records already in memory.
    let [engine_rates, no_prefetch_rates] = engine_only(n, repeats);

    // 2. Both encodings: reading alone (records parsed, no engine), then end to end (read +
    //    parse + engine + report collection), alternating.
    let jsonl = dir.join("bench.jsonl");
    let sstb = dir.join("bench.sstb");
    let jsonl_bytes = write_trace(&jsonl, n);
    let sstb_bytes = convert_trace(&jsonl, &sstb);
    let (mut read_rates, mut e2e_rates) = ([vec![], vec![]], [vec![], vec![]]);
    for _ in 0..repeats {
        for (i, path) in [&jsonl, &sstb].into_iter().enumerate() {
            read_rates[i].push(read_only(path, n));
            e2e_rates[i].push(end_to_end(path, n));
        }
    }

    let rows = [
        ("engine only", &engine_rates),
        ("engine only, without prefetch", &no_prefetch_rates),
        ("JSONL read only", &read_rates[0]),
        ("binary read only", &read_rates[1]),
        ("JSONL end to end", &e2e_rates[0]),
        ("binary end to end", &e2e_rates[1]),
    ];
    println!();
    println!("| measurement | records | repeats | median | min | max |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (what, rates) in rows {
        let wall: Vec<f64> = rates.iter().map(|r| r.wall).collect();
        let (med, min, max) = summary(&wall);
        println!(
            "| {what} | {n} | {repeats} | {:.2} M records/s | {:.2} | {:.2} |",
            med / 1e6,
            min / 1e6,
            max / 1e6
        );
    }
    // On a shared machine, wall time counts the other tenants too; the thread's CPU time
    // counts only this work (caches and memory bandwidth are still shared). Not for end to
    // end: `check` parses on a second thread, which this thread's time leaves out.
    let on_cpu: Vec<String> = rows
        .iter()
        .filter(|(what, _)| !what.ends_with("end to end"))
        .filter_map(|(what, rates)| {
            let cpu: Option<Vec<f64>> = rates.iter().map(|r| r.cpu).collect();
            Some(format!("{what} {:.2}", summary(&cpu?).0 / 1e6))
        })
        .collect();
    if !on_cpu.is_empty() {
        println!("(medians on-CPU, M records/s: {})", on_cpu.join(", "));
    }
    for (what, bytes) in [("JSONL", jsonl_bytes), ("binary", sstb_bytes)] {
        println!(
            "({what} trace file: {:.1} MB, {:.1} bytes/record)",
            bytes as f64 / 1e6,
            bytes as f64 / n as f64
        );
    }

    // 3. Peak memory of checking a long trace, in a child process so nothing else counts.
    if mem_n > 0 {
        let big = dir.join("big.jsonl");
        let big_sstb = dir.join("big.sstb");
        let jsonl_bytes = write_trace(&big, mem_n);
        let sstb_bytes = convert_trace(&big, &big_sstb);
        for (path, bytes, what) in [
            (&big, jsonl_bytes, "JSONL"),
            (&big_sstb, sstb_bytes, "binary"),
        ] {
            let exe = std::env::current_exe().expect("current exe");
            let out = Command::new(exe)
                .arg("--check-memory")
                .arg(path)
                .output()
                .expect("run child");
            println!(
                "peak memory checking {mem_n} records ({:.2} GB of {what}): {}",
                bytes as f64 / 1e9,
                String::from_utf8_lossy(&out.stdout).trim()
            );
            let _ = std::fs::remove_file(path);
        }
        // Memory must stay bounded by live state when every buffer gets a new id and races.
        let fresh = dir.join("fresh.jsonl");
        let bytes = write_fresh_ids(&fresh, mem_n);
        let exe = std::env::current_exe().expect("current exe");
        let out = Command::new(exe)
            .arg("--check-memory")
            .arg(&fresh)
            .output()
            .expect("run child");
        println!(
            "peak memory checking {mem_n} records ({:.2} GB of JSONL) with a new buffer id in \
             every 5 records, each racing once: {}",
            bytes as f64 / 1e9,
            String::from_utf8_lossy(&out.stdout).trim()
        );
        let _ = std::fs::remove_file(&fresh);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Writes about `n` records where every buffer gets a new id: allocated, written on one stream,
/// read on another with no wait (a race), the device synchronized, freed; 5 records a buffer.
/// Returns the file's size.
fn write_fresh_ids(path: &Path, n: u64) -> u64 {
    use streamsan::trace::record::{Access, MemSpace, Op, Pool, Record, StreamFlags, StreamKind};
    let file = BufWriter::with_capacity(1 << 20, File::create(path).expect("create"));
    let mut header = serde_json::Map::new();
    header.insert("producer".into(), "streamsan bench: fresh ids".into());
    let mut w = TraceWriter::new(file, header).expect("header");
    let mut line = 1;
    let mut put = |op: Op, name: Option<&str>| {
        line += 1;
        let record = Record {
            line,
            thread: 0,
            at: None,
            name: name.map(str::to_string),
            op,
        };
        w.write(&record).expect("write");
    };
    for id in [1, 2] {
        let (device, kind, flags) = (0, StreamKind::Created, StreamFlags::NonBlocking);
        put(
            Op::Stream {
                id,
                device,
                kind,
                flags,
            },
            None,
        );
    }
    for buf in 1..=n.div_ceil(5) {
        let alloc = Op::Alloc {
            buf,
            bytes: 4096,
            device: 0,
            space: MemSpace::Device,
            stream: None,
            addr: None,
            pool: Pool::Driver,
        };
        put(alloc, None);
        for (stream, read, name) in [(1, false, "produce"), (2, true, "consume")] {
            let (mut reads, mut writes) = (vec![], vec![]);
            if read { &mut reads } else { &mut writes }.push(Access::whole(buf));
            let atomics = vec![];
            put(
                Op::Launch {
                    stream,
                    reads,
                    writes,
                    atomics,
                },
                Some(name),
            );
        }
        put(Op::DeviceSync { device: 0 }, None);
        put(Op::Free { buf, stream: None }, None);
    }
    w.flush().expect("flush");
    std::fs::metadata(path).expect("stat").len()
}

/// The engine alone on `n` records of the workload already in memory, `repeats` times.
fn engine_only(n: u64, repeats: usize) -> [Vec<Rate>; 2] {
    let mut config = SynthConfig::default();
    if let Some(buffers) = std::env::var("SYNTH_BUFFERS")
        .ok()
        .and_then(|b| b.parse().ok())
    {
        config.buffers = buffers;
    }
    let recs: Vec<_> = records(config).take(n as usize).collect();
    let mut rates = [vec![], vec![]];
    // With `Engine::prefetch` as `check` calls it (in batches), and without, alternating, and
    // which goes first alternating too.
    for repeat in 0..repeats {
        let order = if repeat % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let (prefetch, rates) = (which == 0, &mut rates[which]);
            let mut engine = Engine::new();
            let mut races = 0u64;
            rates.push(timed(n, || {
                for (i, r) in recs.iter().enumerate() {
                    if prefetch {
                        if let Some(ahead) =
                            recs.get(i + streamsan::engine::prefetch::RECORD_PARTS_AHEAD)
                        {
                            streamsan::engine::prefetch::record_parts(ahead);
                        }
                        engine.prefetch(&recs, i, |r| Some(&r.op));
                    }
                    engine
                        .apply(r, &mut |f| {
                            if let Finding::Race(_) = f {
                                races += 1
                            }
                        })
                        .expect("synthetic traces are valid");
                }
            }));
            assert_eq!(
                races, 0,
                "the synthetic workload is race-free by construction"
            );
        }
    }
    rates
}

/// Writes `n` records of the workload to `path`: the binary encoding for a `.sstb` path, else
/// JSON Lines. Returns the file's size.
fn write_trace(path: &Path, n: u64) -> u64 {
    let file = BufWriter::with_capacity(1 << 20, File::create(path).expect("create"));
    let mut header = serde_json::Map::new();
    header.insert("producer".into(), "streamsan synth".into());
    let records = records(SynthConfig::default()).take(n as usize);
    if path.extension().is_some_and(|e| e == binary::EXTENSION) {
        let mut w = BinaryWriter::new(file, header).expect("header");
        records.for_each(|r| w.write(&r).expect("write"));
        w.finish().expect("finish");
    } else {
        let mut w = TraceWriter::new(file, header).expect("header");
        records.for_each(|r| w.write(&r).expect("write"));
        w.flush().expect("flush");
    }
    std::fs::metadata(path).expect("stat").len()
}

/// Converts the JSON Lines trace at `from` to the binary encoding at `to`, as `streamsan
/// convert` does. Returns the new file's size.
fn convert_trace(from: &Path, to: &Path) -> u64 {
    let mut reader = TraceReader::open(from.to_str().expect("utf-8 path")).expect("open");
    let file = BufWriter::with_capacity(1 << 20, File::create(to).expect("create"));
    let mut w = BinaryWriter::with_header(file, reader.header()).expect("header");
    convert(&mut reader, &mut w).expect("convert");
    std::fs::metadata(to).expect("stat").len()
}

/// Records/s of one run over `n` records: by the wall clock, and by this thread's CPU time
/// where the system reports it.
#[derive(Clone, Copy)]
struct Rate {
    wall: f64,
    cpu: Option<f64>,
}

/// Runs `work` over `n` records and times it.
fn timed(n: u64, work: impl FnOnce()) -> Rate {
    let (t, cpu) = (Instant::now(), thread_cpu_secs());
    work();
    let wall = n as f64 / t.elapsed().as_secs_f64();
    let cpu = match (cpu, thread_cpu_secs()) {
        (Some(a), Some(b)) if b > a => Some(n as f64 / (b - a)),
        _ => None,
    };
    Rate { wall, cpu }
}

/// This thread's CPU time so far, from `/proc` where there is one.
fn thread_cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    Some(stat.split(' ').next()?.parse::<f64>().ok()? / 1e9)
}

/// Reading (and parsing) the trace at `path`, without the engine, as `check` reads: into a
/// batch of 1,024 records, reused.
fn read_only(path: &Path, n: u64) -> Rate {
    timed(n, || {
        let mut reader = TraceReader::open(path.to_str().expect("utf-8 path")).expect("open");
        let mut batch = vec![Record::default(); 1024];
        let mut count = 0u64;
        loop {
            let slot = &mut batch[count as usize % 1024];
            let Some(read) = reader.read_into(slot) else {
                break;
            };
            read.expect("valid trace");
            std::hint::black_box(&*slot);
            count += 1;
        }
        assert_eq!(count, n);
    })
}

/// Checking the trace at `path`: read + parse + engine + report collection.
fn end_to_end(path: &Path, n: u64) -> Rate {
    timed(n, || {
        let reader = TraceReader::open(path.to_str().expect("utf-8 path")).expect("open");
        let checked = check_reader(reader).expect("valid trace");
        assert_eq!(checked.stats.records, n);
    })
}

fn check_memory_child(path: &str) {
    let t = Instant::now();
    let checked = check_reader(TraceReader::open(path).expect("open")).expect("valid");
    let secs = t.elapsed().as_secs_f64();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or("VmHWM: unknown");
    println!(
        "{} ({} records in {secs:.1} s, {:.2} M records/s)",
        hwm.split_whitespace().skip(1).collect::<Vec<_>>().join(" "),
        checked.stats.records,
        checked.stats.records as f64 / secs / 1e6
    );
    let _ = std::io::stdout().flush();
}

fn summary(rates: &[f64]) -> (f64, f64, f64) {
    let mut v = rates.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}
