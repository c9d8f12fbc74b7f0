//! Fuzzes the trace reader and the engine together: arbitrary bytes as a trace file must give
//! a verdict or a clear error, never a panic. Seed the corpus with `tests/corpus/*.jsonl`.
//!
//! It is the parser's differential fuzzer too: built with `--cfg fuzzing` (as cargo-fuzz
//! builds), `trace::parse::parse_line` reads every line its fast path takes with the serde
//! path as well and panics if the two disagree.
#![no_main]

use libfuzzer_sys::fuzz_target;
use streamsan::check::check_reader;
use streamsan::report::{RenderOptions, render_json, render_sarif, render_text};
use streamsan::trace::reader::TraceReader;

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = TraceReader::new(std::io::Cursor::new(data), "fuzz.jsonl") else {
        return;
    };
    if let Ok(checked) = check_reader(reader) {
        let opts = RenderOptions::default();
        let _ = render_text(&checked.report, &opts);
        let _ = render_json(&checked.report, &opts);
        let _ = render_sarif(&checked.report, &opts);
    }
});
