//! The decoder of the binary encoding, behind [`TraceReader`](crate::trace::TraceReader): the
//! header, then one frame at a time. A frame that lies whole in the `BufRead`'s buffer is
//! decoded in place; one that straddles its end is copied, growing only as bytes arrive, so no
//! length field can make it allocate more than the input holds.
//!
//! Every error names the file, the line of the record it concerns (for a frame that is no
//! record: the line the next record would have), the byte offset in the file and what was
//! expected; every error ends the reading.

use std::io::{BufRead, Read};

use serde_json::Value;

use super::fields::Fields;
use super::strings::{DefineError, StringTable};
use super::varint::{Cursor, Fault};
use super::{LAYOUT_VERSION, MAGIC, tag, tag_op};
use crate::trace::MAX_LINE_BYTES;
use crate::trace::error::TraceError;
use crate::trace::parse::{Parsed, parse_line};
use crate::trace::reader::{Entry, Position, SkippedRecord, Skips};
use crate::trace::record::{OpKind, Record};
use crate::trace::spare::SpareParts;

/// The state of one binary trace being read.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    strings: StringTable,
    /// A frame that was not whole in the input's buffer, reused.
    scratch: Vec<u8>,
    /// The parts of the records read into before, for the next ones.
    spare: SpareParts,
    /// The end frame was read.
    ended: bool,
    finished: bool,
}

/// What one frame gave.
enum Step {
    /// A record, written to the record passed in.
    Record,
    Skipped(SkippedRecord),
    /// A frame without a record (a string, a gap, the end).
    Continue,
    /// The input ended after the end frame.
    Done,
}

impl Decoder {
    /// Reads the magic, the layout version and the header object's text, and parses the
    /// header as JSON (the caller checks what it says).
    pub(crate) fn start<R: BufRead>(
        inner: &mut R,
        pos: &mut Position,
    ) -> Result<(Decoder, Value), TraceError> {
        pos.line = 1;
        let header_error =
            |pos: &Position, message: String| TraceError::new(pos.file.clone(), 1, None, message);
        let mut magic = [0u8; MAGIC.len()];
        let got = read_up_to(inner, &mut magic, pos)?;
        if let Some(i) = (0..got).find(|&i| magic[i] != MAGIC[i]) {
            return Err(header_error(
                pos,
                format!(
                    "at byte {i}: expected the binary trace magic {} (or a JSON Lines trace), \
                     found {}",
                    show_bytes(&MAGIC),
                    show_bytes(&magic[..got])
                ),
            ));
        }
        if got < MAGIC.len() {
            return Err(header_error(
                pos,
                format!(
                    "at byte {got}: truncated binary trace: expected the magic {}, found the end \
                     of the file",
                    show_bytes(&MAGIC)
                ),
            ));
        }
        pos.bytes = MAGIC.len() as u64;
        let mut version = [0u8; 1];
        if read_up_to(inner, &mut version, pos)? == 0 {
            return Err(header_error(
                pos,
                format!(
                    "at byte {}: truncated binary trace: expected the layout version, found the \
                     end of the file",
                    pos.bytes
                ),
            ));
        }
        if version[0] != LAYOUT_VERSION {
            return Err(header_error(
                pos,
                format!(
                    "at byte {}: unsupported binary layout version {} (this reader reads layout \
                     version {LAYOUT_VERSION})",
                    pos.bytes, version[0]
                ),
            ));
        }
        pos.bytes += 1;
        let at = pos.bytes;
        let len = read_varint(inner, pos).map_err(|fault| {
            header_error(
                pos,
                format!(
                    "at byte {at}: {}expected the header's length (a varint), found {}",
                    fault.truncated(),
                    fault.found()
                ),
            )
        })?;
        if len > MAX_LINE_BYTES as u64 {
            return Err(header_error(
                pos,
                format!(
                    "at byte {at}: the header is {len} bytes long, more than the \
                     {MAX_LINE_BYTES} a header may hold"
                ),
            ));
        }
        let at = pos.bytes;
        let mut text = Vec::new();
        let got = read_body(inner, len, &mut text, pos, 1)?;
        if got < len {
            return Err(header_error(
                pos,
                format!(
                    "at byte {at}: truncated binary trace: expected a header of {len} bytes, \
                     found the end of the file after {got}"
                ),
            ));
        }
        let header = crate::trace::reader::header::parse_json(&text).map_err(|e| {
            header_error(
                pos,
                format!("at byte {at}: expected the header object as JSON text: {e}"),
            )
        })?;
        Ok((Decoder::default(), header))
    }

    /// The next record or skipped record; `None` after the end frame. `newer_minor`: the
    /// header declares a newer minor version than this reader knows, so records of unknown ops
    /// are skipped rather than refused.
    pub(crate) fn next_entry<R: BufRead>(
        &mut self,
        inner: &mut R,
        pos: &mut Position,
        newer_minor: bool,
    ) -> Option<Result<Entry, TraceError>> {
        let mut record = Record::default();
        while !self.finished {
            match self.step(inner, pos, newer_minor, &mut record) {
                Ok(Step::Record) => return Some(Ok(Entry::Record(record))),
                Ok(Step::Skipped(skipped)) => return Some(Ok(Entry::Skipped(skipped))),
                Ok(Step::Continue) => {}
                Ok(Step::Done) => self.finished = true,
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }

    /// The next record, written over `out` (whose heap parts it reuses), passing skipped
    /// records to `skipped`: the hot path of checking.
    pub(crate) fn read_into<R: BufRead>(
        &mut self,
        inner: &mut R,
        pos: &mut Position,
        newer_minor: bool,
        skipped: &mut Skips,
        out: &mut Record,
    ) -> Option<Result<(), TraceError>> {
        self.spare.reclaim(out);
        while !self.finished {
            match self.step(inner, pos, newer_minor, out) {
                Ok(Step::Record) => return Some(Ok(())),
                Ok(Step::Skipped(record)) => skipped.note(record.line, &record.op),
                Ok(Step::Continue) => {}
                Ok(Step::Done) => self.finished = true,
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }

    fn step<R: BufRead>(
        &mut self,
        inner: &mut R,
        pos: &mut Position,
        newer_minor: bool,
        out: &mut Record,
    ) -> Result<Step, TraceError> {
        let start = pos.bytes;
        let buf = match inner.fill_buf() {
            Ok(buf) => buf,
            Err(e) => return Err(TraceError::read(pos.file.clone(), pos.line + 1, &e)),
        };
        if buf.is_empty() {
            if self.ended {
                return Ok(Step::Done);
            }
            return Err(pos.error(
                start,
                "truncated binary trace: the file ends without the end frame (expected a \
                 frame tag)",
            ));
        }
        if self.ended {
            return Err(pos.error(
                start,
                "unexpected data after the end frame (a binary trace ends with its end frame)",
            ));
        }
        // The frame whole in the buffer: decode it in place.
        let tag = buf[0];
        let mut c = Cursor::new(&buf[1..]);
        if let Ok(len) = c.varint()
            && len <= MAX_LINE_BYTES as u64
        {
            let head = 1 + c.pos();
            let total = head + len as usize;
            if total <= buf.len() {
                let frame = Frame {
                    tag,
                    body: &buf[head..total],
                    start,
                    body_at: start + head as u64,
                };
                let step = self.frame(&frame, pos, newer_minor, out);
                inner.consume(total);
                pos.bytes += total as u64;
                return step;
            }
        }
        // Across the buffer's end (or a bad length, reported below): read it into `scratch`.
        inner.consume(1);
        pos.bytes += 1;
        let len = read_varint(inner, pos).map_err(|fault| {
            pos.error(
                start,
                format!(
                    "{}{}: expected the frame's length (a varint), found {}",
                    fault.truncated(),
                    frame_name(tag),
                    fault.found()
                ),
            )
        })?;
        if len > MAX_LINE_BYTES as u64 {
            return Err(pos.error(
                start,
                format!(
                    "{}: the frame is {len} bytes long, more than the {MAX_LINE_BYTES} a frame \
                     may hold",
                    frame_name(tag)
                ),
            ));
        }
        let body_at = pos.bytes;
        let mut body = std::mem::take(&mut self.scratch);
        body.clear();
        let got = read_body(inner, len, &mut body, pos, pos.line.saturating_add(1))?;
        if got < len {
            return Err(pos.error(
                start,
                format!(
                    "truncated binary trace: {} needs {len} bytes, the file ends after {got}",
                    frame_name(tag)
                ),
            ));
        }
        let frame = Frame {
            tag,
            body: &body,
            start,
            body_at,
        };
        let step = self.frame(&frame, pos, newer_minor, out);
        self.scratch = body;
        step
    }

    /// Decodes one whole frame; a record goes to `out`. `pos.bytes` is still at the frame's
    /// start.
    fn frame(
        &mut self,
        frame: &Frame<'_>,
        pos: &mut Position,
        newer_minor: bool,
        out: &mut Record,
    ) -> Result<Step, TraceError> {
        match frame.tag {
            tag::END => {
                if !frame.body.is_empty() {
                    return Err(pos.error(
                        frame.body_at,
                        format!(
                            "end frame: expected an empty body, found {} bytes",
                            frame.body.len()
                        ),
                    ));
                }
                self.ended = true;
                Ok(Step::Continue)
            }
            tag::GAP => {
                let mut c = Cursor::new(frame.body);
                let n = c.varint().ok().filter(|&n| n > 0 && c.remaining() == 0);
                let line = n.and_then(|n| pos.line.checked_add(n));
                let Some(line) = line else {
                    return Err(pos.error(
                        frame.body_at,
                        "gap frame: expected a number of lines (a varint, at least 1, the \
                         whole body) that keeps line numbers below 2^64",
                    ));
                };
                pos.line = line;
                Ok(Step::Continue)
            }
            tag::STRING => match self.strings.define(frame.body) {
                Ok(()) => Ok(Step::Continue),
                Err(DefineError::NotUtf8 { valid_up_to }) => Err(pos.error(
                    frame.body_at + valid_up_to as u64,
                    format!(
                        "string frame: expected UTF-8 text, found the invalid byte 0x{:02x}",
                        frame.body[valid_up_to]
                    ),
                )),
                Err(DefineError::Full) => Err(pos.error(
                    frame.start,
                    format!(
                        "string frame: the file defines more than {} strings or {} bytes of \
                         them",
                        super::MAX_STRINGS,
                        super::MAX_STRING_BYTES
                    ),
                )),
            },
            tag::JSON => json_record(frame, pos, newer_minor, out),
            t if t < tag::FIRST_OP => Err(pos.error(
                frame.start,
                format!(
                    "unknown frame tag 0x{t:02x} (expected an op, or 0x00-0x03: end, gap, JSON \
                     record, string)"
                ),
            )),
            t => {
                let line = next_line(pos, frame)?;
                let fields = Fields::new(frame.body, &self.strings, &mut self.spare);
                let Some(kind) = tag_op(t) else {
                    return later_op(frame, fields, line, pos, newer_minor);
                };
                fields.record(kind, line, newer_minor, out).map_err(|bad| {
                    pos.at_line(
                        line,
                        frame.body_at + bad.at as u64,
                        format!("`{}` record: {}", kind.as_str(), bad.message),
                    )
                })?;
                pos.line = line;
                Ok(Step::Record)
            }
        }
    }
}

/// A record kept as JSON text: parsed as the JSON Lines reader parses a line.
fn json_record(
    frame: &Frame<'_>,
    pos: &mut Position,
    newer_minor: bool,
    out: &mut Record,
) -> Result<Step, TraceError> {
    let line = next_line(pos, frame)?;
    let text = std::str::from_utf8(frame.body).map_err(|e| {
        pos.at_line(
            line,
            frame.body_at + e.valid_up_to() as u64,
            format!(
                "JSON record: expected UTF-8 text, found the invalid byte 0x{:02x}",
                frame.body[e.valid_up_to()]
            ),
        )
    })?;
    let step = match parse_line(text, newer_minor) {
        Ok(Parsed::Record(mut record)) => {
            record.line = line;
            *out = record;
            Step::Record
        }
        Ok(Parsed::Skipped(op)) => Step::Skipped(SkippedRecord {
            line,
            op,
            json: Some(text.to_string()),
        }),
        Err(e) => {
            let at = frame.body_at + e.column.map_or(0, |c| c.saturating_sub(1));
            return Err(pos.at_line(line, at, format!("JSON record: {}", e.message)));
        }
    };
    pos.line = line;
    Ok(step)
}

/// A tag after the ops this reader knows: an op of a later minor version, whose body starts
/// with its name. Skipped when the header declares such a minor, else refused.
fn later_op(
    frame: &Frame<'_>,
    mut fields: Fields<'_, '_>,
    line: u64,
    pos: &mut Position,
    newer_minor: bool,
) -> Result<Step, TraceError> {
    let op = fields.str("op").map_err(|bad| {
        pos.at_line(
            line,
            frame.body_at + bad.at as u64,
            format!(
                "record of tag 0x{:02x} (an op of a later minor version): {}",
                frame.tag, bad.message
            ),
        )
    })?;
    if !newer_minor {
        return Err(pos.at_line(
            line,
            frame.start,
            format!(
                "unknown op {} (tag 0x{:02x}; the header declares no minor version newer \
                 than this reader's, so every op must be one it knows: {})",
                serde_json::to_string(&op).unwrap_or_default(),
                frame.tag,
                OpKind::ALL.map(OpKind::as_str).join(", ")
            ),
        ));
    }
    pos.line = line;
    Ok(Step::Skipped(SkippedRecord {
        line,
        op,
        json: None,
    }))
}

/// One frame, whole, and where it lies in the file.
struct Frame<'a> {
    tag: u8,
    body: &'a [u8],
    /// The offset of its tag byte.
    start: u64,
    /// The offset of its body's first byte.
    body_at: u64,
}

/// The line of the record in `frame`: the one after the last.
fn next_line(pos: &Position, frame: &Frame<'_>) -> Result<u64, TraceError> {
    pos.line.checked_add(1).ok_or_else(|| {
        pos.error(
            frame.start,
            "too many lines (expected line numbers below 2^64)",
        )
    })
}

/// How a frame is named in messages.
fn frame_name(tag: u8) -> String {
    match tag {
        tag::END => "the end frame".into(),
        tag::GAP => "a gap frame".into(),
        tag::JSON => "a JSON record".into(),
        tag::STRING => "a string frame".into(),
        t => match tag_op(t) {
            Some(kind) => {
                let op = kind.as_str();
                let article = if op.starts_with(['a', 'e']) {
                    "an"
                } else {
                    "a"
                };
                format!("{article} `{op}` record")
            }
            None => format!("a frame of tag 0x{t:02x}"),
        },
    }
}

/// Bytes as a Rust-style byte string, for messages: `"\x93SSTB\r\n\x1a"`.
fn show_bytes(bytes: &[u8]) -> String {
    let escaped: String = bytes
        .iter()
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    format!("\"{escaped}\"")
}

impl Fault {
    /// What was found instead of a varint.
    fn found(self) -> &'static str {
        match self {
            Fault::End => "the end of the file",
            Fault::Overflow => "one longer than 10 bytes or above 2^64 - 1",
        }
    }

    /// The prefix of a message about a fault: the file ended, or not.
    fn truncated(self) -> &'static str {
        match self {
            Fault::End => "truncated binary trace: ",
            Fault::Overflow => "",
        }
    }
}

/// Reads into `buf` until it is full or the input ends; how many bytes were read.
fn read_up_to<R: Read>(inner: &mut R, buf: &mut [u8], pos: &Position) -> Result<usize, TraceError> {
    let mut got = 0;
    while got < buf.len() {
        match inner.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(TraceError::read(pos.file.clone(), pos.line.max(1), &e)),
        }
    }
    Ok(got)
}

/// Reads a varint byte by byte, advancing `pos.bytes`.
fn read_varint<R: BufRead>(inner: &mut R, pos: &mut Position) -> Result<u64, Fault> {
    let mut bytes = [0u8; 10];
    for i in 0..bytes.len() {
        let mut one = [0u8; 1];
        match read_up_to(inner, &mut one, pos) {
            Ok(1) => {}
            _ => return Err(Fault::End),
        }
        pos.bytes += 1;
        bytes[i] = one[0];
        if one[0] < 0x80 {
            return Cursor::new(&bytes[..=i]).varint();
        }
    }
    Err(Fault::Overflow)
}

/// Appends up to `len` bytes to `out`, as many as the input holds (so a length field cannot
/// make it allocate more than the input has); how many were read. A read error is placed on
/// `line`.
fn read_body<R: Read>(
    inner: &mut R,
    len: u64,
    out: &mut Vec<u8>,
    pos: &mut Position,
    line: u64,
) -> Result<u64, TraceError> {
    let got = inner
        .by_ref()
        .take(len)
        .read_to_end(out)
        .map_err(|e| TraceError::read(pos.file.clone(), line, &e))? as u64;
    pos.bytes += got;
    Ok(got)
}
