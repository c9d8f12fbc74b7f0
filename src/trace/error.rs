//! The one error type of the trace layer: malformed input, or input that could not be read.

use std::fmt;

/// A trace that cannot be read: the file, the line, the column where known, and what was
/// expected there.
///
/// It displays as `file:line:col: message` (`file:line: message` when the column is unknown,
/// `file: message` for errors about the file as a whole, such as failing to open it). The
/// message is lowercase and has no trailing period, e.g.
///
/// ```text
/// trace.jsonl:7:48: `reads[0]`: expected a buffer id (unsigned integer) or an access object {"buf", "off", "len"}, found -1
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", Location { file, line: *line, column: *column })]
pub struct TraceError {
    /// The trace's display name: the path as given, or `<stdin>`.
    pub file: String,
    /// The 1-based line the error is on (the header is line 1); 0 when the error concerns the
    /// file as a whole (it could not be opened).
    pub line: u64,
    /// The 1-based byte column, where known. For a value of the wrong type or out of range it
    /// points at the last byte of that value.
    pub column: Option<u64>,
    /// What is wrong, phrased as what was expected and what was found where possible.
    pub message: String,
}

impl TraceError {
    /// An error on `line` (and `column`, where known) of `file`.
    pub fn new(
        file: impl Into<String>,
        line: u64,
        column: Option<u64>,
        message: impl Into<String>,
    ) -> TraceError {
        TraceError {
            file: file.into(),
            line,
            column,
            message: message.into(),
        }
    }

    /// The file could not be opened (`line` is 0).
    pub fn open(file: impl Into<String>, err: &std::io::Error) -> TraceError {
        TraceError::new(file, 0, None, format!("cannot open: {}", io_message(err)))
    }

    /// Reading `line` failed.
    pub fn read(file: impl Into<String>, line: u64, err: &std::io::Error) -> TraceError {
        TraceError::new(
            file,
            line,
            None,
            format!("cannot read: {}", io_message(err)),
        )
    }
}

/// An I/O error's text, starting lowercase (`no such file or directory (os error 2)`), as every
/// streamsan message is.
pub fn io_message(err: &std::io::Error) -> String {
    let text = err.to_string();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

/// `file`, `file:line` or `file:line:col`: where an input error is (line 0 means the file).
pub(crate) struct Location<'a> {
    pub(crate) file: &'a str,
    pub(crate) line: u64,
    pub(crate) column: Option<u64>,
}

impl fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_omits_what_is_unknown() {
        let e = TraceError::new("t.jsonl", 7, Some(23), "expected x, found y");
        assert_eq!(e.to_string(), "t.jsonl:7:23: expected x, found y");
        let e = TraceError::new("t.jsonl", 7, None, "missing field `id`");
        assert_eq!(e.to_string(), "t.jsonl:7: missing field `id`");
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        assert_eq!(
            TraceError::open("t.jsonl", &io).to_string(),
            "t.jsonl: cannot open: no such file"
        );
        assert_eq!(
            TraceError::read("t.jsonl", 3, &io).to_string(),
            "t.jsonl:3: cannot read: no such file"
        );
    }
}
