//! Tier 2 of the fast path: a record object in any form the fast path follows (any key
//! order, whitespace, `null`s, unknown fields and the header key, unknown ops where allowed),
//! read field by field into the serde path's [`RawRecord`] with the checks of its visitors
//! (`raw.rs`, `fields.rs`): duplicate fields, each field's one type whatever the op, `null` as
//! absent. The record is then built by the serde path's own [`RawRecord::take_parsed`].

use super::cursor::Cursor;
use super::{access, keys, op_kind};
use crate::trace::parse::Parsed;
use crate::trace::parse::fields::FieldName;
use crate::trace::parse::raw::RawRecord;
use crate::trace::record::{MemSpace, Pool, StreamFlags, StreamKind};

/// The record on the line, or `None` to let the serde path read it.
pub(super) fn record(c: &mut Cursor<'_>, allow_unknown_ops: bool) -> Option<Parsed> {
    let mut raw = RawRecord::default();
    object(c, allow_unknown_ops, &mut raw)?;
    raw.take_parsed().ok()
}

/// The record object and nothing after it but whitespace.
fn object(c: &mut Cursor<'_>, allow_unknown_ops: bool, raw: &mut RawRecord) -> Option<()> {
    c.eat(b'{')?;
    // An empty object lacks `op`: an error.
    let mut seen = 0u32;
    loop {
        c.eat(b'"')?;
        let field = match c.window().and_then(keys::record_key) {
            Some((field, len)) => {
                c.advance(len);
                field
            }
            None => FieldName::parse(c.string_body()?),
        };
        c.eat(b':')?;
        match field {
            FieldName::Other => c.skip_value()?,
            FieldName::Header => {
                raw.header_key = true;
                c.skip_value()?;
            }
            _ => {
                let bit = 1u32 << (field as u32);
                if seen & bit != 0 {
                    return None;
                }
                seen |= bit;
                // `null` counts as absent, whatever the field.
                if !c.null() {
                    value(c, field, allow_unknown_ops, raw)?;
                }
            }
        }
        match c.next()? {
            b',' => {}
            b'}' => break,
            _ => return None,
        }
    }
    c.at_end().then_some(())
}

/// One field's value (not `null`), checked for the field's one type.
fn value(
    c: &mut Cursor<'_>,
    field: FieldName,
    allow_unknown_ops: bool,
    raw: &mut RawRecord,
) -> Option<()> {
    match field {
        FieldName::Op => {
            c.eat(b'"')?;
            if let Some((op, len)) = c.window().and_then(keys::common_op) {
                c.advance(len);
                raw.op = Some(op);
            } else {
                let name = c.string_body()?;
                match op_kind(name) {
                    Some(op) => raw.op = Some(op),
                    None if allow_unknown_ops => raw.unknown_op = Some(name.to_owned()),
                    None => return None,
                }
            }
        }
        FieldName::Thread => raw.thread = Some(c.u64()?),
        FieldName::At => raw.at = Some(c.string()?.to_owned()),
        FieldName::Name => raw.name = Some(c.string()?.to_owned()),
        FieldName::Id => raw.id = Some(c.u64()?),
        FieldName::Device => {
            let device = c.u64()?;
            if device > u64::from(u32::MAX) {
                return None;
            }
            raw.device = Some(device);
        }
        FieldName::Kind => raw.kind = Some(StreamKind::parse(c.string()?)?),
        FieldName::Flags => raw.flags = Some(StreamFlags::parse(c.string()?)?),
        FieldName::Buf => raw.buf = Some(c.u64()?),
        FieldName::Bytes => raw.bytes = Some(c.u64()?),
        FieldName::Space => raw.space = Some(MemSpace::parse(c.string()?)?),
        FieldName::Stream => raw.stream = Some(c.u64()?),
        FieldName::Addr => raw.addr = Some(c.u64()?),
        FieldName::Reads => raw.reads = Some(access::list(c)?),
        FieldName::Writes => raw.writes = Some(access::list(c)?),
        FieldName::Atomics => raw.atomics = Some(access::list(c)?),
        FieldName::Src => raw.src = Some(access::one(c)?),
        FieldName::Dst => raw.dst = Some(access::one(c)?),
        FieldName::Blocking => raw.blocking = Some(c.bool()?),
        FieldName::Event => raw.event = Some(c.u64()?),
        FieldName::Done => raw.done = Some(c.bool()?),
        FieldName::Pool => raw.pool = Some(Pool::parse(c.string()?)?),
        FieldName::Graph => raw.graph = Some(c.u64()?),
        // Handled by the caller; ignored values all the same.
        FieldName::Header | FieldName::Other => c.skip_value()?,
    }
    Some(())
}
