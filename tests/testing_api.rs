//! `streamsan::cuda::testing`: checked runs for regression tests.
//!
//! The CPU tests drive the recording path every wrapper takes (`Sanitizer::record_op`) through
//! `Harness::run_with`, so CI exercises the API without a GPU. The GPU tests run real kernels
//! (`streamsan_demos::ops`) through `testing::sanitize` / `assert_no_races`; they are `#[ignore]`d:
//! `cargo test --test testing_api -- --include-ignored` where a GPU is.

#![cfg(feature = "cuda")]

use std::convert::Infallible;
use std::panic::{AssertUnwindSafe, catch_unwind};

use streamsan::cuda::Sanitizer;
use streamsan::cuda::testing::{self, Harness};
use streamsan::trace::record::{Access, Op};

mod common;

/// `fill` writes `x` on stream `producer`; `sum` reads it on `consumer`; with `ordered`, the
/// consumer waits on an event recorded after `fill`.
fn program(san: &Sanitizer, ordered: bool) {
    for (id, name) in [(1, "producer"), (2, "consumer")] {
        san.record_op(common::created_stream(id), Some(name));
    }
    san.record_op(common::device_buffer(1), Some("x"));
    san.record_op(
        Op::Launch {
            stream: 1,
            reads: vec![],
            writes: vec![Access::whole(1).arg("out")],
            atomics: Vec::new(),
        },
        Some("fill"),
    );
    if ordered {
        san.record_op(Op::Event { id: 1 }, None);
        san.record_op(
            Op::Record {
                event: 1,
                stream: 1,
            },
            None,
        );
        san.record_op(
            Op::Wait {
                stream: 2,
                event: 1,
            },
            None,
        );
    }
    san.record_op(
        Op::Launch {
            stream: 2,
            reads: vec![Access::whole(1).arg("in")],
            writes: vec![],
            atomics: Vec::new(),
        },
        Some("sum"),
    );
}

fn run(ordered: bool) -> testing::Run {
    Harness::new()
        .run_with(|san| {
            program(san, ordered);
            Ok::<(), Infallible>(())
        })
        .unwrap()
}

#[test]
fn a_clean_closure_passes() {
    let run = run(true);
    assert!(run.is_clean());
    assert!(run.races().is_empty());
    run.assert_no_races();
    run.assert_races(0);
    assert!(
        run.report().starts_with("SUMMARY: no races"),
        "{}",
        run.report()
    );
}

#[test]
fn a_race_fails_assert_no_races_with_the_report() {
    let run = run(false);
    assert_eq!(run.races().len(), 1);
    run.assert_races(1);
    let panic = catch_unwind(AssertUnwindSafe(|| run.assert_no_races())).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.starts_with("streamsan found 1 race in code expected to be race-free:"),
        "{message}"
    );
    assert!(
        message.contains("RACE read-after-write on buffer b1 \"x\" bytes [0, 4096)"),
        "{message}"
    );
    assert!(message.contains("tests/testing_api.rs:"), "{message}");
    let wrong = catch_unwind(AssertUnwindSafe(|| run.assert_races(2))).unwrap_err();
    let wrong = wrong.downcast_ref::<String>().unwrap();
    assert!(
        wrong.starts_with("streamsan: expected 2 races, found 1:"),
        "{wrong}"
    );
}

#[test]
fn the_report_is_deterministic_and_snapshots() {
    let run = run(false);
    // The verdict apart from the snapshot, so a review cannot accept a flipped one.
    assert_eq!(run.folded_report().summary.races, 1);
    let report = run.report();
    assert_eq!(
        self::run(false).report(),
        report,
        "a second run, the same bytes"
    );
    assert!(!report.contains(env!("CARGO_MANIFEST_DIR")), "{report}");
    insta::assert_snapshot!(report);
    let json: serde_json::Value = serde_json::from_str(&run.report_json()).unwrap();
    assert_eq!(json["summary"]["races"], 1);
    assert_eq!(json["races"][0]["current"]["name"], "sum");
}

#[test]
fn suppressions_apply_to_a_checked_run() {
    let path = std::env::temp_dir().join(format!("streamsan-tapi-{}.supp", std::process::id()));
    std::fs::write(&path, "race:kernel=sum,buffer=x\nrace:kernel=other\n").unwrap();
    let run = Harness::new()
        .suppressions(&path)
        .run_with(|san| {
            program(san, false);
            Ok::<(), Infallible>(())
        })
        .unwrap();
    let _ = std::fs::remove_file(&path);
    run.assert_no_races();
    assert_eq!(run.folded_report().summary.filtered.unwrap().suppressed, 1);
    assert_eq!(run.unused_suppressions().len(), 1);
    assert_eq!(run.unused_suppressions()[0].line, 2);
}

#[test]
fn a_failing_closure_is_an_error_with_the_report_so_far() {
    let err = Harness::new()
        .run_with(|san| {
            program(san, false);
            Err("out of memory")
        })
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("the checked code failed: \"out of memory\""),
        "{text}"
    );
    assert!(text.contains("RACE read-after-write"), "{text}");
}

/// The real kernels: `randn` fills `x` on the default stream, `sum` reads it on a side stream.
#[cfg(test)]
mod gpu {
    use std::sync::Arc;

    use streamsan::cuda::{CudaContext, testing};
    use streamsan_demos::{Error, Kernels, ops};

    const N: usize = 1 << 16;

    fn randn_then_sum(ctx: &Arc<CudaContext>, ordered: bool) -> Result<(), Error> {
        Kernels::get(ctx)?;
        // cudarc's event tracking would order the streams itself; the race needs it off.
        unsafe { ctx.disable_event_tracking() };
        let main = ctx.default_stream();
        let side = ctx.new_stream_named("side")?;
        let mut x = main.alloc_zeros_named::<f32>("x", N)?;
        let mut total = side.alloc_zeros_named::<f32>("total", 1)?;
        ops::randn(&main, &mut x, 7)?;
        if ordered {
            side.join(&main)?;
        }
        ops::sum(&side, &x, &mut total)?;
        ctx.synchronize()?;
        Ok(())
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn gpu_ordered_randn_then_sum_is_clean() {
        testing::assert_no_races(0, |ctx| randn_then_sum(ctx, true));
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn gpu_unordered_sum_fails_assert_no_races() {
        let panic = std::panic::catch_unwind(|| {
            testing::assert_no_races(0, |ctx| randn_then_sum(ctx, false))
        })
        .unwrap_err();
        let message = panic.downcast_ref::<String>().unwrap();
        assert!(
            message.contains("RACE read-after-write on buffer b1 \"x\""),
            "{message}"
        );
        assert!(message.contains("tests/testing_api.rs:"), "{message}");
    }

    #[test]
    #[ignore = "needs a CUDA device"]
    fn gpu_report_is_deterministic() {
        let first = testing::sanitize(0, |ctx| randn_then_sum(ctx, false)).unwrap();
        let second = testing::sanitize(0, |ctx| randn_then_sum(ctx, false)).unwrap();
        first.assert_races(1);
        assert_eq!(first.report(), second.report());
        let report = first.report();
        assert!(
            report.contains("read by launch \"sum\" (arg \"x\")"),
            "{report}"
        );
        assert!(
            report.contains("at tests/testing_api.rs:"),
            "relative paths: {report}"
        );
        assert!(!report.contains("0x"), "no addresses: {report}");
    }
}
