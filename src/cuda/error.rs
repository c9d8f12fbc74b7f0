//! The one error type of the online layer: what can keep a context, a sanitizer or a checked
//! run from being made, or a checked run from finishing.

use std::path::PathBuf;

use cudarc::driver::DriverError;

use super::options::{ENV_ENABLE, ENV_OPTIONS, KEYS};
use crate::suppress::FilterError;

/// See the module documentation. Messages are lowercase and name what was expected.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// cudarc's `DriverError` (without cudarc's `std` feature it implements neither `Display`
    /// nor `Error`, hence no `#[source]`).
    #[error("CUDA driver error: {0:?}")]
    Driver(DriverError),
    /// `STREAMSAN` is neither on nor off.
    #[error("{ENV_ENABLE}={0:?}: expected 1 or 0")]
    BadEnable(String),
    /// An item of `STREAMSAN_OPTIONS` without `=`.
    #[error("{ENV_OPTIONS}: `{0}` is not `key=value`")]
    NotKeyValue(String),
    /// An option this version does not know.
    #[error("{ENV_OPTIONS}: unknown key `{0}` (expected one of {keys})", keys = key_list())]
    UnknownKey(String),
    /// An option with a value of the wrong kind.
    #[error("{ENV_OPTIONS}: {key}={value:?}: expected {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
    /// The trace or report file could not be created or written.
    #[error("streamsan: {what} {}: {source}", path.display())]
    Output {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// Writing the trace's header to a caller's sink failed.
    #[error("streamsan: writing the trace header failed: {0}")]
    Io(#[from] std::io::Error),
    /// A suppressions file or baseline that cannot be used (it names the file and line).
    #[error("streamsan: {0}")]
    Filter(#[from] FilterError),
    /// The code of a checked run ([`super::testing`]) returned an error; `report` is what the
    /// sanitizer had found by then.
    #[error("the checked code failed: {message}\nstreamsan report so far:\n{report}")]
    Failed { message: String, report: String },
}

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Driver(e)
    }
}

fn key_list() -> String {
    KEYS.iter().map(|k| k.0).collect::<Vec<_>>().join(", ")
}
