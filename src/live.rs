//! A program checked as it runs, fed one record at a time by a front end that is not the cudarc
//! layer (the PyTorch front end's native extension): each record is numbered in call order,
//! checked by the engine at once, written to the trace (when one is open) and its findings
//! folded, printed as found and filtered by the suppressions and baseline. The cudarc layer
//! has its own driver of the same pieces (`cuda::sanitizer`), with a crash-safe mapped trace
//! and cudarc's own event tracking.

use std::io::{self, Write};

use serde_json::{Map, Value};

use crate::engine::{Engine, Finding, InputError};
use crate::report::{Api, LiveFindings, RenderOptions, Report, closing, live_summary, render_json};
use crate::suppress::{Filters, Tally};
use crate::trace::{Record, TraceWriter};

/// Where text goes: the report sink of the session.
pub type Sink = Box<dyn Write + Send>;

/// The file behind this process's standard error, as (device, inode): two processes print
/// to the same place when theirs match (`streamsan run` and the program it checks).
pub fn stderr_identity() -> Option<(u64, u64)> {
    file_identity(&stderr_copy()?)
}

/// A copy of this process's standard error that a later redirection of the program's own
/// (`dup2`, `freopen`) does not move.
pub fn stderr_copy() -> Option<std::fs::File> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let fd = std::io::stderr().as_fd().try_clone_to_owned().ok()?;
        Some(std::fs::File::from(fd))
    }
    #[cfg(not(unix))]
    None
}

/// The (device, inode) of the file `file` writes to.
pub fn file_identity(file: &std::fs::File) -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata().ok()?;
        Some((meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        None
    }
}

/// How a live session reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LiveFormat {
    /// A text block per race as it is found, and a `SUMMARY` line at the end.
    #[default]
    Text,
    /// One JSON report (`docs/report-format.md`) at the end.
    Json,
}

/// The session: the engine, the line counter, the trace, the findings. See the module docs.
pub struct Live {
    engine: Engine,
    /// The line the next record gets (the header is line 1).
    next_line: u64,
    trace: Option<TraceWriter<Sink>>,
    /// The trace's path as reports name it (`reproduce: streamsan check PATH`).
    trace_name: Option<String>,
    report: Sink,
    format: LiveFormat,
    api: Api,
    findings: LiveFindings,
    filters: Option<Filters>,
    /// Findings of the record being applied, reused.
    found: Vec<Finding>,
    closed: bool,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("next_line", &self.next_line)
            .field("trace_name", &self.trace_name)
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

/// What applying one record did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// The record raced, and no suppression or baseline entry took the race out.
    pub raced: bool,
}

/// Why a record was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The record cannot describe a program (an undeclared id, a live id declared again, ...).
    /// It was neither checked nor written to the trace; the session goes on.
    #[error("{0}")]
    Input(#[from] InputError),
    /// The session was finished.
    #[error("the session was finished; no more records are taken")]
    Finished,
}

impl Live {
    /// A session writing reports to `report` in `format`; with `trace`, also a trace there (its
    /// header carries `header`'s fields, and `"api"` when `api` is PyTorch's), named
    /// `trace_name` in reports.
    pub fn new(
        trace: Option<(Sink, String)>,
        mut header: Map<String, Value>,
        report: Sink,
        format: LiveFormat,
        api: Api,
        filters: Option<Filters>,
    ) -> io::Result<Live> {
        if api == Api::Torch {
            header.insert("api".into(), Value::from("torch"));
        }
        let (trace, trace_name) = match trace {
            Some((out, name)) => {
                let mut w = TraceWriter::new(out, header)?;
                w.flush()?;
                (Some(w), Some(name))
            }
            None => (None, None),
        };
        Ok(Live {
            engine: Engine::new(),
            next_line: 2,
            trace,
            trace_name,
            report,
            format,
            api,
            findings: LiveFindings::new(api),
            filters,
            found: Vec::new(),
            closed: false,
        })
    }

    /// Numbers `rec` (its `line` is set here), checks it, writes it to the trace and takes its
    /// findings (printing new race blocks in text format). A record the engine rejects is
    /// neither numbered nor written.
    pub fn apply(&mut self, rec: &mut Record) -> Result<Applied, LiveError> {
        if self.closed {
            return Err(LiveError::Finished);
        }
        rec.line = self.next_line;
        let mut found = std::mem::take(&mut self.found);
        let result = self.engine.apply(rec, &mut |f| found.push(f));
        if let Err(e) = result {
            found.clear();
            self.found = found;
            return Err(e.into());
        }
        self.next_line += 1;
        if let Some(w) = &mut self.trace
            && let Err(e) = w.write(rec).and_then(|()| w.flush())
        {
            self.trace = None;
            let line = rec.line;
            self.say(&format!(
                "streamsan: writing the trace failed at line {line}: {e}; the trace stops here\n"
            ));
        }
        let mut applied = Applied::default();
        for f in found.drain(..) {
            let removed = self.filters.as_ref().is_some_and(|x| x.removes(&f));
            applied.raced |= matches!(f, Finding::Race(_)) && !removed;
            if let Some(text) = self
                .findings
                .add(f, self.format == LiveFormat::Text, removed)
            {
                self.say(&text);
            }
        }
        self.found = found;
        Ok(applied)
    }

    /// The folded report so far, with the suppressions and baseline applied.
    pub fn report(&self) -> Report {
        self.filtered().0
    }

    fn filtered(&self) -> (Report, Option<Tally>) {
        let report = self.findings.report(self.engine.stats());
        Filters::apply_optional(self.filters.as_ref(), report)
    }

    /// How reports render: fix hints in the session's api, the trace as the source.
    pub fn render_options(&self) -> RenderOptions {
        RenderOptions {
            source: self.trace_name.clone(),
            max_reports: None,
            api: self.api,
        }
    }

    /// Records numbered so far.
    pub fn records(&self) -> u64 {
        self.next_line - 2
    }

    /// Ends the session: ends the engine's checks (leaks are warnings), closes the trace and
    /// writes the closing lines (text) or the JSON report to the report sink. Returns the
    /// final report. Later calls return the same report without writing again.
    pub fn finish(&mut self) -> Report {
        if !self.closed {
            self.closed = true;
            let mut found = std::mem::take(&mut self.found);
            self.engine.finish(&mut |f| found.push(f));
            for f in found.drain(..) {
                let removed = self.filters.as_ref().is_some_and(|x| x.removes(&f));
                self.findings.add(f, false, removed);
            }
            if let Some(mut w) = self.trace.take()
                && let Err(e) = w.flush()
            {
                self.say(&format!("streamsan: closing the trace failed: {e}\n"));
            }
            let (report, tally) = self.filtered();
            let text = match self.format {
                LiveFormat::Text if self.api == Api::Torch => {
                    let mut text = closing(&report, self.trace_name.as_deref());
                    if self.trace_name.is_none() && report.has_races() {
                        text.push_str(
                            "streamsan: to replay this run offline, record a trace \
                             (`python -m streamsan.torch --trace run.jsonl script.py`) and run \
                             `streamsan check run.jsonl`\n",
                        );
                    }
                    text
                }
                LiveFormat::Text => live_summary(&report, self.trace_name.as_deref()),
                LiveFormat::Json => render_json(&report, &self.render_options()),
            };
            self.say(&text);
            if let (Some(filters), Some(tally)) = (&self.filters, &tally) {
                let closing = filters.closing(tally);
                self.say(&closing);
            }
            return report;
        }
        self.report()
    }

    /// Writes `text` to the report sink now (write errors are dropped: the verdict still
    /// comes back to the caller).
    pub fn say(&mut self, text: &str) {
        if !text.is_empty() {
            let _ = self.report.write_all(text.as_bytes());
            let _ = self.report.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::record::{Access, Op};
    use std::sync::{Arc, Mutex};

    /// A sink that keeps what was written, for the assertions.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn rec(op: Op) -> Record {
        Record {
            line: 0,
            thread: 0,
            at: None,
            name: None,
            op,
        }
    }

    fn session(api: Api, trace: Option<Shared>, report: Shared) -> Live {
        Live::new(
            trace.map(|t| (Box::new(t) as Sink, "run.jsonl".to_string())),
            Map::new(),
            Box::new(report),
            LiveFormat::Text,
            api,
            None,
        )
        .unwrap()
    }

    /// The seed's race: a write on the legacy default stream, a read on a non-blocking stream.
    fn racy_records() -> Vec<Record> {
        use crate::trace::record::{MemSpace, Pool, StreamFlags, StreamKind};
        vec![
            rec(Op::Stream {
                id: 7,
                device: 0,
                kind: StreamKind::Created,
                flags: StreamFlags::NonBlocking,
            }),
            rec(Op::Alloc {
                buf: 1,
                bytes: 64,
                device: 0,
                space: MemSpace::Device,
                stream: None,
                addr: None,
                pool: Pool::Driver,
            }),
            rec(Op::Launch {
                stream: 0,
                reads: vec![],
                writes: vec![Access::whole(1)],
                atomics: Vec::new(),
            }),
            rec(Op::Launch {
                stream: 7,
                reads: vec![Access::whole(1)],
                writes: vec![],
                atomics: Vec::new(),
            }),
        ]
    }

    #[test]
    fn records_are_numbered_checked_written_and_reported_as_found() {
        let (trace, report) = (Shared::default(), Shared::default());
        let mut live = session(Api::Torch, Some(trace.clone()), report.clone());
        let mut raced = Vec::new();
        for mut r in racy_records() {
            if let Op::Launch { .. } = r.op {
                r.name = Some("aten::sum".into());
            }
            raced.push(live.apply(&mut r).unwrap().raced);
        }
        assert_eq!(raced, [false, false, false, true]);
        assert_eq!(live.records(), 4);
        let printed = report.text();
        assert!(printed.starts_with("RACE read-after-write"), "{printed}");
        // The fix in PyTorch's words.
        assert!(
            printed.contains(".wait_stream(torch.cuda.default_stream())"),
            "{printed}"
        );
        let final_report = live.finish();
        assert_eq!(final_report.summary.races, 1);
        assert!(
            report.text().contains("SUMMARY: 1 race"),
            "{}",
            report.text()
        );
        assert!(
            report
                .text()
                .contains("reproduce: streamsan check run.jsonl")
        );
        // The trace replays to the same verdict, with the header's api.
        let text = trace.text();
        assert!(
            text.lines().next().unwrap().contains("\"api\":\"torch\""),
            "{text}"
        );
        let reader =
            crate::trace::reader::TraceReader::new(io::Cursor::new(text.into_bytes()), "run.jsonl")
                .unwrap();
        assert_eq!(Api::of_header(reader.header()), Api::Torch);
        let checked = crate::check::check_reader(reader).unwrap();
        assert_eq!(checked.report.summary.races, 1);
        assert_eq!(checked.report.races[0].race, final_report.races[0].race);
    }

    #[test]
    fn a_rejected_record_is_neither_numbered_nor_written_and_the_session_goes_on() {
        let trace = Shared::default();
        let mut live = session(Api::Cuda, Some(trace.clone()), Shared::default());
        let mut bad = rec(Op::Launch {
            stream: 99,
            reads: vec![],
            writes: vec![],
            atomics: Vec::new(),
        });
        bad.name = Some("k".into());
        let err = live.apply(&mut bad).unwrap_err();
        assert!(err.to_string().contains("99"), "{err}");
        assert_eq!(live.records(), 0);
        for mut r in racy_records() {
            r.name = Some("k".into());
            live.apply(&mut r).unwrap();
        }
        assert_eq!(trace.text().lines().count(), 5);
        assert_eq!(live.finish().summary.races, 1);
        assert!(matches!(
            live.apply(&mut racy_records()[0].clone()),
            Err(LiveError::Finished)
        ));
    }

    #[test]
    fn json_format_prints_one_report_at_the_end() {
        let report = Shared::default();
        let mut live = Live::new(
            None,
            Map::new(),
            Box::new(report.clone()),
            LiveFormat::Json,
            Api::Cuda,
            None,
        )
        .unwrap();
        for mut r in racy_records() {
            r.name = Some("k".into());
            live.apply(&mut r).unwrap();
        }
        assert_eq!(report.text(), "");
        live.finish();
        let v: Value = serde_json::from_str(&report.text()).unwrap();
        assert_eq!(v["summary"]["races"], 1);
        assert!(
            v["races"][0]["fix"]
                .as_str()
                .unwrap()
                .contains("cudaStreamWaitEvent")
        );
        live.finish();
        assert_eq!(report.text().matches("\"version\"").count(), 1);
    }
}
