//! Every trace under `tests/` and `examples/traces/` through `streamsan convert` to the binary
//! encoding and back: the records (with their lines) and the skipped records are the same, and
//! `streamsan check --format json` reports the same thing on the original, the binary and the
//! converted-back trace, apart from the file's name. A trace that `convert` refuses is one that
//! `check` refuses too.

use std::path::{Path, PathBuf};

mod cli_run;
use cli_run::{Run, run};
use streamsan::trace::{Entry, TraceReader};

/// The run, with `name` written as `as_name` (to compare reports on two files).
fn renamed(run: Run, name: &str, as_name: &str) -> Run {
    Run {
        code: run.code,
        stdout: run.stdout.replace(name, as_name),
        stderr: run.stderr.replace(name, as_name),
    }
}

/// Every `*.jsonl` under `dir`, recursively, relative to the crate root.
fn traces(dir: &Path, out: &mut Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(root.join(dir)).unwrap() {
        let path = dir.join(entry.unwrap().file_name());
        if root.join(&path).is_dir() {
            traces(&path, out);
        } else if path.extension().is_some_and(|e| e == "jsonl") {
            out.push(path.to_str().unwrap().to_string());
        }
    }
}

/// Every record and skipped record of a trace, or its first error.
fn entries(path: &str) -> Result<Vec<Entry>, String> {
    let mut reader = TraceReader::open(path).map_err(|e| e.to_string())?;
    let mut all = Vec::new();
    while let Some(entry) = reader.next_entry() {
        all.push(entry.map_err(|e| e.to_string())?);
    }
    Ok(all)
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("convert");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

#[test]
fn every_trace_round_trips_through_binary_with_the_same_report() {
    let mut all = Vec::new();
    traces(Path::new("tests"), &mut all);
    traces(Path::new("examples/traces"), &mut all);
    all.sort();
    assert!(all.len() > 150, "found only {} traces", all.len());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (mut converted, mut refused) = (0, 0);
    for (i, trace) in all.iter().enumerate() {
        let original = run(&["check", "--format", "json", trace]);
        let sstb = scratch(&format!("{i}.sstb"));
        let sstb = sstb.to_str().unwrap();
        let to_binary = run(&["convert", trace, sstb]);
        if to_binary.code != 0 {
            // Only a trace that cannot be read is refused, and `check` refuses it too.
            assert_eq!(to_binary.code, 2, "{trace}: {to_binary:#?}");
            assert_eq!(original.code, 2, "{trace}: convert refused what check read");
            assert!(
                entries(&root.join(trace).to_string_lossy()).is_err(),
                "{trace}"
            );
            assert!(
                !Path::new(sstb).exists(),
                "{trace}: no output for a refused trace"
            );
            refused += 1;
            continue;
        }
        assert_eq!(to_binary.stdout, "", "{trace}");
        let back = scratch(&format!("{i}.jsonl"));
        let back = back.to_str().unwrap();
        let to_jsonl = run(&["convert", sstb, back]);
        assert_eq!(to_jsonl.code, 0, "{trace}: {to_jsonl:#?}");

        // The same records at the same lines, and the same skipped records.
        let expected = entries(&root.join(trace).to_string_lossy()).unwrap();
        assert_eq!(entries(sstb).unwrap(), expected, "{trace} as binary");
        assert_eq!(entries(back).unwrap(), expected, "{trace} converted back");

        // The same report (or the same input error), the file's name aside.
        for copy in [sstb, back] {
            let report = renamed(run(&["check", "--format", "json", copy]), copy, trace);
            assert_eq!(report, original, "{trace} vs {copy}");
        }
        converted += 1;
    }
    eprintln!("{converted} traces converted both ways, {refused} refused as invalid");
    assert!(refused > 0 && converted > refused);
}

/// `stream_destroy` (minor 3) through `streamsan convert` to binary and back: the same records,
/// and the same text where it was in the writer's canonical form.
#[test]
fn stream_destroy_round_trips_through_binary() {
    let text = "{\"streamsan_trace\":1,\"minor\":3}\n\
        {\"op\":\"stream\",\"name\":\"side\",\"id\":1,\"kind\":\"created\",\"flags\":\"non_blocking\"}\n\
        {\"op\":\"stream_destroy\",\"name\":\"side\",\"id\":1,\"thread\":2,\"at\":\"a.cu:9:5\"}\n\
        \n\
        {\"op\":\"stream\",\"id\":1,\"kind\":\"created\"}\n\
        {\"op\":\"stream_destroy\",\"id\":1}\n";
    let jsonl = scratch("stream_destroy.jsonl");
    std::fs::write(&jsonl, text).unwrap();
    let (jsonl, sstb, back) = (
        jsonl.to_str().unwrap(),
        scratch("stream_destroy.sstb"),
        scratch("stream_destroy.back.jsonl"),
    );
    let (sstb, back) = (sstb.to_str().unwrap(), back.to_str().unwrap());
    assert_eq!(run(&["convert", jsonl, sstb]).code, 0);
    assert_eq!(run(&["convert", sstb, back]).code, 0);
    let expected = entries(jsonl).unwrap();
    let destroys = expected
        .iter()
        .filter(|e| {
            matches!(
                e,
                Entry::Record(r) if matches!(r.op, streamsan::trace::record::Op::StreamDestroy { id: 1 })
            )
        })
        .count();
    assert_eq!(destroys, 2);
    assert_eq!(entries(sstb).unwrap(), expected);
    assert_eq!(entries(back).unwrap(), expected);
    assert_eq!(std::fs::read_to_string(back).unwrap(), text);
}
