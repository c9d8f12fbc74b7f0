//! The writer of the binary encoding: the same calls as the JSON Lines
//! [`TraceWriter`](crate::trace::TraceWriter), one `write_all` per record, and an explicit
//! [`BinaryWriter::finish`] that writes the end frame (a file without it reads as truncated).

use std::io::{self, Write};

use serde_json::{Map, Value};

use super::encode::{Encoder, frame};
use super::{LAYOUT_VERSION, MAGIC, tag, varint};
use crate::trace::record::Record;
use crate::trace::writer::header_json;

/// Writes a binary trace: the magic and the header on construction, then the frames of one
/// record per [`BinaryWriter::write`], then the end frame on [`BinaryWriter::finish`].
///
/// ```
/// # use streamsan::trace::{TraceReader, binary::BinaryWriter, record::{Op, Record}};
/// let mut w = BinaryWriter::new(Vec::new(), serde_json::Map::new())?;
/// let record = Record { line: 0, thread: 0, at: None, name: None, op: Op::DeviceSync { device: 0 } };
/// w.write(&record)?;
/// w.finish()?;
/// let bytes = w.into_inner();
/// let records: Vec<Record> = TraceReader::new(&bytes[..], "t.sstb").unwrap()
///     .collect::<Result<_, _>>().unwrap();
/// assert_eq!(records[0].line, 2);
/// assert_eq!(records[0].op, record.op);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct BinaryWriter<W: Write> {
    out: W,
    encoder: Encoder,
    /// The frames of the record being written, reused.
    frames: Vec<u8>,
    /// Lines so far, the header included.
    lines: u64,
    /// The end frame was written.
    finished: bool,
}

impl<W: Write> BinaryWriter<W> {
    /// Writes the magic, the layout version and the header `{"streamsan_trace":1,"minor":3,
    /// ...header_extra}`, declaring the newest minor version as the JSON Lines writer does. A
    /// `streamsan_trace` or `minor` key in `header_extra` is ignored.
    pub fn new(out: W, header_extra: Map<String, Value>) -> io::Result<BinaryWriter<W>> {
        let json = header_json(Some(crate::trace::FORMAT_MINOR), &header_extra);
        BinaryWriter::start(out, &json)
    }

    /// Writes the header as `header` holds it, its `minor` included (0 when absent): for
    /// copying a trace read with [`TraceReader`](crate::trace::TraceReader), whose records may
    /// belong to a newer minor version.
    pub fn with_header(out: W, header: &Map<String, Value>) -> io::Result<BinaryWriter<W>> {
        let minor = header.get("minor").and_then(Value::as_u64);
        BinaryWriter::start(out, &header_json(minor, header))
    }

    fn start(out: W, header: &[u8]) -> io::Result<BinaryWriter<W>> {
        let mut frames = MAGIC.to_vec();
        frames.push(LAYOUT_VERSION);
        varint::put(&mut frames, header.len() as u64);
        frames.extend_from_slice(header);
        let mut this = BinaryWriter {
            out,
            encoder: Encoder::default(),
            frames,
            lines: 1,
            finished: false,
        };
        this.out.write_all(&this.frames)?;
        Ok(this)
    }

    /// Writes `record` (with the string frames it needs first) in one `write_all`. Its `line`
    /// is not written: a record's line is its position (see [`BinaryWriter::skip_lines`]).
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`], writing nothing, for a record the format
    /// cannot express: a `launch` without a kernel name, or an access whose `off + len`
    /// overflows.
    pub fn write(&mut self, record: &Record) -> io::Result<()> {
        self.check_open()?;
        self.frames.clear();
        self.encoder.record(record, &mut self.frames)?;
        self.out.write_all(&self.frames)?;
        self.lines += 1;
        Ok(())
    }

    /// Leaves `n` lines without a record (a JSON Lines trace's blank lines), so the records
    /// after them keep their line numbers.
    pub fn skip_lines(&mut self, n: u64) -> io::Result<()> {
        self.check_open()?;
        if n == 0 {
            return Ok(());
        }
        let mut body = Vec::with_capacity(10);
        varint::put(&mut body, n);
        self.write_frame(tag::GAP, &body)?;
        self.lines += n;
        Ok(())
    }

    /// Writes one record line kept as JSON text, for a record whose op this crate does not know
    /// (read from a trace of a newer minor version): readers parse it as a JSON Lines record.
    /// Fails with [`io::ErrorKind::InvalidInput`] when `json` holds a line break.
    pub fn write_json(&mut self, json: &str) -> io::Result<()> {
        self.check_open()?;
        if json.contains(['\n', '\r']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a record kept as JSON must be one line",
            ));
        }
        self.write_frame(tag::JSON, json.as_bytes())?;
        self.lines += 1;
        Ok(())
    }

    fn write_frame(&mut self, tag: u8, body: &[u8]) -> io::Result<()> {
        self.frames.clear();
        frame(&mut self.frames, tag, body);
        self.out.write_all(&self.frames)
    }

    /// The line number the next record will have when read back.
    pub fn next_line(&self) -> u64 {
        self.lines + 1
    }

    /// Flushes the underlying writer (the trace stays open: no end frame).
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// Writes the end frame and flushes. A trace whose writer was dropped without it is read
    /// as truncated. Writing records afterwards is an error; calling it again does nothing.
    pub fn finish(&mut self) -> io::Result<()> {
        if !self.finished {
            self.write_frame(tag::END, &[])?;
            self.finished = true;
        }
        self.out.flush()
    }

    /// Gives the underlying writer back (not flushed; without the end frame unless
    /// [`BinaryWriter::finish`] was called).
    pub fn into_inner(self) -> W {
        self.out
    }

    fn check_open(&self) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the binary trace is finished (its end frame is written)",
            ));
        }
        Ok(())
    }
}
