//! Crash safety of the online trace: a host program that dies (SIGKILL, abort, panic) while
//! recording leaves a trace that `streamsan check` reads, losing at most the call in progress.
//!
//! Each test re-executes this test binary as a child (`--exact <test>` with
//! `STREAMSAN_CRASH_CHILD` set), which records through the same path as the wrappers
//! ([`Sanitizer::record_op`]: lock, numbering, engine, the call's lines handed to the trace file
//! at once) or, in the GPU variant, through the wrappers themselves; the parent then kills it or
//! lets it crash, and checks the file. The CPU tests need no GPU; the GPU variant is
//! `#[ignore]`d (run it with `cargo test -- --include-ignored` where a GPU is).
//!
//! On Linux the trace file is written through a shared mapping (`src/cuda/trace_file.rs`): a
//! file left by a crash ends in blank space after its last line, which the reader skips. A kill
//! in the middle of copying a call's lines (or, elsewhere, of a `write` that Linux stops at a
//! page boundary) can leave the last line cut short: the tests accept that, provided the reader
//! names it as truncated and everything before it checks.

#![cfg(feature = "cuda")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use streamsan::check::{CheckError, Checked, check_path};
use streamsan::cuda::{Options, PushKernelArg, Sanitizer};
use streamsan::trace::record::{Access, Op};

mod common;

/// The variable that makes a run of this binary the child; its value is the test's mode.
const CHILD: &str = "STREAMSAN_CRASH_CHILD";
/// The child's trace path.
const TRACE: &str = "STREAMSAN_CRASH_TRACE";
/// Records the child makes before it crashes (abort, panic) or the parent kills it.
const N: u64 = 3000;

fn temp(name: &str, ext: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "streamsan-crash-{name}-{}.{ext}",
        std::process::id()
    ))
}

/// Re-executes this binary to run `test` as the child in `mode`, writing to `trace`.
fn spawn_child(test: &str, mode: &str, trace: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--include-ignored", "--nocapture"])
        .env(CHILD, mode)
        .env(TRACE, trace)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The child's mode, when this process is the child.
fn child_mode() -> Option<(String, PathBuf)> {
    let mode = std::env::var(CHILD).ok()?;
    let trace = PathBuf::from(std::env::var_os(TRACE).expect("the trace path"));
    Some((mode, trace))
}

/// The same, but writing the trace with one `write` per call to an unbuffered `File` (the path
/// of `Sanitizer::with_outputs`, and of trace files off Linux).
fn writing_sanitizer(trace: &Path) -> Arc<Sanitizer> {
    let options = Options {
        trace: Some(trace.to_path_buf()),
        ..Options::default()
    };
    let file = std::fs::File::create(trace).unwrap();
    let report = std::fs::File::create(trace.with_extension("report")).unwrap();
    Sanitizer::with_outputs(options, Some(Box::new(file)), Box::new(report)).unwrap()
}

/// Newlines in the file so far (each ends a line: the header, then records).
fn lines_in(path: &Path) -> u64 {
    std::fs::read(path)
        .map(|b| b.iter().filter(|&&c| c == b'\n').count() as u64)
        .unwrap_or(0)
}

/// Waits until the child has written `records` records, then SIGKILLs it.
fn kill_after(mut child: Child, trace: &Path, records: u64) {
    let start = Instant::now();
    while lines_in(trace) < records + 1 {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("the child ended on its own ({status}) before {records} records:\n{err}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the child wrote {} lines in two minutes",
            lines_in(trace)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success());
}

/// Checks a trace left by a dead child: every complete line is a record that checks, lines are
/// dense, and at most the last line is torn. Returns the check and the number of records.
fn check_leftover(trace: &Path) -> (Checked, u64) {
    let bytes = std::fs::read(trace).unwrap();
    assert!(
        bytes.starts_with(b"{\"streamsan_trace\":1"),
        "no header: {:?}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
    );
    let complete = bytes.iter().rposition(|&c| c == b'\n').unwrap() + 1;
    let records = bytes[..complete].iter().filter(|&&c| c == b'\n').count() as u64 - 1;
    let path = trace.to_str().unwrap();
    // After the last line: nothing, the blank space of a mapped trace file, or (rarely) a line
    // cut short.
    let torn = bytes[complete..].iter().any(|&b| b != b' ');
    let checked = match check_path(path) {
        // A torn line that happens to end exactly before its newline is a whole record.
        Ok(checked) if torn => {
            assert_eq!(checked.stats.records, records + 1);
            return (checked, records + 1);
        }
        Ok(checked) => checked,
        // A write cut by the kill: the reader says so, at the line after the last complete
        // one, and the records before it check.
        Err(CheckError::Trace(e)) if torn => {
            assert!(e.message.contains("truncated"), "{e}");
            assert_eq!(e.line, records + 2, "{e}");
            let prefix = trace.with_extension("prefix.jsonl");
            std::fs::write(&prefix, &bytes[..complete]).unwrap();
            let checked = check_path(prefix.to_str().unwrap()).unwrap_or_else(|e| panic!("{e}"));
            let _ = std::fs::remove_file(prefix);
            checked
        }
        Err(e) => panic!("{e}"),
    };
    assert_eq!(checked.stats.records, records);
    (checked, records)
}

fn remove(trace: &Path) {
    let _ = std::fs::remove_file(trace);
    let _ = std::fs::remove_file(trace.with_extension("report"));
}

/// What the child records: on its own two streams and two buffers (ids offset by `base`, so
/// that threads do not collide), a producer kernel, an event recorded after it and waited on by
/// the consumer stream, the consumer kernel, the event destroyed, a host sync of the consumer
/// (which orders the next round's producer after it): race-free, seven records a round after
/// four declarations. Stops after `limit` records (`None`: never).
fn pipeline(san: &Sanitizer, base: u64, limit: Option<u64>) {
    let mut made = 0u64;
    let mut record = |op: Op, name: Option<&'static str>| {
        if limit.is_some_and(|l| made >= l) {
            return false;
        }
        san.record_op(op, name);
        made += 1;
        true
    };
    let (s1, s2, x, y, ev) = (base + 1, base + 2, base + 1, base + 2, base + 1);
    for id in [s1, s2] {
        record(common::created_stream(id), None);
    }
    for buf in [x, y] {
        record(common::device_buffer(buf), None);
    }
    loop {
        let round = [
            (
                Op::Launch {
                    stream: s1,
                    reads: vec![],
                    writes: vec![Access::whole(x).arg("out")],
                    atomics: Vec::new(),
                },
                Some("produce"),
            ),
            (Op::Event { id: ev }, None),
            (
                Op::Record {
                    event: ev,
                    stream: s1,
                },
                None,
            ),
            (
                Op::Wait {
                    stream: s2,
                    event: ev,
                },
                None,
            ),
            (
                Op::Launch {
                    stream: s2,
                    reads: vec![Access::whole(x).arg("in")],
                    writes: vec![Access::whole(y).arg("out")],
                    atomics: Vec::new(),
                },
                Some("consume"),
            ),
            (Op::EventDestroy { id: ev }, None),
            (Op::StreamSync { stream: s2 }, None),
        ];
        for (op, name) in round {
            if !record(op, name) {
                return;
            }
        }
    }
}

#[test]
fn sigkill_while_four_threads_record_loses_nothing_written() {
    let test = "sigkill_while_four_threads_record_loses_nothing_written";
    if let Some((_, trace)) = child_mode() {
        let san = common::traced_sanitizer(&trace);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let san = san.clone();
                std::thread::spawn(move || pipeline(&san, 100 * t, None))
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        unreachable!("the parent kills this process");
    }
    let trace = temp("kill", "jsonl");
    kill_after(spawn_child(test, "kill", &trace), &trace, N);
    let (checked, records) = check_leftover(&trace);
    assert!(records >= N);
    assert!(!checked.report.has_races(), "{:?}", checked.report);
    remove(&trace);
}

#[test]
fn abort_keeps_every_record_made() {
    let test = "abort_keeps_every_record_made";
    if let Some((mode, trace)) = child_mode() {
        let san = match mode.as_str() {
            "mapped" => common::traced_sanitizer(&trace),
            _ => writing_sanitizer(&trace),
        };
        pipeline(&san, 0, Some(N));
        std::process::abort();
    }
    for mode in ["mapped", "write"] {
        let trace = temp(&format!("abort-{mode}"), "jsonl");
        let out = spawn_child(test, mode, &trace).wait_with_output().unwrap();
        assert!(!out.status.success());
        let (checked, records) = check_leftover(&trace);
        assert_eq!(records, N, "{mode}");
        assert!(!checked.report.has_races());
        let bytes = std::fs::read(&trace).unwrap();
        if mode == "write" || cfg!(not(target_os = "linux")) {
            assert!(
                bytes.ends_with(b"}\n"),
                "{mode}: nothing after the last line"
            );
        } else {
            let lines_end = bytes.iter().rposition(|&b| b != b' ').unwrap() + 1;
            assert!(bytes[..lines_end].ends_with(b"}\n"), "no line is cut");
            assert!(
                bytes.ends_with(b" "),
                "a mapped trace file ends in blank space"
            );
        }
        remove(&trace);
    }
}

#[test]
fn a_panic_keeps_every_record_made() {
    let test = "a_panic_keeps_every_record_made";
    if let Some((_, trace)) = child_mode() {
        // No `Drop` of the sanitizer either: it is leaked, as when the panic ends the process
        // from a thread that holds the last handle.
        let san = common::traced_sanitizer(&trace);
        pipeline(&san, 0, Some(N));
        std::mem::forget(san);
        panic!("the program panics");
    }
    let trace = temp("panic", "jsonl");
    let out = spawn_child(test, "panic", &trace)
        .wait_with_output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the program panics"), "{stderr}");
    let (_, records) = check_leftover(&trace);
    assert_eq!(records, N);
    remove(&trace);
}

/// The same as the CPU kill test, through the wrappers on a GPU: a loop of launches on two
/// streams joined each round, killed while it runs.
#[test]
#[ignore = "needs a CUDA device"]
fn gpu_sigkill_during_launches_keeps_the_trace_readable() {
    use streamsan::cuda::{CudaContext, LaunchConfig};
    let test = "gpu_sigkill_during_launches_keeps_the_trace_readable";
    if let Some((_, trace)) = child_mode() {
        let ctx = CudaContext::builder()
            .ignore_env()
            .sanitize(true)
            .trace_path(&trace)
            .report_path(trace.with_extension("report"))
            .build(0)
            .unwrap();
        let inc = common::kernels(&ctx).inc;
        let s1 = ctx.new_stream_named("producer").unwrap();
        let s2 = ctx.new_stream_named("consumer").unwrap();
        let n = 256usize;
        let mut x = s1.alloc_zeros_named::<f32>("x", n).unwrap();
        let cfg = LaunchConfig::for_num_elems(n as u32);
        for round in 0u64.. {
            let s = if round % 2 == 0 { &s1 } else { &s2 };
            let other = if round % 2 == 0 { &s2 } else { &s1 };
            s.join(other).unwrap();
            unsafe { s.launch_builder(&inc).arg(&mut x).arg(&n).launch(cfg) }.unwrap();
            if round % 64 == 63 {
                s.synchronize().unwrap();
            }
        }
        unreachable!();
    }
    let trace = temp("gpu-kill", "jsonl");
    kill_after(spawn_child(test, "gpu", &trace), &trace, N);
    let (checked, records) = check_leftover(&trace);
    assert!(records >= N);
    assert!(!checked.report.has_races(), "{:?}", checked.report);
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.matches("\"op\":\"launch\"").count() > 100);
    remove(&trace);
}
