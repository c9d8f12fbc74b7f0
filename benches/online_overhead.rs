//! What the online layer costs per kernel launch (DESIGN.md, "Performance targets"): a
//! launch-bound loop of tiny kernels through (a) raw cudarc, (b) streamsan with sanitizing off,
//! (c) streamsan checking online, (d) online with a trace file, side by side in one run,
//! interleaved, repeated; medians per launch and deltas against raw cudarc. A benchmark, not a
//! timed test: it prints a Markdown table and never fails on a number.
//!
//!     cargo bench --bench online_overhead                     # 7 repeats x 20,000 launches
//!     cargo bench --bench online_overhead -- 3 5000           # repeats, launches per repeat
//!     cargo bench --bench online_overhead -- 100 2000         # many short repeats: paired deltas
//!
//! The table is also written to `$OUT/online_overhead.md` when `OUT` is set. Without a CUDA
//! driver or device it says so, measures only the recording path without CUDA, and exits 0.
//!
//! Run over the timing driver of `benches/driver-timing` (its README), it adds a table that
//! splits each variant's time per launch into the driver's calls and the rest: whether a
//! difference to raw cudarc is the sanitizer's own time or the driver's.
//!
//! Workload: for 1, 4 and 16 streams (created with `new_stream`) and 10 and 10,000 live buffers
//! of 4 floats, launch `i` runs `add(y, x, 4)` (one block) on stream `i % streams`, writing
//! that stream's own output buffer and reading live buffer `i % buffers`: race-free without
//! any synchronization, so no report is printed while timing. Twice: with cudarc's event
//! tracking off (one `launch` record per launch) and on (cudarc's default: it adds its waits
//! and records, which streamsan records too).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use streamsan::trace::record::Pool;

use cudarc::driver as raw;
use streamsan::cuda::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, Options, PushKernelArg,
    Sanitizer,
};
use streamsan::trace::record::{Access, MemSpace, Op, StreamFlags, StreamKind};

const KERNEL: &str = r#"
extern "C" __global__ void add(float *y, const float *x, int n) {
    int i = threadIdx.x;
    if (i < n) y[i] += x[i];
}
"#;
const ELEMS: usize = 4;
const STREAMS: [usize; 3] = [1, 4, 16];
const BUFFERS: [usize; 2] = [10, 10_000];

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let repeats = args.first().copied().unwrap_or(7).max(1);
    let launches = args.get(1).copied().unwrap_or(20_000).max(1);
    let dir = std::env::temp_dir().join(format!("streamsan-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");

    // Everything printed is also kept for `$OUT/online_overhead.md`.
    let mut out = String::new();
    let mut say = |text: String| {
        print!("{text}");
        out.push_str(&text);
    };
    match gpu() {
        Some((cuda, ptx)) => {
            let name = cuda.name().unwrap_or_else(|_| "unknown GPU".into());
            drop(cuda);
            say(format!(
                "## Online overhead per launch\n\nmachine: {name}, {}; date: {}\n\n\
                 {repeats} repeats x {launches} launches per cell, the variants interleaved \
                 within each repeat; median us per launch, and the median (first..third \
                 quartile, and mean) over the repeats of each repeat's difference to raw \
                 cudarc: the median drops the few repeats that pay for something now and then \
                 (a trace file grows every 8 MiB), the mean keeps them. Targets \
                 (issue 12): disabled within 2% of raw; online at most +0.3 us with tracking \
                 off, +0.6 with it on; online + trace at most +0.8 us.\n",
                cpu(),
                today()
            ));
            let clock = DriverClock::load();
            let mut split = String::new();
            for tracking in [false, true] {
                say(format!(
                    "\n### cudarc event tracking {}\n\n\
                     | streams | live buffers | raw cudarc | disabled | disabled - raw | online | online - raw | online + trace | online + trace - raw |\n\
                     | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
                    if tracking {
                        "on (cudarc's default)"
                    } else {
                        "off"
                    }
                ));
                for streams in STREAMS {
                    for buffers in BUFFERS {
                        let cell = Cell {
                            streams,
                            buffers,
                            tracking,
                        };
                        let figures = measure(&ptx, cell, repeats, launches, &dir, clock.as_ref());
                        say(row(cell, &figures));
                        if let Some(inside) = &figures.inside {
                            split.push_str(&split_row(cell, inside));
                        }
                    }
                }
            }
            if !split.is_empty() {
                say(format!(
                    "\n### Inside the driver and outside it (the timing driver of `benches/driver-timing`)\n\n\
                     Per launch, the time inside `cuLaunchKernel`, `cuEventRecord` and \
                     `cuStreamWaitEvent` (\"driver\") and the rest of the loop (\"outside\": \
                     cudarc, the wrappers, the sanitizer, and the wait for the GPU at the end of \
                     each run); medians over the repeats, and for each \
                     variant the median of each repeat's difference to raw cudarc.\n\n\
                     | tracking | streams | live buffers | raw: driver | raw: outside | disabled - raw: driver, outside | online - raw: driver, outside | online + trace - raw: driver, outside |\n\
                     | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n{split}"
                ));
            }
        }
        None => say(
            "online_overhead: no CUDA driver or device here, so no launch was timed; run this \
             benchmark on a GPU machine.\n"
                .into(),
        ),
    }
    say(host_path(repeats, launches.min(100_000), &dir));
    if let Some(dir) = std::env::var_os("OUT") {
        let path = PathBuf::from(dir).join("online_overhead.md");
        if let Err(e) = std::fs::write(&path, &out) {
            eprintln!("cannot write {}: {e}", path.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A CUDA context on device 0 and the kernel's PTX, or `None` without a driver or device.
fn gpu() -> Option<(Arc<raw::CudaContext>, cudarc::nvrtc::Ptx)> {
    // SAFETY: only looks for the libraries.
    let present = unsafe {
        cudarc::driver::sys::is_culib_present() && cudarc::nvrtc::sys::is_culib_present()
    };
    if !present {
        return None;
    }
    let ctx = std::panic::catch_unwind(|| raw::CudaContext::new(0))
        .ok()?
        .ok()?;
    let ptx = cudarc::nvrtc::compile_ptx(KERNEL).ok()?;
    Some((ctx, ptx))
}

#[derive(Clone, Copy, Debug)]
struct Cell {
    streams: usize,
    buffers: usize,
    tracking: bool,
}

fn cfg() -> LaunchConfig {
    LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One variant set up for a cell: runs `n` launches from launch index `start`, then waits for
/// the GPU.
trait Runner {
    fn run(&mut self, start: usize, n: usize);
}

/// (a) cudarc alone.
struct Raw {
    ctx: Arc<raw::CudaContext>,
    f: raw::CudaFunction,
    streams: Vec<Arc<raw::CudaStream>>,
    outs: Vec<raw::CudaSlice<f32>>,
    bufs: Vec<raw::CudaSlice<f32>>,
}

impl Raw {
    fn new(ptx: &cudarc::nvrtc::Ptx, cell: Cell) -> Raw {
        let ctx = raw::CudaContext::new(0).unwrap();
        if !cell.tracking {
            unsafe { ctx.disable_event_tracking() };
        }
        let f = ctx
            .load_module(ptx.clone())
            .unwrap()
            .load_function("add")
            .unwrap();
        let streams: Vec<_> = (0..cell.streams)
            .map(|_| ctx.new_stream().unwrap())
            .collect();
        let outs = streams
            .iter()
            .map(|s| s.alloc_zeros::<f32>(ELEMS).unwrap())
            .collect();
        let bufs = (0..cell.buffers)
            .map(|i| streams[i % cell.streams].alloc_zeros::<f32>(ELEMS).unwrap())
            .collect();
        ctx.synchronize().unwrap();
        Raw {
            ctx,
            f,
            streams,
            outs,
            bufs,
        }
    }
}

impl Runner for Raw {
    fn run(&mut self, start: usize, n: usize) {
        let len = ELEMS as i32;
        for i in start..start + n {
            let s = i % self.streams.len();
            let x = &self.bufs[i % self.bufs.len()];
            let mut b = self.streams[s].launch_builder(&self.f);
            raw::PushKernelArg::arg(&mut b, &mut self.outs[s]);
            raw::PushKernelArg::arg(&mut b, x);
            raw::PushKernelArg::arg(&mut b, &len);
            unsafe { b.launch(cfg()) }.unwrap();
        }
        self.ctx.synchronize().unwrap();
    }
}

/// (b), (c), (d): the wrappers.
struct Wrapped {
    ctx: Arc<CudaContext>,
    f: CudaFunction,
    streams: Vec<Arc<CudaStream>>,
    outs: Vec<CudaSlice<f32>>,
    bufs: Vec<CudaSlice<f32>>,
}

impl Wrapped {
    fn new(
        ptx: &cudarc::nvrtc::Ptx,
        cell: Cell,
        sanitize: bool,
        trace: Option<PathBuf>,
        dir: &std::path::Path,
    ) -> Wrapped {
        let mut builder = CudaContext::builder()
            .ignore_env()
            .sanitize(sanitize)
            .report_path(dir.join("report.txt"));
        if let Some(trace) = trace {
            builder = builder.trace_path(trace);
        }
        let ctx = builder.build(0).unwrap();
        if !cell.tracking {
            unsafe { ctx.disable_event_tracking() };
        }
        let f = ctx
            .load_module(ptx.clone())
            .unwrap()
            .load_function("add")
            .unwrap();
        let streams: Vec<_> = (0..cell.streams)
            .map(|_| ctx.new_stream().unwrap())
            .collect();
        let outs = streams
            .iter()
            .map(|s| s.alloc_zeros::<f32>(ELEMS).unwrap())
            .collect();
        let bufs = (0..cell.buffers)
            .map(|i| streams[i % cell.streams].alloc_zeros::<f32>(ELEMS).unwrap())
            .collect();
        ctx.synchronize().unwrap();
        Wrapped {
            ctx,
            f,
            streams,
            outs,
            bufs,
        }
    }
}

impl Runner for Wrapped {
    fn run(&mut self, start: usize, n: usize) {
        let len = ELEMS as i32;
        for i in start..start + n {
            let s = i % self.streams.len();
            let x = &self.bufs[i % self.bufs.len()];
            let mut b = self.streams[s].launch_builder(&self.f);
            b.arg(&mut self.outs[s]).arg(x).arg(&len);
            unsafe { b.launch(cfg()) }.unwrap();
        }
        self.ctx.synchronize().unwrap();
    }
}

impl Drop for Wrapped {
    fn drop(&mut self) {
        if let Some(san) = self.ctx.sanitizer()
            && san.folded_report().has_races()
        {
            eprintln!(
                "unexpected: the workload is race-free, yet:\n{}",
                san.report()
            );
        }
    }
}

/// One cell's figures: the median us per launch of each of the four variants, and of each
/// variant but raw cudarc its paired deltas (each repeat's time minus raw cudarc's in the same
/// repeat) as (median, first quartile, third quartile, mean): drift of the machine between
/// repeats cancels out of a pair, so many short repeats pin a delta of a few tenths of a
/// microsecond that the difference of two medians cannot. The mean keeps what only some
/// repeats pay (growing a trace file, once per 8 MiB of lines), which the median drops.
struct Figures {
    medians: [f64; 4],
    deltas: [(f64, f64, f64, f64); 3],
    /// Over the timing driver only.
    inside: Option<Inside>,
}

/// Times the four variants for one cell.
fn measure(
    ptx: &cudarc::nvrtc::Ptx,
    cell: Cell,
    repeats: usize,
    launches: usize,
    dir: &std::path::Path,
    clock: Option<&DriverClock>,
) -> Figures {
    let trace = dir.join("trace.jsonl");
    let mut runners: Vec<Box<dyn Runner>> = vec![
        Box::new(Raw::new(ptx, cell)),
        Box::new(Wrapped::new(ptx, cell, false, None, dir)),
        Box::new(Wrapped::new(ptx, cell, true, None, dir)),
        Box::new(Wrapped::new(ptx, cell, true, Some(trace.clone()), dir)),
    ];
    // Warm up: module loading, the first launches, the sanitizer's caches.
    for r in &mut runners {
        r.run(0, launches.min(2000));
    }
    let mut times: [Vec<f64>; 4] = Default::default();
    let mut inside: [Vec<f64>; 4] = Default::default();
    for rep in 0..repeats {
        // Rotate the order so no variant always runs first.
        for k in 0..4 {
            let v = (k + rep) % 4;
            let driver = clock.map(DriverClock::ns);
            let t = Instant::now();
            runners[v].run(rep * launches, launches);
            times[v].push(t.elapsed().as_secs_f64() * 1e6 / launches as f64);
            if let (Some(clock), Some(before)) = (clock, driver) {
                inside[v].push((clock.ns() - before) / 1e3 / launches as f64);
            }
        }
    }
    drop(runners);
    let _ = std::fs::remove_file(trace);
    let deltas = [1, 2, 3].map(|v| {
        let mut d = to_raw(&times, v);
        let mean = d.iter().sum::<f64>() / d.len() as f64;
        d.sort_by(f64::total_cmp);
        let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize];
        let quartiles = (at(0.25), at(0.75));
        (median(&mut d), quartiles.0, quartiles.1, mean)
    });
    let inside = clock.map(|_| {
        let outside: [Vec<f64>; 4] =
            std::array::from_fn(|v| (0..repeats).map(|r| times[v][r] - inside[v][r]).collect());
        let paired = |of: &[Vec<f64>; 4], v: usize| median(&mut to_raw(of, v));
        Inside {
            raw: (
                median(&mut inside[0].clone()),
                median(&mut outside[0].clone()),
            ),
            deltas: [1, 2, 3].map(|v| (paired(&inside, v), paired(&outside, v))),
        }
    });
    Figures {
        medians: times.map(|mut t| median(&mut t)),
        deltas,
        inside,
    }
}

/// Each repeat's difference of variant `v` to raw cudarc (variant 0) in the same repeat.
fn to_raw(of: &[Vec<f64>; 4], v: usize) -> Vec<f64> {
    of[v].iter().zip(&of[0]).map(|(x, raw)| x - raw).collect()
}

/// The totals of the timing driver (`benches/driver-timing`), when the process runs over it:
/// what its three timed calls have taken so far.
struct DriverClock {
    totals: unsafe extern "C" fn(*mut u64, *mut f64),
    /// Keeps the library loaded (cudarc loaded it first; this only adds a reference).
    _lib: libloading::Library,
}

impl DriverClock {
    /// The timing driver's totals, if the `libcuda.so` this process loads is the timing driver.
    fn load() -> Option<DriverClock> {
        // SAFETY: the driver cudarc loaded already; loading it again runs nothing new.
        let lib = unsafe { libloading::Library::new("libcuda.so") }.ok()?;
        // SAFETY: the timing driver's function has this signature (timed.c).
        let totals = unsafe {
            *lib.get::<unsafe extern "C" fn(*mut u64, *mut f64)>(b"streamsan_driver_time\0")
                .ok()?
        };
        Some(DriverClock { totals, _lib: lib })
    }

    /// Nanoseconds inside the driver's timed calls so far.
    fn ns(&self) -> f64 {
        let (mut calls, mut ns) = ([0u64; 3], [0f64; 3]);
        // SAFETY: three of each, as timed.c writes.
        unsafe { (self.totals)(calls.as_mut_ptr(), ns.as_mut_ptr()) };
        ns.iter().sum()
    }
}

/// One cell's split by the timing driver: raw cudarc's microseconds per launch inside the
/// driver's timed calls and outside them, and for the other variants the paired differences
/// to raw of both (medians over the repeats).
struct Inside {
    raw: (f64, f64),
    deltas: [(f64, f64); 3],
}

fn split_row(cell: Cell, i: &Inside) -> String {
    let [(d1, o1), (d2, o2), (d3, o3)] = i.deltas;
    format!(
        "| {} | {} | {} | {:.2} | {:.2} | {d1:+.2}, {o1:+.2} | {d2:+.2}, {o2:+.2} | {d3:+.2}, {o3:+.2} |\n",
        if cell.tracking { "on" } else { "off" },
        cell.streams,
        cell.buffers,
        i.raw.0,
        i.raw.1,
    )
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn row(cell: Cell, f: &Figures) -> String {
    let (m, raw) = (&f.medians, f.medians[0]);
    let pct = |v: f64| 100.0 * v / raw;
    let [(d1, a1, b1, _), (d2, a2, b2, e2), (d3, a3, b3, e3)] = f.deltas;
    format!(
        "| {} | {} | {raw:.2} | {:.2} | {:+.1}% ({:+.1}..{:+.1}) | {:.2} | {d2:+.2} ({a2:+.2}..{b2:+.2}, mean {e2:+.2}) \
         | {:.2} | {d3:+.2} ({a3:+.2}..{b3:+.2}, mean {e3:+.2}) |\n",
        cell.streams,
        cell.buffers,
        m[1],
        pct(d1),
        pct(a1),
        pct(b1),
        m[2],
        m[3],
    )
}

/// The recording path alone, without CUDA: a launch's records made through
/// `Sanitizer::record_op` (the lock, numbering, the engine, the trace line), as a floor for
/// the GPU numbers and for machines without a GPU. Each "launch" is one `launch` record that
/// writes its stream's buffer and reads live buffer `i % buffers`; building its `Op` (two small
/// `Vec`s) is part of the time, where the wrappers reuse theirs. A third column adds the records
/// cudarc's event tracking makes around such a launch (`cuda::model::plan_launch`): waits on
/// the read buffer's write event and on the written buffer's read and write events before it,
/// records of the read buffer's read event and the written buffer's write event after it. As
/// the wrappers do, a wait on an event never recorded is not recorded (it orders nothing), and
/// each wait and record is named after its buffer's event.
fn host_path(repeats: usize, launches: usize, dir: &std::path::Path) -> String {
    let mut out = format!(
        "\n### Recording path without CUDA (`record_op`, {repeats} repeats x {launches} launches, median us per launch)\n\n\
         | streams | live buffers | online | online + trace | online, with tracking's records |\n\
         | ---: | ---: | ---: | ---: | ---: |\n"
    );
    for streams in STREAMS {
        for buffers in BUFFERS {
            let trace = dir.join("host-trace.jsonl");
            let report = || streamsan::cuda::ReportTo::Path(dir.join("host-report.txt"));
            let sans = [
                Sanitizer::new(Options {
                    report: report(),
                    ..Options::default()
                })
                .unwrap(),
                Sanitizer::new(Options {
                    trace: Some(trace.clone()),
                    report: report(),
                    ..Options::default()
                })
                .unwrap(),
                Sanitizer::new(Options {
                    report: report(),
                    ..Options::default()
                })
                .unwrap(),
            ];
            let out_buf = |s: usize| 1_000_000 + s as u64;
            // Buffer `b`'s read and write events (the tracking column only).
            let read_ev = |b: u64| 2 * b + 1;
            let write_ev = |b: u64| 2 * b + 2;
            for (v, san) in sans.iter().enumerate() {
                for s in 0..streams {
                    san.record_op(
                        Op::Stream {
                            id: s as u64 + 1,
                            device: 0,
                            kind: StreamKind::Created,
                            flags: StreamFlags::NonBlocking,
                        },
                        None,
                    );
                }
                for buf in (0..buffers as u64).chain((0..streams).map(out_buf)) {
                    san.record_op(
                        Op::Alloc {
                            buf,
                            bytes: 16,
                            device: 0,
                            space: MemSpace::Device,
                            stream: None,
                            addr: None,
                            pool: Pool::Driver,
                        },
                        None,
                    );
                    if v == 2 {
                        san.record_op(Op::Event { id: read_ev(buf) }, None);
                        san.record_op(Op::Event { id: write_ev(buf) }, None);
                    }
                }
            }
            let mut times: [Vec<f64>; 3] = Default::default();
            let mut recorded = std::collections::HashSet::new();
            // The wrappers name each tracked wait and record after its buffer's event, so every
            // buffer brings two names of its own: (buffer, write event?) of an event id.
            let of = |event: u64| ((event - 1) / 2, event.is_multiple_of(2));
            for rep in 0..repeats {
                for (v, san) in sans.iter().enumerate() {
                    let t = Instant::now();
                    for i in rep * launches..(rep + 1) * launches {
                        let s = i % streams;
                        let stream = s as u64 + 1;
                        let (x, y) = ((i % buffers) as u64, out_buf(s));
                        let tracking = v == 2;
                        if tracking {
                            for event in [write_ev(x), read_ev(y), write_ev(y)] {
                                if recorded.contains(&event) {
                                    let (buf, write) = of(event);
                                    san.record_event_op(Op::Wait { stream, event }, buf, write);
                                }
                            }
                        }
                        san.record_op(
                            Op::Launch {
                                stream,
                                reads: vec![Access::whole(x)],
                                writes: vec![Access::whole(y)],
                                atomics: Vec::new(),
                            },
                            Some("add"),
                        );
                        if tracking {
                            for event in [read_ev(x), write_ev(y)] {
                                let (buf, write) = of(event);
                                san.record_event_op(Op::Record { event, stream }, buf, write);
                                recorded.insert(event);
                            }
                        }
                    }
                    times[v].push(t.elapsed().as_secs_f64() * 1e6 / launches as f64);
                }
            }
            for san in &sans {
                let summary = san.folded_report().summary;
                assert_eq!((summary.races, summary.warnings), (0, 0));
            }
            drop(sans);
            let _ = std::fs::remove_file(&trace);
            let [a, b, c] = times.map(|mut t| median(&mut t));
            out += &format!("| {streams} | {buffers} | {a:.3} | {b:.3} | {c:.3} |\n");
        }
    }
    out
}

/// The CPU's model name, from `/proc/cpuinfo` where there is one.
fn cpu() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Today's date (UTC), `YYYY-MM-DD`.
fn today() -> String {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400) as i64;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}
