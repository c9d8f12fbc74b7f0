//! The sanitizer's filters; the findings themselves are folded and worded by the report
//! layer's [`crate::report::LiveFindings`], shared with the PyTorch front end.

use super::options::Options;
use crate::suppress::{FilterError, Filters};

pub use crate::report::{
    LiveFindings as Findings, MAX_KEPT_FINDINGS, MAX_PRINTED_WARNINGS, live_summary as summary,
};

/// The suppressions and baseline `options` name (`suppressions=` / `baseline=`), read when the
/// sanitizer is made; `None` when they name none.
pub(crate) fn load_filters(options: &Options) -> Result<Option<Filters>, FilterError> {
    Filters::load(&options.suppressions, options.baseline.as_deref())
}
