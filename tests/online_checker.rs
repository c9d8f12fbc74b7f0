//! The checker thread (`src/cuda/sanitizer/checker.rs`) as a program meets it, without CUDA:
//! records made through the same path as the wrappers ([`Sanitizer::record_op`]), in this
//! crate's non-test build, where records are queued without being made whole first.
//!
//! - checking on the thread finds, counts and prints what checking within the calls does, with
//!   many host threads, pauses long enough for the checker to take batches still filling, and
//!   queries in between;
//! - races queued when the process exits are printed, even when the program exits without
//!   ending the sanitizer (`std::process::exit` with the sanitizer alive);
//! - a program thread that holds `io::stderr()`'s lock while it asks for findings, or exits,
//!   does not wait for ever for the checker, which prints to standard error too.
//!
//! The last two re-execute this binary as a child (`--exact <test>` with
//! `STREAMSAN_CHECKER_CHILD` set) and look at what it printed.

#![cfg(feature = "cuda")]

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use streamsan::cuda::{Options, ReportTo, Sanitizer};
use streamsan::trace::record::{Access, Op};

mod common;

/// The variable that makes a run of this binary the child.
const CHILD: &str = "STREAMSAN_CHECKER_CHILD";

/// A report sink that keeps what it is given.
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<u8>>>);

impl Write for Kept {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Kept {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

/// Streams `base + 1` and `base + 2`, and buffer `buf` written on the first and read on the
/// second with nothing between: one race per call.
fn declare(san: &Sanitizer, base: u64) {
    for id in [base + 1, base + 2] {
        san.record_op(common::created_stream(id), None);
    }
}

fn race_on(san: &Sanitizer, base: u64, buf: u64) {
    san.record_op(common::device_buffer(buf), Some("x"));
    for (stream, write) in [(base + 1, true), (base + 2, false)] {
        let access = vec![Access::whole(buf).arg("x")];
        let (reads, writes) = if write {
            (vec![], access)
        } else {
            (access, vec![])
        };
        san.record_op(
            Op::Launch {
                stream,
                reads,
                writes,
                atomics: Vec::new(),
            },
            Some(if write { "fill" } else { "sum" }),
        );
    }
}

/// One host thread's work: `rounds` buffers, each raced on, synchronized and freed; now and
/// then a pause of more than the checker's idle time, now and then a query.
fn worker(san: &Sanitizer, t: u64, rounds: u64) {
    let base = 10 * t;
    declare(san, base);
    let mut seed = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for r in 0..rounds {
        let buf = 1_000_000 * t + r;
        race_on(san, base, buf);
        san.record_op(Op::DeviceSync { device: 0 }, None);
        san.record_op(Op::Free { buf, stream: None }, None);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        match seed % 1000 {
            0 => std::thread::sleep(Duration::from_millis(30)),
            1 => {
                let _ = san.stats();
            }
            _ => {}
        }
    }
}

/// A sanitizer checking on its thread or within the calls, printing into the returned sink.
fn sanitizer(checker_thread: bool) -> (Arc<Sanitizer>, Kept) {
    let report = Kept::default();
    let options = Options {
        checker_thread,
        ..Options::default()
    };
    let san = Sanitizer::with_outputs(options, None, Box::new(report.clone())).unwrap();
    (san, report)
}

#[test]
fn the_checker_thread_finds_and_prints_what_checking_within_calls_does() {
    let run = |checker_thread: bool| {
        let (san, report) = sanitizer(checker_thread);
        worker(&san, 1, 3000);
        let found = (san.stats(), san.folded_report(), san.findings());
        drop(san);
        (found, report.text())
    };
    let (within, threaded) = (run(false), run(true));
    let occurrences: u64 = within.0.1.races.iter().map(|r| r.occurrences).sum();
    assert_eq!(occurrences, 3000, "each round races once");
    assert_eq!(within.0, threaded.0, "counts, report and findings");
    assert!(within.1.contains("SUMMARY: 1 race"), "{}", within.1);
    assert_eq!(within.1, threaded.1, "the same text, in the same order");
}

#[test]
fn many_threads_recording_lose_nothing_on_the_checker_thread() {
    let (san, report) = sanitizer(true);
    std::thread::scope(|s| {
        for t in 1..=6 {
            let san = &san;
            s.spawn(move || worker(san, t, 2000));
        }
    });
    let stats = san.stats();
    let folded = san.folded_report();
    // Per thread: 2 streams, then per round an alloc, 2 launches, a sync and a free.
    assert_eq!(stats.records, 6 * (2 + 2000 * 5));
    assert_eq!(folded.races.len(), 6, "one pair of sites per thread");
    assert!(folded.races.iter().all(|r| r.occurrences == 2000));
    drop(san);
    let text = report.text();
    assert_eq!(text.matches("RACE ").count(), 6, "{text}");
    assert!(text.contains("SUMMARY: 6 races"), "{text}");
}

/// Runs `test` in a child process (`mode` tells it what to do) and returns its exit status and
/// standard error, or fails after `limit`.
fn child(test: &str, mode: &str, limit: Duration) -> (Option<i32>, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, mode)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code(), err);
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!("the child ({mode}) did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A sanitizer reporting to standard error, as `STREAMSAN=1` makes one.
fn to_stderr() -> Arc<Sanitizer> {
    Sanitizer::new(Options {
        report: ReportTo::Stderr,
        ..Options::default()
    })
    .unwrap()
}

#[test]
fn races_queued_at_exit_are_printed_though_the_sanitizer_lives_on() {
    let test = "races_queued_at_exit_are_printed_though_the_sanitizer_lives_on";
    if std::env::var_os(CHILD).is_some() {
        let san = to_stderr();
        declare(&san, 0);
        race_on(&san, 0, 1);
        // Alive at the exit, and no query: only the exit hook can check what is queued.
        std::mem::forget(san);
        std::process::exit(3);
    }
    let (code, err) = child(test, "exit", Duration::from_secs(60));
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(err.matches("RACE read-after-write").count(), 1, "{err}");
}

#[test]
fn a_thread_holding_stderr_does_not_wait_for_ever_for_the_checker() {
    let test = "a_thread_holding_stderr_does_not_wait_for_ever_for_the_checker";
    if std::env::var_os(CHILD).is_some() {
        let san = to_stderr();
        declare(&san, 0);
        race_on(&san, 0, 1);
        let mut held = std::io::stderr().lock();
        // The query waits for the checker, which prints the race meanwhile.
        let races = san.races().len();
        writeln!(held, "races: {races}").unwrap();
        drop(san);
        // A sanitizer that ends while the lock is held prints its summary all the same.
        let other = to_stderr();
        declare(&other, 0);
        race_on(&other, 0, 2);
        drop(other);
        drop(held);
        std::process::exit(4);
    }
    let (code, err) = child(test, "stderr", Duration::from_secs(60));
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains("races: 1"), "{err}");
    assert!(err.contains("SUMMARY: 1 race"), "{err}");
}

unsafe extern "C" {
    fn fork() -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
}

#[test]
fn a_forked_child_neither_hangs_nor_crashes_in_the_sanitizer() {
    let test = "a_forked_child_neither_hangs_nor_crashes_in_the_sanitizer";
    if std::env::var_os(CHILD).is_some() {
        // With a trace file: the child must not cut the file the parent is still writing.
        let trace =
            std::env::temp_dir().join(format!("streamsan-fork-{}.jsonl", std::process::id()));
        let san = Sanitizer::new(Options {
            report: ReportTo::Stderr,
            trace: Some(trace.clone()),
            ..Options::default()
        })
        .unwrap();
        declare(&san, 0);
        race_on(&san, 0, 1);
        assert_eq!(san.races().len(), 1);
        // SAFETY: the child only records, queries, drops and exits (no CUDA).
        let pid = unsafe { fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // The child: no checker thread here. Recording, a query, the end of the
            // sanitizer and the exit hook must all return. Its records come after the
            // parent's next ones, at the same place in the file they share: they must not
            // replace them.
            std::thread::sleep(Duration::from_millis(300));
            race_on(&san, 0, 2);
            let _ = san.races();
            drop(san);
            std::process::exit(7);
        }
        // The parent goes on writing its trace, which must still be whole and its own.
        race_on(&san, 0, 3);
        let mut status = 0;
        // SAFETY: waits for the child just made.
        assert_eq!(unsafe { waitpid(pid, &mut status, 0) }, pid);
        eprintln!("child status {status:#x}");
        drop(san);
        let text = std::fs::read_to_string(&trace).unwrap();
        let checked = streamsan::check::check_path(trace.to_str().unwrap());
        let _ = std::fs::remove_file(&trace);
        let checked = checked.unwrap_or_else(|e| panic!("{e}"));
        eprintln!("trace records {}", checked.stats.records);
        eprintln!(
            "buffer 3 in {} lines, buffer 2 in {}",
            text.matches("\"buf\":3").count(),
            text.matches("\"buf\":2").count()
        );
        std::process::exit(5);
    }
    let (code, err) = child(test, "fork", Duration::from_secs(60));
    assert_eq!(code, Some(5), "{err}");
    // Exited normally with 7: WIFEXITED, WEXITSTATUS 7.
    assert!(err.contains("child status 0x700"), "{err}");
    assert_eq!(
        err.matches("SUMMARY:").count(),
        1,
        "only the parent ends it: {err}"
    );
    // The parent's 2 streams and 2 rounds of 3 records; the child's records are not its.
    assert!(err.contains("trace records 8"), "{err}");
    assert!(err.contains("buffer 3 in 3 lines, buffer 2 in 0"), "{err}");
    // The child says why it wrote no trace.
    assert!(err.contains("a child made by fork does not write"), "{err}");
}

#[test]
fn a_json_report_to_a_file_is_written_there_whole() {
    for checker_thread in [true, false] {
        let path = std::env::temp_dir().join(format!(
            "streamsan-json-{}-{checker_thread}.json",
            std::process::id()
        ));
        let san = Sanitizer::new(Options {
            format: streamsan::cuda::ReportFormat::Json,
            report: ReportTo::Path(path.clone()),
            checker_thread,
            ..Options::default()
        })
        .unwrap();
        declare(&san, 0);
        race_on(&san, 0, 1);
        drop(san);
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let report: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("not one JSON document ({e}): {text}"));
        assert_eq!(report["races"].as_array().map(Vec::len), Some(1), "{text}");
    }
}
