//! `streamsan run` where no GPU is: everything but the recording itself (that runs on the GPU
//! machine: tests/run_gpu/run-cases.sh, and its traces are checked by tests/gpu_fixtures.rs).
//! A program that never initializes CUDA never loads the tool, so these runs check the
//! command's own behaviour: exit statuses, errors, what it says when there is nothing to check.

use assert_cmd::Command;

/// The command, with the tool library named explicitly: a program without CUDA never loads
/// it, so any existing file stands in (the real one is built by `cargo build -p
/// streamsan-tool`, which a test run of this crate alone may not do).
fn run() -> Command {
    let mut cmd = Command::cargo_bin("streamsan").unwrap();
    cmd.env(
        "STREAMSAN_TOOL_LIB",
        concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"),
    )
    .env_remove("CUDA_INJECTION64_PATH")
    .arg("run");
    cmd
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_program_without_cuda_has_nothing_to_check_and_keeps_its_exit_status() {
    let out = run().args(["--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("made no CUDA call"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());
    let out = run().args(["--", "sh", "-c", "exit 3"]).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn the_program_sees_the_injection_and_the_trace_directory() {
    let dir = std::env::temp_dir().join(format!("streamsan-run-test-{}", std::process::id()));
    let out = run()
        .args(["--api-only", "--no-call-sites", "--keep-traces"])
        .arg(&dir)
        .args(["--", "sh", "-c", "test -n \"$CUDA_INJECTION64_PATH\" && test -d \"$STREAMSAN_RUN_DIR\" && test \"$STREAMSAN_RUN_KERNELS\" = 0 && test \"$STREAMSAN_RUN_SITES\" = 0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(dir.is_dir(), "--keep-traces keeps the directory");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn errors_exit_2_and_say_what_is_wrong() {
    let out = run().args(["--", "/nonexistent/program"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot run /nonexistent/program"),
        "{}",
        stderr(&out)
    );

    let out = run()
        .env("STREAMSAN_TOOL_LIB", "/nonexistent/lib.so")
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("STREAMSAN_TOOL_LIB=/nonexistent/lib.so"),
        "{}",
        stderr(&out)
    );

    let out = run()
        .env("CUDA_INJECTION64_PATH", "/other/tool.so")
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("CUDA_INJECTION64_PATH is already set"),
        "{}",
        stderr(&out)
    );

    let out = run().output().unwrap();
    assert_eq!(out.status.code(), Some(2), "no PROGRAM is a usage error");

    let out = run()
        .args(["--suppressions", "/nonexistent.supp", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn help_says_how_it_works_and_what_it_cannot_see() {
    let out = run().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "CUDA_INJECTION64_PATH",
        "pinned or managed memory",
        "--api-only",
        "66",
    ] {
        assert!(text.contains(needle), "--help lacks {needle}");
    }
}

#[test]
fn a_process_whose_tool_did_not_start_is_no_verdict() {
    // The tool leaves `trace-PID.failed` when it cannot start (no libsanitizer-public.so,
    // another Sanitizer API tool attached); a stand-in program leaves one the same way.
    let out = run()
        .args([
            "--",
            "sh",
            "-c",
            "echo 'no libsanitizer-public.so' > \"$STREAMSAN_RUN_DIR/trace-$$.failed\"",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the CUDA tool did not start: no libsanitizer-public.so"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("no verdict"), "{}", stderr(&out));
}

#[test]
fn a_kept_directory_used_again_checks_only_this_runs_traces() {
    let dir = std::env::temp_dir().join(format!("streamsan-run-reuse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // An earlier run's racy trace.
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/traces/sum_before_randn.jsonl"
        ),
        dir.join("trace-1.jsonl"),
    )
    .unwrap();
    let out = run()
        .arg("--keep-traces")
        .arg(&dir)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("made no CUDA call"),
        "{}",
        stderr(&out)
    );
    // A trace this run writes is checked: the racy one, under a new name, races.
    let out = run()
        .arg("--keep-traces")
        .arg(&dir)
        .args([
            "--",
            "sh",
            "-c",
            "cp \"$STREAMSAN_RUN_DIR/trace-1.jsonl\" \"$STREAMSAN_RUN_DIR/trace-$$.jsonl\"",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(66), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("SUMMARY: 1 race (read-after-write"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("reproduce: streamsan check"),
        "a kept trace can be replayed: {}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A stand-in for a CUDA process: it writes a racy trace where the tool would have.
const RACY_PROCESS: &str = concat!(
    "cp ",
    env!("CARGO_MANIFEST_DIR"),
    "/examples/traces/sum_before_randn.jsonl \"$STREAMSAN_RUN_DIR/trace-$$.jsonl\""
);

#[test]
fn races_print_as_each_process_finds_them_and_the_end_sums_up() {
    // What the program is told: check as you run, print races, halt or not.
    let env_is = |args: &[&str], test: &str| {
        let out = run()
            .args(args)
            .args(["--", "sh", "-c", test])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?} {test}: {}",
            stderr(&out)
        );
    };
    env_is(
        &[],
        "test \"$STREAMSAN_RUN_LIVE\" = 1 && test -z \"$STREAMSAN_RUN_HALT\"",
    );
    env_is(
        &["--halt-on-error", "--error-exitcode", "70"],
        "test \"$STREAMSAN_RUN_HALT\" = 70",
    );
    env_is(&["--format", "json"], "test -z \"$STREAMSAN_RUN_LIVE\"");
    env_is(&["--max-reports", "1"], "test -z \"$STREAMSAN_RUN_LIVE\"");
    env_is(
        &["--report", "/dev/null"],
        "test -z \"$STREAMSAN_RUN_LIVE\"",
    );
    let supp = std::env::temp_dir().join(format!("streamsan-run-{}.supp", std::process::id()));
    std::fs::write(&supp, "race:kind=write-after-write\n").unwrap();
    let absolute = std::fs::canonicalize(&supp).unwrap();
    env_is(
        &["--suppressions", supp.to_str().unwrap()],
        &format!(
            "test \"$STREAMSAN_RUN_SUPPRESSIONS\" = {:?}",
            absolute.display().to_string()
        ),
    );
    let _ = std::fs::remove_file(&supp);

    // At the end, on stderr: only the summary where the process's races went to this same
    // stderr (its tool says so in its summary), and no replay line for a temporary directory
    // that is gone. The stand-in writes the summary a tool that printed one race would.
    let shown = format!(
        "{RACY_PROCESS} && printf '{{\"live\":{{\"races\":1,\"records\":12,\"stopped\":false,\"stderr\":[%s,%s]}},\"host_visible_allocations\":2}}' $(stat -L -c '%d %i' /proc/$$/fd/2) > \"$STREAMSAN_RUN_DIR/trace-$$.summary.json\""
    );
    let out = run().args(["--", "sh", "-c", &shown]).output().unwrap();
    assert_eq!(out.status.code(), Some(66), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("SUMMARY: 1 race (read-after-write"), "{err}");
    assert!(!err.contains("RACE read-after-write on"), "{err}");
    assert!(!err.contains("reproduce:"), "{err}");
    assert!(err.contains("rerun with --keep-traces DIR"), "{err}");
    assert!(
        err.contains("warning[not-checked] line 1: host code reading or writing pinned"),
        "{err}"
    );
    assert!(err.contains("made 2 such allocations"), "{err}");
    // Where they went elsewhere (the program's stderr redirected), where records came after
    // the summary (11 checked of 12), or no summary says, the whole report comes at the end.
    let partial = shown.replace("records\":12", "records\":11");
    assert_ne!(partial, shown);
    let elsewhere = format!(
        "{RACY_PROCESS} && echo '{{\"live\":{{\"races\":1,\"stopped\":false,\"stderr\":[1,2]}}}}' > \"$STREAMSAN_RUN_DIR/trace-$$.summary.json\""
    );
    for program in [RACY_PROCESS, elsewhere.as_str(), partial.as_str()] {
        let out = run().args(["--", "sh", "-c", program]).output().unwrap();
        assert_eq!(out.status.code(), Some(66), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("RACE read-after-write on"),
            "{program}: {}",
            stderr(&out)
        );
    }
    // A JSON report (or a --report file) is whole at the end.
    let out = run()
        .args(["--format", "json", "--", "sh", "-c", RACY_PROCESS])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(66));
    let err = stderr(&out);
    assert!(err.contains("\"races\": ["), "{err}");
    // What the run could not see is part of the report: a `not-checked` warning.
    assert!(err.contains("\"kind\": \"not-checked\""), "{err}");
    assert!(
        err.contains("pinned or managed memory is not seen"),
        "{err}"
    );
}

#[test]
fn log_entries_outside_the_bounds_are_a_usage_error() {
    for n in ["0", "268435457", "1152921504606846977"] {
        let out = run()
            .args(["--log-entries", n, "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--log-entries {n}");
    }
}
