//! `streamsan check --html`: the page, run in a real browser (headless Chromium).
//!
//! Pages are generated from racy corpus traces, the racy GPU fixtures recorded with cudarc's
//! event tracking off, and a 100,000-operation synthetic trace with races appended; each is
//! opened as `page.html#selftest`, where the page clicks every race link (real click events)
//! and writes what it saw into `<pre id="selftest">`. The test asserts that the drawn races are
//! the JSON report's (count, both lines), that clicking each one opens its report block, that
//! the first race is open by default, and that the 100k page renders in under 5 s.
//!
//! Without `chromium` on PATH the test prints a loud skip message and passes, unless
//! `STREAMSAN_REQUIRE_BROWSER=1` (CI sets it), where it fails.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use streamsan::check::check_reader_with;
use streamsan::report::html::HtmlWriter;
use streamsan::report::{RenderOptions, Report, render_json, render_text};
use streamsan::trace::reader::TraceReader;
use streamsan::trace::writer::TraceWriter;
use streamsan_demos::synth::{SynthConfig, records};

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
}

fn browser_or_skip() -> Option<PathBuf> {
    match chromium() {
        Some(path) => Some(path),
        None if std::env::var("STREAMSAN_REQUIRE_BROWSER").as_deref() == Ok("1") => {
            panic!("STREAMSAN_REQUIRE_BROWSER=1 but `chromium` is not on PATH")
        }
        None => {
            eprintln!(
                "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
                 !! SKIPPED tests/html.rs: `chromium` is not installed, so the HTML     !!\n\
                 !! page was not checked in a browser (CI sets STREAMSAN_REQUIRE_BROWSER)!!\n\
                 !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
            );
            None
        }
    }
}

/// A fresh, empty directory under the target directory's tmp.
fn tmp_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("html-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Page {
    path: PathBuf,
    report: Report,
}

fn write_page(trace: &[u8], title: &str, out: &Path) -> Page {
    let reader = TraceReader::new(trace, title).expect("a header");
    let mut writer = HtmlWriter::new(title);
    let checked = check_reader_with(reader, &mut |r, resolved| writer.record(r, resolved))
        .expect("the trace is valid");
    let file = std::fs::File::create(out).unwrap();
    writer
        .finish(std::io::BufWriter::new(file), &checked.report)
        .unwrap()
        .flush()
        .unwrap();
    Page {
        path: out.to_path_buf(),
        report: checked.report,
    }
}

/// Runs the page's self-test in headless Chromium and returns the `#selftest` JSON.
fn selftest(browser: &Path, page: &Path, name: &str) -> Value {
    let profile = tmp_dir(&format!("profile-{name}"));
    let url = format!("file://{}#selftest", page.canonicalize().unwrap().display());
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=10000", "--dump-dom"])
        .arg(&url)
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout);
    let start = dom.find("<pre id=\"selftest\">").unwrap_or_else(|| {
        panic!(
            "{name}: no #selftest output; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    }) + "<pre id=\"selftest\">".len();
    let end = start + dom[start..].find("</pre>").expect("closed");
    let text = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&");
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{name}: selftest is not JSON ({e}): {text}"))
}

/// The headline (first line) of each race's text report block.
fn headlines(report: &Report) -> Vec<String> {
    report
        .races
        .iter()
        .map(|f| {
            let one = Report {
                races: vec![f.clone()],
                warnings: Vec::new(),
                summary: report.summary,
            };
            render_text(&one, &RenderOptions::default())
                .lines()
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// The assertions shared by every page; returns the render time in ms.
fn assert_page(browser: &Path, page: &Page, name: &str) -> f64 {
    let st = selftest(browser, &page.path, name);
    let json: Value =
        serde_json::from_str(&render_json(&page.report, &RenderOptions::default())).unwrap();
    let races = json["races"].as_array().unwrap();
    assert!(!races.is_empty(), "{name}: the trace is racy");
    let heads = headlines(&page.report);
    assert_eq!(st["races"], races.len(), "{name}: race count");
    let clicks = st["clicks"].as_array().unwrap();
    assert_eq!(clicks.len(), races.len(), "{name}: every race clicked");
    // The first race is open by default.
    assert_eq!(st["default_open_index"], 0, "{name}");
    let open = st["default_open"].as_str().unwrap();
    assert!(open.starts_with(&heads[0]), "{name}: default panel: {open}");
    for (i, (click, race)) in clicks.iter().zip(races).enumerate() {
        assert_eq!(click["index"], i, "{name}");
        assert_eq!(click["found"], true, "{name}: race {i} has a drawn link");
        assert_eq!(
            click["listed"], true,
            "{name}: race {i} in window.streamsanDrawn"
        );
        // A graph node's side is drawn at the launch that ran it.
        let drawn_line = |side: &Value| match side.get("graph_launch") {
            Some(launch) => launch.clone(),
            None => side["line"].clone(),
        };
        assert_eq!(
            click["current_line"],
            drawn_line(&race["current"]),
            "{name}: race {i} current line"
        );
        assert_eq!(
            click["previous_line"],
            drawn_line(&race["previous"]),
            "{name}: race {i} previous line"
        );
        assert_eq!(
            click["selected"], i,
            "{name}: race {i} selected by its click"
        );
        let panel = click["panel"].as_str().unwrap();
        assert!(
            panel.starts_with(&heads[i]) && panel.contains("  fix: "),
            "{name}: race {i}: the panel shows {panel:?}, expected {:?}",
            heads[i]
        );
        let lane = |key: &str| click[key].as_str().unwrap().to_string();
        for (key, side) in [("current_lane", "current"), ("previous_lane", "previous")] {
            let l = lane(key);
            let ok = match race[side]["stream"].as_u64() {
                Some(_) => l.starts_with('s'),
                None => l.starts_with("host thread"),
            };
            assert!(ok, "{name}: race {i} {side} lane {l}");
        }
    }
    assert_eq!(
        st["marker_opens"], true,
        "{name}: the marker opens its race"
    );
    assert_eq!(
        st["list_opens"], true,
        "{name}: the list entry opens its race"
    );
    st["render_ms"].as_f64().unwrap()
}

#[test]
fn racy_traces_in_a_browser() {
    let Some(browser) = browser_or_skip() else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut traces: Vec<PathBuf> = [
        "p01-double-buffer-pipeline",
        "p02-producer-consumer-threads",
        "p03-offload-then-free",
        "p04-randn-sum",
        "r16-reuse-other-stream",
        "r17-fork-branches",
        "r18-output-read-other-stream",
    ]
    .iter()
    .map(|n| root.join(format!("tests/corpus/{n}.racy.jsonl")))
    .collect();
    let mut gpu: Vec<PathBuf> = std::fs::read_dir(root.join("tests/fixtures/gpu"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.contains("racy-tracking-off") && n.ends_with(".jsonl")
        })
        .collect();
    gpu.sort();
    assert!(!gpu.is_empty());
    traces.extend(gpu);
    let dir = tmp_dir("pages");
    for trace in traces {
        let name = trace.file_stem().unwrap().to_str().unwrap().to_string();
        let bytes = std::fs::read(&trace).unwrap();
        let page = write_page(&bytes, &name, &dir.join(format!("{name}.html")));
        let ms = assert_page(&browser, &page, &name);
        eprintln!(
            "{name}: {} races, rendered in {ms} ms",
            page.report.races.len()
        );
    }
}

#[test]
fn hundred_thousand_operations_in_a_browser() {
    let Some(browser) = browser_or_skip() else {
        return;
    };
    let mut writer = TraceWriter::new(Vec::new(), Default::default()).unwrap();
    for record in records(SynthConfig::default()).take(100_000) {
        writer.write(&record).unwrap();
    }
    let mut trace = writer.into_inner();
    // Races appended (the synthetic workload is race-free): two new streams write and read
    // a new buffer with nothing between them, and the host reads it.
    trace.extend_from_slice(
        br#"{"op": "stream", "id": 900001, "kind": "created", "flags": "non_blocking", "name": "w"}
{"op": "stream", "id": 900002, "kind": "created", "flags": "non_blocking", "name": "r"}
{"op": "alloc", "buf": 900001, "bytes": 4096, "device": 0, "space": "managed", "name": "late"}
{"op": "launch", "stream": 900001, "name": "produce", "writes": [900001]}
{"op": "launch", "stream": 900002, "name": "consume", "reads": [900001]}
{"op": "host_access", "name": "print", "reads": [900001]}
{"op": "launch", "stream": 900002, "name": "overwrite", "writes": [{"buf": 900001, "off": 0, "len": 64}]}
"#,
    );
    let dir = tmp_dir("synth");
    let page = write_page(&trace, "synth.jsonl", &dir.join("synth.html"));
    assert!(page.report.summary.records >= 100_000);
    let ms = assert_page(&browser, &page, "synth-100k");
    eprintln!(
        "synth 100k: {} records, {} races, rendered in {ms} ms (navigation start to first frame)",
        page.report.summary.records,
        page.report.races.len()
    );
    assert!(ms < 5000.0, "the 100k page renders in under 5 s: {ms} ms");
}
