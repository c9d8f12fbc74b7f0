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
