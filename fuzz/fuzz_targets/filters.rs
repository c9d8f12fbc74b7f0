//! Fuzzes the suppression and baseline files: arbitrary text must parse or give a clear error
//! (file, line, what was expected), never a panic, and what parses is applied to the report of
//! a racy example trace and rendered with its counts.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use streamsan::check::check_reader;
use streamsan::report::{RenderOptions, Report, render_text};
use streamsan::suppress::{Baseline, Suppressions, apply};
use streamsan::trace::reader::TraceReader;

/// The report of a trace with races and warnings, checked once.
fn report() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| {
        let trace = include_str!("../../examples/traces/sum_before_randn.jsonl");
        let reader = TraceReader::new(trace.as_bytes(), "sum_before_randn.jsonl").expect("valid");
        check_reader(reader).expect("checks").report
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let suppressions = Suppressions::parse(&text, "fuzz.supp").unwrap_or_default();
    let baseline = Baseline::parse(&text, "fuzz.baseline").ok();
    let filtered = apply(report().clone(), &suppressions, baseline.as_ref());
    let _ = render_text(&filtered.report, &RenderOptions::default());
    let _ = filtered.unused(&suppressions);
    let _ = filtered.stale_baseline_entries();
});
