//! The examples' scenarios on a real GPU, sanitized through the builder API, in all four
//! variants (racy / fixed, cudarc's event tracking off / on):
//!
//! - racy, tracking off: the GPU's numbers are wrong (for `free_in_use`: when the pool handed
//!   the freed memory out again, which the scenario checks by address) and the sanitizer
//!   reports the expected race, at the line of the racing call in `src/ops/demos/`, with the
//!   kernel, argument and previous access the scenario names; every race is at that line;
//! - every other variant: the numbers are right and the sanitizer reports nothing.
//!
//! Each run writes its trace; with `STREAMSAN_FIXTURE_DIR` set, to
//! `$STREAMSAN_FIXTURE_DIR/<example>-<racy|fixed>-tracking-<on|off>.jsonl` (to be committed
//! under tests/fixtures/gpu/), else to a temporary file that is removed. Reports go to a
//! temporary file, shown when an assertion fails.
//!
//! Run with `cargo test --test gpu_examples -- --include-ignored --test-threads=1` where a GPU
//! is.

#![cfg(feature = "cuda")]

use std::path::PathBuf;

use serde_json::Value;
use streamsan::cuda::Context;
use streamsan::ops::demos::{self, Outcome, Variant, cli::Demo, cli::describe};

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("streamsan-{}-{name}", std::process::id()))
}

/// Runs `demo` in variant `v` on a fresh sanitized context; returns the outcome, the trace's
/// records and the report text.
fn run(demo: &Demo, v: Variant) -> (Outcome, Vec<Value>, String) {
    let name = v.trace_name(demo.name);
    let fixture_dir = std::env::var_os("STREAMSAN_FIXTURE_DIR").map(PathBuf::from);
    let trace = match &fixture_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).unwrap();
            dir.join(&name)
        }
        None => scratch(&name),
    };
    let report = scratch(&format!("{name}.report.txt"));
    let ctx = Context::builder()
        .ignore_env()
        .sanitize(true)
        .trace_path(&trace)
        .report_path(&report)
        .build(0)
        .expect("a CUDA device");
    let outcome = (demo.run)(&ctx, v).unwrap_or_else(|e| panic!("{} ({v}): {e}", demo.name));
    drop(ctx); // the sanitizer's summary, and the end of the trace
    let text = std::fs::read_to_string(&trace).unwrap();
    let records = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    if fixture_dir.is_none() {
        let _ = std::fs::remove_file(&trace);
    }
    let report_text = std::fs::read_to_string(&report).unwrap_or_default();
    let _ = std::fs::remove_file(&report);
    (outcome, records, report_text)
}

fn check(demo: &Demo, v: Variant) {
    let (o, trace, report) = run(demo, v);
    let argv = [demo.name.to_string()];
    let context = format!(
        "{}\n--- sanitizer report ---\n{report}",
        describe(demo, &o, &argv, None)
    );
    assert!(o.sanitized);

    // The trace is v1 and has the scenario's launches, named.
    assert_eq!(trace[0]["streamsan_trace"], 1, "{context}");
    assert!(
        trace
            .iter()
            .any(|r| r["op"] == "launch" && r["name"] == "spin"),
        "{context}"
    );

    if v.races() {
        let wrong_expected =
            demo.name != demos::free_in_use::NAME || demos::free_in_use::memory_reused(&o);
        if wrong_expected {
            assert!(
                !o.matches(),
                "the racy program gave right numbers\n{context}"
            );
        }
        let race = o
            .expected_race()
            .unwrap_or_else(|| panic!("expected {:#?}\n{context}", o.expected));
        assert_eq!(race.buffer.name.as_deref(), Some(o.expected.buffer));
        for r in o.races() {
            assert!(
                o.expected.current.site.is(r.current.at.as_deref()),
                "a race not at {}: {r:#?}\n{context}",
                o.expected.current.site
            );
        }
    } else {
        assert!(o.matches(), "wrong numbers\n{context}");
        assert!(o.races().is_empty(), "{:#?}\n{context}", o.races());
        assert!(o.warnings().is_empty(), "{:#?}\n{context}", o.warnings());
    }

    // With tracking on, cudarc's own synchronization is in the trace; with it off, none (the
    // events cudarc makes for pinned buffers are declared either way, but never recorded).
    let cudarc_syncs = trace
        .iter()
        .filter(|r| r["name"].as_str().is_some_and(|n| n.starts_with("cudarc:")))
        .filter(|r| {
            ["wait", "record", "event_sync", "device_sync"].contains(&r["op"].as_str().unwrap())
        })
        .count();
    assert_eq!(cudarc_syncs > 0, v.tracking, "{context}");
}

/// Unsanitized, the numbers are the same: the sanitizer neither causes nor hides the race.
fn check_unsanitized(demo: &Demo) {
    for v in [Variant::RACY, Variant::FIXED] {
        let ctx = Context::builder()
            .ignore_env()
            .sanitize(false)
            .build(0)
            .expect("a CUDA device");
        let o = (demo.run)(&ctx, v).unwrap_or_else(|e| panic!("{} ({v}): {e}", demo.name));
        assert!(!o.sanitized && o.findings.is_empty());
        let describe = describe(demo, &o, &[demo.name.to_string()], None);
        if v.fixed {
            assert!(o.matches(), "{describe}");
        } else if demo.name != demos::free_in_use::NAME || demos::free_in_use::memory_reused(&o) {
            assert!(!o.matches(), "{describe}");
        }
    }
}

macro_rules! scenario {
    ($module:ident) => {
        mod $module {
            use super::*;
            use streamsan::ops::demos::$module::DEMO;

            #[test]
            #[ignore = "needs a CUDA device"]
            fn racy_tracking_off() {
                check(&DEMO, Variant::RACY);
            }

            #[test]
            #[ignore = "needs a CUDA device"]
            fn fixed_tracking_off() {
                check(&DEMO, Variant::FIXED);
            }

            #[test]
            #[ignore = "needs a CUDA device"]
            fn racy_tracking_on() {
                check(
                    &DEMO,
                    Variant {
                        fixed: false,
                        tracking: true,
                    },
                );
            }

            #[test]
            #[ignore = "needs a CUDA device"]
            fn fixed_tracking_on() {
                check(
                    &DEMO,
                    Variant {
                        fixed: true,
                        tracking: true,
                    },
                );
            }

            #[test]
            #[ignore = "needs a CUDA device"]
            fn unsanitized() {
                check_unsanitized(&DEMO);
            }
        }
    };
}

scenario!(sum_before_randn);
scenario!(pipeline);
scenario!(producer_consumer);
scenario!(free_in_use);

/// The racy `free_in_use` should usually show wrong numbers too; if the pool did not reuse
/// the memory, say so (not a failure: the driver does not promise reuse).
#[test]
#[ignore = "needs a CUDA device"]
fn free_in_use_reports_whether_memory_was_reused() {
    let ctx = Context::builder()
        .ignore_env()
        .sanitize(false)
        .build(0)
        .unwrap();
    let o = (demos::free_in_use::DEMO.run)(&ctx, Variant::RACY).unwrap();
    assert_eq!(
        o.notes.len(),
        1,
        "with tracking off the addresses are compared"
    );
    if demos::free_in_use::memory_reused(&o) {
        assert!(!o.matches(), "x's memory went to y, so the sum adds sevens");
    } else {
        eprintln!(
            "note: the pool did not reuse x's memory this time: {:?}",
            o.notes
        );
    }
}
