//! The streaming reader of trace format v1: one line in memory at a time.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};

use serde_json::{Map, Value};

use super::error::TraceError;
use super::parse::{LineError, Parsed, parse_line};
use super::record::Record;
use super::{FORMAT_MINOR, FORMAT_VERSION, HEADER_KEY, MAX_LINE_BYTES};

/// How many skipped records [`TraceReader::skipped`] keeps (it counts them all).
pub const SKIPPED_KEPT: usize = 1024;

/// The display name of standard input.
pub const STDIN_NAME: &str = "<stdin>";

/// Reads a trace: validates the header on construction, then yields one [`Record`] per record
/// line, with [`Record::line`] set to its 1-based line number.
///
/// Memory does not grow with the trace: one line buffer is reused (lines are capped at
/// [`MAX_LINE_BYTES`]). Blank lines (empty or only spaces, tabs and a `\r`) are skipped but
/// counted; a `\r\n` ending is accepted.
///
/// A malformed line yields an `Err` and reading may go on with the next line; an I/O error,
/// an over-long line or a truncated last line ends the iteration.
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
    file: String,
    header: Map<String, Value>,
    minor: u64,
    /// The current line's bytes (without its line ending).
    buf: Vec<u8>,
    /// The number of the line last read (0 before the header).
    line: u64,
    /// The last line read had no line ending.
    unterminated: bool,
    finished: bool,
    skipped: Vec<(u64, String)>,
    skipped_ops: Vec<String>,
    skipped_count: u64,
}

impl TraceReader {
    /// Opens the trace at `path`, or standard input for `-`, and reads its header.
    pub fn open(path: &str) -> Result<TraceReader, TraceError> {
        if path == "-" {
            let stdin: Box<dyn BufRead + Send> = Box::new(BufReader::new(io::stdin()));
            return TraceReader::new(stdin, STDIN_NAME);
        }
        let file = File::open(path).map_err(|e| TraceError::open(path, &e))?;
        let file: Box<dyn BufRead + Send> = Box::new(BufReader::with_capacity(1 << 16, file));
        TraceReader::new(file, path)
    }
}

impl<R: BufRead> TraceReader<R> {
    /// Wraps `reader`, named `name` in errors, and reads and validates the header (line 1).
    pub fn new(reader: R, name: impl Into<String>) -> Result<TraceReader<R>, TraceError> {
        let mut this = TraceReader {
            inner: reader,
            file: name.into(),
            header: Map::new(),
            minor: 0,
            buf: Vec::new(),
            line: 0,
            unterminated: false,
            finished: false,
            skipped: Vec::new(),
            skipped_ops: Vec::new(),
            skipped_count: 0,
        };
        this.read_header()?;
        Ok(this)
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
        &self.file
    }

    /// The number of the line last read (1 after the header).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// Records skipped because their op is unknown and the header declares a newer minor
    /// version: `(line, op)`, the first [`SKIPPED_KEPT`] of them.
    pub fn skipped(&self) -> &[(u64, String)] {
        &self.skipped
    }

    /// The distinct ops of the skipped records, in order of first appearance (at most
    /// [`SKIPPED_KEPT`] of them).
    pub fn skipped_ops(&self) -> &[String] {
        &self.skipped_ops
    }

    /// How many records were skipped in all.
    pub fn skipped_count(&self) -> u64 {
        self.skipped_count
    }

    /// An error on the current line.
    fn error(&self, column: Option<u64>, message: impl Into<String>) -> TraceError {
        TraceError::new(self.file.clone(), self.line, column, message)
    }

    /// Reads the next line into `buf`, without its line ending. `Ok(false)` at the end.
    fn read_line(&mut self) -> Result<bool, TraceError> {
        self.buf.clear();
        if self.buf.capacity() > 4 * (1 << 20) {
            self.buf.shrink_to(1 << 16);
        }
        let limit = MAX_LINE_BYTES as u64 + 1;
        let read = (&mut self.inner)
            .take(limit)
            .read_until(b'\n', &mut self.buf);
        match read {
            Ok(0) => return Ok(false),
            Ok(_) => self.line += 1,
            Err(e) => return Err(TraceError::read(self.file.clone(), self.line + 1, &e)),
        }
        if self.buf.last() == Some(&b'\n') {
            self.buf.pop();
            if self.buf.last() == Some(&b'\r') {
                self.buf.pop();
            }
            self.unterminated = false;
        } else if self.buf.len() > MAX_LINE_BYTES {
            return Err(self.error(
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

    /// The current line as text, skipping `skip` bytes (a byte order mark).
    fn text(&self, skip: usize) -> Result<&str, TraceError> {
        std::str::from_utf8(&self.buf[skip..]).map_err(|e| {
            let column = Some((skip + e.valid_up_to()) as u64 + 1);
            if e.error_len().is_none() && self.unterminated {
                self.error(
                    column,
                    "the last line looks truncated (no newline at the end of the file, and it \
                     ends inside a UTF-8 character)",
                )
            } else {
                let bad = self.buf[skip + e.valid_up_to()];
                self.error(
                    column,
                    format!("expected UTF-8 text, found the invalid byte 0x{bad:02x}"),
                )
            }
        })
    }

    /// A parse error on the current line, placed and phrased.
    fn line_error(&self, err: LineError, column_offset: u64) -> TraceError {
        let column = err.column.map(|c| c + column_offset);
        if err.incomplete && self.unterminated {
            let message = match err.message.strip_prefix("incomplete JSON: ") {
                Some(rest) => format!(
                    "the last line looks truncated (no newline at the end of the file, and \
                     incomplete JSON: {rest})"
                ),
                None => err.message,
            };
            self.error(column, message)
        } else {
            self.error(column, err.message)
        }
    }

    fn read_header(&mut self) -> Result<(), TraceError> {
        const EXPECTED: &str = "expected line 1 to be the header {\"streamsan_trace\": 1, ...}";
        if !self.read_line()? {
            self.line = 1;
            return Err(self.error(None, format!("empty trace: {EXPECTED}")));
        }
        if self.buf.starts_with(&[0xff, 0xfe]) || self.buf.starts_with(&[0xfe, 0xff]) {
            return Err(self.error(
                Some(1),
                "the file looks like UTF-16 text (expected UTF-8 JSON Lines)",
            ));
        }
        // A UTF-8 byte order mark, as some Windows tools write, is skipped.
        let bom = if self.buf.starts_with(b"\xef\xbb\xbf") {
            3
        } else {
            0
        };
        let text = self.text(bom)?;
        if is_blank(text) {
            return Err(self.error(
                None,
                format!("missing header: {EXPECTED}, found a blank line"),
            ));
        }
        let value: Value = match serde_json::from_str(text) {
            Ok(value) => value,
            Err(e) => {
                let mut err = LineError::from_json(e);
                err.message = match err.message.strip_suffix(')') {
                    // "... (looks truncated)" becomes "... (looks truncated; in the header)".
                    Some(open) if open.contains('(') => format!("{open}; in the header)"),
                    _ => format!("{} (in the header)", err.message),
                };
                return Err(self.line_error(err, bom as u64));
            }
        };
        let Value::Object(header) = value else {
            let found = describe(&value);
            return Err(self.error(
                None,
                format!("expected a header object {{\"streamsan_trace\": 1, ...}}, found {found}"),
            ));
        };
        match header.get(HEADER_KEY) {
            Some(Value::Number(n)) if n.as_u64() == Some(FORMAT_VERSION) => {}
            Some(Value::Number(n)) if n.as_u64().is_some() => {
                return Err(self.error(
                    None,
                    format!(
                        "unsupported trace format version {n} (this reader reads version \
                         {FORMAT_VERSION})"
                    ),
                ));
            }
            Some(other) => {
                return Err(self.error(
                    None,
                    format!(
                        "`{HEADER_KEY}`: expected the format version {FORMAT_VERSION} \
                         (unsigned integer), found {}",
                        describe(other)
                    ),
                ));
            }
            None => {
                let found = match header.get("op") {
                    Some(op) => format!("a record (\"op\": {})", describe(op)),
                    None => format!("an object without `{HEADER_KEY}`"),
                };
                return Err(self.error(None, format!("missing header: {EXPECTED}, found {found}")));
            }
        }
        self.minor = match header.get("minor") {
            None | Some(Value::Null) => 0,
            Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap_or(0),
            Some(other) => {
                return Err(self.error(
                    None,
                    format!(
                        "`minor`: expected a minor version (unsigned integer), found {}",
                        describe(other)
                    ),
                ));
            }
        };
        self.header = header;
        Ok(())
    }
}

impl<R> std::fmt::Debug for TraceReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader")
            .field("file", &self.file)
            .field("line", &self.line)
            .field("minor", &self.minor)
            .field("finished", &self.finished)
            .field("skipped_count", &self.skipped_count)
            .finish_non_exhaustive()
    }
}

/// Once it has returned `None`, it always does.
impl<R: BufRead> std::iter::FusedIterator for TraceReader<R> {}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<Record, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.finished {
            match self.read_line() {
                Ok(true) => {}
                Ok(false) => self.finished = true,
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
            }
            if self.finished {
                break;
            }
            let text = match self.text(0) {
                Ok(text) => text,
                Err(e) => {
                    self.finished |= self.unterminated;
                    return Some(Err(e));
                }
            };
            if text.as_bytes().first() != Some(&b'{') && is_blank(text) {
                continue;
            }
            match parse_line(text, self.minor > FORMAT_MINOR) {
                Ok(Parsed::Record(mut record)) => {
                    record.line = self.line;
                    return Some(Ok(record));
                }
                Ok(Parsed::Skipped(op)) => {
                    self.skipped_count += 1;
                    if self.skipped_ops.len() < SKIPPED_KEPT && !self.skipped_ops.contains(&op) {
                        self.skipped_ops.push(op.clone());
                    }
                    if self.skipped.len() < SKIPPED_KEPT {
                        self.skipped.push((self.line, op));
                    }
                }
                Err(e) => {
                    self.finished |= self.unterminated;
                    return Some(Err(self.line_error(e, 0)));
                }
            }
        }
        None
    }
}

/// Empty, or only JSON whitespace.
fn is_blank(text: &str) -> bool {
    text.bytes().all(|b| matches!(b, b' ' | b'\t' | b'\r'))
}

/// A found JSON value, for messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests;
