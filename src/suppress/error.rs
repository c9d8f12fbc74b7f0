//! The one error type of this module: a suppressions file or a baseline that cannot be used.

use crate::trace::error::{Location, io_message};

/// A suppressions file or baseline that cannot be used: the file, the line and column where
/// known, and what was expected there.
///
/// It displays as `file:line:col: message` (`file:line: message` without a column,
/// `file: message` for the file as a whole, such as failing to read it), like the trace
/// reader's errors. The message is lowercase and has no trailing period:
///
/// ```text
/// streamsan.supp:4:6: unknown key `kernal` in a `race:` suppression (expected one of: kind, buffer, kernel, op, stream, at, or current./previous. before kernel, op, stream, at)
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", Location { file, line: *line, column: *column })]
pub struct FilterError {
    /// The file as named on the command line (or given to `parse`).
    pub file: String,
    /// The 1-based line; 0 when the error concerns the file as a whole.
    pub line: u64,
    /// The 1-based byte column, where known.
    pub column: Option<u64>,
    /// What is wrong, phrased as what was expected and what was found.
    pub message: String,
}

impl FilterError {
    pub(crate) fn new(
        file: &str,
        line: u64,
        column: Option<u64>,
        message: impl Into<String>,
    ) -> FilterError {
        FilterError {
            file: file.to_string(),
            line,
            column,
            message: message.into(),
        }
    }

    /// The file could not be read.
    pub(crate) fn read(file: &str, err: &std::io::Error) -> FilterError {
        FilterError::new(file, 0, None, format!("cannot read: {}", io_message(err)))
    }
}

/// The text of the file at `path` (named `name` in errors), without a UTF-8 byte order mark
/// (some Windows tools write one, and the trace reader skips it too). Bytes that are not UTF-8
/// are an error at their line and column, worded as the trace reader's.
pub(crate) fn read_text(path: &std::path::Path, name: &str) -> Result<String, FilterError> {
    let bytes = std::fs::read(path).map_err(|e| FilterError::read(name, &e))?;
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_string()),
        Err(e) => {
            let (valid, bad) = bytes.split_at(e.valid_up_to());
            let line = valid.iter().filter(|&&b| b == b'\n').count() as u64 + 1;
            let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            let column = (valid.len() - line_start) as u64 + 1;
            Err(FilterError::new(
                name,
                line,
                Some(column),
                format!(
                    "expected UTF-8 text, found the invalid byte {:#04x}",
                    bad.first().copied().unwrap_or_default()
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_read_without_a_byte_order_mark_and_bad_bytes_are_located() {
        let dir =
            std::env::temp_dir().join(format!("streamsan-filter-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.supp");
        std::fs::write(&path, b"\xEF\xBB\xBFrace:kernel=sum\n").unwrap();
        assert_eq!(read_text(&path, "a.supp").unwrap(), "race:kernel=sum\n");
        std::fs::write(&path, b"# ok\nrace:kernel=\xff\n").unwrap();
        assert_eq!(
            read_text(&path, "a.supp").unwrap_err().to_string(),
            "a.supp:2:13: expected UTF-8 text, found the invalid byte 0xff"
        );
    }

    #[test]
    fn displays_file_line_and_column_where_known() {
        assert_eq!(
            FilterError::new("a.supp", 3, Some(7), "expected x").to_string(),
            "a.supp:3:7: expected x"
        );
        assert_eq!(
            FilterError::new("a.supp", 3, None, "expected x").to_string(),
            "a.supp:3: expected x"
        );
        let err = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        assert_eq!(
            FilterError::read("a.supp", &err).to_string(),
            "a.supp: cannot read: no such file"
        );
    }
}
