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

use super::strings::{DefineError, StringTable};
use super::varint::{Cursor, Fault};
use super::{LAYOUT_VERSION, MAGIC, access_bit, allowed_flags, flag, tag, tag_op};
use crate::trace::MAX_LINE_BYTES;
use crate::trace::error::TraceError;
use crate::trace::parse::{Parsed, parse_line};
use crate::trace::reader::{Entry, Position, SkippedRecord, Skips};
use crate::trace::record::{
    Access, ByteRange, MemSpace, Op, OpKind, Pool, Record, StreamFlags, StreamKind,
};

/// The state of one binary trace being read.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    strings: StringTable,
    /// A frame that was not whole in the input's buffer, reused.
    scratch: Vec<u8>,
    /// The end frame was read.
    ended: bool,
    finished: bool,
}

/// What one frame gave.
enum Step {
    Record(Record),
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
        let header = serde_json::from_slice(&text).map_err(|e| {
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
        while !self.finished {
            match self.step(inner, pos, newer_minor) {
                Ok(Step::Record(record)) => return Some(Ok(Entry::Record(record))),
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

    /// The next record, passing skipped records to `skipped`: the hot path of checking, with
    /// one wrapper fewer to move each record through than [`Decoder::next_entry`].
    pub(crate) fn next_record<R: BufRead>(
        &mut self,
        inner: &mut R,
        pos: &mut Position,
        newer_minor: bool,
        skipped: &mut Skips,
    ) -> Option<Result<Record, TraceError>> {
        while !self.finished {
            match self.step(inner, pos, newer_minor) {
                Ok(Step::Record(record)) => return Some(Ok(record)),
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
                let step = self.frame(&frame, pos, newer_minor);
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
        let step = self.frame(&frame, pos, newer_minor);
        self.scratch = body;
        step
    }

    /// Decodes one whole frame. `pos.bytes` is still at the frame's start.
    fn frame(
        &mut self,
        frame: &Frame<'_>,
        pos: &mut Position,
        newer_minor: bool,
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
            tag::JSON => self.json_record(frame, pos, newer_minor),
            t if t < tag::FIRST_OP => Err(pos.error(
                frame.start,
                format!(
                    "unknown frame tag 0x{t:02x} (expected an op, or 0x00-0x03: end, gap, JSON \
                     record, string)"
                ),
            )),
            t => {
                let line = next_line(pos, frame)?;
                let fields = Fields {
                    c: Cursor::new(frame.body),
                    strings: &self.strings,
                };
                let Some(kind) = tag_op(t) else {
                    return self.later_op(frame, fields, line, pos, newer_minor);
                };
                let record = fields.record(kind, line, newer_minor).map_err(|bad| {
                    pos.at_line(
                        line,
                        frame.body_at + bad.at as u64,
                        format!("`{}` record: {}", kind.as_str(), bad.message),
                    )
                })?;
                pos.line = line;
                Ok(Step::Record(record))
            }
        }
    }

    /// A record kept as JSON text: parsed as the JSON Lines reader parses a line.
    fn json_record(
        &mut self,
        frame: &Frame<'_>,
        pos: &mut Position,
        newer_minor: bool,
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
                Step::Record(record)
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
        &self,
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

/// A field that could not be decoded: where in the body, and what was expected.
struct Bad {
    at: usize,
    message: String,
}

/// A field's name in messages: `stream`, `reads[2]`, `reads[2].off`.
#[derive(Clone, Copy)]
struct Path {
    field: &'static str,
    index: Option<usize>,
}

impl std::fmt::Display for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.index {
            Some(i) => write!(f, "{}[{i}]", self.field),
            None => f.write_str(self.field),
        }
    }
}

/// The fields of one op frame, read in the documented order.
struct Fields<'a, 'b> {
    c: Cursor<'a>,
    strings: &'b StringTable,
}

impl Fields<'_, '_> {
    fn fault(&self, what: impl std::fmt::Display, expected: &str, fault: Fault) -> Bad {
        let found = match fault {
            Fault::End => "the end of the record",
            Fault::Overflow => "one longer than 10 bytes or above 2^64 - 1",
        };
        Bad {
            at: self.c.pos(),
            message: format!("`{what}`: expected {expected}, found {found}"),
        }
    }

    fn bad(&self, at: usize, message: String) -> Bad {
        Bad { at, message }
    }

    #[inline]
    fn u64(&mut self, field: &'static str) -> Result<u64, Bad> {
        self.c
            .varint()
            .map_err(|f| self.fault(field, "a varint", f))
    }

    fn byte(&mut self, field: &'static str) -> Result<u8, Bad> {
        self.c.byte().map_err(|f| self.fault(field, "a byte", f))
    }

    fn device(&mut self) -> Result<u32, Bad> {
        let at = self.c.pos();
        let v = self.u64("device")?;
        u32::try_from(v).map_err(|_| {
            self.bad(
                at,
                format!("`device`: expected a device ordinal (unsigned 32-bit integer), found {v}"),
            )
        })
    }

    /// A string reference: `0` then a literal, or an index + 1 into the table.
    fn str(&mut self, path: impl std::fmt::Display + Copy) -> Result<String, Bad> {
        let at = self.c.pos();
        let r = self
            .c
            .varint()
            .map_err(|f| self.fault(path, "a string reference (a varint)", f))?;
        if r > 0 {
            return match self.strings.get(r - 1) {
                Some(s) => Ok(s.to_owned()),
                None => Err(self.bad(
                    at,
                    format!(
                        "`{path}`: string {} is not defined (expected an index below {}, or 0 \
                         and the text)",
                        r - 1,
                        self.strings.len()
                    ),
                )),
            };
        }
        let len = self
            .c
            .varint()
            .map_err(|f| self.fault(path, "the length of a literal string", f))?;
        let text_at = self.c.pos();
        let bytes = usize::try_from(len)
            .ok()
            .and_then(|len| self.c.take(len).ok())
            .ok_or_else(|| {
                self.bad(
                    text_at,
                    format!(
                        "`{path}`: expected {len} bytes of a literal string, found the end of \
                         the record after {}",
                        self.c.remaining()
                    ),
                )
            })?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(e) => Err(self.bad(
                text_at + e.valid_up_to(),
                format!(
                    "`{path}`: expected UTF-8 text, found the invalid byte 0x{:02x}",
                    bytes[e.valid_up_to()]
                ),
            )),
        }
    }

    fn record(mut self, kind: OpKind, line: u64, newer_minor: bool) -> Result<Record, Bad> {
        let flags = self.byte("flags")?;
        let unknown = flags & !allowed_flags(kind);
        if unknown != 0 && !newer_minor {
            return Err(self.bad(
                0,
                format!(
                    "unknown flag bits 0x{unknown:02x} (this op's flags are a subset of \
                     0x{:02x}; others belong to a newer minor version, which the header does \
                     not declare)",
                    allowed_flags(kind)
                ),
            ));
        }
        let has = |bit: u8| flags & bit != 0;
        let thread = if has(flag::THREAD) {
            self.u64("thread")?
        } else {
            0
        };
        let name = if has(flag::NAME) {
            Some(self.str("name")?)
        } else {
            None
        };
        let at = if has(flag::AT) {
            Some(self.str("at")?)
        } else {
            None
        };
        let op = self.op(kind, flags, name.is_some())?;
        if self.c.remaining() > 0 && !newer_minor {
            return Err(self.bad(
                self.c.pos(),
                format!(
                    "{} bytes after the last field (fields this reader does not know belong to \
                     a newer minor version, which the header does not declare)",
                    self.c.remaining()
                ),
            ));
        }
        Ok(Record {
            line,
            thread,
            at,
            name,
            op,
        })
    }

    /// The op's own fields, after the common ones.
    fn op(&mut self, kind: OpKind, flags: u8, named: bool) -> Result<Op, Bad> {
        let has = |bit: u8| flags & bit != 0;
        let device = |this: &mut Self| {
            if has(flag::BIT3) {
                this.device()
            } else {
                Ok(0)
            }
        };
        Ok(match kind {
            OpKind::Stream => Op::Stream {
                id: self.u64("id")?,
                device: device(self)?,
                kind: self.stream_kind()?,
                flags: if has(flag::BIT4) {
                    StreamFlags::NonBlocking
                } else {
                    StreamFlags::Blocking
                },
            },
            OpKind::Event => Op::Event {
                id: self.u64("id")?,
            },
            OpKind::EventDestroy => Op::EventDestroy {
                id: self.u64("id")?,
            },
            OpKind::Alloc => {
                let buf = self.u64("buf")?;
                let bytes = self.u64("bytes")?;
                let space = self.space()?;
                let device = device(self)?;
                let stream = self.opt(has(flag::BIT4), "stream")?;
                let addr = self.opt(has(flag::ADDR), "addr")?;
                let pool = if has(flag::CACHING) {
                    Pool::Caching
                } else {
                    Pool::Driver
                };
                if pool == Pool::Caching && addr.is_none() {
                    return Err(self.bad(
                        0,
                        "missing field `addr` (a `caching` alloc needs the block's device \
                         address: its bytes keep their history by address)"
                            .into(),
                    ));
                }
                Op::Alloc {
                    buf,
                    bytes,
                    device,
                    space,
                    stream,
                    addr,
                    pool,
                }
            }
            OpKind::Free => Op::Free {
                buf: self.u64("buf")?,
                stream: self.opt(has(flag::BIT4), "stream")?,
            },
            OpKind::Launch => {
                if !named {
                    return Err(self.bad(
                        0,
                        "missing field `name` (a `launch` record needs the kernel's name)".into(),
                    ));
                }
                Op::Launch {
                    stream: self.u64("stream")?,
                    reads: self.accesses("reads")?,
                    writes: self.accesses("writes")?,
                }
            }
            OpKind::Memcpy => Op::Memcpy {
                stream: self.u64("stream")?,
                src: self.access(Path {
                    field: "src",
                    index: None,
                })?,
                dst: self.access(Path {
                    field: "dst",
                    index: None,
                })?,
                blocking: has(flag::BIT3),
            },
            OpKind::Memset => Op::Memset {
                stream: self.u64("stream")?,
                dst: self.access(Path {
                    field: "dst",
                    index: None,
                })?,
                blocking: has(flag::BIT3),
            },
            OpKind::HostFunc => Op::HostFunc {
                stream: self.u64("stream")?,
                reads: self.accesses("reads")?,
                writes: self.accesses("writes")?,
            },
            OpKind::HostAccess => Op::HostAccess {
                reads: self.accesses("reads")?,
                writes: self.accesses("writes")?,
            },
            OpKind::Record => Op::Record {
                event: self.u64("event")?,
                stream: self.u64("stream")?,
            },
            OpKind::Wait => Op::Wait {
                stream: self.u64("stream")?,
                event: self.u64("event")?,
            },
            OpKind::EventSync => Op::EventSync {
                event: self.u64("event")?,
            },
            OpKind::EventQuery => Op::EventQuery {
                event: self.u64("event")?,
                done: has(flag::BIT3),
            },
            OpKind::StreamSync => Op::StreamSync {
                stream: self.u64("stream")?,
            },
            OpKind::StreamQuery => Op::StreamQuery {
                stream: self.u64("stream")?,
                done: has(flag::BIT3),
            },
            OpKind::DeviceSync => Op::DeviceSync {
                device: device(self)?,
            },
            OpKind::RecordStream => Op::RecordStream {
                buf: self.u64("buf")?,
                stream: self.u64("stream")?,
            },
            OpKind::GraphBegin => Op::GraphBegin {
                graph: self.u64("graph")?,
                stream: self.u64("stream")?,
            },
            OpKind::GraphEnd => Op::GraphEnd {
                graph: self.u64("graph")?,
                stream: self.u64("stream")?,
            },
            OpKind::GraphLaunch => Op::GraphLaunch {
                graph: self.u64("graph")?,
                stream: self.u64("stream")?,
            },
            OpKind::GraphDestroy => Op::GraphDestroy {
                graph: self.u64("graph")?,
            },
        })
    }

    fn opt(&mut self, present: bool, field: &'static str) -> Result<Option<u64>, Bad> {
        present.then(|| self.u64(field)).transpose()
    }

    fn stream_kind(&mut self) -> Result<StreamKind, Bad> {
        let at = self.c.pos();
        match self.byte("kind")? {
            0 => Ok(StreamKind::LegacyDefault),
            1 => Ok(StreamKind::PerThreadDefault),
            2 => Ok(StreamKind::Created),
            b => Err(self.bad(
                at,
                format!(
                    "`kind`: expected a stream kind: 0 (legacy_default), 1 (per_thread_default) \
                     or 2 (created), found {b}"
                ),
            )),
        }
    }

    fn space(&mut self) -> Result<MemSpace, Bad> {
        let at = self.c.pos();
        match self.byte("space")? {
            0 => Ok(MemSpace::Device),
            1 => Ok(MemSpace::Pinned),
            2 => Ok(MemSpace::Managed),
            3 => Ok(MemSpace::Host),
            b => Err(self.bad(
                at,
                format!(
                    "`space`: expected a memory space: 0 (device), 1 (pinned), 2 (managed) or 3 \
                     (host), found {b}"
                ),
            )),
        }
    }

    /// A count, then that many accesses. The count is checked against the bytes left (an
    /// access takes at least one), so it cannot make the list allocate more than the body holds.
    fn accesses(&mut self, field: &'static str) -> Result<Vec<Access>, Bad> {
        let at = self.c.pos();
        let n = self.u64(field)?;
        if n > self.c.remaining() as u64 {
            return Err(self.bad(
                at,
                format!(
                    "`{field}`: expected {n} accesses, but the record has only {} bytes left",
                    self.c.remaining()
                ),
            ));
        }
        let mut list = Vec::with_capacity(n as usize);
        for i in 0..n as usize {
            list.push(self.access(Path {
                field,
                index: Some(i),
            })?);
        }
        Ok(list)
    }

    /// The head byte, the rest of the buffer id, the range, the argument name.
    fn access(&mut self, path: Path) -> Result<Access, Bad> {
        let head = self
            .c
            .byte()
            .map_err(|f| self.fault(path, "an access", f))?;
        let low = u64::from(head >> access_bit::ID_SHIFT) & 0x1f;
        let buf = if head & access_bit::MORE != 0 {
            let at = self.c.pos();
            let rest = self
                .c
                .varint()
                .map_err(|f| self.fault(format_args!("{path}.buf"), "a varint", f))?;
            if rest >> (64 - access_bit::ID_BITS) != 0 {
                return Err(self.bad(
                    at,
                    format!("`{path}.buf`: expected a buffer id below 2^64, found a larger one"),
                ));
            }
            low | rest << access_bit::ID_BITS
        } else {
            low
        };
        let range = if head & access_bit::RANGE != 0 {
            let off = self
                .c
                .varint()
                .map_err(|f| self.fault(format_args!("{path}.off"), "a varint", f))?;
            let at = self.c.pos();
            let len = self
                .c
                .varint()
                .map_err(|f| self.fault(format_args!("{path}.len"), "a varint", f))?;
            if off.checked_add(len).is_none() {
                return Err(self.bad(
                    at,
                    format!(
                        "`{path}`: expected off + len to fit in an unsigned 64-bit integer, \
                         found off {off} + len {len}"
                    ),
                ));
            }
            Some(ByteRange { off, len })
        } else {
            None
        };
        let arg = if head & access_bit::ARG != 0 {
            Some(self.str(format_args!("{path}.arg"))?)
        } else {
            None
        };
        Ok(Access { buf, range, arg })
    }
}
