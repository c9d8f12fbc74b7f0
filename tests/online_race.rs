//! Online checking on a real GPU: a two-stream race is reported when the racing call is made,
//! at the program's line, with the allocation site; the fixed program reports nothing;
//! `halt_on_error` exits with 66. Run with `cargo test -- --include-ignored` where a GPU is.

#![cfg(feature = "cuda")]

use std::process::Command;
use std::sync::Arc;

use streamsan::cuda::{CudaContext, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use streamsan::engine::{AccessKind, Race, RaceKind, Unordered};
use streamsan::trace::OpKind;

mod common;

const N: usize = 1 << 20;

/// The source line a report's `file:line:col` points at, from this file.
fn source_at(at: &str) -> &'static str {
    common::source_line(include_str!("online_race.rs"), "online_race.rs", at)
}

fn sanitized() -> Arc<CudaContext> {
    CudaContext::builder()
        .ignore_env()
        .sanitize(true)
        .build(0)
        .expect("a CUDA device")
}

/// Everything the program made, kept alive until [`finish`] orders the frees.
struct Program {
    _s1: Arc<CudaStream>,
    s2: Arc<CudaStream>,
    _x: CudaSlice<f32>,
    y: CudaSlice<f32>,
}

/// `fill` writes x on s1, `scale` reads x on s2. Without `fixed`, nothing orders them (event
/// tracking is off, so cudarc adds nothing either).
fn program(ctx: &Arc<CudaContext>, fixed: bool) -> Program {
    let common::Kernels { fill, scale, .. } = common::kernels(ctx);
    unsafe { ctx.disable_event_tracking() };
    let s1 = ctx.new_stream_named("producer").unwrap();
    let s2 = ctx.new_stream_named("consumer").unwrap();
    let mut x = s1.alloc_zeros_named::<f32>("x", N).unwrap(); // x allocated
    let mut y = s2.alloc_zeros_named::<f32>("y", N).unwrap();
    let cfg = LaunchConfig::for_num_elems(N as u32);
    unsafe {
        s1.launch_builder(&fill)
            .names(&["out", "v", "n"])
            .arg(&mut x)
            .arg(&2.0f32)
            .arg(&N)
            .launch(cfg) // x written
    }
    .unwrap();
    if fixed {
        s2.join(&s1).unwrap();
    }
    unsafe {
        s2.launch_builder(&scale)
            .names(&["out", "in", "k", "n"])
            .arg(&mut y)
            .arg(&x)
            .arg(&3.0f32)
            .arg(&N)
            .launch(cfg) // x read
    }
    .unwrap();
    Program {
        _s1: s1,
        s2,
        _x: x,
        y,
    }
}

fn finish(ctx: &Arc<CudaContext>, p: Program) -> Vec<f32> {
    // Order the frees after every use (they run on the allocation streams).
    ctx.synchronize().unwrap();
    let out = p.s2.clone_dtoh(&p.y).unwrap();
    ctx.synchronize().unwrap();
    drop(p);
    out
}

fn the_race(races: &[Race]) -> &Race {
    races
        .iter()
        .find(|r| r.previous.op == OpKind::Launch && r.current.op == OpKind::Launch)
        .unwrap_or_else(|| panic!("no launch/launch race in {races:#?}"))
}

#[test]
#[ignore = "needs a CUDA device"]
fn two_stream_race_is_reported_at_the_racing_line() {
    let ctx = sanitized();
    let san = ctx.sanitizer().unwrap().clone();
    let p = program(&ctx, false);
    // Reported online: before anything else happens.
    let races = san.races();
    let race = the_race(&races);
    assert_eq!(race.kind, RaceKind::ReadAfterWrite);
    assert_eq!(race.buffer.name.as_deref(), Some("x"));
    assert_eq!(race.range, (0, (N * 4) as u64));
    assert_eq!(race.current.access, AccessKind::Read);
    assert_eq!(race.current.name.as_deref(), Some("scale"));
    assert_eq!(race.current.arg.as_deref(), Some("in"));
    assert!(source_at(race.current.at.as_deref().unwrap()).ends_with("// x read"));
    assert_eq!(race.previous.access, AccessKind::Write);
    assert_eq!(race.previous.name.as_deref(), Some("fill"));
    assert_eq!(race.previous.arg.as_deref(), Some("out"));
    assert!(source_at(race.previous.at.as_deref().unwrap()).ends_with("// x written"));
    assert!(source_at(race.buffer.alloc_at.as_deref().unwrap()).ends_with("// x allocated"));
    assert_eq!(
        race.why,
        Unordered::NeverSynchronized,
        "s2 never synchronized with s1"
    );
    // Every race of the program is at the read.
    for r in &races {
        assert!(source_at(r.current.at.as_deref().unwrap()).ends_with("// x read"));
    }
    // The kernels really ran.
    let out = finish(&ctx, p);
    assert_eq!(out.len(), N);
}

#[test]
#[ignore = "needs a CUDA device"]
fn joined_streams_report_nothing() {
    let ctx = sanitized();
    let p = program(&ctx, true);
    let out = finish(&ctx, p);
    assert!(out.iter().all(|&v| v == 6.0));
    let san = ctx.sanitizer().unwrap();
    assert_eq!(san.races(), vec![], "the fixed program is clean");
    assert_eq!(san.warnings(), vec![]);
}

#[test]
#[ignore = "needs a CUDA device"]
fn disabled_sanitizer_passes_through() {
    let ctx = CudaContext::builder()
        .ignore_env()
        .sanitize(false)
        .build(0)
        .unwrap();
    assert!(ctx.sanitizer().is_none());
    let p = program(&ctx, true);
    let out = finish(&ctx, p);
    assert!(out.iter().all(|&v| v == 6.0));
}

#[test]
#[ignore = "needs a CUDA device"]
fn halt_on_error_exits_with_66() {
    if std::env::var_os("STREAMSAN_TEST_HALT_CHILD").is_some() {
        let ctx = CudaContext::builder()
            .ignore_env()
            .sanitize(true)
            .halt_on_error(true)
            .build(0)
            .unwrap();
        let _p = program(&ctx, false);
        panic!("halt_on_error did not halt");
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "halt_on_error_exits_with_66",
            "--include-ignored",
            "--nocapture",
        ])
        .env("STREAMSAN_TEST_HALT_CHILD", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(66), "{stderr}");
    assert!(stderr.contains("RACE read-after-write"), "{stderr}");
    assert!(stderr.contains("online_race.rs"), "{stderr}");
}

#[test]
#[ignore = "needs a CUDA device"]
fn streamsan_env_enables_without_code_change() {
    // The environment is read by `CudaContext::new`; run in a child so this process's is untouched.
    if std::env::var_os("STREAMSAN_TEST_ENV_CHILD").is_some() {
        let ctx = CudaContext::new(0).unwrap();
        assert!(ctx.sanitizer().is_some(), "STREAMSAN=1 turns it on");
        let p = program(&ctx, false);
        assert!(!ctx.sanitizer().unwrap().races().is_empty());
        finish(&ctx, p);
        return;
    }
    let trace = std::env::temp_dir().join(format!("streamsan-env-{}.jsonl", std::process::id()));
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "streamsan_env_enables_without_code_change",
            "--include-ignored",
        ])
        .env("STREAMSAN_TEST_ENV_CHILD", "1")
        .env("STREAMSAN", "1")
        .env(
            "STREAMSAN_OPTIONS",
            format!("trace={}:format=text", trace.display()),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("RACE read-after-write"), "{stderr}");
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(
        text.ends_with("}\n"),
        "a clean end cuts the trace after its last line"
    );
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["streamsan_trace"], 1);
    assert!(
        lines
            .iter()
            .any(|r| r["op"] == "launch" && r["name"] == "scale")
    );
    let _ = std::fs::remove_file(trace);
}
