//! The record visitor: every field of a line into a flat [`RawRecord`], then the op's
//! required fields checked and the [`Record`] built.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::Parsed;
use super::access::{AccessListSeed, AccessSeed, KeySeed};
use super::fields::{FieldName, Path, ScalarSeed, Val, float, quoted};
use crate::trace::record::{Access, MemSpace, Op, OpKind, Pool, Record, StreamFlags, StreamKind};

/// Every field of one record line, as read: by the serde visitor below, or by the fast path's
/// general tier (`scan/general.rs`), which fills it the same way.
#[derive(Debug, Default)]
pub(super) struct RawRecord {
    pub(super) op: Option<OpKind>,
    pub(super) unknown_op: Option<String>,
    pub(super) header_key: bool,
    pub(super) thread: Option<u64>,
    pub(super) at: Option<String>,
    pub(super) name: Option<String>,
    pub(super) id: Option<u64>,
    pub(super) device: Option<u64>,
    pub(super) kind: Option<StreamKind>,
    pub(super) flags: Option<StreamFlags>,
    pub(super) buf: Option<u64>,
    pub(super) bytes: Option<u64>,
    pub(super) space: Option<MemSpace>,
    pub(super) stream: Option<u64>,
    pub(super) addr: Option<u64>,
    pub(super) reads: Option<Vec<Access>>,
    pub(super) writes: Option<Vec<Access>>,
    pub(super) atomics: Option<Vec<Access>>,
    pub(super) src: Option<Access>,
    pub(super) dst: Option<Access>,
    pub(super) blocking: Option<bool>,
    pub(super) event: Option<u64>,
    pub(super) done: Option<bool>,
    pub(super) pool: Option<Pool>,
    pub(super) graph: Option<u64>,
}

/// Reads one record object into a [`RawRecord`].
pub(super) struct RecordSeed<'r> {
    pub(super) allow_unknown_ops: bool,
    pub(super) raw: &'r mut RawRecord,
}

impl<'de> DeserializeSeed<'de> for RecordSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl RecordSeed<'_> {
    pub(super) fn err<E: de::Error>(&self, found: impl fmt::Display) -> E {
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
        while let Some(field) = map.next_key_seed(KeySeed(FieldName::parse))? {
            match field {
                FieldName::Other => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                FieldName::Header => {
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
                FieldName::Reads | FieldName::Writes | FieldName::Atomics => {
                    let list = map.next_value_seed(AccessListSeed {
                        field: field.name(),
                    })?;
                    match field {
                        FieldName::Reads => raw.reads = list,
                        FieldName::Writes => raw.writes = list,
                        _ => raw.atomics = list,
                    }
                }
                FieldName::Src | FieldName::Dst => {
                    let access = map.next_value_seed(AccessSeed {
                        path: Path::field(field.name()),
                        nullable: true,
                    })?;
                    if field == FieldName::Src {
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
    pub(super) fn set(&mut self, field: FieldName, val: Val) {
        match (field, val) {
            (_, Val::Null) => {}
            (FieldName::Op, Val::Op(op)) => self.op = Some(op),
            (FieldName::Op, Val::UnknownOp(op)) => self.unknown_op = Some(op),
            (FieldName::Thread, Val::U64(v)) => self.thread = Some(v),
            (FieldName::At, Val::Str(v)) => self.at = Some(v),
            (FieldName::Name, Val::Str(v)) => self.name = Some(v),
            (FieldName::Id, Val::U64(v)) => self.id = Some(v),
            (FieldName::Device, Val::U64(v)) => self.device = Some(v),
            (FieldName::Kind, Val::Kind(v)) => self.kind = Some(v),
            (FieldName::Flags, Val::Flags(v)) => self.flags = Some(v),
            (FieldName::Buf, Val::U64(v)) => self.buf = Some(v),
            (FieldName::Bytes, Val::U64(v)) => self.bytes = Some(v),
            (FieldName::Space, Val::Space(v)) => self.space = Some(v),
            (FieldName::Stream, Val::U64(v)) => self.stream = Some(v),
            (FieldName::Addr, Val::U64(v)) => self.addr = Some(v),
            (FieldName::Blocking, Val::Bool(v)) => self.blocking = Some(v),
            (FieldName::Event, Val::U64(v)) => self.event = Some(v),
            (FieldName::Done, Val::Bool(v)) => self.done = Some(v),
            (FieldName::Pool, Val::Pool(v)) => self.pool = Some(v),
            (FieldName::Graph, Val::U64(v)) => self.graph = Some(v),
            (field, val) => debug_assert!(false, "field {field:?} got {val:?}"),
        }
    }

    /// Checks the op's required fields, applies defaults, builds the record (`line` 0). Takes
    /// the fields out rather than consuming the raw record, which is large: both parsers fill
    /// one in their own frame, and moving it here by value cost a copy per line.
    pub(super) fn take_parsed(&mut self) -> Result<Parsed, String> {
        let op = match (self.op, self.unknown_op.take()) {
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
        let need = |field: FieldName| {
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
                id: self.id.ok_or_else(|| need(FieldName::Id))?,
                device,
                kind: self.kind.ok_or_else(|| need(FieldName::Kind))?,
                flags: self.flags.unwrap_or(StreamFlags::Blocking),
            },
            OpKind::Event => Op::Event {
                id: self.id.ok_or_else(|| need(FieldName::Id))?,
            },
            OpKind::EventDestroy => Op::EventDestroy {
                id: self.id.ok_or_else(|| need(FieldName::Id))?,
            },
            OpKind::StreamDestroy => Op::StreamDestroy {
                id: self.id.ok_or_else(|| need(FieldName::Id))?,
            },
            OpKind::Alloc => Op::Alloc {
                buf: self.buf.ok_or_else(|| need(FieldName::Buf))?,
                bytes: self.bytes.ok_or_else(|| need(FieldName::Bytes))?,
                device,
                space: self.space.ok_or_else(|| need(FieldName::Space))?,
                stream: self.stream,
                addr: match (self.pool, self.addr) {
                    (Some(Pool::Caching), None) => {
                        return Err(
                            "missing field `addr` (a `caching` alloc needs the block's device \
                             address: its bytes keep their history by address)"
                                .into(),
                        );
                    }
                    (_, addr) => addr,
                },
                pool: self.pool.unwrap_or_default(),
            },
            OpKind::Free => Op::Free {
                buf: self.buf.ok_or_else(|| need(FieldName::Buf))?,
                stream: self.stream,
            },
            OpKind::Launch => {
                if self.name.is_none() {
                    return Err(need(FieldName::Name));
                }
                Op::Launch {
                    stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
                    reads: self.reads.take().unwrap_or_default(),
                    writes: self.writes.take().unwrap_or_default(),
                    atomics: self.atomics.take().unwrap_or_default(),
                }
            }
            OpKind::Memcpy => Op::Memcpy {
                stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
                src: self.src.take().ok_or_else(|| need(FieldName::Src))?,
                dst: self.dst.take().ok_or_else(|| need(FieldName::Dst))?,
                blocking: self.blocking.ok_or_else(|| need(FieldName::Blocking))?,
            },
            OpKind::Memset => Op::Memset {
                stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
                dst: self.dst.take().ok_or_else(|| need(FieldName::Dst))?,
                blocking: self.blocking.ok_or_else(|| need(FieldName::Blocking))?,
            },
            OpKind::HostFunc => Op::HostFunc {
                stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
                reads: self.reads.take().unwrap_or_default(),
                writes: self.writes.take().unwrap_or_default(),
            },
            OpKind::HostAccess => Op::HostAccess {
                reads: self.reads.take().unwrap_or_default(),
                writes: self.writes.take().unwrap_or_default(),
            },
            OpKind::Record => Op::Record {
                event: self.event.ok_or_else(|| need(FieldName::Event))?,
                stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
            },
            OpKind::Wait => Op::Wait {
                stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
                event: self.event.ok_or_else(|| need(FieldName::Event))?,
            },
            OpKind::EventSync => Op::EventSync {
                event: self.event.ok_or_else(|| need(FieldName::Event))?,
            },
            OpKind::EventQuery => Op::EventQuery {
                event: self.event.ok_or_else(|| need(FieldName::Event))?,
                done: self.done.ok_or_else(|| need(FieldName::Done))?,
            },
            OpKind::StreamSync => Op::StreamSync {
                stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
            },
            OpKind::StreamQuery => Op::StreamQuery {
                stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
                done: self.done.ok_or_else(|| need(FieldName::Done))?,
            },
            OpKind::DeviceSync => Op::DeviceSync { device },
            OpKind::RecordStream => Op::RecordStream {
                buf: self.buf.ok_or_else(|| need(FieldName::Buf))?,
                stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
            },
            OpKind::GraphBegin => Op::GraphBegin {
                graph: self.graph.ok_or_else(|| need(FieldName::Graph))?,
                stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
            },
            OpKind::GraphEnd => Op::GraphEnd {
                graph: self.graph.ok_or_else(|| need(FieldName::Graph))?,
                stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
            },
            OpKind::GraphLaunch => Op::GraphLaunch {
                graph: self.graph.ok_or_else(|| need(FieldName::Graph))?,
                stream: self.stream.ok_or_else(|| need(FieldName::Stream))?,
            },
            OpKind::GraphDestroy => Op::GraphDestroy {
                graph: self.graph.ok_or_else(|| need(FieldName::Graph))?,
            },
        };
        Ok(Parsed::Record(Record {
            line: 0,
            thread: self.thread.unwrap_or(0),
            at: self.at.take(),
            name: self.name.take(),
            op,
        }))
    }
}
