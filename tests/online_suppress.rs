//! Suppressions and baselines in the online layer (`suppressions=` / `baseline=` in
//! `STREAMSAN_OPTIONS`, `ContextBuilder::suppressions` / `baseline`): a race they take out is
//! not printed, not among `races()`, does not halt, and is counted in the summary; an unused
//! suppression is listed when the sanitizer ends; a new race beside a baselined one still shows.
//!
//! CPU-only: the records go through the path every wrapper takes (`Sanitizer::record_op`).

#![cfg(feature = "cuda")]

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use streamsan::cuda::{Options, Sanitizer};
use streamsan::trace::record::{Access, Op};

mod common;

/// A report sink the test can read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

fn temp(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("streamsan-osupp-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

fn sanitizer(options: Options) -> (Arc<Sanitizer>, Captured) {
    let out = Captured::default();
    let san = Sanitizer::with_outputs(options, None, Box::new(out.clone())).unwrap();
    (san, out)
}

/// Streams `producer` (1) and `consumer` (2), buffers `x` (1) and `y` (2). `fill` writes `x`
/// on the producer, `sum` reads it on the consumer, unordered: one read-after-write race on
/// `x`; with `also_y`, the same on `y` through `axpy`.
fn racy(san: &Sanitizer, also_y: bool) {
    for (id, name) in [(1, "producer"), (2, "consumer")] {
        san.record_op(common::created_stream(id), Some(name));
    }
    for (buf, name) in [(1, "x"), (2, "y")] {
        san.record_op(common::device_buffer(buf), Some(name));
    }
    san.record_op(
        Op::Launch {
            stream: 1,
            reads: vec![],
            writes: vec![Access::whole(1).arg("out"), Access::whole(2).arg("out2")],
            atomics: Vec::new(),
        },
        Some("fill"),
    );
    san.record_op(
        Op::Launch {
            stream: 2,
            reads: vec![Access::whole(1).arg("in")],
            writes: vec![],
            atomics: Vec::new(),
        },
        Some("sum"),
    );
    if also_y {
        san.record_op(
            Op::Launch {
                stream: 2,
                reads: vec![Access::whole(2).arg("in")],
                writes: vec![],
                atomics: Vec::new(),
            },
            Some("axpy"),
        );
    }
}

#[test]
fn without_filters_the_races_show() {
    let (san, out) = sanitizer(Options::default());
    racy(&san, true);
    assert_eq!(san.races().len(), 2);
    assert_eq!(out.text().matches("RACE ").count(), 2);
    assert!(!san.report_json().contains("suppressed"));
}

#[test]
fn a_suppressed_race_disappears_and_an_unused_suppression_is_listed() {
    let supp = temp(
        "a.supp",
        "# known: sum reads x unordered\nrace:kernel=sum,buffer=x\nrace:kernel=never_launched\n",
    );
    let (san, out) = sanitizer(Options {
        suppressions: vec![supp.clone()],
        // A suppressed race must not halt: were it to, this test process would exit with 66.
        halt_on_error: true,
        ..Options::default()
    });
    racy(&san, false);
    assert!(san.races().is_empty(), "{:?}", san.races());
    assert!(san.findings().is_empty());
    let report = san.folded_report();
    assert!(!report.has_races());
    assert_eq!(report.summary.filtered.unwrap().suppressed, 1);
    assert!(!out.text().contains("RACE "), "{}", out.text());
    let text = san.report();
    assert!(text.contains("not counted: 1 suppressed race"), "{text}");
    let unused = san.unused_suppressions();
    assert_eq!(unused.len(), 1);
    assert_eq!(unused[0].line, 3);

    drop(san);
    let printed = out.text();
    let _ = std::fs::remove_file(&supp);
    assert!(
        printed.contains("SUMMARY: no races"),
        "the summary counts what was taken out: {printed}"
    );
    assert!(printed.contains("1 suppressed race"), "{printed}");
    let expected = format!(
        "warning: {}:3: unused suppression `race:kernel=never_launched`: it matched no race or \
         warning\n",
        supp.display()
    );
    assert!(printed.ends_with(&expected), "{printed}");
}

#[test]
fn a_new_race_beside_a_baselined_one_still_shows() {
    // The baseline: the JSON report of the run with the one known race.
    let (known, _) = sanitizer(Options::default());
    racy(&known, false);
    assert_eq!(known.races().len(), 1);
    let baseline = temp("known.json", &known.report_json());

    let (san, out) = sanitizer(Options {
        baseline: Some(baseline.clone()),
        ..Options::default()
    });
    racy(&san, true);
    let races = san.races();
    assert_eq!(races.len(), 1, "{races:?}");
    assert_eq!(races[0].current.name.as_deref(), Some("axpy"));
    let report = san.folded_report();
    assert_eq!(report.summary.races, 1);
    assert_eq!(report.summary.filtered.unwrap().baselined, 1);
    let printed = out.text();
    assert_eq!(printed.matches("RACE ").count(), 1, "{printed}");
    assert!(printed.contains("\"y\""), "{printed}");
    drop(san);
    let printed = out.text();
    let _ = std::fs::remove_file(&baseline);
    assert!(printed.contains("1 baselined race"), "{printed}");
}

#[test]
fn a_stale_baseline_entry_is_noted() {
    let (known, _) = sanitizer(Options::default());
    racy(&known, true);
    let baseline = temp("stale.json", &known.report_json());
    let (san, out) = sanitizer(Options {
        baseline: Some(baseline.clone()),
        ..Options::default()
    });
    racy(&san, false);
    assert!(san.races().is_empty());
    drop(san);
    let _ = std::fs::remove_file(&baseline);
    assert!(
        out.text()
            .contains("1 of the 2 baselined races no longer occur"),
        "{}",
        out.text()
    );
}

#[test]
fn a_bad_file_is_an_error_naming_file_and_line() {
    let supp = temp("bad.supp", "race:kernel=sum\nrace:kernel=sum,colour=red\n");
    let err = Sanitizer::with_outputs(
        Options {
            suppressions: vec![supp.clone()],
            ..Options::default()
        },
        None,
        Box::new(io::sink()),
    )
    .unwrap_err();
    let _ = std::fs::remove_file(&supp);
    assert!(matches!(err, streamsan::cuda::Error::Filter(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("streamsan: {}:2:", supp.display())),
        "{text}"
    );
    assert!(text.contains("unknown key `colour`"), "{text}");
}
