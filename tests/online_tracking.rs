//! cudarc's automatic event tracking on a real GPU: with it on, the waits cudarc inserts are in
//! the trace and the program that is racy without them is clean; with it off, only the user's
//! synchronization counts; and the races cudarc's tracking does not prevent are reported.
//! Run with `cargo test -- --include-ignored` where a GPU is.

#![cfg(feature = "cuda")]

use std::path::PathBuf;

use serde_json::Value;
use streamsan::cuda::{ArgAccess, CudaContext, LaunchConfig, PushKernelArg};
use streamsan::engine::{Race, RaceKind};
use streamsan::trace::OpKind;

mod common;

const N: usize = 1 << 20;

/// The source line a report's `file:line:col` points at, from this file.
fn source_at(at: &str) -> &'static str {
    common::source_line(include_str!("online_tracking.rs"), "online_tracking.rs", at)
}

fn trace_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("streamsan-{name}-{}.jsonl", std::process::id()))
}

fn read_trace(path: &PathBuf) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let _ = std::fs::remove_file(path);
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn cudarc_records(trace: &[Value]) -> Vec<&Value> {
    trace
        .iter()
        .filter(|r| r["name"].as_str().is_some_and(|n| n.starts_with("cudarc:")))
        .collect()
}

/// `fill` writes x on s1, `scale` reads it on s2, with no synchronization of the program's own.
/// Returns the races and the trace.
fn unsynchronized(tracking: bool, name: &str) -> (Vec<Race>, Vec<Value>) {
    let path = trace_path(name);
    let ctx = CudaContext::builder()
        .ignore_env()
        .sanitize(true)
        .trace_path(&path)
        .build(0)
        .unwrap();
    if !tracking {
        unsafe { ctx.disable_event_tracking() };
    }
    let common::Kernels { fill, scale, .. } = common::kernels(&ctx);
    let s1 = ctx.new_stream().unwrap();
    let s2 = ctx.new_stream().unwrap();
    let mut x = s1.alloc_zeros::<f32>(N).unwrap();
    let mut y = s2.alloc_zeros::<f32>(N).unwrap();
    let cfg = LaunchConfig::for_num_elems(N as u32);
    unsafe {
        s1.launch_builder(&fill)
            .arg(&mut x)
            .arg(&1.0f32)
            .arg(&N)
            .launch(cfg)
    }
    .unwrap();
    unsafe {
        s2.launch_builder(&scale)
            .arg(&mut y)
            .arg(&x)
            .arg(&2.0f32)
            .arg(&N)
            .launch(cfg) // tracked read
    }
    .unwrap();
    let races = ctx.sanitizer().unwrap().races();
    ctx.synchronize().unwrap();
    drop((x, y, s1, s2));
    drop(ctx);
    (races, read_trace(&path))
}

#[test]
#[ignore = "needs a CUDA device"]
fn tracking_on_orders_the_streams_and_is_in_the_trace() {
    let (races, trace) = unsynchronized(true, "tracking-on");
    assert_eq!(
        races,
        vec![],
        "cudarc's waits order the read after the write"
    );
    let cudarc = cudarc_records(&trace);
    // The first new_stream synchronizes the context.
    assert!(cudarc.iter().any(|r| r["op"] == "device_sync"));
    // The read waits on x's write event, recorded after the fill on s1.
    let wait = cudarc
        .iter()
        .find(|r| {
            r["op"] == "wait"
                && r["name"]
                    .as_str()
                    .unwrap()
                    .starts_with("cudarc:write-event of b")
                && source_at(r["at"].as_str().unwrap()).ends_with("// tracked read")
        })
        .expect("the wait cudarc inserts before the read");
    let event = &wait["event"];
    assert!(
        trace
            .iter()
            .any(|r| r["op"] == "record" && &r["event"] == event),
        "the write event was recorded before"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn tracking_off_leaves_only_the_program_s_synchronization() {
    let (races, trace) = unsynchronized(false, "tracking-off");
    assert!(
        cudarc_records(&trace).is_empty(),
        "no cudarc waits or records"
    );
    let race = races
        .iter()
        .find(|r| r.kind == RaceKind::ReadAfterWrite && r.previous.op == OpKind::Launch)
        .unwrap_or_else(|| panic!("{races:#?}"));
    assert!(source_at(race.current.at.as_deref().unwrap()).ends_with("// tracked read"));
}

#[test]
#[ignore = "needs a CUDA device"]
fn tracking_misses_a_write_through_a_shared_reference() {
    // The kernel writes x, but x is passed as `&x`: cudarc records it as a read, so the reader
    // on s2 waits only for the memset. Declared as a write, the sanitizer sees the race.
    let ctx = CudaContext::builder()
        .ignore_env()
        .sanitize(true)
        .build(0)
        .unwrap();
    let common::Kernels { fill, scale, .. } = common::kernels(&ctx);
    let s1 = ctx.new_stream().unwrap();
    let s2 = ctx.new_stream().unwrap();
    let x = s1.alloc_zeros::<f32>(N).unwrap();
    let mut y = s2.alloc_zeros::<f32>(N).unwrap();
    let cfg = LaunchConfig::for_num_elems(N as u32);
    unsafe {
        s1.launch_builder(&fill)
            .arg_as_named("out", &x, ArgAccess::Write)
            .arg(&1.0f32)
            .arg(&N)
            .launch(cfg) // hidden write
    }
    .unwrap();
    unsafe {
        s2.launch_builder(&scale)
            .arg(&mut y)
            .arg_named("in", &x)
            .arg(&2.0f32)
            .arg(&N)
            .launch(cfg) // read after hidden write
    }
    .unwrap();
    let races = ctx.sanitizer().unwrap().races();
    let race = races
        .iter()
        .find(|r| r.kind == RaceKind::ReadAfterWrite)
        .unwrap_or_else(|| panic!("{races:#?}"));
    assert!(source_at(race.previous.at.as_deref().unwrap()).ends_with("// hidden write"));
    assert!(source_at(race.current.at.as_deref().unwrap()).ends_with("// read after hidden write"));
    assert_eq!(race.previous.arg.as_deref(), Some("out"));
    ctx.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA device"]
fn tracking_remembers_only_the_last_reader() {
    // cudarc keeps one read event per buffer: a second reader's record replaces the first's,
    // so a later writer waits for the second reader only.
    let ctx = CudaContext::builder()
        .ignore_env()
        .sanitize(true)
        .build(0)
        .unwrap();
    let common::Kernels { fill, scale, .. } = common::kernels(&ctx);
    let s1 = ctx.new_stream().unwrap();
    let s2 = ctx.new_stream().unwrap();
    let s3 = ctx.new_stream().unwrap();
    let mut x = s3.alloc_zeros::<f32>(N).unwrap();
    let mut y1 = s1.alloc_zeros::<f32>(N).unwrap();
    let mut y2 = s2.alloc_zeros::<f32>(N).unwrap();
    let cfg = LaunchConfig::for_num_elems(N as u32);
    unsafe {
        s1.launch_builder(&scale)
            .arg(&mut y1)
            .arg(&x)
            .arg(&2.0f32)
            .arg(&N)
            .launch(cfg) // first reader
    }
    .unwrap();
    unsafe {
        s2.launch_builder(&scale)
            .arg(&mut y2)
            .arg(&x)
            .arg(&2.0f32)
            .arg(&N)
            .launch(cfg) // second reader
    }
    .unwrap();
    assert_eq!(ctx.sanitizer().unwrap().races(), vec![]);
    unsafe {
        s3.launch_builder(&fill)
            .arg(&mut x)
            .arg(&1.0f32)
            .arg(&N)
            .launch(cfg) // writer
    }
    .unwrap();
    let races = ctx.sanitizer().unwrap().races();
    assert_eq!(races.len(), 1, "{races:#?}");
    assert_eq!(races[0].kind, RaceKind::WriteAfterRead);
    assert!(source_at(races[0].current.at.as_deref().unwrap()).ends_with("// writer"));
    assert!(source_at(races[0].previous.at.as_deref().unwrap()).ends_with("// first reader"));
    ctx.synchronize().unwrap();
}

#[test]
#[ignore = "needs a CUDA device"]
fn pinned_read_after_async_copy_needs_a_sync_in_single_stream_mode() {
    // With only the default stream cudarc does not manage synchronization, so the pinned
    // buffer's event is never recorded and `host_read` (as_slice) does not wait for the copy.
    for fixed in [false, true] {
        let ctx = CudaContext::builder()
            .ignore_env()
            .sanitize(true)
            .build(0)
            .unwrap();
        let main = ctx.default_stream();
        let x = main.clone_htod(&vec![1.5f32; N]).unwrap();
        let mut pinned = unsafe { ctx.alloc_pinned::<f32>(N) }.unwrap();
        main.memcpy_dtoh(&x, &mut pinned).unwrap();
        if fixed {
            main.synchronize().unwrap();
        }
        let first = pinned.as_slice().unwrap()[0]; // host read
        let races = ctx.sanitizer().unwrap().races();
        if fixed {
            assert_eq!(races, vec![]);
            assert_eq!(first, 1.5);
        } else {
            let race = races
                .iter()
                .find(|r| r.kind == RaceKind::ReadAfterWrite && r.current.stream.is_none())
                .unwrap_or_else(|| panic!("{races:#?}"));
            assert!(source_at(race.current.at.as_deref().unwrap()).ends_with("// host read"));
            assert_eq!(race.previous.op, OpKind::Memcpy);
        }
        main.synchronize().unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Holes in cudarc's tracking, each shown with wrong numbers: a spin kernel delays the producer,
// so the unordered consumer reads the old values every time. Each has its fixed twin.

use std::sync::Arc;
use std::sync::mpsc;

use streamsan::cuda::CudaSlice;
use streamsan::cuda::testing::{self, Run};
use streamsan_demos::{Error, Kernels, SPIN_CYCLES, ops};

/// Runs `f` under a fresh sanitizer; returns what it read back and the run.
fn checked(f: impl FnOnce(&Arc<CudaContext>) -> Result<Vec<f32>, Error>) -> (Vec<f32>, Run) {
    let mut out = Vec::new();
    let run = testing::sanitize(0, |ctx| {
        Kernels::get(ctx)?;
        out = f(ctx)?;
        Ok::<(), Error>(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    (out, run)
}

/// Runs each op once on `stream` (CUDA loads kernels lazily, with a synchronization).
fn warm_up(stream: &Arc<streamsan::cuda::CudaStream>) -> Result<(), Error> {
    let mut w = stream.alloc_zeros::<f32>(16)?;
    ops::spin(stream, 1)?;
    ops::fill(stream, &mut w, 0.0)?;
    stream.synchronize()?;
    Ok(())
}

/// Thread A fills `x` on its per-thread stream (after a spin) and hands `x` to thread B, which
/// reads it on *its* per-thread stream. No stream was created, so cudarc is not in
/// multi-stream mode and tracks nothing; two threads' per-thread streams are two streams (CUDA
/// Runtime API, "Stream synchronization behavior": per-thread default streams synchronize with
/// the legacy stream only). Fixed: A records an event and B waits on it.
fn per_thread_handoff(fixed: bool) -> (Vec<f32>, Run) {
    checked(|ctx| {
        let x = ctx.default_stream().alloc_zeros::<f32>(N)?;
        ctx.synchronize()?;
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|scope| {
            let producer = scope.spawn(move || -> Result<(), Error> {
                let s = ctx.per_thread_stream();
                warm_up(&s)?;
                let mut x = x;
                ops::spin(&s, SPIN_CYCLES)?;
                ops::fill(&s, &mut x, 1.0)?; // producer on thread A
                let event = if fixed {
                    Some(s.record_event(None)?)
                } else {
                    None
                };
                tx.send((x, event))
                    .map_err(|_| Error::Thread("consumer gone"))?;
                Ok(())
            });
            let consumer = scope.spawn(move || -> Result<Vec<f32>, Error> {
                let s = ctx.per_thread_stream();
                warm_up(&s)?;
                let (x, event): (CudaSlice<f32>, _) =
                    rx.recv().map_err(|_| Error::Thread("producer gone"))?;
                if let Some(event) = event {
                    s.wait(&event)?;
                }
                let mut y = s.alloc_zeros::<f32>(N)?;
                ops::copy(&s, &x, &mut y)?; // consumer on thread B
                let out = s.clone_dtoh(&y)?;
                ctx.synchronize()?;
                Ok(out)
            });
            producer.join().expect("producer")?;
            consumer.join().expect("consumer")
        })
    })
}

#[test]
#[ignore = "needs a CUDA device"]
fn per_thread_streams_of_two_threads_are_not_tracked() {
    let (y, run) = per_thread_handoff(false);
    println!("per-thread handoff, no event: y[0] = {} (meant: 1)", y[0]);
    assert!(y.iter().all(|&v| v == 0.0), "{}", y[0]);
    let race = run
        .races()
        .into_iter()
        .find(|r| r.kind == RaceKind::ReadAfterWrite)
        .unwrap_or_else(|| panic!("{}", run.report()));
    assert_ne!(race.current.thread, race.previous.thread);
    let (y, run) = per_thread_handoff(true);
    assert!(y.iter().all(|&v| v == 1.0), "{}", y[0]);
    run.assert_no_races();
}

/// A stream made by `new_stream` fills `x` (after a spin), then is dropped: cudarc counts no
/// created stream any more and stops managing, so the read on the legacy stream waits on
/// nothing (cudarc core.rs:450-468, 664-677). The legacy stream does not wait for
/// non-blocking streams (CUDA Runtime API, "Stream synchronization behavior"). Fixed: the
/// legacy stream joins the created one before it goes.
fn dropped_stream(fixed: bool) -> (Vec<f32>, Run) {
    checked(|ctx| {
        let main = ctx.default_stream();
        warm_up(&main)?;
        let mut x = main.alloc_zeros::<f32>(N)?;
        let side = ctx.new_stream()?;
        warm_up(&side)?;
        ops::spin(&side, SPIN_CYCLES)?;
        ops::fill(&side, &mut x, 1.0)?; // writer on the created stream
        if fixed {
            main.join(&side)?;
        }
        drop(side);
        let out = main.clone_dtoh(&x)?; // read once cudarc stopped managing
        ctx.synchronize()?;
        Ok(out)
    })
}

#[test]
#[ignore = "needs a CUDA device"]
fn dropping_the_last_created_stream_stops_tracking() {
    let (x, run) = dropped_stream(false);
    println!(
        "read after the stream was dropped: x[0] = {} (meant: 1)",
        x[0]
    );
    assert!(x.iter().all(|&v| v == 0.0), "{}", x[0]);
    assert!(
        run.races()
            .iter()
            .any(|r| r.kind == RaceKind::ReadAfterWrite),
        "{}",
        run.report()
    );
    let (x, run) = dropped_stream(true);
    assert!(x.iter().all(|&v| v == 1.0), "{}", x[0]);
    run.assert_no_races();
}

/// Thread A fills `x` on its per-thread stream (after a spin) before any stream is created, so
/// no event of `x` is recorded. The main thread then makes its first stream and reads `x` on
/// it. `new_stream` synchronizes the context first (core.rs:726-738): right. `fork` of the
/// main thread's per-thread stream does not (core.rs:771-782), and the fork only waits for its
/// parent: the read waits on `x`'s never-recorded write event, which orders nothing.
fn first_stream(by_fork: bool) -> (Vec<f32>, Run) {
    checked(|ctx| {
        let x = ctx.default_stream().alloc_zeros::<f32>(N)?;
        ctx.synchronize()?;
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|scope| {
            scope
                .spawn(move || -> Result<(), Error> {
                    let s = ctx.per_thread_stream();
                    warm_up(&s)?;
                    let mut x = x;
                    ops::spin(&s, SPIN_CYCLES)?;
                    ops::fill(&s, &mut x, 1.0)?; // writer before any created stream
                    tx.send(x).map_err(|_| Error::Thread("reader gone"))?;
                    Ok(())
                })
                .join()
                .expect("writer")
        })?;
        let x = rx.recv().map_err(|_| Error::Thread("writer gone"))?;
        let s = if by_fork {
            ctx.per_thread_stream().fork()?
        } else {
            ctx.new_stream()?
        };
        let out = s.clone_dtoh(&x)?; // read on the first created stream
        ctx.synchronize()?;
        Ok(out)
    })
}

#[test]
#[ignore = "needs a CUDA device"]
fn fork_does_not_synchronize_the_context_as_new_stream_does() {
    let (x, run) = first_stream(true);
    println!("read on a fork: x[0] = {} (meant: 1)", x[0]);
    assert!(x.iter().all(|&v| v == 0.0), "{}", x[0]);
    assert!(
        run.races()
            .iter()
            .any(|r| r.kind == RaceKind::ReadAfterWrite),
        "{}",
        run.report()
    );
    let (x, run) = first_stream(false);
    assert!(x.iter().all(|&v| v == 1.0), "{}", x[0]);
    run.assert_no_races();
}
