//! The programs of `examples/` on a real GPU, sanitized through the builder API, in all four
//! variants (racy / fixed, cudarc's event tracking off / on):
//!
//! - racy, tracking off: the GPU's numbers are wrong (for `free_in_use`: when the pool handed
//!   the freed memory out again, which the example checks by address) and the sanitizer
//!   reports the expected race, at the lines of the racing calls in the example file, with the
//!   kernel, argument and previous access named below; every race is at that line;
//! - every other variant: the numbers are right and the sanitizer reports nothing.
//!
//! Each example file is compiled into this test as a module (its `run` is what its `main`
//! runs). The racing calls are found by the comments that end their lines in the example
//! (`// race: the read`, ...), so the examples can change without this file.
//!
//! Each run writes its trace; with `STREAMSAN_FIXTURE_DIR` set, to
//! `$STREAMSAN_FIXTURE_DIR/<example>-<racy|fixed>-tracking-<on|off>.jsonl` (to be committed
//! under tests/fixtures/gpu/), else to a temporary file that is removed. Reports go to a
//! temporary file, shown when an assertion fails.
//!
//! Run with `cargo test --test gpu_examples -- --include-ignored --test-threads=1` where a GPU
//! is.

#![cfg(feature = "cuda")]

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use streamsan::cuda::CudaContext;
use streamsan::engine::{AccessKind, Race, RaceKind, Site};
use streamsan::trace::OpKind;
use streamsan_demos::{Error, Outcome, Tolerance, Variant, cpu};

#[allow(dead_code)] // `main`
#[path = "../examples/free_in_use.rs"]
mod free_in_use;
#[allow(dead_code)]
#[path = "../examples/pipeline.rs"]
mod pipeline;
#[allow(dead_code)]
#[path = "../examples/producer_consumer.rs"]
mod producer_consumer;
#[allow(dead_code)]
#[path = "../examples/sum_before_randn.rs"]
mod sum_before_randn;

/// One example: its name (and file), its `run`, the race its racy variant must report.
struct Example {
    name: &'static str,
    source: &'static str,
    run: fn(&Arc<CudaContext>, Variant) -> Result<Outcome, Error>,
    race: ExpectedRace,
}

/// The race a correct sanitizer reports for an example's racy variant (tracking off).
struct ExpectedRace {
    kind: RaceKind,
    /// The buffer's name.
    buffer: &'static str,
    current: ExpectedAccess,
    previous: ExpectedAccess,
}

/// One side of an expected race.
struct ExpectedAccess {
    /// The comment that ends the line of the call, in the example.
    marker: &'static str,
    /// The trace op: `launch`, `memcpy`, `host_access`, `free`, ...
    op: OpKind,
    /// The kernel name or label, where the record has one.
    name: Option<&'static str>,
    /// The kernel argument, where the record has one.
    arg: Option<&'static str>,
    access: AccessKind,
}

/// `sum` reading `x` before `randn`'s write of it is ordered: the race of the two
/// randn-then-sum examples.
const SUM_READS_RANDN_OUTPUT: ExpectedRace = ExpectedRace {
    kind: RaceKind::ReadAfterWrite,
    buffer: "x",
    current: ExpectedAccess {
        marker: "// race: the read",
        op: OpKind::Launch,
        name: Some("sum"),
        arg: Some("x"),
        access: AccessKind::Read,
    },
    previous: ExpectedAccess {
        marker: "// race: the write",
        op: OpKind::Launch,
        name: Some("randn"),
        arg: Some("out"),
        access: AccessKind::Write,
    },
};

const SUM_BEFORE_RANDN: Example = Example {
    name: "sum_before_randn",
    source: include_str!("../examples/sum_before_randn.rs"),
    run: sum_before_randn::run,
    race: SUM_READS_RANDN_OUTPUT,
};

const PRODUCER_CONSUMER: Example = Example {
    name: "producer_consumer",
    source: include_str!("../examples/producer_consumer.rs"),
    run: producer_consumer::run,
    race: SUM_READS_RANDN_OUTPUT,
};

/// The host reads the last chunk's pinned result (the one the spin delays) before its download.
const PIPELINE: Example = Example {
    name: "pipeline",
    source: include_str!("../examples/pipeline.rs"),
    run: pipeline::run,
    race: ExpectedRace {
        kind: RaceKind::ReadAfterWrite,
        buffer: "h_out[3]",
        current: ExpectedAccess {
            marker: "// race: the read",
            op: OpKind::HostAccess,
            name: None,
            arg: None,
            access: AccessKind::Read,
        },
        previous: ExpectedAccess {
            marker: "// race: the write",
            op: OpKind::Memcpy,
            name: Some("memcpy_dtoh"),
            arg: None,
            access: AccessKind::Write,
        },
    },
};

/// The host frees `x` while `sum` on the side stream may still read it.
const FREE_IN_USE: Example = Example {
    name: "free_in_use",
    source: include_str!("../examples/free_in_use.rs"),
    run: free_in_use::run,
    race: ExpectedRace {
        kind: RaceKind::FreeWhileInUse,
        buffer: "x",
        current: ExpectedAccess {
            marker: "// race: the free",
            op: OpKind::Free,
            name: None,
            arg: None,
            access: AccessKind::Free,
        },
        previous: ExpectedAccess {
            marker: "// race: the read",
            op: OpKind::Launch,
            name: Some("sum"),
            arg: Some("x"),
            access: AccessKind::Read,
        },
    },
};

impl Example {
    /// The example's path, as a report names it.
    fn file(&self) -> String {
        format!("examples/{}.rs", self.name)
    }

    /// The line (1-based) that ends with `marker`; there must be exactly one.
    fn line_of(&self, marker: &str) -> u32 {
        let lines: Vec<usize> = self
            .source
            .lines()
            .enumerate()
            .filter(|(_, l)| l.trim_end().ends_with(marker))
            .map(|(i, _)| i + 1)
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "{}: lines ending in {marker:?}",
            self.file()
        );
        lines[0] as u32
    }

    /// Whether a report's `file:line:col` is the line of `marker` in this example. The file is
    /// compared lexically normalized: compiled into this test, the example's file is
    /// `tests/../examples/<name>.rs`.
    fn is_at(&self, marker: &str, at: Option<&str>) -> bool {
        let Some(at) = at else {
            return false;
        };
        let mut parts = at.rsplitn(3, ':');
        let (_col, line, file) = (parts.next(), parts.next(), parts.next());
        let Some(file) = file else {
            return false;
        };
        let mut normalized = PathBuf::new();
        for c in Path::new(file).components() {
            match c {
                Component::ParentDir => {
                    normalized.pop();
                }
                Component::CurDir => {}
                c => normalized.push(c),
            }
        }
        normalized == Path::new(&self.file())
            && line.and_then(|l| l.parse().ok()) == Some(self.line_of(marker))
    }

    fn matches(&self, expected: &ExpectedAccess, site: &Site) -> bool {
        self.is_at(expected.marker, site.at.as_deref())
            && site.op == expected.op
            && site.access == expected.access
            && (expected.name.is_none() || site.name.as_deref() == expected.name)
            && (expected.arg.is_none() || site.arg.as_deref() == expected.arg)
    }

    /// The expected race, if the outcome has it.
    fn expected_race<'o>(&self, o: &'o Outcome) -> Option<&'o Race> {
        let e = &self.race;
        o.races().into_iter().find(|r| {
            r.kind == e.kind
                && r.buffer.name.as_deref() == Some(e.buffer)
                && self.matches(&e.current, &r.current)
                && self.matches(&e.previous, &r.previous)
        })
    }

    /// Whether the racy numbers must be wrong: always, but for `free_in_use` only when the pool
    /// gave `y` the memory of `x`.
    fn wrong_numbers_expected(&self, o: &Outcome) -> bool {
        self.name != "free_in_use" || memory_reused(o)
    }
}

/// Whether the outcome of `free_in_use` says `y` was given `x`'s memory (only known with
/// tracking off).
fn memory_reused(o: &Outcome) -> bool {
    o.notes.iter().any(|n| n.starts_with("y was given"))
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("streamsan-{}-{name}", std::process::id()))
}

/// Runs `ex` in variant `v` on a fresh sanitized context; returns the outcome, the trace's
/// records and the report text.
fn run(ex: &Example, v: Variant) -> (Outcome, Vec<Value>, String) {
    let name = v.trace_name(ex.name);
    let fixture_dir = std::env::var_os("STREAMSAN_FIXTURE_DIR").map(PathBuf::from);
    let trace = match &fixture_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).unwrap();
            dir.join(&name)
        }
        None => scratch(&name),
    };
    let report = scratch(&format!("{name}.report.txt"));
    let ctx = CudaContext::builder()
        .ignore_env()
        .sanitize(true)
        .trace_path(&trace)
        .report_path(&report)
        .build(0)
        .expect("a CUDA device");
    let outcome = (ex.run)(&ctx, v).unwrap_or_else(|e| panic!("{} ({v}): {e}", ex.name));
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

fn check(ex: &Example, v: Variant) {
    let (o, trace, report) = run(ex, v);
    let context = format!("{} ({v})\n{o}--- sanitizer report ---\n{report}", ex.name);
    assert!(o.sanitized);

    // The trace is v1 and has the example's launches, named.
    assert_eq!(trace[0]["streamsan_trace"], 1, "{context}");
    assert!(
        trace
            .iter()
            .any(|r| r["op"] == "launch" && r["name"] == "spin"),
        "{context}"
    );

    if v.races() {
        if ex.wrong_numbers_expected(&o) {
            assert!(
                !o.matches(),
                "the racy program gave right numbers\n{context}"
            );
        }
        let race = ex.expected_race(&o).unwrap_or_else(|| {
            panic!(
                "expected a {} on {:?}, {} at {}:{} after {} at line {}\n{context}",
                ex.race.kind.as_str(),
                ex.race.buffer,
                ex.race.current.op.as_str(),
                ex.file(),
                ex.line_of(ex.race.current.marker),
                ex.race.previous.op.as_str(),
                ex.line_of(ex.race.previous.marker),
            )
        });
        assert_eq!(race.buffer.name.as_deref(), Some(ex.race.buffer));
        for r in o.races() {
            assert!(
                ex.is_at(ex.race.current.marker, r.current.at.as_deref()),
                "a race not at the line of {:?}: {r:#?}\n{context}",
                ex.race.current.marker
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
fn check_unsanitized(ex: &Example) {
    for v in [Variant::RACY, Variant::FIXED] {
        let ctx = CudaContext::builder()
            .ignore_env()
            .sanitize(false)
            .build(0)
            .expect("a CUDA device");
        let o = (ex.run)(&ctx, v).unwrap_or_else(|e| panic!("{} ({v}): {e}", ex.name));
        assert!(!o.sanitized && o.findings.is_empty());
        if v.fixed {
            assert!(o.matches(), "{} ({v})\n{o}", ex.name);
        } else if ex.wrong_numbers_expected(&o) {
            assert!(!o.matches(), "{} ({v})\n{o}", ex.name);
        }
    }
}

macro_rules! scenario {
    ($module:ident, $example:ident) => {
        mod $module {
            use super::*;

            #[test]
            fn racing_lines_are_marked() {
                for side in [&$example.race.current, &$example.race.previous] {
                    $example.line_of(side.marker);
                }
            }

            #[test]
            #[ignore = "needs a CUDA device"]
            fn racy_tracking_off() {
                check(&$example, Variant::RACY);
            }

            #[test]
            #[ignore = "needs a CUDA device"]
            fn fixed_tracking_off() {
                check(&$example, Variant::FIXED);
            }

            #[test]
            #[ignore = "needs a CUDA device"]
            fn racy_tracking_on() {
                check(&$example, Variant::new(false, true));
            }

            #[test]
            #[ignore = "needs a CUDA device"]
            fn fixed_tracking_on() {
                check(&$example, Variant::new(true, true));
            }

            #[test]
            #[ignore = "needs a CUDA device"]
            fn unsanitized() {
                check_unsanitized(&$example);
            }
        }
    };
}

scenario!(sum_before_randn_example, SUM_BEFORE_RANDN);
scenario!(pipeline_example, PIPELINE);
scenario!(producer_consumer_example, PRODUCER_CONSUMER);
scenario!(free_in_use_example, FREE_IN_USE);

/// A report's location names the example file, however the path to it was spelled.
#[test]
fn report_locations_match_the_marked_lines() {
    let ex = &SUM_BEFORE_RANDN;
    let line = ex.line_of("// race: the read");
    for file in ["examples", "tests/../examples", "./examples"] {
        let at = format!("{file}/sum_before_randn.rs:{line}:5");
        assert!(ex.is_at("// race: the read", Some(&at)), "{at}");
    }
    let wrong_line = format!("examples/sum_before_randn.rs:{}:5", line + 1);
    assert!(!ex.is_at("// race: the read", Some(&wrong_line)));
    assert!(!ex.is_at("// race: the read", Some("src/sum_before_randn.rs:1:1")));
    assert!(!ex.is_at("// race: the read", None));
}

/// A sum of zeros (or of sevens) must be clearly wrong: each example's seed gives a sum far
/// outside the tolerance around 0, and far from 7 n.
#[test]
fn example_seeds_give_sums_far_from_zero() {
    for (seed, n) in [
        (sum_before_randn::SEED, sum_before_randn::N),
        (producer_consumer::SEED, producer_consumer::N),
        (free_in_use::SEED, free_in_use::N),
    ] {
        let x = cpu::randn(seed, n);
        let (sum, tol) = (cpu::sum(&x), Tolerance::for_sum(&x));
        assert!(
            sum.abs() > 10.0 * tol.atol,
            "seed {seed}: sum {sum}, {tol:?}"
        );
        assert!(!tol.close(0.0, sum) && !tol.close(7.0 * n as f32, sum));
    }
}

/// The racy `free_in_use` should usually show wrong numbers too; if the pool did not reuse
/// the memory, say so (not a failure: the driver does not promise reuse).
#[test]
#[ignore = "needs a CUDA device"]
fn free_in_use_reports_whether_memory_was_reused() {
    let ctx = CudaContext::builder()
        .ignore_env()
        .sanitize(false)
        .build(0)
        .unwrap();
    let o = free_in_use::run(&ctx, Variant::RACY).unwrap();
    assert_eq!(
        o.notes.len(),
        1,
        "with tracking off the addresses are compared"
    );
    if memory_reused(&o) {
        assert!(!o.matches(), "x's memory went to y, so the sum adds sevens");
    } else {
        eprintln!(
            "note: the pool did not reuse x's memory this time: {:?}",
            o.notes
        );
    }
}
