//! The sentence of each warning: the engine hands over a [`WarningFact`], this words it. Every
//! output format (text, JSON `message`, SARIF, the timelines) and the suppressions' `message=`
//! condition use this one wording.

use super::names::{buffer_label, count, stream_sym};
use crate::engine::finding::{AccessKind, Warning, WarningFact};
use crate::trace::record::OpKind;

/// The warning's message: lowercase, no trailing period.
pub fn warning_message(warning: &Warning) -> String {
    match &warning.fact {
        WarningFact::UnrecordedEvent {
            event,
            call,
            captured,
        } => {
            let what = match call {
                OpKind::Wait => "a wait on",
                OpKind::EventSync => "a synchronize of",
                OpKind::EventQuery => "a query of",
                other => other.as_str(),
            };
            match captured {
                None => format!(
                    "{what} event {event}, which was never recorded, orders nothing (record it \
                     with cudaEventRecord first)"
                ),
                Some(line) => format!(
                    "{what} event {event}, last recorded inside a graph capture (line {line}), \
                     orders nothing: a captured record is an edge of the graph, not work of a \
                     stream, and CUDA rejects the wait once the capture is over (record the event \
                     after the graph's launch instead)"
                ),
            }
        }
        WarningFact::ForeignPerThreadStream {
            stream,
            thread,
            owner,
        } => format!(
            "thread {thread} uses the per-thread default stream {stream} of thread {owner}; \
             each host thread has its own"
        ),
        WarningFact::HostAccessToDevice { buffer, access } => format!(
            "host code {} device memory of buffer {}; only pinned, managed and host memory are \
             visible to the host",
            if *access == AccessKind::Read {
                "reads"
            } else {
                "writes"
            },
            buffer_label(buffer)
        ),
        WarningFact::Leak { first, count: n } => {
            let shown: Vec<String> = first.iter().map(buffer_label).collect();
            let more = n.saturating_sub(shown.len() as u64);
            format!(
                "{} still allocated at the end of the trace: {}{}",
                if *n == 1 {
                    "1 buffer is".to_string()
                } else {
                    format!("{n} buffers are")
                },
                shown.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            )
        }
        WarningFact::CachingFreeInUse {
            buffer,
            streams,
            lines,
        } => {
            let uses: Vec<String> = streams
                .iter()
                .zip(lines)
                .map(|(s, line)| format!("stream {} (line {line})", stream_sym(s)))
                .collect();
            let syms: Vec<String> = streams.iter().map(stream_sym).collect();
            format!(
                "caching block {} is freed while {} may still use it and no record_stream \
                 covers {}: the pool may hand these bytes to a new block whose accesses race \
                 with that use (call record_stream({}) on the block before the free, or make the \
                 freeing thread wait for {})",
                buffer_label(buffer),
                uses.join(", "),
                if syms.len() == 1 { "it" } else { "them" },
                syms.join("), record_stream("),
                syms.join(" and ")
            )
        }
        WarningFact::NotChecked { what } => what.clone(),
        WarningFact::ForgottenBuffer { id, kept } => format!(
            "buffer {id} was freed before the last {kept} frees, and streamsan no longer keeps \
             its state (memory stays bounded by what is live): this use after free is not \
             checked (the record's other accesses are)"
        ),
        WarningFact::Skipped { ops, count: n } => {
            let ops: Vec<String> = ops.iter().map(|op| format!("{op:?}")).collect();
            format!(
                "{} of unknown op{} {} skipped: the header declares a newer minor version of \
                 the format than this reader knows, so the verdict does not cover them",
                count(*n, "record", "records"),
                if ops.len() == 1 { "" } else { "s" },
                ops.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::buffer_x;

    fn message(fact: WarningFact) -> String {
        warning_message(&Warning { line: 3, fact })
    }

    #[test]
    fn every_fact_is_worded() {
        assert_eq!(
            message(WarningFact::UnrecordedEvent {
                event: 4,
                call: OpKind::Wait,
                captured: None,
            }),
            "a wait on event 4, which was never recorded, orders nothing (record it with \
             cudaEventRecord first)"
        );
        assert_eq!(
            message(WarningFact::UnrecordedEvent {
                event: 4,
                call: OpKind::Wait,
                captured: Some(12),
            }),
            "a wait on event 4, last recorded inside a graph capture (line 12), orders nothing: \
             a captured record is an edge of the graph, not work of a stream, and CUDA rejects \
             the wait once the capture is over (record the event after the graph's launch \
             instead)"
        );
        assert_eq!(
            message(WarningFact::ForeignPerThreadStream {
                stream: 3,
                thread: 1,
                owner: 0
            }),
            "thread 1 uses the per-thread default stream 3 of thread 0; each host thread has \
             its own"
        );
        assert_eq!(
            message(WarningFact::HostAccessToDevice {
                buffer: buffer_x(),
                access: AccessKind::Write
            }),
            "host code writes device memory of buffer b1 \"x\"; only pinned, managed and host \
             memory are visible to the host"
        );
        let mut y = buffer_x();
        y.ordinal = 2;
        y.name = None;
        assert_eq!(
            message(WarningFact::Leak {
                first: vec![buffer_x(), y],
                count: 7
            }),
            "7 buffers are still allocated at the end of the trace: b1 \"x\", b2 and 5 more"
        );
        assert_eq!(
            message(WarningFact::Leak {
                first: vec![buffer_x()],
                count: 1
            }),
            "1 buffer is still allocated at the end of the trace: b1 \"x\""
        );
        assert_eq!(
            message(WarningFact::Skipped {
                ops: vec!["graph_begin".into(), "graph_end".into()],
                count: 5
            }),
            "5 records of unknown ops \"graph_begin\", \"graph_end\" skipped: the header \
             declares a newer minor version of the format than this reader knows, so the \
             verdict does not cover them"
        );
        assert_eq!(
            message(WarningFact::ForgottenBuffer { id: 12, kept: 3 }),
            "buffer 12 was freed before the last 3 frees, and streamsan no longer keeps its \
             state (memory stays bounded by what is live): this use after free is not checked \
             (the record's other accesses are)"
        );
    }
}
