//! One variant of `online_overhead`, alone, for a profiler: a loop of launches of the `add`
//! kernel over 4 streams and 1,000 live buffers (or as many as asked), with cudarc's event
//! tracking on or off, sanitizing off, on, or on with a trace. It prints microseconds per
//! launch of the second of two rounds. Not a benchmark of record (`online_overhead` is): its
//! use is `valgrind --tool=callgrind --separate-threads=yes` on a machine without a GPU, over
//! the do-nothing driver in `benches/stub-cuda` (see its README), to see where the calling
//! thread's instructions go.
//!
//!     cargo bench --bench launch_loop -- TRACKING SANITIZE N [STREAMS [BUFFERS]]
//!     TRACKING: on | off (default off); SANITIZE: off | on | trace (default on); N: launches per round (default 20000)
//!     STREAMS, BUFFERS: 4 and 1000 by default, as `online_overhead`'s middle cells
//!     LAUNCH_LOOP_KEEP=1 keeps the trace (in the temporary directory) to look at
//!     LAUNCH_LOOP_THREADS=1 prints how busy each thread was in the timed round
//!     LAUNCH_LOOP_DRAIN=1 prints how long synchronizing took after the last launch returned

use streamsan::cuda::{CudaContext, LaunchConfig, PushKernelArg};

const KERNEL: &str = r#"
extern "C" __global__ void add(float *y, const float *x, int n) {
    int i = threadIdx.x;
    if (i < n) y[i] += x[i];
}
"#;

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let tracking = args.first().is_some_and(|a| a == "on");
    let sanitize = args.get(1).map_or("on", String::as_str);
    let n: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    // At least one of each: the launches pick them round-robin.
    let n_streams: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(4).max(1);
    let n_bufs: usize = args
        .get(4)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000)
        .max(1);
    let dir = std::env::temp_dir();
    let mut builder = CudaContext::builder()
        .ignore_env()
        .sanitize(sanitize != "off")
        .report_path(dir.join(format!("launch-loop-{}.txt", std::process::id())));
    let trace = dir.join(format!("launch-loop-{}.jsonl", std::process::id()));
    if sanitize == "trace" {
        builder = builder.trace_path(&trace);
    }
    let ctx = builder.build(0).expect("a CUDA context");
    if !tracking {
        unsafe { ctx.disable_event_tracking() };
    }
    let ptx = cudarc::nvrtc::compile_ptx(KERNEL).expect("the kernel compiles");
    let f = ctx.load_module(ptx).unwrap().load_function("add").unwrap();
    let streams: Vec<_> = (0..n_streams).map(|_| ctx.new_stream().unwrap()).collect();
    let mut outs: Vec<_> = streams
        .iter()
        .map(|s| s.alloc_zeros::<f32>(4).unwrap())
        .collect();
    let bufs: Vec<_> = (0..n_bufs)
        .map(|i| streams[i % n_streams].alloc_zeros::<f32>(4).unwrap())
        .collect();
    ctx.synchronize().unwrap();
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let len = 4i32;
    for round in 0..2 {
        let threads_before = thread_times();
        let start = std::time::Instant::now();
        for i in 0..n {
            let s = i % streams.len();
            let mut b = streams[s].launch_builder(&f);
            b.arg(&mut outs[s]).arg(&bufs[i % bufs.len()]).arg(&len);
            unsafe { b.launch(cfg) }.unwrap();
        }
        let issued = start.elapsed();
        ctx.synchronize().unwrap();
        let synchronized = start.elapsed();
        if round == 1 {
            let us = start.elapsed().as_secs_f64() * 1e6 / n as f64;
            println!(
                "{us:.3} us per launch (tracking {}, sanitize {sanitize}, {n_streams} streams, {n_bufs} buffers)",
                if tracking { "on" } else { "off" }
            );
            if std::env::var_os("LAUNCH_LOOP_DRAIN").is_some() {
                // How long synchronizing took after the last launch returned (the GPU's work
                // still queued, plus the call itself and, sanitized, its record): near nothing
                // when the loop is bound by the launching thread, a queue's worth when by the GPU.
                println!(
                    "  issued in {:.3} us per launch; synchronizing took {:.1} us after",
                    issued.as_secs_f64() * 1e6 / n as f64,
                    (synchronized - issued).as_secs_f64() * 1e6
                );
            }
            if std::env::var_os("LAUNCH_LOOP_THREADS").is_some() {
                let wall = start.elapsed().as_secs_f64();
                for (name, ns) in thread_times() {
                    let before = threads_before.iter().find(|(n, _)| *n == name);
                    let busy = ns.saturating_sub(before.map_or(0, |b| b.1)) as f64 / 1e9;
                    println!("  thread {name}: {:.0}% busy", 100.0 * busy / wall);
                }
            }
        }
    }
    drop((outs, bufs, streams, f, ctx));
    if std::env::var_os("LAUNCH_LOOP_KEEP").is_none() {
        let _ = std::fs::remove_file(trace);
    }
}

/// Each thread of this process, by task id and name, with the nanoseconds it has run
/// (`/proc/self/task/*/schedstat`): whether the checker thread keeps up with the launches.
fn thread_times() -> Vec<(String, u64)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(path.join("schedstat")).unwrap_or_default();
        if let Some(ns) = stat.split_whitespace().next().and_then(|v| v.parse().ok()) {
            let name = format!("{} {}", task.file_name().to_string_lossy(), comm.trim());
            out.push((name, ns));
        }
    }
    out
}
