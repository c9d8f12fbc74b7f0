//! The record-level field names of the format, the type each must have, and the visitor of
//! scalar values, with the wording of type errors.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::trace::record::{MemSpace, OpKind, Pool, StreamFlags, StreamKind};

/// The fields of trace format 1.0 (record level). Each has one type whatever the op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FieldName {
    Op,
    Thread,
    At,
    Name,
    Id,
    Device,
    Kind,
    Flags,
    Buf,
    Bytes,
    Space,
    Stream,
    Addr,
    Reads,
    Writes,
    Atomics,
    Src,
    Dst,
    Blocking,
    Event,
    Done,
    Pool,
    Graph,
    /// `streamsan_trace`: a header key, ignored in a record unless the record has no op.
    Header,
    /// Any other name: ignored.
    Other,
}

impl FieldName {
    /// Every field name, in declaration order.
    pub(super) const ALL: [FieldName; 25] = [
        FieldName::Op,
        FieldName::Thread,
        FieldName::At,
        FieldName::Name,
        FieldName::Id,
        FieldName::Device,
        FieldName::Kind,
        FieldName::Flags,
        FieldName::Buf,
        FieldName::Bytes,
        FieldName::Space,
        FieldName::Stream,
        FieldName::Addr,
        FieldName::Reads,
        FieldName::Writes,
        FieldName::Atomics,
        FieldName::Src,
        FieldName::Dst,
        FieldName::Blocking,
        FieldName::Event,
        FieldName::Done,
        FieldName::Pool,
        FieldName::Graph,
        FieldName::Header,
        FieldName::Other,
    ];

    /// The field named `s`. Keys are told apart by length first, so that a key costs one
    /// comparison of a few bytes: this runs for every key of every line, on both parsers.
    pub(super) fn parse(s: &str) -> FieldName {
        match s.len() {
            2 => match s {
                "op" => FieldName::Op,
                "at" => FieldName::At,
                "id" => FieldName::Id,
                _ => FieldName::Other,
            },
            3 => match s {
                "buf" => FieldName::Buf,
                "src" => FieldName::Src,
                "dst" => FieldName::Dst,
                _ => FieldName::Other,
            },
            4 => match s {
                "name" => FieldName::Name,
                "kind" => FieldName::Kind,
                "done" => FieldName::Done,
                "pool" => FieldName::Pool,
                "addr" => FieldName::Addr,
                _ => FieldName::Other,
            },
            5 => match s {
                "reads" => FieldName::Reads,
                "event" => FieldName::Event,
                "bytes" => FieldName::Bytes,
                "space" => FieldName::Space,
                "flags" => FieldName::Flags,
                "graph" => FieldName::Graph,
                _ => FieldName::Other,
            },
            6 => match s {
                "stream" => FieldName::Stream,
                "writes" => FieldName::Writes,
                "thread" => FieldName::Thread,
                "device" => FieldName::Device,
                _ => FieldName::Other,
            },
            7 if s == "atomics" => FieldName::Atomics,
            8 if s == "blocking" => FieldName::Blocking,
            15 if s == "streamsan_trace" => FieldName::Header,
            _ => FieldName::Other,
        }
    }

    pub(super) const fn name(self) -> &'static str {
        match self {
            FieldName::Op => "op",
            FieldName::Thread => "thread",
            FieldName::At => "at",
            FieldName::Name => "name",
            FieldName::Id => "id",
            FieldName::Device => "device",
            FieldName::Kind => "kind",
            FieldName::Flags => "flags",
            FieldName::Buf => "buf",
            FieldName::Bytes => "bytes",
            FieldName::Space => "space",
            FieldName::Stream => "stream",
            FieldName::Addr => "addr",
            FieldName::Reads => "reads",
            FieldName::Writes => "writes",
            FieldName::Atomics => "atomics",
            FieldName::Src => "src",
            FieldName::Dst => "dst",
            FieldName::Blocking => "blocking",
            FieldName::Event => "event",
            FieldName::Done => "done",
            FieldName::Pool => "pool",
            FieldName::Graph => "graph",
            FieldName::Header => "streamsan_trace",
            FieldName::Other => "?",
        }
    }

    /// The type of a scalar field (the access fields have their own seeds).
    pub(super) fn want(self, allow_unknown_ops: bool) -> Want {
        match self {
            FieldName::Op => Want::Op { allow_unknown_ops },
            FieldName::Thread => Want::U64("a host thread id"),
            FieldName::At => Want::Str("a source location \"file:line:col\""),
            FieldName::Name => Want::Str("a name"),
            FieldName::Id => Want::U64("an id"),
            FieldName::Device => Want::U32("a device ordinal"),
            FieldName::Kind => Want::Kind,
            FieldName::Flags => Want::Flags,
            FieldName::Buf => Want::U64("a buffer id"),
            FieldName::Bytes => Want::U64("a size in bytes"),
            FieldName::Space => Want::Space,
            FieldName::Stream => Want::U64("a stream id"),
            FieldName::Addr => Want::U64("an address"),
            FieldName::Event => Want::U64("an event id"),
            FieldName::Graph => Want::U64("a graph id"),
            FieldName::Pool => Want::Pool,
            FieldName::Blocking | FieldName::Done => Want::Bool,
            FieldName::Reads
            | FieldName::Writes
            | FieldName::Atomics
            | FieldName::Src
            | FieldName::Dst
            | FieldName::Header
            | FieldName::Other => Want::Str("a value"),
        }
    }

    /// What a record that lacks this field needed, for "missing field" messages.
    pub(super) fn needs(self) -> String {
        match self {
            FieldName::Src => "a source access (a buffer id or an access object)".into(),
            FieldName::Dst => "a destination access (a buffer id or an access object)".into(),
            FieldName::Name => "the kernel name".into(),
            FieldName::Blocking => {
                "a boolean: true for the synchronous API variant, false for the async one".into()
            }
            FieldName::Done => "a boolean: true when the query returned cudaSuccess".into(),
            other => match other.want(false) {
                Want::U64(noun) | Want::U32(noun) | Want::Str(noun) => noun.into(),
                want => want.expected(),
            },
        }
    }
}

/// The type a scalar field must have, with the noun its messages use.
#[derive(Clone, Copy, Debug)]
pub(super) enum Want {
    U64(&'static str),
    U32(&'static str),
    Bool,
    Str(&'static str),
    Kind,
    Flags,
    Space,
    Pool,
    Op { allow_unknown_ops: bool },
}

impl Want {
    /// What was expected, e.g. `a buffer id (unsigned integer)`.
    pub(super) fn expected(self) -> String {
        match self {
            Want::U64(noun) => format!("{noun} (unsigned integer)"),
            Want::U32(noun) => format!("{noun} (unsigned 32-bit integer)"),
            Want::Bool => "true or false".into(),
            Want::Str(noun) => format!("{noun} (string)"),
            Want::Kind => {
                "a stream kind: \"legacy_default\", \"per_thread_default\" or \"created\"".into()
            }
            Want::Flags => "stream flags: \"blocking\" or \"non_blocking\"".into(),
            Want::Space => "a memory space: \"device\", \"pinned\", \"managed\" or \"host\"".into(),
            Want::Pool => "a pool: \"driver\" or \"caching\"".into(),
            Want::Op { .. } => "an op name (string)".into(),
        }
    }
}

/// Where in the record a value sits, for messages: `` `reads[2].off` ``.
#[derive(Clone, Copy, Debug)]
pub(super) struct Path {
    pub(super) field: &'static str,
    pub(super) index: Option<usize>,
    pub(super) sub: Option<&'static str>,
}

impl Path {
    pub(super) fn field(field: &'static str) -> Path {
        Path {
            field,
            index: None,
            sub: None,
        }
    }

    pub(super) fn sub(self, sub: &'static str) -> Path {
        Path {
            sub: Some(sub),
            ..self
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}", self.field)?;
        if let Some(index) = self.index {
            write!(f, "[{index}]")?;
        }
        if let Some(sub) = self.sub {
            write!(f, ".{sub}")?;
        }
        f.write_str("`")
    }
}

/// A found string, JSON-quoted and cut short if long.
pub(super) fn quoted(s: &str) -> String {
    const MAX_CHARS: usize = 40;
    match s.char_indices().nth(MAX_CHARS) {
        None => serde_json::to_string(s).unwrap_or_default(),
        Some((cut, _)) => format!(
            "{}...",
            serde_json::to_string(&s[..cut]).unwrap_or_default()
        ),
    }
}

/// A found non-integer number. serde_json hands integers beyond `u64` over as floats.
pub(super) fn float(v: f64) -> String {
    if v >= 18_446_744_073_709_551_616.0 {
        "a number too large for an unsigned 64-bit integer".into()
    } else {
        format!("{v:?}")
    }
}

/// "`path`: expected X, found Y".
pub(super) fn mismatch<E: de::Error>(path: Path, expected: &str, found: impl fmt::Display) -> E {
    E::custom(format_args!("{path}: expected {expected}, found {found}"))
}

/// A scalar field's value, typed by its [`Want`].
#[derive(Debug)]
pub(super) enum Val {
    Null,
    U64(u64),
    Bool(bool),
    Str(String),
    Kind(StreamKind),
    Flags(StreamFlags),
    Space(MemSpace),
    Pool(Pool),
    Op(OpKind),
    UnknownOp(String),
}

#[derive(Clone, Copy)]
pub(super) struct ScalarSeed {
    pub(super) want: Want,
    pub(super) path: Path,
}

impl<'de> DeserializeSeed<'de> for ScalarSeed {
    type Value = Val;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Val, D::Error> {
        d.deserialize_any(self)
    }
}

impl ScalarSeed {
    pub(super) fn err<E: de::Error>(self, found: impl fmt::Display) -> E {
        mismatch(self.path, &self.want.expected(), found)
    }
}

impl<'de> Visitor<'de> for ScalarSeed {
    type Value = Val;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.want.expected())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Val, E> {
        match self.want {
            Want::U64(_) => Ok(Val::U64(v)),
            Want::U32(_) if v <= u64::from(u32::MAX) => Ok(Val::U64(v)),
            Want::U32(_) => Err(self.err(format_args!(
                "{v} (too large for an unsigned 32-bit integer)"
            ))),
            _ => Err(self.err(v)),
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Val, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(self.err(v)),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Val, E> {
        Err(self.err(float(v)))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Val, E> {
        match self.want {
            Want::Bool => Ok(Val::Bool(v)),
            _ => Err(self.err(v)),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Val, E> {
        let val = match self.want {
            Want::Str(_) => Some(Val::Str(v.to_owned())),
            Want::Kind => StreamKind::parse(v).map(Val::Kind),
            Want::Flags => StreamFlags::parse(v).map(Val::Flags),
            Want::Space => MemSpace::parse(v).map(Val::Space),
            Want::Pool => Pool::parse(v).map(Val::Pool),
            Want::Op { allow_unknown_ops } => match OpKind::parse(v) {
                Some(op) => Some(Val::Op(op)),
                None if allow_unknown_ops => Some(Val::UnknownOp(v.to_owned())),
                None => {
                    return Err(E::custom(format_args!(
                        "unknown op {} (expected one of: {})",
                        quoted(v),
                        OpKind::ALL.map(OpKind::as_str).join(", ")
                    )));
                }
            },
            Want::U64(_) | Want::U32(_) | Want::Bool => None,
        };
        val.ok_or_else(|| self.err(quoted(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Val, E> {
        Ok(Val::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Val, A::Error> {
        Err(self.err("an array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Val, A::Error> {
        Err(self.err("an object"))
    }
}
