//! What the sanitizer's lock guards, and how a step becomes a record: numbered, encoded for
//! the trace, applied to the engine, its findings kept, printed and (on request) halting.

use std::io::Write;
use std::panic::Location;

use rustc_hash::FxHashMap;

use crate::cuda::options::{Options, ReportFormat};
use crate::cuda::reporting::{self, Findings};
use crate::cuda::step::{Label, Step};
use crate::cuda::threads::ThreadIds;
use crate::cuda::trace_file::TraceSink;
use crate::engine::{Engine, Finding};
use crate::report::{Api, RenderOptions, Report, render_json};
use crate::suppress::{Filters, Tally};
use crate::trace::record::{
    Access, BufId, DeviceId, EventId, GraphId, Op, Record, StreamId, ThreadId,
};
use crate::trace::writer::encode;

use super::Sink;

/// The trace being written: the header went out at creation; each call's lines are encoded into
/// `pending` and appended to `out` at once when the call ends.
pub(super) struct TraceOut {
    pub(super) out: TraceSink,
    pub(super) pending: Vec<u8>,
}

pub(crate) struct State {
    pub(super) engine: Engine,
    /// The line the next record gets (the header is line 1).
    pub(super) next_line: u64,
    pub(super) trace: Option<TraceOut>,
    /// The trace path as reports name it.
    pub(super) trace_name: Option<String>,
    pub(super) report: Sink,
    pub(super) findings: Findings,
    /// Suppressions and baseline, when the options name some.
    pub(super) filters: Option<Filters>,
    pub(super) threads: ThreadIds,
    /// Events with a record in the trace and no `event_destroy` since: the events whose
    /// tracked waits and syncs order something (see [`Step::TrackedWait`]).
    pub(super) recorded: super::id_set::IdSet,
    pub(super) legacy: FxHashMap<DeviceId, StreamId>,
    pub(super) per_thread: FxHashMap<(ThreadId, DeviceId), StreamId>,
    pub(super) next_stream: StreamId,
    pub(super) next_event: EventId,
    pub(super) next_buf: BufId,
    pub(super) next_graph: GraphId,
    /// The graph each capturing stream (the one `begin_capture` was called on) captures into.
    pub(super) captures: FxHashMap<StreamId, GraphId>,
    /// Feeding the engine: `options.check`, until the engine rejects a record.
    pub(super) checking: bool,
    /// Calls skipped because they mixed sanitizers; warned about once.
    pub(super) warned_foreign: bool,
    /// The record being made, reused: its strings and access lists keep their capacity.
    pub(super) rec: Record,
    /// Spare strings for `rec.name` and `rec.at` while those are `None`.
    pub(super) spare_name: String,
    pub(super) spare_at: String,
    /// `file:line:col` of every call site seen, by the address of its `Location`.
    pub(super) at_cache: FxHashMap<usize, Box<str>>,
    /// A step list and access lists of earlier calls, reused.
    pub(super) steps_pool: Vec<Step>,
    pub(super) access_pool: Vec<Vec<Access>>,
    /// Findings of the record being applied, reused.
    pub(super) new_findings: Vec<Finding>,
    #[cfg(test)]
    pub(crate) captured: Vec<Record>,
}

/// Sets `slot` to `text`, reusing the string in `slot` or `spare`.
fn set_text(slot: &mut Option<String>, spare: &mut String, text: Option<&str>) {
    let mut s = slot.take().unwrap_or_else(|| std::mem::take(spare));
    match text {
        Some(text) => {
            s.clear();
            s.push_str(text);
            *slot = Some(s);
        }
        None => *spare = s,
    }
}

/// Sets `slot` to `label`, reusing the string in `slot` or `spare`.
fn set_label(slot: &mut Option<String>, spare: &mut String, label: &Label) {
    let mut s = slot.take().unwrap_or_else(|| std::mem::take(spare));
    if label.write_into(&mut s) {
        *slot = Some(s);
    } else {
        *spare = s;
    }
}

/// `file` with `dir/..` pairs taken out: a module compiled in through `#[path = "../x.rs"]`
/// is named `tests/../x.rs` by rustc, and reports should say `x.rs`.
fn clean_path(file: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in file.split('/') {
        match part {
            ".." if parts.last().is_some_and(|p| *p != ".." && !p.is_empty()) => {
                parts.pop();
            }
            "." if !parts.is_empty() => {}
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

#[cfg(test)]
#[test]
fn paths_are_cleaned_lexically() {
    assert_eq!(clean_path("tests/../examples/a.rs"), "examples/a.rs");
    assert_eq!(clean_path("src/./lib.rs"), "src/lib.rs");
    assert_eq!(clean_path("../up/a.rs"), "../up/a.rs");
    assert_eq!(clean_path("/abs/x/../y.rs"), "/abs/y.rs");
    assert_eq!(clean_path("a.rs"), "a.rs");
}

/// At most this many access lists are kept for reuse.
const ACCESS_POOL: usize = 16;

impl State {
    /// Turns one step into a record (or none: see [`Step::TrackedWait`]).
    pub(super) fn apply(
        &mut self,
        options: &Options,
        step: Step,
        thread: ThreadId,
        at: Option<&'static Location<'static>>,
    ) {
        let (op, name) = match step {
            Step::Op { op, name } => {
                match op {
                    Op::Record { event, .. } => {
                        self.recorded.insert(event);
                    }
                    Op::EventDestroy { id } => {
                        self.recorded.remove(id);
                    }
                    _ => {}
                }
                (op, name)
            }
            Step::TrackedWait {
                stream,
                event,
                name,
            } => {
                if !self.recorded.contains(event) {
                    return;
                }
                (Op::Wait { stream, event }, name)
            }
            Step::TrackedRecord {
                event,
                stream,
                name,
            } => {
                self.recorded.insert(event);
                (Op::Record { event, stream }, name)
            }
            Step::TrackedSync { event, name } => {
                if !self.recorded.contains(event) {
                    return;
                }
                (Op::EventSync { event }, name)
            }
        };
        self.emit(options, op, &name, thread, at);
    }

    /// Makes the record: numbers it, encodes its trace line, checks it.
    pub(super) fn emit(
        &mut self,
        options: &Options,
        op: Op,
        name: &Label,
        thread: ThreadId,
        at: Option<&'static Location<'static>>,
    ) {
        let old = std::mem::replace(&mut self.rec.op, op);
        self.recycle(old);
        self.rec.line = self.next_line;
        self.next_line += 1;
        self.rec.thread = thread;
        set_label(&mut self.rec.name, &mut self.spare_name, name);
        let at = at.map(|l| {
            &**self
                .at_cache
                .entry(l as *const Location<'static> as usize)
                .or_insert_with(|| {
                    format!("{}:{}:{}", clean_path(l.file()), l.line(), l.column()).into()
                })
        });
        set_text(&mut self.rec.at, &mut self.spare_at, at);
        if let Some(t) = &mut self.trace
            && let Err(e) = encode(&self.rec, &mut t.pending)
        {
            // Only a record the format cannot express (a launch without a kernel name): the
            // trace would no longer match the numbering.
            let line = self.rec.line;
            self.write_trace();
            self.trace = None;
            self.say(&format!(
                "streamsan: cannot write record {line} to the trace: {e}; the trace stops before it\n"
            ));
        }
        if self.checking {
            let mut found = std::mem::take(&mut self.new_findings);
            if let Err(e) = self.engine.apply(&self.rec, &mut |f| found.push(f)) {
                self.checking = false;
                self.say(&format!(
                    "streamsan: internal error, the engine rejected a record: {e}; online \
                     checking stops here (the trace goes on)\n"
                ));
            }
            for f in found.drain(..) {
                self.found(options, f);
            }
            self.new_findings = found;
        }
        #[cfg(test)]
        self.captured.push(self.rec.clone());
    }

    /// Keeps the access lists of a finished record for [`Call::access_list`].
    pub(super) fn recycle(&mut self, op: Op) {
        if let Op::Launch { reads, writes, .. }
        | Op::HostFunc { reads, writes, .. }
        | Op::HostAccess { reads, writes } = op
        {
            for list in [reads, writes] {
                if list.capacity() > 0 && self.access_pool.len() < ACCESS_POOL {
                    self.access_pool.push(list);
                }
            }
        }
    }

    /// Writes the trace lines made so far, in one `write_all`.
    pub(super) fn write_trace(&mut self) {
        let Some(t) = &mut self.trace else {
            return;
        };
        if t.pending.is_empty() {
            return;
        }
        let result = t.out.append(&t.pending);
        t.pending.clear();
        if let Err(e) = result {
            self.trace = None;
            let line = self.next_line;
            self.say(&format!(
                "streamsan: writing the trace failed before line {line}: {e}; the trace stops here\n"
            ));
        }
    }

    /// Writes the pending lines and ends the trace.
    pub(super) fn close_trace(&mut self) {
        self.write_trace();
        if let Some(t) = &mut self.trace
            && let Err(e) = t.out.close()
        {
            self.trace = None;
            self.say(&format!("streamsan: closing the trace failed: {e}\n"));
        }
    }

    /// The folded report so far with the filters applied, and what they matched (`None`
    /// without filters, when the report is left as it is).
    pub(super) fn filtered(&mut self) -> (Report, Option<Tally>) {
        let report = self.findings.report(self.engine.stats());
        Filters::apply_optional(self.filters.as_ref(), report)
    }

    /// Keeps a finding, prints it as it is found (text), and halts on a race if asked to.
    /// A finding the suppressions or the baseline take out is only counted.
    pub(super) fn found(&mut self, options: &Options, finding: Finding) {
        let removed = self.filters.as_ref().is_some_and(|f| f.removes(&finding));
        let race = matches!(finding, Finding::Race(_)) && !removed;
        if let Some(text) =
            self.findings
                .add(finding, options.format == ReportFormat::Text, removed)
        {
            self.say(&text);
        }
        if race && options.halt_on_error {
            // The racing record's line is pending: the trace reproduces the race.
            self.close_trace();
            let report = self.filtered().0;
            let text = match options.format {
                ReportFormat::Text => reporting::summary(&report, self.trace_name.as_deref()),
                ReportFormat::Json => render_json(
                    &report,
                    &RenderOptions {
                        source: self.trace_name.clone(),
                        max_reports: None,
                        api: Api::Cuda,
                    },
                ),
            };
            self.say(&text);
            self.say(&format!(
                "streamsan: halt_on_error: exiting with status {}\n",
                options.exitcode
            ));
            std::process::exit(options.exitcode);
        }
    }

    pub(super) fn say(&mut self, text: &str) {
        if !text.is_empty() {
            let _ = self.report.write_all(text.as_bytes());
            let _ = self.report.flush();
        }
    }
}
