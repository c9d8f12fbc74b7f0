//! The streaming reader of trace format v1, in either encoding: JSON Lines, or the binary
//! encoding ([`super::binary`]), chosen by the input's first byte. One line or frame in memory
//! at a time.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use super::FORMAT_MINOR;
use super::binary::{self, decoder::Decoder};
use super::error::TraceError;
use super::record::Record;

pub(crate) mod header;
mod jsonl;

/// How many skipped records [`TraceReader::skipped`] keeps (it counts them all).
pub const SKIPPED_KEPT: usize = 1024;

/// The display name of standard input.
pub const STDIN_NAME: &str = "<stdin>";

/// The two encodings of trace format v1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// JSON Lines text (`.jsonl`).
    JsonLines,
    /// The binary encoding (`.sstb`, [`super::binary`]).
    Binary,
}

impl Encoding {
    /// Its name on the command line and in messages: `jsonl` or `binary`.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::JsonLines => "jsonl",
            Encoding::Binary => "binary",
        }
    }
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One record line as [`TraceReader::next_entry`] gives it: a record, or a record the reader
/// skipped. Converters use it to keep skipped records; checking needs only the records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    Record(Record),
    Skipped(SkippedRecord),
}

/// A record whose op this reader does not know, skipped because the header declares a newer
/// minor version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedRecord {
    /// Its line.
    pub line: u64,
    /// Its op's name.
    pub op: String,
    /// Its text, where the trace holds it as JSON (always in JSON Lines; in the binary
    /// encoding when a converter kept it as text).
    pub json: Option<String>,
}

/// Where a reader is: the input's display name, the line last read (0 before the header), the
/// bytes consumed. Shared by the two decoders, which place their errors with it.
#[derive(Debug)]
pub(crate) struct Position {
    pub(crate) file: String,
    pub(crate) line: u64,
    pub(crate) bytes: u64,
}

impl Position {
    /// An error at byte `at` of the file, about the line after the last one read.
    pub(crate) fn error(&self, at: u64, message: impl std::fmt::Display) -> TraceError {
        self.at_line(self.line.saturating_add(1), at, message)
    }

    /// An error at byte `at` of the file, about `line`.
    pub(crate) fn at_line(
        &self,
        line: u64,
        at: u64,
        message: impl std::fmt::Display,
    ) -> TraceError {
        TraceError::new(
            self.file.clone(),
            line,
            None,
            format!("at byte {at}: {message}"),
        )
    }
}

/// The records skipped for their unknown op: the first [`SKIPPED_KEPT`] with their line, their
/// distinct ops, how many in all.
#[derive(Debug, Default)]
pub(crate) struct Skips {
    kept: Vec<(u64, String)>,
    ops: Vec<String>,
    count: u64,
}

impl Skips {
    pub(crate) fn note(&mut self, line: u64, op: &str) {
        self.count += 1;
        if self.ops.len() < SKIPPED_KEPT && !self.ops.iter().any(|o| o == op) {
            self.ops.push(op.to_string());
        }
        if self.kept.len() < SKIPPED_KEPT {
            self.kept.push((line, op.to_string()));
        }
    }
}

/// A live view of how far a [`TraceReader`] has got, readable from another thread while the
/// reader is moved into a pipeline: for progress displays.
#[derive(Clone, Debug, Default)]
pub struct ReadProgress(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    bytes: AtomicU64,
    records: AtomicU64,
}

impl ReadProgress {
    /// Bytes of the input consumed so far.
    pub fn bytes(&self) -> u64 {
        self.0.bytes.load(Ordering::Relaxed)
    }

    /// Records read so far (not counting skipped ones).
    pub fn records(&self) -> u64 {
        self.0.records.load(Ordering::Relaxed)
    }

    fn set(&self, bytes: u64, records: u64) {
        self.0.bytes.store(bytes, Ordering::Relaxed);
        self.0.records.store(records, Ordering::Relaxed);
    }
}

/// The decoder of the input's encoding.
#[derive(Debug)]
enum Format {
    Jsonl(jsonl::Lines),
    Binary(Decoder),
}

/// Reads a trace in either encoding: validates the header on construction, then yields one
/// [`Record`] per record, with [`Record::line`] set to its 1-based line number.
///
/// The encoding is chosen by the first byte: the binary encoding's magic starts with `0x93`,
/// which cannot start a JSON Lines trace (`docs/trace-format.md`). Either way, errors name the
/// file and the line; a binary trace's also give the byte offset.
///
/// Memory does not grow with the trace: one line buffer is reused (lines are capped at
/// [`MAX_LINE_BYTES`](super::MAX_LINE_BYTES)), and a binary trace's string table is bounded.
/// Blank lines (empty or only spaces, tabs and a `\r`) are skipped but counted; a `\r\n`
/// ending is accepted.
///
/// A malformed JSON Lines line yields an `Err` and reading may go on with the next line; an
/// I/O error, an over-long line, a truncated last line or any error in a binary trace ends the
/// iteration.
///
/// ```
/// # use streamsan::trace::TraceReader;
/// let text = "{\"streamsan_trace\": 1}\n{\"op\": \"device_sync\"}\n";
/// let mut reader = TraceReader::new(text.as_bytes(), "t.jsonl")?;
/// let record = reader.next().unwrap()?;
/// assert_eq!(record.line, 2);
/// assert!(reader.next().is_none());
/// # Ok::<(), streamsan::trace::TraceError>(())
/// ```
pub struct TraceReader<R = Box<dyn BufRead + Send>> {
    inner: R,
    pos: Position,
    format: Format,
    header: Map<String, Value>,
    minor: u64,
    /// The size of the input, where known (a regular file opened by path).
    input_len: Option<u64>,
    records: u64,
    skipped: Skips,
    progress: Option<ReadProgress>,
}

impl TraceReader {
    /// Opens the trace at `path`, or standard input for `-`, and reads its header.
    pub fn open(path: &str) -> Result<TraceReader, TraceError> {
        if path == "-" {
            let stdin: Box<dyn BufRead + Send> =
                Box::new(BufReader::with_capacity(1 << 16, io::stdin()));
            return TraceReader::new(stdin, STDIN_NAME);
        }
        let file = File::open(path).map_err(|e| TraceError::open(path, &e))?;
        let len = file
            .metadata()
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        let file: Box<dyn BufRead + Send> = Box::new(BufReader::with_capacity(1 << 16, file));
        let mut reader = TraceReader::new(file, path)?;
        reader.input_len = len;
        Ok(reader)
    }
}

impl<R: BufRead> TraceReader<R> {
    /// Wraps `reader`, named `name` in errors, picks the encoding by the first byte, and reads
    /// and validates the header.
    pub fn new(mut reader: R, name: impl Into<String>) -> Result<TraceReader<R>, TraceError> {
        let mut pos = Position {
            file: name.into(),
            line: 0,
            bytes: 0,
        };
        let first = loop {
            match reader.fill_buf() {
                Ok(buf) => break buf.first().copied(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(TraceError::read(pos.file.clone(), 1, &e)),
            }
        };
        let (format, value) = if first.is_some_and(|b| binary::looks_binary(&[b])) {
            let (decoder, value) = Decoder::start(&mut reader, &mut pos)?;
            (Format::Binary(decoder), value)
        } else {
            let (lines, value) = jsonl::Lines::start(&mut reader, &mut pos)?;
            (Format::Jsonl(lines), value)
        };
        let (header, minor) = header::validate(value)
            .map_err(|message| TraceError::new(pos.file.clone(), 1, None, message))?;
        Ok(TraceReader {
            inner: reader,
            pos,
            format,
            header,
            minor,
            input_len: None,
            records: 0,
            skipped: Skips::default(),
            progress: None,
        })
    }

    /// The next record, or record skipped for its unknown op (which [`Iterator::next`] passes
    /// over); `None` at the end. Skipped records are counted in [`TraceReader::skipped`] either
    /// way.
    pub fn next_entry(&mut self) -> Option<Result<Entry, TraceError>> {
        let newer_minor = self.minor > FORMAT_MINOR;
        let entry = match &mut self.format {
            Format::Jsonl(lines) => lines.next_entry(&mut self.inner, &mut self.pos, newer_minor),
            Format::Binary(decoder) => {
                decoder.next_entry(&mut self.inner, &mut self.pos, newer_minor)
            }
        };
        match &entry {
            Some(Ok(Entry::Record(_))) => self.records += 1,
            Some(Ok(Entry::Skipped(skipped))) => self.skipped.note(skipped.line, &skipped.op),
            _ => {}
        }
        self.report_progress();
        entry
    }

    /// The next record, written over `out`; `None` at the end. Errors are those of
    /// [`Iterator::next`], and so is `out` after an `Ok`.
    ///
    /// `out`'s strings and access lists are reused for the records read after it: a caller
    /// that reads into the same records over and over (as `check` does, a batch at a time)
    /// allocates nothing per record once they are all in use. After `None` or an `Err`, what
    /// `out` holds is unspecified.
    pub fn read_into(&mut self, out: &mut Record) -> Option<Result<(), TraceError>> {
        let newer_minor = self.minor > FORMAT_MINOR;
        let (inner, pos, skipped) = (&mut self.inner, &mut self.pos, &mut self.skipped);
        let read = match &mut self.format {
            Format::Jsonl(lines) => lines.read_into(inner, pos, newer_minor, skipped, out),
            Format::Binary(decoder) => decoder.read_into(inner, pos, newer_minor, skipped, out),
        };
        if let Some(Ok(())) = &read {
            self.records += 1;
        }
        self.report_progress();
        read
    }

    fn report_progress(&self) {
        if let Some(progress) = &self.progress {
            progress.set(self.pos.bytes, self.records);
        }
    }

    /// The header object, all of it (`streamsan_trace`, `minor` where given, and any other
    /// fields such as `producer`).
    pub fn header(&self) -> &Map<String, Value> {
        &self.header
    }

    /// The minor version the header declares (0 when it declares none).
    pub fn minor(&self) -> u64 {
        self.minor
    }

    /// The trace's display name, as used in errors.
    pub fn file(&self) -> &str {
        &self.pos.file
    }

    /// The encoding of the input.
    pub fn encoding(&self) -> Encoding {
        match self.format {
            Format::Jsonl(_) => Encoding::JsonLines,
            Format::Binary(_) => Encoding::Binary,
        }
    }

    /// The number of the line last read (1 after the header).
    pub fn line(&self) -> u64 {
        self.pos.line
    }

    /// Bytes of the input consumed so far.
    pub fn bytes_read(&self) -> u64 {
        self.pos.bytes
    }

    /// The size of the input in bytes, where known: a regular file opened by
    /// [`TraceReader::open`]. With [`TraceReader::bytes_read`], how much is left.
    pub fn input_len(&self) -> Option<u64> {
        self.input_len
    }

    /// A handle that follows this reader's bytes and records from another thread (a progress
    /// display while the reader is moved into `check`).
    pub fn progress(&mut self) -> ReadProgress {
        let progress = self.progress.get_or_insert_with(ReadProgress::default);
        progress.set(self.pos.bytes, self.records);
        progress.clone()
    }

    /// Records skipped because their op is unknown and the header declares a newer minor
    /// version: `(line, op)`, the first [`SKIPPED_KEPT`] of them.
    pub fn skipped(&self) -> &[(u64, String)] {
        &self.skipped.kept
    }

    /// The distinct ops of the skipped records, in order of first appearance (at most
    /// [`SKIPPED_KEPT`] of them).
    pub fn skipped_ops(&self) -> &[String] {
        &self.skipped.ops
    }

    /// How many records were skipped in all.
    pub fn skipped_count(&self) -> u64 {
        self.skipped.count
    }
}

impl<R> std::fmt::Debug for TraceReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader")
            .field("file", &self.pos.file)
            .field("line", &self.pos.line)
            .field("bytes", &self.pos.bytes)
            .field("minor", &self.minor)
            .field("format", &self.format)
            .field("skipped_count", &self.skipped.count)
            .finish_non_exhaustive()
    }
}

/// Once it has returned `None`, it always does.
impl<R: BufRead> std::iter::FusedIterator for TraceReader<R> {}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut record = Record::default();
        Some(self.read_into(&mut record)?.map(|()| record))
    }
}

#[cfg(test)]
pub(crate) mod tests;
