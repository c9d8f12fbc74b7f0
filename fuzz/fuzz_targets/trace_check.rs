//! Fuzzes the trace reader and the engine together: arbitrary bytes as a trace file must give
//! a verdict or a clear error, never a panic. A trace that checks is also drawn as the HTML
//! timeline and the Perfetto trace, and rendered as text, JSON and SARIF. Seed the corpus with
//! the test traces (docs/testing.md).
//!
//! It is the parser's differential fuzzer too: built with `--cfg fuzzing` (as cargo-fuzz
//! builds), `trace::parse::parse_line` reads every line its fast path takes with the serde
//! path as well and panics if the two disagree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamsan::check::check_reader_with;
use streamsan::report::html::HtmlWriter;
use streamsan::report::perfetto::PerfettoWriter;
use streamsan::report::{RenderOptions, render_json, render_sarif, render_text};
use streamsan::trace::reader::TraceReader;

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = TraceReader::new(std::io::Cursor::new(data), "fuzz.jsonl") else {
        return;
    };
    let mut html = HtmlWriter::new("fuzz.jsonl");
    let Ok(mut perfetto) = PerfettoWriter::new(Vec::new(), "fuzz.jsonl") else {
        return;
    };
    let mut tap = |r: &_, resolved: &_| {
        html.record(r, resolved);
        perfetto.record(r, resolved);
    };
    if let Ok(checked) = check_reader_with(reader, &mut tap) {
        let opts = RenderOptions::default();
        let _ = render_text(&checked.report, &opts);
        let _ = render_json(&checked.report, &opts);
        let _ = render_sarif(&checked.report, &opts);
        let _ = html.finish(Vec::new(), &checked.report);
        let _ = perfetto.finish(&checked.report);
    }
});
