//! The trace drawn as one self-contained HTML page: `streamsan check --html report.html`.
//! `docs/timeline.md` explains how to read it.
//!
//! The page holds everything it needs (inline CSS and script, no network access): a lane per
//! host thread and per stream, named as in the text report, with the operations in issue order;
//! the synchronization edges as arrows; every race as a red link from its previous access to its
//! current one, and beside the timeline a race list whose entries (like the links and markers)
//! open the race's text report block in a side panel. What is drawn, and which edges, comes from
//! `report::timeline`, the model the Perfetto exporter draws from too, so both show the same
//! picture.
//!
//! The data travel as one JSON object in a `<script type="application/json" id="data">`:
//!
//! | key | value |
//! | --- | --- |
//! | `title` | the trace file |
//! | `lanes` | `[{"tid", "name", "sort"}]`: one per track, in `tid` order |
//! | `names`, `kinds` | string tables that `ops` and `flows` index |
//! | `ops` | flat `[tid, line, name, kind, ...]`: one slice per operation, in trace order |
//! | `flows` | flat `[from tid, from line, to tid, to line, name, ...]`: synchronization edges |
//! | `races` | `[{"kind", "headline", "text", "current": {"tid", "line"}, "previous": {...}}]` in report order; `text` is the race's block of the text report |
//! | `warnings` | `[{"kind", "line", "message"}]` |
//! | `summary` | the text report's SUMMARY line |
//!
//! The page keeps only what is on screen in the DOM: operations and edges are painted on a
//! `<canvas>`, and race links are SVG elements for the races in view (each with `data-race`,
//! `data-current-line`, `data-previous-line`, `data-current-lane`, `data-previous-lane`; the
//! same are listed in `window.streamsanDrawn`). Opened as `report.html#selftest`, the page
//! clicks every race link in turn after rendering and writes what it found into
//! `<pre id="selftest">` as JSON (`tests/html.rs` runs it in headless Chromium).
//!
//! Unlike the Perfetto exporter, the writer keeps every slice until [`HtmlWriter::finish`]
//! (the page embeds them all): memory grows with the length of the trace, by a few dozen bytes
//! per operation.

use std::io::{self, Write};

use rustc_hash::FxHashMap;
use serde::Serialize;

use super::timeline::{Draw, OpArgs, Slice, Timeline};
use super::{Api, RenderOptions, Report, render_text};
use crate::engine::Resolved;
use crate::trace::record::Record;

const TEMPLATE: &str = include_str!("html/page.html");
const STYLE: &str = include_str!("html/page.css");
const SCRIPT: &str = include_str!("html/page.js");

/// Collects a trace's timeline: [`HtmlWriter::record`] for every record in trace order, then
/// [`HtmlWriter::finish`] with the report writes the page.
///
/// ```
/// # use streamsan::report::html::HtmlWriter;
/// # use streamsan::trace::reader::TraceReader;
/// let trace = "{\"streamsan_trace\": 1}\n\
///              {\"op\": \"launch\", \"name\": \"k\", \"stream\": 0}\n";
/// let reader = TraceReader::new(trace.as_bytes(), "t.jsonl").unwrap();
/// let mut writer = HtmlWriter::new("t.jsonl");
/// let checked =
///     streamsan::check::check_reader_with(reader, &mut |r, resolved| writer.record(r, resolved))
///         .unwrap();
/// let page = writer.finish(Vec::new(), &checked.report).unwrap();
/// let page = String::from_utf8(page).unwrap();
/// assert!(page.starts_with("<!DOCTYPE html>") && page.contains("\"k\""));
/// ```
#[derive(Debug)]
pub struct HtmlWriter {
    title: String,
    /// Whose calls the race panels' fix hints name.
    api: Api,
    timeline: Timeline,
    page: Page,
}

/// The [`Draw`] side: slices and edges as flat arrays with interned strings.
#[derive(Debug, Default)]
struct Page {
    names: Strings,
    kinds: Strings,
    ops: Vec<u64>,
    flows: Vec<u64>,
}

#[derive(Debug, Default)]
struct Strings {
    list: Vec<String>,
    index: FxHashMap<String, u64>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

impl Draw for Page {
    fn slice(&mut self, name: &str, _cat: &'static str, tid: u32, line: u64, args: OpArgs<'_>) {
        let name = self.names.id(name);
        let kind = self.kinds.id(args.op);
        self.ops.extend([u64::from(tid), line, name, kind]);
    }

    fn flow(&mut self, name: &str, _cat: &'static str, from: Slice, to: Slice) {
        let name = self.kinds.id(name);
        self.flows.extend([
            u64::from(from.tid),
            from.line,
            u64::from(to.tid),
            to.line,
            name,
        ]);
    }
}

#[derive(Serialize)]
struct Data<'a> {
    title: &'a str,
    lanes: Vec<Lane>,
    names: &'a [String],
    kinds: &'a [String],
    ops: &'a [u64],
    flows: &'a [u64],
    races: Vec<RaceData>,
    warnings: Vec<WarningData>,
    summary: String,
}

#[derive(Serialize)]
struct Lane {
    tid: u32,
    name: String,
    sort: u64,
}

#[derive(Serialize)]
struct RaceData {
    kind: &'static str,
    headline: String,
    text: String,
    occurrences: u64,
    current: End,
    previous: End,
}

#[derive(Serialize)]
struct End {
    tid: u32,
    line: u64,
}

impl End {
    fn of(slice: Slice) -> End {
        End {
            tid: slice.tid,
            line: slice.line,
        }
    }
}

#[derive(Serialize)]
struct WarningData {
    kind: &'static str,
    line: u64,
    message: String,
}

impl HtmlWriter {
    /// Starts a page; `title` names the trace (the trace file, typically).
    pub fn new(title: &str) -> Self {
        HtmlWriter {
            title: title.to_string(),
            api: Api::Cuda,
            timeline: Timeline::default(),
            page: Page::default(),
        }
    }

    /// Names fix hints in `api`'s calls (a trace's header says which: [`Api::of_header`]).
    pub fn set_api(&mut self, api: Api) {
        self.api = api;
    }

    /// Draws one record; records must come in trace order.
    pub fn record(&mut self, r: &Record, resolved: &Resolved) {
        self.timeline.record(r, resolved, &mut self.page);
    }

    /// Writes the page for `report` to `out` and returns it.
    pub fn finish<W: Write>(mut self, mut out: W, report: &Report) -> io::Result<W> {
        let opts = RenderOptions {
            source: Some(self.title.clone()),
            max_reports: None,
            api: self.api,
        };
        let races = report
            .races
            .iter()
            .map(|folded| {
                let one = Report {
                    races: vec![folded.clone()],
                    warnings: Vec::new(),
                    summary: report.summary,
                };
                let full = render_text(
                    &one,
                    &RenderOptions {
                        api: self.api,
                        ..RenderOptions::default()
                    },
                );
                // The race's block: everything before the blank line and the SUMMARY.
                let text = match full.find("\n\n") {
                    Some(end) => full[..end + 1].to_string(),
                    None => full,
                };
                RaceData {
                    kind: folded.race.kind.as_str(),
                    headline: text.lines().next().unwrap_or_default().to_string(),
                    text,
                    occurrences: folded.occurrences,
                    current: End::of(self.timeline.site_slice(&folded.race.current)),
                    previous: End::of(self.timeline.site_slice(&folded.race.previous)),
                }
            })
            .collect();
        let full = render_text(report, &opts);
        let summary = full
            .lines()
            .find(|l| l.starts_with("SUMMARY:"))
            .unwrap_or_default()
            .to_string();
        let data = Data {
            title: &self.title,
            lanes: self
                .timeline
                .tracks()
                .into_iter()
                .map(|t| Lane {
                    tid: t.tid,
                    name: t.name,
                    sort: t.sort_index,
                })
                .collect(),
            names: &self.page.names.list,
            kinds: &self.page.kinds.list,
            ops: &self.page.ops,
            flows: &self.page.flows,
            races,
            warnings: report
                .warnings
                .iter()
                .map(|w| WarningData {
                    kind: w.kind().as_str(),
                    line: w.line,
                    message: super::warning_message(w),
                })
                .collect(),
            summary,
        };
        // `<` only occurs inside JSON strings, where `\u003c` means the same: the data cannot
        // close the script element.
        let json = serde_json::to_string(&data)?.replace('<', "\\u003c");
        let page = TEMPLATE
            .replace(
                "{{title}}",
                &escape_html(&format!("streamsan: {}", self.title)),
            )
            .replace("{{style}}", STYLE)
            .replace("{{script}}", SCRIPT);
        let (before, after) = page
            .split_once("{{data}}")
            .expect("the template has a data slot");
        out.write_all(before.as_bytes())?;
        out.write_all(json.as_bytes())?;
        out.write_all(after.as_bytes())?;
        out.flush()?;
        self.page = Page::default();
        Ok(out)
    }
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
