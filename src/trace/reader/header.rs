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

/// The header's JSON, parsed, with each of its keys given once: "A field given twice in one
/// object is an error" (trace-format.md), in the header as in records, where two `minor`s
/// would otherwise leave the version to whichever came last.
pub(crate) fn parse_json(text: &[u8]) -> serde_json::Result<Value> {
    let value = serde_json::from_slice(text)?;
    serde_json::from_slice::<UniqueKeys>(text)?;
    Ok(value)
}

/// A JSON value whose top-level object, if it is one, has no key twice.
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate field `{key}`"
                )));
            }
            map.next_value::<serde::de::IgnoredAny>()?;
        }
        Ok(UniqueKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(UniqueKeys)
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }
}

/// A found JSON value, for messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        // serde_json hands integers beyond `u64` over as floats, as the records' reader says.
        Value::Number(n) => match n.as_f64() {
            Some(v) if n.is_f64() && v >= 18_446_744_073_709_551_616.0 => {
                "a number too large for an unsigned 64-bit integer".into()
            }
            _ => n.to_string(),
        },
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}
