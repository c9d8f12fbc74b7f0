//! The header's checks, the same for both encodings: a JSON object whose `streamsan_trace` is
//! the format version this crate reads, with an optional unsigned `minor`.

use serde_json::{Map, Value};

use crate::trace::{FORMAT_VERSION, HEADER_KEY};

/// What the header must be, for messages.
pub(super) const EXPECTED: &str = "expected line 1 to be the header {\"streamsan_trace\": 1, ...}";

/// The header object and its minor version, or what is wrong with it (the message of an error
/// on line 1, without a column).
pub(super) fn validate(value: Value) -> Result<(Map<String, Value>, u64), String> {
    let Value::Object(header) = value else {
        let found = describe(&value);
        return Err(format!(
            "expected a header object {{\"streamsan_trace\": 1, ...}}, found {found}"
        ));
    };
    match header.get(HEADER_KEY) {
        Some(Value::Number(n)) if n.as_u64() == Some(FORMAT_VERSION) => {}
        Some(Value::Number(n)) if n.as_u64().is_some() => {
            return Err(format!(
                "unsupported trace format version {n} (this reader reads version \
                 {FORMAT_VERSION})"
            ));
        }
        Some(other) => {
            return Err(format!(
                "`{HEADER_KEY}`: expected the format version {FORMAT_VERSION} (unsigned \
                 integer), found {}",
                describe(other)
            ));
        }
        None => {
            let found = match header.get("op") {
                Some(op) => format!("a record (\"op\": {})", describe(op)),
                None => format!("an object without `{HEADER_KEY}`"),
            };
            return Err(format!("missing header: {EXPECTED}, found {found}"));
        }
    }
    let minor = match header.get("minor") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) if n.as_u64().is_some() => n.as_u64().unwrap_or(0),
        Some(other) => {
            return Err(format!(
                "`minor`: expected a minor version (unsigned integer), found {}",
                describe(other)
            ));
        }
    };
    Ok((header, minor))
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
