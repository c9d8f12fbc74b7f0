//! cudarc's automatic event tracking on a real GPU: with it on, the waits cudarc inserts are in
//! the trace and the program that is racy without them is clean; with it off, only the user's
//! synchronization counts; and the races cudarc's tracking does not prevent are reported.
//! Run with `cargo test -- --include-ignored` where a GPU is.

#![cfg(feature = "cuda")]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;

use serde_json::Value;
use streamsan::cuda::testing::Run;
use streamsan::cuda::{ArgAccess, CudaContext, CudaSlice, LaunchConfig, PushKernelArg};
use streamsan::engine::{Race, RaceKind};
use streamsan::trace::OpKind;
use streamsan_demos::{Error, Kernels, SPIN_CYCLES, ops};

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

/// `fill` writes x = 1 on s1 (after a spin), `scale` reads it on s2 into y = 2x, with no
/// synchronization of the program's own. Returns the races, the trace and y.
fn unsynchronized(tracking: bool, name: &str) -> (Vec<Race>, Vec<Value>, Vec<f32>) {
    let path = trace_path(name);
    let ctx = common::traced_context(&path);
    if !tracking {
        unsafe { ctx.disable_event_tracking() };
    }
    let common::Kernels { fill, scale, .. } = common::kernels(&ctx);
    Kernels::get(&ctx).unwrap();
    let s1 = ctx.new_stream().unwrap();
    let s2 = ctx.new_stream().unwrap();
    common::warm_up(&s1).unwrap();
    let mut x = s1.alloc_zeros::<f32>(N).unwrap();
    let mut y = s2.alloc_zeros::<f32>(N).unwrap();
    ctx.synchronize().unwrap();
    let cfg = LaunchConfig::for_num_elems(N as u32);
    ops::spin(&s1, SPIN_CYCLES).unwrap();
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
    let out = ctx.default_stream().clone_dtoh(&y).unwrap();
    drop((x, y, s1, s2, fill, scale));
    drop(ctx);
    (races, read_trace(&path), out)
}

#[test]
#[ignore = "needs a CUDA device"]
fn tracking_on_orders_the_streams_and_is_in_the_trace() {
    let (races, trace, y) = unsynchronized(true, "tracking-on");
    assert!(
        y.iter().all(|&v| v == 2.0),
        "cudarc ordered the read: {}",
        y[0]
    );
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
                && r["at"]
                    .as_str()
                    .is_some_and(|at| at.contains("online_tracking.rs"))
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
    let (races, trace, y) = unsynchronized(false, "tracking-off");
    println!("tracking off: y[0] = {} (meant: 2)", y[0]);
    assert!(
        y.iter().all(|&v| v == 0.0),
        "the read ran before the fill: {}",
        y[0]
    );
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
    Kernels::get(&ctx).unwrap();
    let s1 = ctx.new_stream().unwrap();
    let s2 = ctx.new_stream().unwrap();
    common::warm_up(&s1).unwrap();
    let x = s1.alloc_zeros::<f32>(N).unwrap();
    let mut y = s2.alloc_zeros::<f32>(N).unwrap();
    ctx.synchronize().unwrap();
    let cfg = LaunchConfig::for_num_elems(N as u32);
    ops::spin(&s1, SPIN_CYCLES).unwrap();
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
    let y = ctx.default_stream().clone_dtoh(&y).unwrap();
    println!("read after a hidden write: y[0] = {} (meant: 2)", y[0]);
    assert!(
        y.iter().all(|&v| v == 0.0),
        "cudarc did not order it: {}",
        y[0]
    );
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
    Kernels::get(&ctx).unwrap();
    let s1 = ctx.new_stream().unwrap();
    let s2 = ctx.new_stream().unwrap();
    let s3 = ctx.new_stream().unwrap();
    common::warm_up(&s1).unwrap();
    let mut x = s3.alloc_zeros::<f32>(N).unwrap();
    let mut y1 = s1.alloc_zeros::<f32>(N).unwrap();
    let mut y2 = s2.alloc_zeros::<f32>(N).unwrap();
    let cfg = LaunchConfig::for_num_elems(N as u32);
    unsafe {
        s3.launch_builder(&fill)
            .arg(&mut x)
            .arg(&1.0f32)
            .arg(&N)
            .launch(cfg)
    }
    .unwrap();
    ctx.synchronize().unwrap();
    ops::spin(&s1, SPIN_CYCLES).unwrap(); // delays the first reader
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
            .arg(&5.0f32)
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
    let y1 = ctx.default_stream().clone_dtoh(&y1).unwrap();
    println!(
        "first reader overtaken by the writer: y1[0] = {} (meant: 2)",
        y1[0]
    );
    assert!(y1.iter().all(|&v| v == 10.0), "{}", y1[0]);
}

#[test]
#[ignore = "needs a CUDA device"]
fn pinned_read_after_async_copy_needs_a_sync_in_single_stream_mode() {
    // With only the default stream cudarc does not manage synchronization, so the pinned
    // buffer's event is never recorded and `as_slice` does not wait for the copy.
    for fixed in [false, true] {
        let ctx = CudaContext::builder()
            .ignore_env()
            .sanitize(true)
            .build(0)
            .unwrap();
        Kernels::get(&ctx).unwrap();
        let main = ctx.default_stream();
        common::warm_up(&main).unwrap();
        let x = main.clone_htod(&vec![1.5f32; N]).unwrap();
        let mut pinned = unsafe { ctx.alloc_pinned::<f32>(N) }.unwrap();
        pinned.as_mut_slice().unwrap().fill(0.0);
        ops::spin(&main, SPIN_CYCLES).unwrap(); // delays the copy
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
            println!("pinned read without a sync: {first} (meant: 1.5)");
            assert_eq!(first, 0.0, "the host read before the copy landed");
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

/// [`common::checked`] without a fixture.
fn checked(f: impl FnOnce(&Arc<CudaContext>) -> Result<Vec<f32>, Error>) -> (Vec<f32>, Run) {
    common::checked(None, f)
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
                common::warm_up(&s)?;
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
                common::warm_up(&s)?;
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
    let race = common::assert_wrong_then_right(
        "per-thread handoff, no event",
        per_thread_handoff(false),
        per_thread_handoff(true),
        (0.0, 1.0),
        RaceKind::ReadAfterWrite,
    );
    assert_ne!(race.current.thread, race.previous.thread);
}

/// A stream made by `new_stream` fills `x` (after a spin), then is dropped: cudarc counts no
/// created stream any more and stops managing, so the read on the legacy stream waits on
/// nothing (cudarc core.rs:450-468, 664-677). The legacy stream does not wait for
/// non-blocking streams (CUDA Runtime API, "Stream synchronization behavior"). Fixed: the
/// legacy stream joins the created one before it goes.
fn dropped_stream(fixed: bool) -> (Vec<f32>, Run) {
    checked(|ctx| {
        let main = ctx.default_stream();
        common::warm_up(&main)?;
        let mut x = main.alloc_zeros::<f32>(N)?;
        let side = ctx.new_stream()?;
        common::warm_up(&side)?;
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
    common::assert_wrong_then_right(
        "read after the stream was dropped",
        dropped_stream(false),
        dropped_stream(true),
        (0.0, 1.0),
        RaceKind::ReadAfterWrite,
    );
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
                    common::warm_up(&s)?;
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
    common::assert_wrong_then_right(
        "read on a fork",
        first_stream(true),
        first_stream(false),
        (0.0, 1.0),
        RaceKind::ReadAfterWrite,
    );
}

// ---------------------------------------------------------------------------------------------
// Refining a launch's accesses without changing cudarc's signature.

/// `fill` on s1 writes only the first half of `x` (`n` = N/2), declared with `arg_range`; `scale`
/// on s2 reads the second half through a view: disjoint bytes, no race. Reading the first half
/// on s2 without a wait races, and shows it (a spin delays the fill).
#[test]
#[ignore = "needs a CUDA device"]
fn arg_range_declares_the_bytes_a_kernel_writes() {
    let (lo, run) = checked(|ctx| {
        unsafe { ctx.disable_event_tracking() };
        let common::Kernels { fill, scale, .. } = common::kernels(ctx);
        let s1 = ctx.new_stream()?;
        let s2 = ctx.new_stream()?;
        common::warm_up(&s1)?;
        let half = N / 2;
        let mut x = s1.alloc_zeros::<f32>(N)?;
        let mut y_hi = s2.alloc_zeros::<f32>(half)?;
        let mut y_lo = s2.alloc_zeros::<f32>(half)?;
        ctx.synchronize()?;
        let cfg = LaunchConfig::for_num_elems(half as u32);
        ops::spin(&s1, SPIN_CYCLES)?;
        unsafe {
            s1.launch_builder(&fill)
                .arg_range(&mut x, ArgAccess::Write, ..half)
                .arg(&1.0f32)
                .arg(&half)
                .launch(cfg) // writes the first half
        }?;
        unsafe {
            s2.launch_builder(&scale)
                .arg(&mut y_hi)
                .arg(&x.slice(half..))
                .arg(&2.0f32)
                .arg(&half)
                .launch(cfg) // reads the second half
        }?;
        unsafe {
            s2.launch_builder(&scale)
                .arg(&mut y_lo)
                .arg(&x.slice(..half))
                .arg(&2.0f32)
                .arg(&half)
                .launch(cfg) // reads the first half
        }?;
        ctx.synchronize()?;
        Ok(s2.clone_dtoh(&y_lo)?)
    });
    println!("first half read without a wait: {} (meant: 2)", lo[0]);
    assert!(lo.iter().all(|&v| v == 0.0), "{}", lo[0]);
    let races = run.races();
    assert_eq!(races.len(), 1, "{}", run.report());
    let race = races[0];
    assert_eq!(race.kind, RaceKind::ReadAfterWrite);
    assert!(source_at(race.previous.at.as_deref().unwrap()).ends_with("// writes the first half"));
    assert!(source_at(race.current.at.as_deref().unwrap()).ends_with("// reads the first half"));
}

/// A `&mut` argument the kernel only reads, declared with `arg_as`, and a `&` read of the same
/// buffer on another stream: two reads, no race. Taken as cudarc's types say (a write), the
/// sanitizer would report one.
#[test]
#[ignore = "needs a CUDA device"]
fn arg_as_declares_a_mut_argument_only_read() {
    for declared in [true, false] {
        let (_, run) = checked(|ctx| {
            unsafe { ctx.disable_event_tracking() };
            let common::Kernels { scale, .. } = common::kernels(ctx);
            let s1 = ctx.new_stream()?;
            let s2 = ctx.new_stream()?;
            let mut z = s1.alloc_zeros::<f32>(N)?;
            let mut y1 = s1.alloc_zeros::<f32>(N)?;
            let mut y2 = s2.alloc_zeros::<f32>(N)?;
            ctx.synchronize()?;
            let cfg = LaunchConfig::for_num_elems(N as u32);
            let mut b = s1.launch_builder(&scale);
            b.arg(&mut y1);
            if declared {
                b.arg_as(&mut z, ArgAccess::Read);
            } else {
                b.arg(&mut z);
            }
            unsafe { b.arg(&2.0f32).arg(&N).launch(cfg) }?;
            unsafe {
                s2.launch_builder(&scale)
                    .arg(&mut y2)
                    .arg(&z)
                    .arg(&2.0f32)
                    .arg(&N)
                    .launch(cfg)
            }?;
            ctx.synchronize()?;
            Ok(Vec::new())
        });
        declared_or_race(&run, declared, RaceKind::ReadAfterWrite);
    }
}

/// R19 through the cudarc layer: two streams add into one total with `atomicAdd`, unordered.
/// Declared `ArgAccess::Atomic`, the two updates do not race (the sum is right whatever their
/// order); taken as cudarc's `&mut` says (a plain write), they would be reported.
#[test]
#[ignore = "needs a CUDA device"]
fn arg_as_atomic_lets_two_streams_add_into_one_total() {
    for declared in [true, false] {
        let (sum, run) = checked(|ctx| {
            unsafe { ctx.disable_event_tracking() };
            let common::Kernels { fill, total, .. } = common::kernels(ctx);
            let s1 = ctx.new_stream()?;
            let s2 = ctx.new_stream()?;
            let mut x = s1.alloc_zeros::<f32>(N)?;
            let mut sum = s1.alloc_zeros::<f32>(1)?;
            let cfg = LaunchConfig::for_num_elems(N as u32);
            unsafe {
                s1.launch_builder(&fill)
                    .arg(&mut x)
                    .arg(&1.0f32)
                    .arg(&N)
                    .launch(cfg)
            }?;
            ctx.synchronize()?;
            for s in [&s1, &s2] {
                let mut b = s.launch_builder(&total);
                if declared {
                    b.arg_as(&mut sum, ArgAccess::Atomic);
                } else {
                    b.arg(&mut sum);
                }
                unsafe { b.arg(&x).arg(&N).launch(cfg) }?;
            }
            ctx.synchronize()?;
            Ok(s1.clone_dtoh(&sum)?)
        });
        assert_eq!(sum, [2.0 * N as f32], "both streams' ones are counted");
        declared_or_race(&run, declared, RaceKind::WriteAfterWrite);
    }
}

/// With the declaration, no race; taken as cudarc's types say, a race of `kind`.
fn declared_or_race(run: &Run, declared: bool, kind: RaceKind) {
    if declared {
        run.assert_no_races();
    } else {
        assert!(
            run.races().iter().any(|r| r.kind == kind),
            "{}",
            run.report()
        );
    }
}
