//! What a wrapper records for one call: a list of [`Step`]s, each a record to make (a call the
//! program made, or a wait, record or sync cudarc's event tracking made on its own), with its
//! label kept unformatted until the record is made.

use std::sync::Arc;

use crate::trace::record::{BufId, EventId, Op, StreamId};
use crate::trace::writer::NameText;

/// A record's `name`, kept unformatted until the record is made: most labels are static text
/// (a kernel's name too, where [`super::CudaFunction`] keeps it for the process's life, else
/// shared with it), or one of cudarc's events named after its buffer, so planning a launch
/// allocates no string (the sanitizer writes the label into a reused buffer).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Label {
    #[default]
    None,
    Static(&'static str),
    Shared(Arc<str>),
    Owned(String),
    /// `cudarc:read-event of b{buf}`.
    ReadEvent(BufId),
    /// `cudarc:write-event of b{buf}`.
    WriteEvent(BufId),
    /// `cudarc:event of pinned b{buf}`.
    PinnedEvent(BufId),
}

impl Label {
    /// Writes the label into `out` (cleared first); `false` for [`Label::None`].
    pub(crate) fn write_into(&self, out: &mut String) -> bool {
        out.clear();
        match self.as_name() {
            NameText::None => return false,
            NameText::Text(s) => out.push_str(s),
            NameText::Numbered(prefix, n) => {
                out.push_str(prefix);
                let mut digits = [0; 20];
                let digits = crate::trace::writer::decimal(n, &mut digits);
                out.extend(digits.iter().map(|&d| char::from(d)));
            }
        }
        true
    }

    /// The label as a trace line's writer takes it, without making a string.
    pub(crate) fn as_name(&self) -> NameText<'_> {
        match self {
            Label::None => NameText::None,
            Label::Static(s) => NameText::Text(s),
            Label::Shared(s) => NameText::Text(s),
            Label::Owned(s) => NameText::Text(s),
            Label::ReadEvent(b) => NameText::Numbered("cudarc:read-event of b", *b),
            Label::WriteEvent(b) => NameText::Numbered("cudarc:write-event of b", *b),
            Label::PinnedEvent(b) => NameText::Numbered("cudarc:event of pinned b", *b),
        }
    }

    /// The label as text.
    #[cfg(test)]
    pub(crate) fn text(&self) -> Option<String> {
        let mut out = String::new();
        self.write_into(&mut out).then_some(out)
    }
}

impl From<Option<String>> for Label {
    fn from(name: Option<String>) -> Label {
        name.map_or(Label::None, Label::Owned)
    }
}

/// One thing to record, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// A call the program made, or one that cudarc makes as part of a documented verb
    /// (`join`, `fork`, `record_event`, the free in `Drop`).
    Op { op: Op, name: Label },
    /// A wait issued by cudarc's event tracking. A wait on an event that was never recorded
    /// orders nothing (ordering model R4), so it is left out of the trace rather than drawing an
    /// `unrecorded-event` warning about cudarc's bookkeeping.
    TrackedWait {
        stream: StreamId,
        event: EventId,
        name: Label,
    },
    /// A record issued by cudarc's event tracking.
    TrackedRecord {
        event: EventId,
        stream: StreamId,
        name: Label,
    },
    /// A host synchronization on a cudarc-internal event (pinned memory accessors and drop);
    /// left out, like [`Step::TrackedWait`], when the event was never recorded.
    TrackedSync { event: EventId, name: Label },
}

impl Step {
    /// A plain operation with an optional label.
    pub(crate) fn op(op: Op, name: Option<String>) -> Step {
        Step::Op {
            op,
            name: name.into(),
        }
    }

    /// A plain operation with a label.
    pub(crate) fn labeled(op: Op, name: Label) -> Step {
        Step::Op { op, name }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_labels_spell_the_buffer_as_format_does() {
        for b in [0, 7, 10, 99, 100, 12_345, u64::MAX] {
            assert_eq!(
                Label::ReadEvent(b).text().as_deref(),
                Some(format!("cudarc:read-event of b{b}").as_str())
            );
            assert_eq!(
                Label::WriteEvent(b).text().as_deref(),
                Some(format!("cudarc:write-event of b{b}").as_str())
            );
            assert_eq!(
                Label::PinnedEvent(b).text().as_deref(),
                Some(format!("cudarc:event of pinned b{b}").as_str())
            );
        }
        // Written over what a reused buffer held.
        let mut out = String::from("a much longer earlier label");
        assert!(Label::ReadEvent(3).write_into(&mut out));
        assert_eq!(out, "cudarc:read-event of b3");
        assert!(!Label::None.write_into(&mut out));
        assert!(out.is_empty());
    }
}
