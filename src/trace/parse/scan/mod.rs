//! The fast path: a hand-written scanner of one record line, tried before serde_json.
//!
//! Two tiers, each answering `Some` only for a line it has read completely and on which the
//! serde path gives the same `Ok`:
//!
//! 1. [`written`]: the writer's own layout (`TraceWriter`: no whitespace, the keys in the
//!    writer's order), read with literal key comparisons straight into the [`Record`]. Traces
//!    written by streamsan take this tier.
//! 2. [`general`]: any key order, whitespace, `null`s, unknown fields, the header key, unknown
//!    ops where allowed: read field by field into the same flat [`RawRecord`] the serde path
//!    fills, with the same per-field checks, and built by the same
//!    [`RawRecord::take_parsed`].
//!
//! On anything a tier does not follow (an escape in a string, a number that is not a plain
//! unsigned integer, deep nesting in an ignored value) and on every error it answers `None`:
//! the caller then runs the serde path, which alone words errors. So a line the fast path
//! declines costs one failed scan more than before, and its error stays exactly as it was.
//!
//! [`Record`]: crate::trace::record::Record

mod access;
mod cursor;
mod general;
mod keys;
mod number;
mod written;

use super::{Filled, Parsed};
use crate::trace::record::{OpKind, Record};
use crate::trace::spare::SpareParts;
use cursor::Cursor;

/// What is on `text`, a record written to `out`, or `None` to let the serde path read it. On
/// `None` or a skipped record, `out`'s op has given its access lists to `spare` (it may have
/// been made a launch by the writer-layout scan first); the rest of `out` is as it was. A
/// record in the writer's layout takes its strings and lists from `spare` and `out`; tier 1 is
/// skipped when `written_declined` (it declined the line before).
#[inline(always)]
pub(super) fn scan_line_into(
    text: &str,
    allow_unknown_ops: bool,
    written_declined: bool,
    spare: &mut SpareParts,
    out: &mut Record,
) -> Option<Filled> {
    if !written_declined && written::record(&mut Cursor::new(text), spare, out).is_some() {
        return Some(Filled::Record);
    }
    // The other paths make new lists: `out`'s are kept for the records after it.
    spare.reclaim_lists(&mut out.op);
    scan_any(text, allow_unknown_ops).map(|parsed| Filled::from_parsed(parsed, out))
}

/// A record line in the writer's layout at the start of `input` (raw bytes that may go on with
/// further lines), written to `out` as [`scan_line_into`] would: its length up to its line
/// ending, and its length with it. `None` (and `out` as `written::record` leaves it) for
/// anything else, a line that is not whole in `input` included: the caller then finds the
/// line's end and reads it as text.
#[inline(always)]
pub(super) fn scan_written_line(
    input: &[u8],
    spare: &mut SpareParts,
    out: &mut Record,
) -> Option<(usize, usize)> {
    written::record_then(&mut Cursor::at_line_start(input), spare, out, |c| {
        let text = c.position();
        c.line_ending().map(|ending| (text, text + ending))
    })
}

/// The record on `text`, or `None` to let the serde path read it.
#[cfg(test)]
pub(super) fn scan_line(text: &str, allow_unknown_ops: bool) -> Option<Parsed> {
    let mut out = Record::default();
    scan_line_into(
        text,
        allow_unknown_ops,
        false,
        &mut SpareParts::default(),
        &mut out,
    )
    .map(|filled| filled.into_parsed(out))
}

/// Tier 1: a record line in the writer's own layout.
#[cfg(test)]
pub(super) fn scan_written(text: &str) -> Option<Parsed> {
    let mut out = Record::default();
    written::record(&mut Cursor::new(text), &mut SpareParts::default(), &mut out)
        .map(|()| Parsed::Record(out))
}

/// Tier 2: a record line in any form the fast path follows.
#[inline(never)]
pub(super) fn scan_any(text: &str, allow_unknown_ops: bool) -> Option<Parsed> {
    general::record(&mut Cursor::new(text), allow_unknown_ops)
}

/// The op spelled `name`: the ops of the synthetic workload's mix first, one comparison each,
/// then [`OpKind::parse`], which stays the authority on what an op is.
fn op_kind(name: &str) -> Option<OpKind> {
    match name {
        "launch" => Some(OpKind::Launch),
        "wait" => Some(OpKind::Wait),
        "alloc" => Some(OpKind::Alloc),
        "record" => Some(OpKind::Record),
        "free" => Some(OpKind::Free),
        _ => OpKind::parse(name),
    }
}

#[cfg(test)]
mod tests;
