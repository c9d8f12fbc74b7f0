//! Fuzzes the trace reader and the engine together: arbitrary bytes as a trace file must give
//! a verdict or a clear error, never a panic. A trace that checks is also drawn as the HTML
//! timeline and the Perfetto trace, and rendered as text, JSON and SARIF. Seed the corpus with
//! the test traces (docs/testing.md).
//!
//! It is the parser's differential fuzzer too: built with `--cfg fuzzing` (as cargo-fuzz
//! builds), `trace::parse::parse_line_into` reads every line its fast path takes with the serde
//! path as well and panics if the two disagree.
//!
//! Inputs of even length are read from memory whole, so every line lies whole in the reader's
//! input and is parsed where it lies; odd ones through a buffer of 1 to 61 bytes, so that lines
//! cross its end and are copied.
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamsan::check::check_reader_with;
use streamsan::report::html::HtmlWriter;
use streamsan::report::perfetto::PerfettoWriter;
use streamsan::report::{RenderOptions, render_json, render_sarif, render_text};
use streamsan::trace::reader::TraceReader;

fuzz_target!(|data: &[u8]| {
    let input: Box<dyn std::io::BufRead + Send + '_> = if data.len() % 2 == 0 {
        Box::new(std::io::Cursor::new(data))
    } else {
        Box::new(std::io::BufReader::with_capacity(1 + data.len() % 61, data))
    };
    let Ok(reader) = TraceReader::new(input, "fuzz.jsonl") else {
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
