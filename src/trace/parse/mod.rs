//! Parsing one record line of trace format v1 into a [`Record`].
//!
//! Two parsers read a line, and they must agree: [`parse_line`] tries the fast path first and
//! falls back to the serde path.
//!
//! - **The fast path** (`scan`) is a hand-written byte scanner. It answers only when it has read
//!   the whole line and is certain of the result: for the writer's own layout it builds the
//!   [`Record`] directly, for any other form it follows (key orders, whitespace, `null`s,
//!   unknown fields) it fills the serde path's [`RawRecord`] and builds the record with the
//!   same [`RawRecord::take_parsed`]. On anything else (escapes in strings, numbers that are
//!   not plain unsigned integers, every kind of error) it declines, at the cost of one failed
//!   scan.
//! - **The serde path** ([`parse_with_serde`]) reads every line the fast path declines and is
//!   the only source of error messages, so every error and its column is what it always was.
//!   serde_json drives hand-written visitors: the line's object is read field by field into a
//!   flat [`RawRecord`] of `Option`s (nothing is buffered: no tagged or untagged enums, no
//!   `serde_json::Value`), then [`RawRecord::take_parsed`] checks the op's required fields and
//!   builds the [`Record`]. Op names and enum spellings are matched on the borrowed text; only
//!   strings the record keeps (`at`, `name`, `arg`) are copied.
//!
//! The differential tests (`tests.rs`) run both on every trace in the repository and on
//! generated and mutated lines; in debug unit tests and under the fuzzer (`--cfg fuzzing`),
//! `parse_line` itself checks every line the fast path takes against the serde path.
//!
//! Every field name has one type, whatever the op (`stream` is always a stream id, `blocking`
//! always a boolean), so a field is checked as it is read, where serde_json still knows the
//! column. Errors found then carry the column; errors found after the whole object is read (a
//! missing field) do not.
//!
//! `fields` holds the vocabulary of field names and value types with the scalar visitor,
//! `access` the visitors of accesses and access lists, `raw` the record visitor and the
//! per-op checks; `scan` the fast path.

use serde::de::DeserializeSeed;
use serde_json::error::Category;

mod access;
mod fields;
mod raw;
mod scan;

use super::record::Record;
use super::spare::SpareParts;
use raw::{RawRecord, RecordSeed};

/// What one line held.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// A record; its `line` is 0, for the caller to set.
    Record(Record),
    /// A record whose op this reader does not know, allowed because the header declares a newer
    /// minor version: the op's name.
    Skipped(String),
}

/// Why a line could not be parsed.
#[derive(Debug)]
pub(crate) struct LineError {
    /// 1-based byte column in the line, where known.
    pub column: Option<u64>,
    pub message: String,
    /// The line ended before its JSON was complete (a truncated last line, if it is the last).
    pub incomplete: bool,
}

impl LineError {
    fn without_column(message: String) -> LineError {
        LineError {
            column: None,
            message,
            incomplete: false,
        }
    }

    /// Our phrasing of a serde_json error: the position taken out of the text into `column`.
    pub(crate) fn from_json(err: serde_json::Error) -> LineError {
        let mut message = err.to_string();
        let column = if err.line() > 0 {
            let suffix = format!(" at line {} column {}", err.line(), err.column());
            if message.ends_with(&suffix) {
                message.truncate(message.len() - suffix.len());
            }
            Some((err.column() as u64).max(1))
        } else {
            None
        };
        let incomplete = err.classify() == Category::Eof;
        let message = match err.classify() {
            Category::Eof => match message.strip_prefix("EOF while parsing ") {
                Some("a value") => "incomplete JSON: the line ends where a value should be".into(),
                Some(what) => format!("incomplete JSON: the line ends inside {what}"),
                None => format!("incomplete JSON: {message}"),
            },
            Category::Syntax if message == "trailing characters" => {
                "invalid JSON: trailing characters after the record (one record per line)".into()
            }
            Category::Syntax => format!("invalid JSON: {message}"),
            // Our own messages (from the visitors below), and I/O, which `from_str` cannot give.
            Category::Data | Category::Io => message,
        };
        LineError {
            column,
            message,
            incomplete,
        }
    }
}

/// What [`parse_line_into`] found on a line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Filled {
    /// A record, written to the record passed in; its `line` is 0, for the caller to set.
    Record,
    /// As [`Parsed::Skipped`].
    Skipped(String),
}

impl Filled {
    /// `parsed` as filled into `out`.
    fn from_parsed(parsed: Parsed, out: &mut Record) -> Filled {
        match parsed {
            Parsed::Record(record) => {
                *out = record;
                Filled::Record
            }
            Parsed::Skipped(op) => Filled::Skipped(op),
        }
    }

    /// As [`Parsed`], the record being `out`.
    fn into_parsed(self, out: Record) -> Parsed {
        match self {
            Filled::Record => Parsed::Record(out),
            Filled::Skipped(op) => Parsed::Skipped(op),
        }
    }
}

/// Parses one line (without its newline) holding one record object: the fast path if it
/// takes the line, else the serde path.
pub(crate) fn parse_line(text: &str, allow_unknown_ops: bool) -> Result<Parsed, LineError> {
    let mut out = Record::default();
    parse_line_into(
        text,
        allow_unknown_ops,
        false,
        &mut SpareParts::default(),
        &mut out,
    )
    .map(|filled| filled.into_parsed(out))
}

/// [`parse_line`], writing a record over `out`: a line in the writer's layout (the hot path of
/// checking) takes its strings and access lists from `spare` and moves no record.
/// `written_declined`: [`parse_written_line`] has already declined the whole line, so the
/// writer's layout is not tried again (the other tiers and serde read such a line alike).
pub(crate) fn parse_line_into(
    text: &str,
    allow_unknown_ops: bool,
    written_declined: bool,
    spare: &mut SpareParts,
    out: &mut Record,
) -> Result<Filled, LineError> {
    match scan::scan_line_into(text, allow_unknown_ops, written_declined, spare, out) {
        Some(filled) => {
            #[cfg(any(all(test, debug_assertions), fuzzing))]
            assert_same_as_serde(text, allow_unknown_ops, &filled, out);
            Ok(filled)
        }
        None => parse_with_serde(text, allow_unknown_ops).map(|p| Filled::from_parsed(p, out)),
    }
}

/// The record line at the start of `input` (bytes of a JSON Lines trace, from a line's start
/// on, perhaps with more lines after it), written over `out` like [`parse_line_into`], when
/// it is in the writer's layout and whole in `input`: returns the line's length with its line
/// ending. The hot path of checking a trace streamsan wrote: the line is read where it lies,
/// its end found and its bytes checked as UTF-8 as it is read, rather than in a pass each
/// before. `None` for any other line (`out` as the writer-layout scan leaves a line it
/// declines: perhaps with a launch's op partly written): the caller reads it as usual.
#[inline(always)]
pub(crate) fn parse_written_line(
    input: &[u8],
    spare: &mut SpareParts,
    out: &mut Record,
) -> Option<usize> {
    let (_text, line) = scan::scan_written_line(input, spare, out)?;
    #[cfg(any(all(test, debug_assertions), fuzzing))]
    assert_same_as_serde(
        std::str::from_utf8(&input[.._text]).expect("a line the fast path took is UTF-8"),
        false,
        &Filled::Record,
        out,
    );
    Some(line)
}

/// The serde path: every line the fast path declines, and the only source of error messages.
fn parse_with_serde(text: &str, allow_unknown_ops: bool) -> Result<Parsed, LineError> {
    // The raw record stays in this frame: the visitor fills it in place (moving a struct of
    // this size through serde's `Result`s showed up as memcpy in profiles).
    let mut raw = RawRecord::default();
    let mut de = serde_json::Deserializer::from_str(text);
    RecordSeed {
        allow_unknown_ops,
        raw: &mut raw,
    }
    .deserialize(&mut de)
    .map_err(LineError::from_json)?;
    de.end().map_err(LineError::from_json)?;
    raw.take_parsed().map_err(LineError::without_column)
}

/// In debug unit tests and under the fuzzer, every line the fast path takes is read by the
/// serde path too, and the two must agree.
#[cfg(any(all(test, debug_assertions), fuzzing))]
fn assert_same_as_serde(text: &str, allow_unknown_ops: bool, fast: &Filled, out: &Record) {
    match parse_with_serde(text, allow_unknown_ops) {
        Ok(slow) => {
            let fast = match fast {
                Filled::Record => Parsed::Record(out.clone()),
                Filled::Skipped(op) => Parsed::Skipped(op.clone()),
            };
            assert_eq!(fast, slow, "the two parsers differ on {text:?}")
        }
        Err(e) => panic!(
            "the fast path took {text:?}, which the serde path rejects: {}",
            e.message
        ),
    }
}

#[cfg(test)]
mod tests;
