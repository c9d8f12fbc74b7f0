//! Parsing one record line of trace format v1 into a [`Record`].
//!
//! serde_json drives hand-written visitors: the line's object is read field by field into a
//! flat [`RawRecord`] of `Option`s (nothing is buffered: no tagged or untagged enums, no
//! `serde_json::Value`), then [`RawRecord::into_parsed`] checks the op's required fields and
//! builds the [`Record`]. Op names and enum spellings are matched on the borrowed text; only
//! strings the record keeps (`at`, `name`, `arg`) are copied.
//!
//! Every field name has one type, whatever the op (`stream` is always a stream id, `blocking`
//! always a boolean), so a field is checked as it is read, where serde_json still knows the
//! column. Errors found then carry the column; errors found after the whole object is read (a
//! missing field) do not.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::error::Category;

use super::record::{Access, ByteRange, MemSpace, Op, OpKind, Record, StreamFlags, StreamKind};

/// What one line held.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// A record; its `line` is 0, for the caller to set.
    Record(Record),
    /// A record whose op this reader does not know, allowed because the header declares a newer
    /// minor version: the op's name.
    Skipped(String),
}

/// Why a line could not be parsed.
#[derive(Debug)]
pub(crate) struct LineError {
    /// 1-based byte column in the line, where known.
    pub column: Option<u64>,
    pub message: String,
    /// The line ended before its JSON was complete (a truncated last line, if it is the last).
    pub incomplete: bool,
}

impl LineError {
    fn without_column(message: String) -> LineError {
        LineError {
            column: None,
            message,
            incomplete: false,
        }
    }

    /// Our phrasing of a serde_json error: the position taken out of the text into `column`.
    pub(crate) fn from_json(err: serde_json::Error) -> LineError {
        let mut message = err.to_string();
        let column = if err.line() > 0 {
            let suffix = format!(" at line {} column {}", err.line(), err.column());
            if message.ends_with(&suffix) {
                message.truncate(message.len() - suffix.len());
            }
            Some((err.column() as u64).max(1))
        } else {
            None
        };
        let incomplete = err.classify() == Category::Eof;
        let message = match err.classify() {
            Category::Eof => match message.strip_prefix("EOF while parsing ") {
                Some("a value") => "incomplete JSON: the line ends where a value should be".into(),
                Some(what) => format!("incomplete JSON: the line ends inside {what}"),
                None => format!("incomplete JSON: {message}"),
            },
            Category::Syntax if message == "trailing characters" => {
                "invalid JSON: trailing characters after the record (one record per line)".into()
            }
            Category::Syntax => format!("invalid JSON: {message}"),
            // Our own messages (from the visitors below), and I/O, which `from_str` cannot give.
            Category::Data | Category::Io => message,
        };
        LineError {
            column,
            message,
            incomplete,
        }
    }
}

/// Parses one line (without its newline) holding one record object.
pub(crate) fn parse_line(text: &str, allow_unknown_ops: bool) -> Result<Parsed, LineError> {
    // The raw record stays in this frame: the visitor fills it in place (moving a struct of
    // this size through serde's `Result`s showed up as memcpy in profiles).
    let mut raw = RawRecord::default();
    let mut de = serde_json::Deserializer::from_str(text);
    RecordSeed {
        allow_unknown_ops,
        raw: &mut raw,
    }
    .deserialize(&mut de)
    .map_err(LineError::from_json)?;
    de.end().map_err(LineError::from_json)?;
    raw.into_parsed().map_err(LineError::without_column)
}

/// The fields of trace format 1.0 (record level). Each has one type whatever the op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Field {
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
    Src,
    Dst,
    Blocking,
    Event,
    Done,
    /// `streamsan_trace`: a header key, ignored in a record unless the record has no op.
    Header,
    /// Any other name: ignored.
    Other,
}

impl Field {
    fn parse(s: &str) -> Field {
        match s {
            "op" => Field::Op,
            "thread" => Field::Thread,
            "at" => Field::At,
            "name" => Field::Name,
            "id" => Field::Id,
            "device" => Field::Device,
            "kind" => Field::Kind,
            "flags" => Field::Flags,
            "buf" => Field::Buf,
            "bytes" => Field::Bytes,
            "space" => Field::Space,
            "stream" => Field::Stream,
            "addr" => Field::Addr,
            "reads" => Field::Reads,
            "writes" => Field::Writes,
            "src" => Field::Src,
            "dst" => Field::Dst,
            "blocking" => Field::Blocking,
            "event" => Field::Event,
            "done" => Field::Done,
            "streamsan_trace" => Field::Header,
            _ => Field::Other,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Field::Op => "op",
            Field::Thread => "thread",
            Field::At => "at",
            Field::Name => "name",
            Field::Id => "id",
            Field::Device => "device",
            Field::Kind => "kind",
            Field::Flags => "flags",
            Field::Buf => "buf",
            Field::Bytes => "bytes",
            Field::Space => "space",
            Field::Stream => "stream",
            Field::Addr => "addr",
            Field::Reads => "reads",
            Field::Writes => "writes",
            Field::Src => "src",
            Field::Dst => "dst",
            Field::Blocking => "blocking",
            Field::Event => "event",
            Field::Done => "done",
            Field::Header => "streamsan_trace",
            Field::Other => "?",
        }
    }

    /// The type of a scalar field (the access fields have their own seeds).
    fn want(self, allow_unknown_ops: bool) -> Want {
        match self {
            Field::Op => Want::Op { allow_unknown_ops },
            Field::Thread => Want::U64("a host thread id"),
            Field::At => Want::Str("a source location \"file:line:col\""),
            Field::Name => Want::Str("a name"),
            Field::Id => Want::U64("an id"),
            Field::Device => Want::U32("a device ordinal"),
            Field::Kind => Want::Kind,
            Field::Flags => Want::Flags,
            Field::Buf => Want::U64("a buffer id"),
            Field::Bytes => Want::U64("a size in bytes"),
            Field::Space => Want::Space,
            Field::Stream => Want::U64("a stream id"),
            Field::Addr => Want::U64("an address"),
            Field::Event => Want::U64("an event id"),
            Field::Blocking | Field::Done => Want::Bool,
            Field::Reads
            | Field::Writes
            | Field::Src
            | Field::Dst
            | Field::Header
            | Field::Other => Want::Str("a value"),
        }
    }

    /// What a record that lacks this field needed, for "missing field" messages.
    fn needs(self) -> String {
        match self {
            Field::Src => "a source access (a buffer id or an access object)".into(),
            Field::Dst => "a destination access (a buffer id or an access object)".into(),
            Field::Name => "the kernel name".into(),
            Field::Blocking => {
                "a boolean: true for the synchronous API variant, false for the async one".into()
            }
            Field::Done => "a boolean: true when the query returned cudaSuccess".into(),
            other => match other.want(false) {
                Want::U64(noun) | Want::U32(noun) | Want::Str(noun) => noun.into(),
                want => want.expected(),
            },
        }
    }
}

/// The type a scalar field must have, with the noun its messages use.
#[derive(Clone, Copy, Debug)]
enum Want {
    U64(&'static str),
    U32(&'static str),
    Bool,
    Str(&'static str),
    Kind,
    Flags,
    Space,
    Op { allow_unknown_ops: bool },
}

impl Want {
    /// What was expected, e.g. `a buffer id (unsigned integer)`.
    fn expected(self) -> String {
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
            Want::Op { .. } => "an op name (string)".into(),
        }
    }
}

/// Where in the record a value sits, for messages: `` `reads[2].off` ``.
#[derive(Clone, Copy, Debug)]
struct Path {
    field: &'static str,
    index: Option<usize>,
    sub: Option<&'static str>,
}

impl Path {
    fn field(field: &'static str) -> Path {
        Path {
            field,
            index: None,
            sub: None,
        }
    }

    fn sub(self, sub: &'static str) -> Path {
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
fn quoted(s: &str) -> String {
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
fn float(v: f64) -> String {
    if v >= 18_446_744_073_709_551_616.0 {
        "a number too large for an unsigned 64-bit integer".into()
    } else {
        format!("{v:?}")
    }
}

/// "`path`: expected X, found Y".
fn mismatch<E: de::Error>(path: Path, expected: &str, found: impl fmt::Display) -> E {
    E::custom(format_args!("{path}: expected {expected}, found {found}"))
}

/// A scalar field's value, typed by its [`Want`].
#[derive(Debug)]
enum Val {
    Null,
    U64(u64),
    Bool(bool),
    Str(String),
    Kind(StreamKind),
    Flags(StreamFlags),
    Space(MemSpace),
    Op(OpKind),
    UnknownOp(String),
}

#[derive(Clone, Copy)]
struct ScalarSeed {
    want: Want,
    path: Path,
}

impl<'de> DeserializeSeed<'de> for ScalarSeed {
    type Value = Val;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Val, D::Error> {
        d.deserialize_any(self)
    }
}

impl ScalarSeed {
    fn err<E: de::Error>(self, found: impl fmt::Display) -> E {
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

/// The expectation for an access, as the spec words it.
const ACCESS_EXPECTED: &str =
    "a buffer id (unsigned integer) or an access object {\"buf\", \"off\", \"len\"}";

/// One access: a bare buffer id, or `{"buf", "off", "len", "arg"}`. `null` gives `None` where
/// `nullable` (a top-level `src` / `dst`: then it counts as absent).
#[derive(Clone, Copy)]
struct AccessSeed {
    path: Path,
    nullable: bool,
}

impl AccessSeed {
    fn err<E: de::Error>(self, found: impl fmt::Display) -> E {
        mismatch(self.path, ACCESS_EXPECTED, found)
    }
}

impl<'de> DeserializeSeed<'de> for AccessSeed {
    type Value = Option<Access>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Access>, D::Error> {
        d.deserialize_any(self)
    }
}

/// The keys of an access object.
enum AccessKey {
    Buf,
    Off,
    Len,
    Arg,
    Other,
}

impl<'de> Visitor<'de> for AccessSeed {
    type Value = Option<Access>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(ACCESS_EXPECTED)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(Access::whole(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(self.err(v)),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Err(self.err(float(v)))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Err(self.err(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Err(self.err(quoted(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        if self.nullable {
            Ok(None)
        } else {
            Err(self.err("null"))
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(self.err("an array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut buf, mut off, mut len, mut arg) = (None, None, None, None);
        let mut seen = 0u8;
        while let Some(key) = map.next_key_seed(KeySeed(|s: &str| match s {
            "buf" => AccessKey::Buf,
            "off" => AccessKey::Off,
            "len" => AccessKey::Len,
            "arg" => AccessKey::Arg,
            _ => AccessKey::Other,
        }))? {
            let (name, bit, want) = match key {
                AccessKey::Buf => ("buf", 1, Want::U64("a buffer id")),
                AccessKey::Off => ("off", 2, Want::U64("a byte offset")),
                AccessKey::Len => ("len", 4, Want::U64("a length in bytes")),
                AccessKey::Arg => ("arg", 8, Want::Str("a kernel argument name")),
                AccessKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if seen & bit != 0 {
                return Err(de::Error::custom(format_args!(
                    "{}: duplicate field `{name}`",
                    self.path
                )));
            }
            seen |= bit;
            let seed = ScalarSeed {
                want,
                path: self.path.sub(name),
            };
            match (key, map.next_value_seed(seed)?) {
                (AccessKey::Buf, Val::U64(v)) => buf = Some(v),
                (AccessKey::Off, Val::U64(v)) => off = Some(v),
                (AccessKey::Len, Val::U64(v)) => len = Some(v),
                (AccessKey::Arg, Val::Str(v)) => arg = Some(v),
                _ => {}
            }
        }
        let Some(buf) = buf else {
            return Err(de::Error::custom(format_args!(
                "{}: missing field `buf` in the access object (expected a buffer id)",
                self.path
            )));
        };
        let range = match (off, len) {
            (None, None) => None,
            (Some(off), Some(len)) => {
                if off.checked_add(len).is_none() {
                    return Err(de::Error::custom(format_args!(
                        "{}: expected off + len to fit in an unsigned 64-bit integer, \
                         found off {off} + len {len}",
                        self.path
                    )));
                }
                Some(ByteRange { off, len })
            }
            (Some(_), None) | (None, Some(_)) => {
                let (given, missing) = if off.is_some() {
                    ("off", "len")
                } else {
                    ("len", "off")
                };
                return Err(de::Error::custom(format_args!(
                    "{}: `{given}` without `{missing}` (expected both, for bytes \
                     [off, off + len), or neither, for the whole buffer)",
                    self.path
                )));
            }
        };
        Ok(Some(Access { buf, range, arg }))
    }
}

/// A list of accesses (`reads`, `writes`); `null` counts as absent.
#[derive(Clone, Copy)]
struct AccessListSeed {
    field: &'static str,
}

impl AccessListSeed {
    fn err<E: de::Error>(self, found: impl fmt::Display) -> E {
        mismatch(
            Path::field(self.field),
            "a list of accesses (buffer ids or access objects)",
            found,
        )
    }
}

impl<'de> DeserializeSeed<'de> for AccessListSeed {
    type Value = Option<Vec<Access>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for AccessListSeed {
    type Value = Option<Vec<Access>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of accesses")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut list = Vec::new();
        loop {
            let seed = AccessSeed {
                path: Path {
                    field: self.field,
                    index: Some(list.len()),
                    sub: None,
                },
                nullable: false,
            };
            match seq.next_element_seed(seed)? {
                Some(Some(access)) => list.push(access),
                _ => return Ok(Some(list)),
            }
        }
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Err(self.err(format_args!("{v} (write [{v}] for one access)")))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Err(self.err(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Err(self.err(float(v)))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Err(self.err(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Err(self.err(quoted(v)))
    }

    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(self.err("an object (write [{...}] for one access)"))
    }
}

/// An object key, mapped to a small enum without allocating.
struct KeySeed<F>(F);

impl<'de, K, F: FnOnce(&str) -> K> DeserializeSeed<'de> for KeySeed<F> {
    type Value = K;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<K, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl<'de, K, F: FnOnce(&str) -> K> Visitor<'de> for KeySeed<F> {
    type Value = K;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<K, E> {
        Ok((self.0)(v))
    }
}

/// Every field of one record line, as read.
#[derive(Debug, Default)]
struct RawRecord {
    op: Option<OpKind>,
    unknown_op: Option<String>,
    header_key: bool,
    thread: Option<u64>,
    at: Option<String>,
    name: Option<String>,
    id: Option<u64>,
    device: Option<u64>,
    kind: Option<StreamKind>,
    flags: Option<StreamFlags>,
    buf: Option<u64>,
    bytes: Option<u64>,
    space: Option<MemSpace>,
    stream: Option<u64>,
    addr: Option<u64>,
    reads: Option<Vec<Access>>,
    writes: Option<Vec<Access>>,
    src: Option<Access>,
    dst: Option<Access>,
    blocking: Option<bool>,
    event: Option<u64>,
    done: Option<bool>,
}

/// Reads one record object into a [`RawRecord`].
struct RecordSeed<'r> {
    allow_unknown_ops: bool,
    raw: &'r mut RawRecord,
}

impl<'de> DeserializeSeed<'de> for RecordSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl RecordSeed<'_> {
    fn err<E: de::Error>(&self, found: impl fmt::Display) -> E {
        E::custom(format_args!(
            "expected a record object {{\"op\": ...}}, found {found}"
        ))
    }
}

impl<'de> Visitor<'de> for RecordSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a record object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let raw = self.raw;
        let mut seen = 0u32;
        while let Some(field) = map.next_key_seed(KeySeed(Field::parse))? {
            match field {
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                Field::Header => {
                    raw.header_key = true;
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                _ => {}
            }
            let bit = 1u32 << (field as u32);
            if seen & bit != 0 {
                return Err(de::Error::custom(format_args!(
                    "duplicate field `{}`",
                    field.name()
                )));
            }
            seen |= bit;
            match field {
                Field::Reads | Field::Writes => {
                    let list = map.next_value_seed(AccessListSeed {
                        field: field.name(),
                    })?;
                    if field == Field::Reads {
                        raw.reads = list;
                    } else {
                        raw.writes = list;
                    }
                }
                Field::Src | Field::Dst => {
                    let access = map.next_value_seed(AccessSeed {
                        path: Path::field(field.name()),
                        nullable: true,
                    })?;
                    if field == Field::Src {
                        raw.src = access;
                    } else {
                        raw.dst = access;
                    }
                }
                _ => {
                    let seed = ScalarSeed {
                        want: field.want(self.allow_unknown_ops),
                        path: Path::field(field.name()),
                    };
                    raw.set(field, map.next_value_seed(seed)?);
                }
            }
        }
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        Err(self.err(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        Err(self.err(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        Err(self.err(float(v)))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        Err(self.err(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        Err(self.err(quoted(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(self.err("null"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(self.err("an array"))
    }
}

impl RawRecord {
    /// Stores a scalar field. `Null` leaves it absent; the value's type always matches the
    /// field's (the seed checked it).
    fn set(&mut self, field: Field, val: Val) {
        match (field, val) {
            (_, Val::Null) => {}
            (Field::Op, Val::Op(op)) => self.op = Some(op),
            (Field::Op, Val::UnknownOp(op)) => self.unknown_op = Some(op),
            (Field::Thread, Val::U64(v)) => self.thread = Some(v),
            (Field::At, Val::Str(v)) => self.at = Some(v),
            (Field::Name, Val::Str(v)) => self.name = Some(v),
            (Field::Id, Val::U64(v)) => self.id = Some(v),
            (Field::Device, Val::U64(v)) => self.device = Some(v),
            (Field::Kind, Val::Kind(v)) => self.kind = Some(v),
            (Field::Flags, Val::Flags(v)) => self.flags = Some(v),
            (Field::Buf, Val::U64(v)) => self.buf = Some(v),
            (Field::Bytes, Val::U64(v)) => self.bytes = Some(v),
            (Field::Space, Val::Space(v)) => self.space = Some(v),
            (Field::Stream, Val::U64(v)) => self.stream = Some(v),
            (Field::Addr, Val::U64(v)) => self.addr = Some(v),
            (Field::Blocking, Val::Bool(v)) => self.blocking = Some(v),
            (Field::Event, Val::U64(v)) => self.event = Some(v),
            (Field::Done, Val::Bool(v)) => self.done = Some(v),
            (field, val) => debug_assert!(false, "field {field:?} got {val:?}"),
        }
    }

    /// Checks the op's required fields, applies defaults, builds the record (`line` 0).
    fn into_parsed(self) -> Result<Parsed, String> {
        let op = match (self.op, self.unknown_op) {
            (Some(op), _) => op,
            (None, Some(unknown)) => return Ok(Parsed::Skipped(unknown)),
            (None, None) if self.header_key => {
                return Err(
                    "unexpected second header (a trace has one header, on line 1; \
                            traces cannot be concatenated)"
                        .into(),
                );
            }
            (None, None) => {
                return Err("missing field `op` (expected an op name such as \"launch\")".into());
            }
        };
        let need = |field: Field| {
            format!(
                "missing field `{}` (a `{}` record needs {})",
                field.name(),
                op.as_str(),
                field.needs()
            )
        };
        // `device` was checked to fit in 32 bits when read.
        let device = u32::try_from(self.device.unwrap_or(0)).unwrap_or(u32::MAX);
        let op = match op {
            OpKind::Stream => Op::Stream {
                id: self.id.ok_or_else(|| need(Field::Id))?,
                device,
                kind: self.kind.ok_or_else(|| need(Field::Kind))?,
                flags: self.flags.unwrap_or(StreamFlags::Blocking),
            },
            OpKind::Event => Op::Event {
                id: self.id.ok_or_else(|| need(Field::Id))?,
            },
            OpKind::EventDestroy => Op::EventDestroy {
                id: self.id.ok_or_else(|| need(Field::Id))?,
            },
            OpKind::Alloc => Op::Alloc {
                buf: self.buf.ok_or_else(|| need(Field::Buf))?,
                bytes: self.bytes.ok_or_else(|| need(Field::Bytes))?,
                device,
                space: self.space.ok_or_else(|| need(Field::Space))?,
                stream: self.stream,
                addr: self.addr,
            },
            OpKind::Free => Op::Free {
                buf: self.buf.ok_or_else(|| need(Field::Buf))?,
                stream: self.stream,
            },
            OpKind::Launch => {
                if self.name.is_none() {
                    return Err(need(Field::Name));
                }
                Op::Launch {
                    stream: self.stream.ok_or_else(|| need(Field::Stream))?,
                    reads: self.reads.unwrap_or_default(),
                    writes: self.writes.unwrap_or_default(),
                }
            }
            OpKind::Memcpy => Op::Memcpy {
                stream: self.stream.ok_or_else(|| need(Field::Stream))?,
                src: self.src.ok_or_else(|| need(Field::Src))?,
                dst: self.dst.ok_or_else(|| need(Field::Dst))?,
                blocking: self.blocking.ok_or_else(|| need(Field::Blocking))?,
            },
            OpKind::Memset => Op::Memset {
                stream: self.stream.ok_or_else(|| need(Field::Stream))?,
                dst: self.dst.ok_or_else(|| need(Field::Dst))?,
                blocking: self.blocking.ok_or_else(|| need(Field::Blocking))?,
            },
            OpKind::HostFunc => Op::HostFunc {
                stream: self.stream.ok_or_else(|| need(Field::Stream))?,
                reads: self.reads.unwrap_or_default(),
                writes: self.writes.unwrap_or_default(),
            },
            OpKind::HostAccess => Op::HostAccess {
                reads: self.reads.unwrap_or_default(),
                writes: self.writes.unwrap_or_default(),
            },
            OpKind::Record => Op::Record {
                event: self.event.ok_or_else(|| need(Field::Event))?,
                stream: self.stream.ok_or_else(|| need(Field::Stream))?,
            },
            OpKind::Wait => Op::Wait {
                stream: self.stream.ok_or_else(|| need(Field::Stream))?,
                event: self.event.ok_or_else(|| need(Field::Event))?,
            },
            OpKind::EventSync => Op::EventSync {
                event: self.event.ok_or_else(|| need(Field::Event))?,
            },
            OpKind::EventQuery => Op::EventQuery {
                event: self.event.ok_or_else(|| need(Field::Event))?,
                done: self.done.ok_or_else(|| need(Field::Done))?,
            },
            OpKind::StreamSync => Op::StreamSync {
                stream: self.stream.ok_or_else(|| need(Field::Stream))?,
            },
            OpKind::StreamQuery => Op::StreamQuery {
                stream: self.stream.ok_or_else(|| need(Field::Stream))?,
                done: self.done.ok_or_else(|| need(Field::Done))?,
            },
            OpKind::DeviceSync => Op::DeviceSync { device },
        };
        Ok(Parsed::Record(Record {
            line: 0,
            thread: self.thread.unwrap_or(0),
            at: self.at,
            name: self.name,
            op,
        }))
    }
}
