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

#[cfg(test)]
mod tests {
    use super::*;

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
