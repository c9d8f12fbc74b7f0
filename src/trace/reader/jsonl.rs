//! The JSON Lines encoding: one line in memory at a time (parsed where it lies in the input's
//! buffer when it is whole there, else copied), blank lines counted, each line parsed by
//! `trace::parse`. Errors carry the line and, where known, the column.
//!
//! A line in the writer's own layout (every trace streamsan writes) is read straight off the
//! input's buffer before its end is known: the parser finds the end as it reads, and checks
//! only its strings as UTF-8 (the rest it matches byte by byte against ASCII). Any other line,
//! or one not whole in the buffer, is found (`memchr`), checked as UTF-8 and parsed as before.

use std::io::{BufRead, Read};

use serde_json::Value;

use super::header::EXPECTED;
use super::{Entry, Position, SkippedRecord, Skips};
use crate::trace::MAX_LINE_BYTES;
use crate::trace::error::TraceError;
use crate::trace::parse::{Filled, LineError, parse_line_into, parse_written_line};
use crate::trace::record::Record;
use crate::trace::spare::SpareParts;

/// The state of one JSON Lines trace being read.
#[derive(Debug, Default)]
pub(super) struct Lines {
    /// The current line's bytes (without its line ending), when it was not whole in the input's
    /// buffer, or was a skipped record's.
    buf: Vec<u8>,
    /// The last line read had no line ending.
    unterminated: bool,
    finished: bool,
    /// The parts of the records read into before, for the next ones.
    spare: SpareParts,
}

impl Lines {
    /// Reads line 1 and parses it as JSON (the caller checks what it says).
    pub(super) fn start<R: BufRead>(
        inner: &mut R,
        pos: &mut Position,
    ) -> Result<(Lines, Value), TraceError> {
        let mut this = Lines::default();
        if !this.read_line(inner, pos)? {
            pos.line = 1;
            return Err(this.error(pos, None, format!("empty trace: {EXPECTED}")));
        }
        if this.buf.starts_with(&[0xff, 0xfe]) || this.buf.starts_with(&[0xfe, 0xff]) {
            return Err(this.error(
                pos,
                Some(1),
                "the file looks like UTF-16 text (expected UTF-8 JSON Lines)",
            ));
        }
        // A UTF-8 byte order mark, as some Windows tools write, is skipped.
        let bom = if this.buf.starts_with(b"\xef\xbb\xbf") {
            3
        } else {
            0
        };
        let text = text_of(&this.buf, this.unterminated, pos, bom)?;
        if is_blank(text) {
            return Err(this.error(
                pos,
                None,
                format!("missing header: {EXPECTED}, found a blank line"),
            ));
        }
        match super::header::parse_json(text.as_bytes()) {
            Ok(value) => Ok((this, value)),
            Err(e) => {
                let mut err = LineError::from_json(e);
                err.message = match err.message.strip_suffix(')') {
                    // "... (looks truncated)" becomes "... (looks truncated; in the header)".
                    Some(open) if open.contains('(') => format!("{open}; in the header)"),
                    _ => format!("{} (in the header)", err.message),
                };
                Err(line_error(pos, this.unterminated, err, bom as u64))
            }
        }
    }

    /// The next record or skipped record; `None` at the end. A malformed line is an `Err`, and
    /// reading may go on with the next line; an I/O error, an over-long line or a truncated last
    /// line ends it.
    pub(super) fn next_entry<R: BufRead>(
        &mut self,
        inner: &mut R,
        pos: &mut Position,
        newer_minor: bool,
    ) -> Option<Result<Entry, TraceError>> {
        let mut record = Record::default();
        Some(
            match self.next_filled(inner, pos, newer_minor, &mut record)? {
                Ok(Filled::Record) => Ok(Entry::Record(record)),
                Ok(Filled::Skipped(op)) => Ok(Entry::Skipped(SkippedRecord {
                    line: pos.line,
                    op,
                    // The line parsed, so it is UTF-8.
                    json: Some(String::from_utf8_lossy(&self.buf).into_owned()),
                })),
                Err(e) => Err(e),
            },
        )
    }

    /// The next record, written over `out` (whose heap parts it reuses), passing skipped
    /// records to `skipped`: the hot path of checking.
    pub(super) fn read_into<R: BufRead>(
        &mut self,
        inner: &mut R,
        pos: &mut Position,
        newer_minor: bool,
        skipped: &mut Skips,
        out: &mut Record,
    ) -> Option<Result<(), TraceError>> {
        // `out`'s strings and lists stay: the fast path fills them again where they are (and
        // keeps the lists of an op it does not need), and the other paths keep them first.
        loop {
            match self.next_filled(inner, pos, newer_minor, out)? {
                Ok(Filled::Record) => return Some(Ok(())),
                Ok(Filled::Skipped(op)) => skipped.note(pos.line, &op),
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// The next non-blank line, parsed; a record is written to `out`, with its line number.
    fn next_filled<R: BufRead>(
        &mut self,
        inner: &mut R,
        pos: &mut Position,
        newer_minor: bool,
        out: &mut Record,
    ) -> Option<Result<Filled, TraceError>> {
        while !self.finished {
            // A line whole in the input's buffer (most lines) is parsed where it lies, without
            // a copy; others (and over-long ones, which `read_line` refuses) are read into
            // `buf`.
            let buffered = match inner.fill_buf() {
                Ok(buffered) => buffered,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => &[],
                Err(e) => {
                    self.finished = true;
                    return Some(Err(TraceError::read(pos.file.clone(), pos.line + 1, &e)));
                }
            };
            // A line in the writer's layout is read straight off the buffer, its end found as
            // it is read; as the search below, only a line of at most `MAX_LINE_BYTES` before
            // its `\n`.
            let upto = buffered.len().min(MAX_LINE_BYTES + 1);
            if let Some(n) = parse_written_line(&buffered[..upto], &mut self.spare, out) {
                pos.line += 1;
                pos.bytes += n as u64;
                self.unterminated = false;
                out.line = pos.line;
                inner.consume(n);
                return Some(Ok(Filled::Record));
            }
            if let Some(n) = memchr::memchr(b'\n', buffered)
                && n <= MAX_LINE_BYTES
            {
                pos.line += 1;
                pos.bytes += n as u64 + 1;
                self.unterminated = false;
                let line = without_cr(&buffered[..n]);
                // Whole in the buffer, so the try above read all of it and declined it.
                let parsed = parse_one(line, false, true, pos, newer_minor, &mut self.spare, out);
                if let Some(Ok(Filled::Skipped(_))) = parsed {
                    // `next_entry` keeps a skipped record's text.
                    self.buf.clear();
                    self.buf.extend_from_slice(line);
                }
                inner.consume(n + 1);
                match parsed {
                    Some(parsed) => return Some(parsed),
                    None => continue,
                }
            }
            match self.read_line(inner, pos) {
                Ok(true) => {}
                Ok(false) => {
                    self.finished = true;
                    break;
                }
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
            }
            let unterminated = self.unterminated;
            match parse_one(
                &self.buf,
                unterminated,
                false,
                pos,
                newer_minor,
                &mut self.spare,
                out,
            ) {
                Some(Err(e)) => {
                    self.finished |= unterminated;
                    return Some(Err(e));
                }
                Some(parsed) => return Some(parsed),
                None => continue,
            }
        }
        None
    }

    /// An error on the current line.
    fn error(&self, pos: &Position, column: Option<u64>, message: impl Into<String>) -> TraceError {
        TraceError::new(pos.file.clone(), pos.line, column, message)
    }

    /// Reads the next line into `buf`, without its line ending. `Ok(false)` at the end.
    fn read_line<R: BufRead>(
        &mut self,
        inner: &mut R,
        pos: &mut Position,
    ) -> Result<bool, TraceError> {
        self.buf.clear();
        if self.buf.capacity() > 4 * (1 << 20) {
            self.buf.shrink_to(1 << 16);
        }
        let limit = MAX_LINE_BYTES as u64 + 1;
        let read = inner.by_ref().take(limit).read_until(b'\n', &mut self.buf);
        match read {
            Ok(0) => return Ok(false),
            Ok(n) => {
                pos.line += 1;
                pos.bytes += n as u64;
            }
            Err(e) => return Err(TraceError::read(pos.file.clone(), pos.line + 1, &e)),
        }
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
            self.unterminated = false;
        } else if self.buf.len() > MAX_LINE_BYTES {
            return Err(self.error(
                pos,
                None,
                format!(
                    "line is longer than {MAX_LINE_BYTES} bytes (expected one record per line)"
                ),
            ));
        } else {
            self.unterminated = true;
        }
        Ok(true)
    }
}

/// The line `buf` as text, skipping `skip` bytes (a byte order mark). `unterminated`: it is
/// the last line, without a line ending. (A function of the line's parts, so that the text can
/// be borrowed while the reader's spare parts are lent to the parser.)
fn text_of<'b>(
    buf: &'b [u8],
    unterminated: bool,
    pos: &Position,
    skip: usize,
) -> Result<&'b str, TraceError> {
    let bytes = &buf[skip..];
    if all_ascii(bytes) {
        // SAFETY: ASCII is UTF-8. (Most lines are ASCII, and this check costs a fraction of
        // `from_utf8`'s.)
        return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes).map_err(|e| {
        let column = Some((skip + e.valid_up_to()) as u64 + 1);
        let message = if e.error_len().is_none() && unterminated {
            "the last line looks truncated (no newline at the end of the file, and it ends \
             inside a UTF-8 character)"
                .to_string()
        } else {
            let bad = buf[skip + e.valid_up_to()];
            format!("expected UTF-8 text, found the invalid byte 0x{bad:02x}")
        };
        TraceError::new(pos.file.clone(), pos.line, column, message)
    })
}

/// Whether every byte of `bytes` is ASCII: the bytes of each 8 or'ed together, with no branch
/// per word (a line is short, and almost always ASCII).
fn all_ascii(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    let mut high = 0u64;
    for word in &mut words {
        high |= u64::from_ne_bytes(word.try_into().expect("8 bytes"));
    }
    let tail = words.remainder().iter().fold(0u8, |acc, &b| acc | b);
    high & 0x8080_8080_8080_8080 == 0 && tail < 0x80
}

/// The record on `line` (the current line, without its line ending) written to `out`, or what
/// else it holds; `None` for a blank line. `unterminated`: it is the last line, without a line
/// ending. `written_declined`: `parse_written_line` read the whole line and declined it.
fn parse_one(
    line: &[u8],
    unterminated: bool,
    written_declined: bool,
    pos: &Position,
    newer_minor: bool,
    spare: &mut SpareParts,
    out: &mut Record,
) -> Option<Result<Filled, TraceError>> {
    let text = match text_of(line, unterminated, pos, 0) {
        Ok(text) => text,
        Err(e) => return Some(Err(e)),
    };
    if text.as_bytes().first() != Some(&b'{') && is_blank(text) {
        return None;
    }
    Some(
        match parse_line_into(text, newer_minor, written_declined, spare, out) {
            Ok(Filled::Record) => {
                out.line = pos.line;
                Ok(Filled::Record)
            }
            Ok(skipped) => Ok(skipped),
            Err(e) => Err(line_error(pos, unterminated, e, 0)),
        },
    )
}

/// A parse error on the current line, placed and phrased.
fn line_error(
    pos: &Position,
    unterminated: bool,
    err: LineError,
    column_offset: u64,
) -> TraceError {
    let column = err.column.map(|c| c + column_offset);
    let message = match err.message.strip_prefix("incomplete JSON: ") {
        Some(rest) if err.incomplete && unterminated => format!(
            "the last line looks truncated (no newline at the end of the file, and incomplete \
             JSON: {rest})"
        ),
        _ => err.message,
    };
    TraceError::new(pos.file.clone(), pos.line, column, message)
}

/// `line` without a `\r` ending it (of a `\r\n` line ending).
fn without_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Empty, or only JSON whitespace.
fn is_blank(text: &str) -> bool {
    text.bytes().all(|b| matches!(b, b' ' | b'\t' | b'\r'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `all_ascii` is `is_ascii`, for every byte value at every position of lines of 0 to 24
    /// bytes (so the byte falls in a word and in the tail).
    #[test]
    fn all_ascii_is_is_ascii() {
        for len in 0..=24 {
            assert!(all_ascii(&vec![b'a'; len]));
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut line = vec![b'{'; len];
                    line[at] = byte;
                    assert_eq!(all_ascii(&line), line.is_ascii(), "{line:?}");
                }
            }
        }
    }
}
