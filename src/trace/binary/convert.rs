//! Copying a trace from either encoding into either writer, records and line numbers intact:
//! what `streamsan convert` does.

use std::io::{self, Write};

use crate::trace::error::TraceError;
use crate::trace::reader::{Entry, TraceReader};
use crate::trace::record::Record;
use crate::trace::{BinaryWriter, TraceWriter};

/// What both writers can do, for [`convert`].
pub trait WriteTrace {
    /// Writes one record at the next line.
    fn write(&mut self, record: &Record) -> io::Result<()>;
    /// Leaves `n` lines without a record.
    fn skip_lines(&mut self, n: u64) -> io::Result<()>;
    /// Writes one record line kept as JSON text.
    fn write_json(&mut self, json: &str) -> io::Result<()>;
    /// The line the next record gets.
    fn next_line(&self) -> u64;
    /// Ends the trace (the binary encoding's end frame) and flushes.
    fn finish(&mut self) -> io::Result<()>;
}

impl<W: Write> WriteTrace for TraceWriter<W> {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        TraceWriter::write(self, record)
    }
    fn skip_lines(&mut self, n: u64) -> io::Result<()> {
        TraceWriter::skip_lines(self, n)
    }
    fn write_json(&mut self, json: &str) -> io::Result<()> {
        TraceWriter::write_json(self, json)
    }
    fn next_line(&self) -> u64 {
        TraceWriter::next_line(self)
    }
    fn finish(&mut self) -> io::Result<()> {
        self.flush()
    }
}

impl<W: Write> WriteTrace for BinaryWriter<W> {
    fn write(&mut self, record: &Record) -> io::Result<()> {
        BinaryWriter::write(self, record)
    }
    fn skip_lines(&mut self, n: u64) -> io::Result<()> {
        BinaryWriter::skip_lines(self, n)
    }
    fn write_json(&mut self, json: &str) -> io::Result<()> {
        BinaryWriter::write_json(self, json)
    }
    fn next_line(&self) -> u64 {
        BinaryWriter::next_line(self)
    }
    fn finish(&mut self) -> io::Result<()> {
        BinaryWriter::finish(self)
    }
}

/// Why a trace could not be converted.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The input is not a valid trace (or holds a record the output cannot express); the error
    /// names the file and the line.
    #[error("{0}")]
    Input(#[from] TraceError),
    /// Writing the output failed.
    #[error("{0}")]
    Output(io::Error),
}

/// What [`convert`] copied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Converted {
    /// Records written.
    pub records: u64,
    /// Records of unknown ops (a newer minor version's) kept as JSON text.
    pub kept_as_json: u64,
}

/// Copies every record of `reader` to `out` at the same line (blank lines become gaps and back),
/// then finishes `out`. `out` should have been made with the reader's header
/// ([`TraceWriter::with_header`], [`BinaryWriter::with_header`]).
///
/// Records of ops the reader does not know (skipped, in a trace of a newer minor version) are
/// kept as their JSON text. One read from a binary trace has no text (a newer writer encoded
/// its fields), and is an error: convert it with the streamsan that wrote it.
pub fn convert<R: std::io::BufRead>(
    reader: &mut TraceReader<R>,
    out: &mut dyn WriteTrace,
) -> Result<Converted, ConvertError> {
    let mut done = Converted::default();
    while let Some(entry) = reader.next_entry() {
        let line = match &entry {
            Ok(Entry::Record(record)) => record.line,
            Ok(Entry::Skipped(skipped)) => skipped.line,
            Err(_) => 0,
        };
        let gap = line.saturating_sub(out.next_line());
        out.skip_lines(gap).map_err(ConvertError::Output)?;
        match entry? {
            Entry::Record(record) => {
                out.write(&record).map_err(ConvertError::Output)?;
                done.records += 1;
            }
            Entry::Skipped(skipped) => {
                let Some(json) = skipped.json else {
                    return Err(ConvertError::Input(TraceError::new(
                        reader.file(),
                        skipped.line,
                        None,
                        format!(
                            "cannot convert the record of op {}: this streamsan does not know \
                             the op, and the binary trace holds its fields in binary (convert \
                             with the streamsan that wrote the trace)",
                            serde_json::to_string(&skipped.op).unwrap_or_default()
                        ),
                    )));
                };
                out.write_json(&json).map_err(ConvertError::Output)?;
                done.kept_as_json += 1;
            }
        }
    }
    out.finish().map_err(ConvertError::Output)?;
    Ok(done)
}
