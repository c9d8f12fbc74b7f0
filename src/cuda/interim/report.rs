//! INTERIM — TO BE REPLACED by the report layer (`crate::report::{Collector, render_text,
//! render_json}`, see `super`). Minimal text for one race or warning as it is found, a summary
//! line, and a JSON report in the documented schema.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::engine::{Finding, Race, Site, Stats, StreamInfo, Warning};

fn stream_label(s: &StreamInfo) -> String {
    let mut out = format!("s{}", s.ordinal);
    if let Some(name) = &s.name {
        let _ = write!(out, " {name:?}");
    }
    let kind = match s.kind {
        crate::trace::record::StreamKind::LegacyDefault => "legacy default".to_string(),
        crate::trace::record::StreamKind::PerThreadDefault => "per-thread default".to_string(),
        crate::trace::record::StreamKind::Created => {
            format!("created, {}", s.flags.as_str().replace('_', "-"))
        }
    };
    let _ = write!(out, " ({kind})");
    out
}

fn actor(site: &Site) -> String {
    match &site.stream {
        Some(s) => format!("stream {}", stream_label(s)),
        None => format!("host thread {}", site.thread),
    }
}

fn site_line(site: &Site) -> String {
    let mut out = format!("{} by {}", site.access.as_str(), site.op);
    if let Some(name) = &site.name {
        let _ = write!(out, " {name:?}");
    }
    if let Some(arg) = &site.arg {
        let _ = write!(out, " (arg {arg:?})");
    }
    let _ = write!(out, " on {}, thread {}", actor(site), site.thread);
    if let Some(at) = &site.at {
        let _ = write!(out, ", at {at}");
    }
    let _ = write!(out, ", trace line {}", site.line);
    out
}

/// One race as a text block, ending in a newline.
pub(crate) fn race_text(race: &Race, trace: Option<&str>) -> String {
    let b = &race.buffer;
    let mut out = format!("RACE {} on buffer b{}", race.kind.as_str(), b.ordinal);
    if let Some(name) = &b.name {
        let _ = write!(out, " {name:?}");
    }
    let _ = writeln!(out, " bytes [{}, {})", race.range.0, race.range.1);
    let _ = writeln!(out, "  {}", site_line(&race.current));
    let _ = writeln!(out, "  previous {}", site_line(&race.previous));
    let (cur, prev) = (actor(&race.current), actor(&race.previous));
    match &race.last_sync {
        None => {
            let _ = writeln!(out, "  why: {cur} never synchronized with {prev}");
        }
        Some(sync) => {
            let _ = writeln!(
                out,
                "  why: the last ordering {cur} received from {prev} came through the `{}` at trace line {}, before the previous access (line {})",
                sync.op, sync.line, race.previous.line
            );
        }
    }
    let _ = write!(out, "  allocated");
    if let Some(at) = &b.alloc_at {
        let _ = write!(out, " at {at}");
    }
    let _ = writeln!(
        out,
        " (trace line {}): {} bytes of {} memory on device {}",
        b.alloc_line,
        b.bytes,
        b.space.as_str(),
        b.device
    );
    let fix = match (&race.current.stream, &race.previous.stream) {
        (Some(_), Some(_)) => format!(
            "make {cur} wait for {prev} after line {}: `current.join(&previous)`, or record an event on the previous stream after it and `current.wait(&event)`",
            race.previous.line
        ),
        (None, Some(_)) => format!(
            "synchronize with {prev} before the host access: `stream.synchronize()` or `event.synchronize()`"
        ),
        _ => format!("order the access after line {}", race.previous.line),
    };
    let _ = writeln!(out, "  fix: {fix}");
    if let Some(trace) = trace {
        let _ = writeln!(out, "reproduce: streamsan check {trace}");
    }
    out
}

/// One warning as a line.
pub(crate) fn warning_text(w: &Warning) -> String {
    format!(
        "warning[{}] line {}: {}\n",
        w.kind.as_str(),
        w.line,
        w.message
    )
}

/// The closing line.
pub(crate) fn summary_text(findings: &[Finding], records: u64, trace: Option<&str>) -> String {
    let races = findings
        .iter()
        .filter(|f| matches!(f, Finding::Race(_)))
        .count();
    let warnings = findings.len() - races;
    let mut out = format!(
        "SUMMARY: streamsan: {races} race{}, {warnings} warning{} in {records} records\n",
        if races == 1 { "" } else { "s" },
        if warnings == 1 { "" } else { "s" },
    );
    if let Some(trace) = trace {
        let _ = writeln!(out, "reproduce: streamsan check {trace}");
    }
    out
}

fn site_json(s: &Site) -> Value {
    json!({
        "line": s.line,
        "stream": s.stream.as_ref().map(|s| s.id),
        "thread": s.thread,
        "op": s.op,
        "name": s.name,
        "access": s.access.as_str(),
        "arg": s.arg,
        "at": s.at,
    })
}

/// The JSON report of DESIGN.md (no folding: every race has `occurrences: 1`).
pub(crate) fn json_report(findings: &[Finding], stats: &Stats) -> String {
    let mut races = Vec::new();
    let mut warnings = Vec::new();
    for f in findings {
        match f {
            Finding::Race(r) => races.push(json!({
                "kind": r.kind.as_str(),
                "buffer": r.buffer.id,
                "range": [r.range.0, r.range.1],
                "current": site_json(&r.current),
                "previous": site_json(&r.previous),
                "occurrences": 1,
                "fix": null,
            })),
            Finding::Warning(w) => warnings.push(json!({
                "kind": w.kind.as_str(), "line": w.line, "message": w.message,
            })),
        }
    }
    let report = json!({
        "version": 1,
        "summary": {
            "records": stats.records,
            "races": races.len(),
            "warnings": warnings.len(),
            "streams": stats.streams,
            "buffers": stats.buffers,
        },
        "races": races,
        "warnings": warnings,
    });
    let mut s = serde_json::to_string_pretty(&report).unwrap_or_default();
    s.push('\n');
    s
}
