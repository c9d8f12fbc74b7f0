//! Traces recorded on a real GPU by the examples' tests (see tests/fixtures/gpu/README.md),
//! checked offline: the verdict is asserted explicitly, then the text and JSON reports are
//! snapshotted. CI has no GPU; this is how it keeps checking real GPU behaviour.

use streamsan::check::{Checked, check_path};
use streamsan::report::{RenderOptions, render_json, render_text};

/// A racy program with cudarc's tracking off must race; everything else must be clean (with
/// tracking on, cudarc's own waits order the racy programs).
fn expected_racy(name: &str) -> bool {
    name.contains("-racy-tracking-off")
}

/// A committed trace, checked: its file name, its path as reports name it (under `dir`), the
/// result; the verdict is `racy` (at least one race) or clean (none).
fn check_fixture(path: &std::path::Path, dir: &str, racy: bool) -> (String, String, Checked) {
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let rel = format!("{dir}/{name}");
    let checked = check_path(path.to_str().unwrap()).expect("a recorded trace is valid");
    let races = checked.report.races.len();
    if racy {
        assert!(races >= 1, "{name}: expected a race, got none");
    } else {
        assert_eq!(races, 0, "{name}: expected no race");
    }
    (name, rel, checked)
}

#[test]
fn gpu_recorded_traces() {
    let mut seen = 0;
    insta::glob!("fixtures/gpu/*.jsonl", |path| {
        seen += 1;
        let racy = expected_racy(&path.file_name().unwrap().to_string_lossy());
        let (name, rel, checked) = check_fixture(path, "tests/fixtures/gpu", racy);
        assert_eq!(
            checked.report.warnings.len(),
            0,
            "{name}: unexpected warnings {:?}",
            checked.report.warnings
        );
        let opts = RenderOptions {
            source: Some(rel),
            max_reports: None,
            ..RenderOptions::default()
        };
        insta::assert_snapshot!("text", render_text(&checked.report, &opts));
        insta::assert_snapshot!("json", render_json(&checked.report, &opts));
    });
    assert_eq!(seen, 16, "four examples x racy/fixed x tracking on/off");
}

/// Graph programs recorded online (`tests/online_graphs.rs`): the racy ones race, the fixed
/// ones are clean; the graph records are there.
#[test]
fn gpu_recorded_graph_traces() {
    let mut seen = 0;
    insta::glob!("fixtures/gpu/graphs/*.jsonl", |path| {
        seen += 1;
        let racy = path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .contains("-racy");
        let (name, rel, checked) = check_fixture(path, "tests/fixtures/gpu/graphs", racy);
        let text = std::fs::read_to_string(path).unwrap();
        assert!(
            text.contains("\"op\":\"graph_begin\""),
            "{name}: no capture"
        );
        if name.starts_with("scratch-") {
            // cudarc's allocation on the capturing stream, recorded as a stream-ordered alloc
            // inside the capture: a graph allocation node.
            let capture = text
                .split("\"op\":\"graph_begin\"")
                .nth(1)
                .and_then(|rest| rest.split("\"op\":\"graph_end\"").next())
                .unwrap_or_default();
            assert!(
                capture
                    .lines()
                    .any(|l| l.contains("\"op\":\"alloc\"") && l.contains("\"stream\":")),
                "{name}: no allocation in the capture"
            );
        }
        let opts = RenderOptions {
            source: Some(rel),
            max_reports: None,
            ..RenderOptions::default()
        };
        insta::assert_snapshot!("text", render_text(&checked.report, &opts));
    });
    assert_eq!(seen, 9, "the graph programs of tests/online_graphs.rs");
}

/// The tracking-on traces hold cudarc's own synchronization as ordinary records.
#[test]
fn tracking_on_traces_contain_cudarcs_own_waits() {
    for entry in
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gpu")).unwrap()
    {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let cudarc_waits = text
            .lines()
            .filter(|l| l.contains("\"op\":\"wait\"") && l.contains("cudarc:"))
            .count();
        if name.contains("tracking-on") {
            assert!(cudarc_waits > 0, "{name}: no cudarc wait recorded");
        } else {
            assert_eq!(cudarc_waits, 0, "{name}: cudarc waits with tracking off");
        }
    }
}

/// Traces recorded on the GPU by the PyTorch front end (`python -m streamsan.torch --trace`,
/// tests/fixtures/torch/README.md): the racy programs race, the fixed ones are clean and end
/// without warnings, and reports give PyTorch's fixes (the header says `"api": "torch"`).
#[test]
fn torch_recorded_traces() {
    let mut seen = 0;
    insta::glob!("fixtures/torch/*.jsonl", |path| {
        seen += 1;
        let racy = path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .contains("_racy");
        let (name, rel, checked) = check_fixture(path, "tests/fixtures/torch", racy);
        assert_eq!(checked.api, streamsan::report::Api::Torch, "{name}");
        let races = checked.report.races.len();
        if !racy {
            assert_eq!(
                checked.report.warnings.len(),
                0,
                "{name}: unexpected warnings {:?}",
                checked.report.warnings
            );
        }
        let opts = RenderOptions {
            source: Some(rel),
            max_reports: None,
            api: checked.api,
        };
        let text = render_text(&checked.report, &opts);
        if races > 0 {
            assert!(
                text.contains("torch.cuda.") || text.contains(".record_stream("),
                "{name}: no fix in PyTorch terms: {text}"
            );
        }
        insta::assert_snapshot!("text", text);
    });
    assert!(seen >= 2, "the PyTorch traces of tests/fixtures/torch");
}

/// The timelines of a PyTorch trace word their fixes in PyTorch's terms too (the header's
/// api reaches the HTML page and the Perfetto trace, as `streamsan check --html/--perfetto`
/// passes it).
#[test]
fn torch_trace_timelines_give_pytorch_fixes() {
    use streamsan::report::html::HtmlWriter;
    use streamsan::report::perfetto::PerfettoWriter;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/torch/r01_default_stream_racy.jsonl"
    );
    let trace = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let reader = streamsan::trace::reader::TraceReader::new(trace, "r01").unwrap();
    let mut html = HtmlWriter::new("r01");
    let mut perfetto = PerfettoWriter::new(Vec::new(), "r01").unwrap();
    let checked = streamsan::check::check_reader_with(reader, &mut |r, resolved| {
        html.record(r, resolved);
        perfetto.record(r, resolved);
    })
    .unwrap();
    assert_eq!(checked.api, streamsan::report::Api::Torch);
    html.set_api(checked.api);
    perfetto.set_api(checked.api);
    let page = String::from_utf8(html.finish(Vec::new(), &checked.report).unwrap()).unwrap();
    let events = String::from_utf8(perfetto.finish(&checked.report).unwrap()).unwrap();
    for (what, text) in [("HTML page", &page), ("Perfetto trace", &events)] {
        assert!(text.contains("wait_stream"), "{what}: no PyTorch fix");
        assert!(!text.contains("cudaStreamWaitEvent"), "{what}: a CUDA fix");
    }
}

/// Traces that `streamsan run` recorded on an H100 through the Sanitizer API, from unmodified
/// programs (tests/run_gpu/: CUDA C built with nvcc, and the PyTorch cases of
/// tests/torch_gpu/cases run as `streamsan run -- python FILE`). The racy programs race (their
/// plain runs print wrong numbers there), the fixed ones are clean; except the two PyTorch
/// cases whose race is a *host* read of pinned memory, which the Sanitizer API does not show
/// (docs/run.md, limitations): `run` must find nothing there, not something else. Four of
/// the correct PyTorch programs of tests/torch_gpu/programs are there too. Four of
/// the correct PyTorch programs of tests/torch_gpu/programs are there too.
#[test]
fn run_recorded_traces() {
    let mut seen = 0;
    insta::glob!("fixtures/run/*.jsonl", |path| {
        seen += 1;
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let host_read =
            name.contains("r04_pinned_d2h_read") || name.contains("r12_stream_query_poll");
        // The one finding in the correct-looking programs: PyTorch's CUDA-graph RNG prologue
        // fills one 8-byte buffer on the capture stream and on the legacy stream, unordered;
        // the PyTorch front end reports the same (docs/pytorch.md, limitations).
        let graph_rng = name.contains("program-whole_network_graph");
        let racy = (name.contains("-racy") && !host_read) || graph_rng;
        let (name, rel, checked) = check_fixture(path, "tests/fixtures/run", racy);
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.starts_with("{\"streamsan_trace\":1"), "{name}");
        assert!(
            text.lines()
                .next()
                .unwrap()
                .contains("\"producer\":\"streamsan run\""),
            "{name}"
        );
        assert!(text.contains("\"kernels\":\"instrumented\""), "{name}");
        if name.starts_with("torch-") {
            return; // large, with PyTorch's kernel names: the verdict is what is pinned
        }
        // The CUDA C cases: every kernel is named as written and every race names its lines.
        assert!(
            !text.contains("\"name\":\"_Z"),
            "{name}: a kernel name left mangled"
        );
        let opts = RenderOptions {
            source: Some(rel),
            max_reports: None,
            ..RenderOptions::default()
        };
        let report = render_text(&checked.report, &opts);
        if racy {
            assert!(
                report.contains("at ./tests/run_gpu/apps/cases.cu:"),
                "{name}: {report}"
            );
        }
        if name.starts_with("atomics-") {
            // The Sanitizer API flags an atomicAdd as a read and a write: R19's `atomics`.
            assert!(text.contains("\"atomics\":[{\"buf\""), "{name}");
        }
        insta::assert_snapshot!("text", report);
    });
    assert_eq!(
        seen, 47,
        "25 CUDA C runs, 18 PyTorch case runs, 4 PyTorch programs (tests/run_gpu/run-cases.sh)"
    );
}

/// Streams dropped by the program (`tests/online_stream_destroy.rs`): the producer's stream is
/// destroyed with its kernel still running; the racy copy on another stream races with it, the
/// fixed one (the host waited first) is clean.
#[test]
fn gpu_recorded_stream_traces() {
    let mut seen = 0;
    insta::glob!("fixtures/gpu/streams/*.jsonl", |path| {
        seen += 1;
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let racy = name.contains("-racy");
        let (_, rel, checked) = check_fixture(path, "tests/fixtures/gpu/streams", racy);
        let text = std::fs::read_to_string(path).unwrap();
        assert!(
            text.contains("\"op\":\"stream_destroy\""),
            "{name}: no destroy"
        );
        if racy {
            let race = &checked.report.races[0].race;
            let producer = race
                .previous
                .stream
                .as_ref()
                .and_then(|s| s.name.as_deref());
            assert_eq!(
                producer,
                Some("producer"),
                "{name}: the write was the producer's"
            );
        }
        let opts = RenderOptions {
            source: Some(rel),
            max_reports: None,
            ..RenderOptions::default()
        };
        insta::assert_snapshot!("text", render_text(&checked.report, &opts));
    });
    assert_eq!(seen, 2, "racy and fixed");
}
