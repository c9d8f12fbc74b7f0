//! `Sanitizer::report()` is a deterministic string fit for snapshots: the folded text report of
//! the run so far, as `streamsan check` would print it for the trace written so far.
//!
//! The CPU test records through the path every wrapper takes ([`Sanitizer::record_op`]); the
//! GPU test runs a racy program through the wrappers twice and expects the same report twice
//! (`#[ignore]`d: run it with `cargo test -- --include-ignored` where a GPU is).

#![cfg(feature = "cuda")]

use std::io;
use std::sync::Arc;

use streamsan::cuda::{Options, PushKernelArg, Sanitizer};
use streamsan::trace::record::{Access, Op};

mod common;

fn quiet() -> Arc<Sanitizer> {
    Sanitizer::with_outputs(Options::default(), None, Box::new(io::sink())).unwrap()
}

/// A producer stream fills `x`, a consumer stream sums it, with no synchronization between
/// them, three rounds; then `x` is freed by the host without waiting.
fn racy(san: &Sanitizer) {
    for (id, name) in [(1, "producer"), (2, "consumer")] {
        san.record_op(common::created_stream(id), Some(name));
    }
    san.record_op(common::device_buffer(1), Some("x"));
    for _ in 0..3 {
        san.record_op(
            Op::Launch {
                stream: 1,
                reads: vec![],
                writes: vec![Access::whole(1).arg("out")],
                atomics: Vec::new(),
            },
            Some("fill"),
        );
        san.record_op(
            Op::Launch {
                stream: 2,
                reads: vec![Access::bytes(1, 0, 2048).arg("in")],
                writes: vec![],
                atomics: Vec::new(),
            },
            Some("sum"),
        );
    }
    san.record_op(
        Op::Free {
            buf: 1,
            stream: None,
        },
        None,
    );
}

#[test]
fn report_is_the_folded_text_report_and_stable() {
    let san = quiet();
    racy(&san);
    let report = san.report();
    // The verdict, asserted apart from the snapshot so a review cannot accept a flipped one.
    let folded = san.folded_report();
    assert_eq!(folded.summary.races, 4);
    assert_eq!(
        folded
            .races
            .iter()
            .map(|r| r.occurrences)
            .collect::<Vec<_>>(),
        [3, 2, 1, 1]
    );
    assert_eq!(san.races().len(), 7);
    // Asking again, or another sanitizer running the same program, gives the same bytes.
    assert_eq!(san.report(), report);
    let again = quiet();
    racy(&again);
    assert_eq!(again.report(), report);
    insta::assert_snapshot!(report);
}

#[test]
#[ignore = "needs a CUDA device"]
fn gpu_reports_are_deterministic_and_point_at_the_program() {
    use streamsan::cuda::{CudaContext, LaunchConfig};
    fn run() -> String {
        let ctx = CudaContext::builder()
            .ignore_env()
            .sanitize(true)
            .report_path(std::env::temp_dir().join("streamsan-online-report.txt"))
            .build(0)
            .expect("a CUDA device");
        unsafe { ctx.disable_event_tracking() };
        let fill = common::kernels(&ctx).fill;
        let s1 = ctx.new_stream_named("producer").unwrap();
        let s2 = ctx.new_stream_named("consumer").unwrap();
        let n = 1024usize;
        let mut x = s1.alloc_zeros_named::<f32>("x", n).unwrap();
        let cfg = LaunchConfig::for_num_elems(n as u32);
        for _ in 0..3 {
            unsafe {
                s1.launch_builder(&fill)
                    .arg(&mut x)
                    .arg(&1.0f32)
                    .arg(&n)
                    .launch(cfg)
            }
            .unwrap();
            let _ = s2.clone_dtoh(&x).unwrap();
        }
        let report = ctx.sanitizer().unwrap().report();
        ctx.synchronize().unwrap();
        report
    }
    let first = run();
    assert_eq!(run(), first);
    assert!(first.contains("RACE "), "{first}");
    assert!(first.contains("tests/online_report.rs:"), "{first}");
    assert!(first.contains("on buffer b1 \"x\""), "{first}");
    assert!(first.contains("SUMMARY: "), "{first}");
}
