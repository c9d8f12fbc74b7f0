//! Accesses: a bare buffer id or an access object, and lists of them.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::fields::{Path, ScalarSeed, Val, Want, float, mismatch, quoted};
use crate::trace::record::{Access, ByteRange};

/// The expectation for an access, as the spec words it.
pub(super) const ACCESS_EXPECTED: &str =
    "a buffer id (unsigned integer) or an access object {\"buf\", \"off\", \"len\"}";

/// One access: a bare buffer id, or `{"buf", "off", "len", "arg"}`. `null` gives `None` where
/// `nullable` (a top-level `src` / `dst`: then it counts as absent).
#[derive(Clone, Copy)]
pub(super) struct AccessSeed {
    pub(super) path: Path,
    pub(super) nullable: bool,
}

impl AccessSeed {
    pub(super) fn err<E: de::Error>(self, found: impl fmt::Display) -> E {
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
pub(super) enum AccessKey {
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
pub(super) struct AccessListSeed {
    pub(super) field: &'static str,
}

impl AccessListSeed {
    pub(super) fn err<E: de::Error>(self, found: impl fmt::Display) -> E {
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
pub(super) struct KeySeed<F>(pub(super) F);

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
