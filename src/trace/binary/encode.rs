//! Encoding one [`Record`] as frames: the string frames it needs first, then its op frame. The
//! field layout per op is the table in `docs/trace-format.md`; `decoder.rs` mirrors it.

use std::io;

use super::strings::{Interner, Ref};
use super::{access_bit, flag, named, op_tag, tag, varint};
use crate::trace::record::{Access, MemSpace, Op, Pool, Record, StreamFlags, StreamKind};

/// Turns records into frames, remembering which strings it has defined.
#[derive(Debug, Default)]
pub(crate) struct Encoder {
    strings: Interner,
    /// The body being built, reused.
    body: Vec<u8>,
}

impl Encoder {
    /// Appends `record`'s frames to `out`. Fails with [`io::ErrorKind::InvalidInput`], leaving
    /// `out` and the string table as they were, for a record the format cannot express (a
    /// `launch` without a kernel name, an access whose `off + len` overflows), as the JSON Lines
    /// writer does.
    pub(crate) fn record(&mut self, record: &Record, out: &mut Vec<u8>) -> io::Result<()> {
        let (start, strings) = (out.len(), self.strings.len());
        self.body.clear();
        let mut b = Body {
            body: &mut self.body,
            strings: &mut self.strings,
            defs: out,
        };
        let result = b.record(record);
        if result.is_err() {
            out.truncate(start);
            self.strings.truncate(strings);
            return result;
        }
        frame(out, op_tag(record.op.kind()), &self.body);
        Ok(())
    }
}

/// Appends one frame: the tag, the body's length, the body.
pub(crate) fn frame(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    varint::put(out, body.len() as u64);
    out.extend_from_slice(body);
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// One record's body being written; string definitions go to `defs`, ahead of the record.
struct Body<'a> {
    body: &'a mut Vec<u8>,
    strings: &'a mut Interner,
    defs: &'a mut Vec<u8>,
}

impl Body<'_> {
    fn record(&mut self, record: &Record) -> io::Result<()> {
        let op = &record.op;
        if matches!(op, Op::Launch { .. }) && record.name.is_none() {
            return Err(invalid(
                "a launch record needs a kernel name (`Record::name`)",
            ));
        }
        if named(op_tag(op.kind())) {
            self.str(op.kind().as_str());
        }
        let mut flags = op_flags(op);
        if record.thread != 0 {
            flags |= flag::THREAD;
        }
        if record.name.is_some() {
            flags |= flag::NAME;
        }
        if record.at.is_some() {
            flags |= flag::AT;
        }
        self.body.push(flags);
        if record.thread != 0 {
            self.u64(record.thread);
        }
        if let Some(name) = &record.name {
            self.str(name);
        }
        if let Some(at) = &record.at {
            self.str(at);
        }
        self.fields(op)
    }

    /// The op's fields after the common ones, in the documented order.
    fn fields(&mut self, op: &Op) -> io::Result<()> {
        match op {
            Op::Stream {
                id, device, kind, ..
            } => {
                self.u64(*id);
                self.device(*device);
                self.body.push(stream_kind_byte(*kind));
            }
            Op::Event { id } | Op::EventDestroy { id } | Op::StreamDestroy { id } => self.u64(*id),
            Op::Alloc {
                buf,
                bytes,
                device,
                space,
                stream,
                addr,
                ..
            } => {
                self.u64(*buf);
                self.u64(*bytes);
                self.body.push(space_byte(*space));
                self.device(*device);
                self.opt(*stream);
                self.opt(*addr);
            }
            Op::Free { buf, stream } => {
                self.u64(*buf);
                self.opt(*stream);
            }
            Op::Launch {
                stream,
                reads,
                writes,
                atomics,
            } => {
                self.u64(*stream);
                self.accesses(reads)?;
                self.accesses(writes)?;
                if !atomics.is_empty() {
                    self.accesses(atomics)?;
                }
            }
            Op::HostFunc {
                stream,
                reads,
                writes,
            } => {
                self.u64(*stream);
                self.accesses(reads)?;
                self.accesses(writes)?;
            }
            Op::Memcpy {
                stream, src, dst, ..
            } => {
                self.u64(*stream);
                self.access(src)?;
                self.access(dst)?;
            }
            Op::Memset { stream, dst, .. } => {
                self.u64(*stream);
                self.access(dst)?;
            }
            Op::HostAccess { reads, writes } => {
                self.accesses(reads)?;
                self.accesses(writes)?;
            }
            Op::Record { event, stream } => {
                self.u64(*event);
                self.u64(*stream);
            }
            Op::Wait { stream, event } => {
                self.u64(*stream);
                self.u64(*event);
            }
            Op::EventSync { event } | Op::EventQuery { event, .. } => self.u64(*event),
            Op::StreamSync { stream } | Op::StreamQuery { stream, .. } => self.u64(*stream),
            Op::DeviceSync { device } => self.device(*device),
            Op::RecordStream { buf, stream } => {
                self.u64(*buf);
                self.u64(*stream);
            }
            Op::GraphBegin { graph, stream }
            | Op::GraphEnd { graph, stream }
            | Op::GraphLaunch { graph, stream } => {
                self.u64(*graph);
                self.u64(*stream);
            }
            Op::GraphDestroy { graph } => self.u64(*graph),
        }
        Ok(())
    }

    fn u64(&mut self, v: u64) {
        varint::put(self.body, v);
    }

    /// Written only when set; its flag bit says so.
    fn opt(&mut self, v: Option<u64>) {
        if let Some(v) = v {
            self.u64(v);
        }
    }

    /// Written only when not 0; its flag bit says so.
    fn device(&mut self, device: u32) {
        if device != 0 {
            self.u64(u64::from(device));
        }
    }

    /// A string reference: `index + 1`, or `0` and the text inline when the table is full.
    fn str(&mut self, s: &str) {
        match self.strings.intern(s) {
            Ref::Known(i) => self.u64(u64::from(i) + 1),
            Ref::New(i) => {
                frame(self.defs, tag::STRING, s.as_bytes());
                self.u64(u64::from(i) + 1);
            }
            Ref::Literal => {
                self.u64(0);
                self.u64(s.len() as u64);
                self.body.extend_from_slice(s.as_bytes());
            }
        }
    }

    fn accesses(&mut self, list: &[Access]) -> io::Result<()> {
        self.u64(list.len() as u64);
        list.iter().try_for_each(|a| self.access(a))
    }

    /// The head byte (range and argument bits, the buffer id's low bits), the rest of the id,
    /// the range, the argument.
    fn access(&mut self, access: &Access) -> io::Result<()> {
        let mut head = ((access.buf & 0x1f) as u8) << access_bit::ID_SHIFT;
        let rest = access.buf >> access_bit::ID_BITS;
        if rest != 0 {
            head |= access_bit::MORE;
        }
        if access.range.is_some() {
            head |= access_bit::RANGE;
        }
        if access.arg.is_some() {
            head |= access_bit::ARG;
        }
        self.body.push(head);
        if rest != 0 {
            self.u64(rest);
        }
        if let Some(range) = access.range {
            if range.off.checked_add(range.len).is_none() {
                return Err(invalid("an access's off + len overflows u64"));
            }
            self.u64(range.off);
            self.u64(range.len);
        }
        if let Some(arg) = &access.arg {
            self.str(arg);
        }
        Ok(())
    }
}

/// The op-specific flag bits of `op`.
fn op_flags(op: &Op) -> u8 {
    let bit = |set: bool, bit: u8| if set { bit } else { 0 };
    match op {
        Op::Stream { device, flags, .. } => {
            bit(*device != 0, flag::BIT3) | bit(*flags == StreamFlags::NonBlocking, flag::BIT4)
        }
        Op::Alloc {
            device,
            stream,
            addr,
            pool,
            ..
        } => {
            bit(*device != 0, flag::BIT3)
                | bit(stream.is_some(), flag::BIT4)
                | bit(addr.is_some(), flag::ADDR)
                | bit(*pool == Pool::Caching, flag::CACHING)
        }
        Op::Free { stream, .. } => bit(stream.is_some(), flag::BIT4),
        Op::Launch { atomics, .. } => bit(!atomics.is_empty(), flag::BIT3),
        Op::Memcpy { blocking, .. } | Op::Memset { blocking, .. } => bit(*blocking, flag::BIT3),
        Op::EventQuery { done, .. } | Op::StreamQuery { done, .. } => bit(*done, flag::BIT3),
        Op::DeviceSync { device } => bit(*device != 0, flag::BIT3),
        _ => 0,
    }
}

/// `legacy_default` 0, `per_thread_default` 1, `created` 2.
pub(crate) fn stream_kind_byte(kind: StreamKind) -> u8 {
    match kind {
        StreamKind::LegacyDefault => 0,
        StreamKind::PerThreadDefault => 1,
        StreamKind::Created => 2,
    }
}

/// `device` 0, `pinned` 1, `managed` 2, `host` 3.
pub(crate) fn space_byte(space: MemSpace) -> u8 {
    match space {
        MemSpace::Device => 0,
        MemSpace::Pinned => 1,
        MemSpace::Managed => 2,
        MemSpace::Host => 3,
    }
}
