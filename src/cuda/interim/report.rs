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

/// A fix in the library's verbs.
fn fix_text(race: &Race) -> String {
    let (cur, prev) = (actor(&race.current), actor(&race.previous));
    match (&race.current.stream, &race.previous.stream) {
        (Some(_), Some(_)) => format!(
            "make {cur} wait for {prev} after line {}: `current.join(&previous)`, or record an event on the previous stream after it and `current.wait(&event)`",
            race.previous.line
        ),
        (None, Some(_)) => format!(
            "synchronize with {prev} before the host access: `stream.synchronize()` or `event.synchronize()`"
        ),
        _ => format!("order the access after line {}", race.previous.line),
    }
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
    let fix = fix_text(race);
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
                "fix": fix_text(r),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{AccessKind, BufferInfo, RaceKind};
    use crate::trace::record::{MemSpace, StreamFlags, StreamKind};

    fn site(line: u64, stream: u32, access: AccessKind, at: &str) -> Site {
        Site {
            line,
            stream: Some(StreamInfo {
                id: stream as u64,
                ordinal: stream,
                device: 0,
                kind: StreamKind::Created,
                flags: StreamFlags::NonBlocking,
                name: None,
            }),
            thread: 0,
            op: "launch",
            name: Some("k".into()),
            access,
            arg: Some("x".into()),
            at: Some(at.into()),
        }
    }

    #[test]
    fn a_race_names_both_sites_and_the_allocation() {
        let race = Race {
            kind: RaceKind::ReadAfterWrite,
            buffer: BufferInfo {
                id: 1,
                ordinal: 1,
                name: Some("x".into()),
                bytes: 64,
                space: MemSpace::Device,
                device: 0,
                alloc_line: 3,
                alloc_at: Some("a.rs:1:1".into()),
                alloc_stream: None,
                addr: None,
            },
            range: (0, 64),
            current: site(9, 2, AccessKind::Read, "a.rs:9:5"),
            previous: site(7, 1, AccessKind::Write, "a.rs:7:5"),
            last_sync: None,
        };
        let text = race_text(&race, Some("t.jsonl"));
        for part in [
            "RACE read-after-write on buffer b1 \"x\" bytes [0, 64)",
            "read by launch \"k\" (arg \"x\") on stream s2 (created, non-blocking)",
            "at a.rs:9:5, trace line 9",
            "previous write by launch",
            "at a.rs:7:5, trace line 7",
            "never synchronized",
            "allocated at a.rs:1:1 (trace line 3)",
            "fix: ",
            "reproduce: streamsan check t.jsonl",
        ] {
            assert!(text.contains(part), "{part:?} missing in\n{text}");
        }
        let json: serde_json::Value = serde_json::from_str(&json_report(
            &[Finding::Race(Box::new(race))],
            &Stats::default(),
        ))
        .unwrap();
        assert_eq!(json["races"][0]["kind"], "read-after-write");
        assert_eq!(json["races"][0]["current"]["at"], "a.rs:9:5");
        assert_eq!(json["summary"]["races"], 1);
    }
}
