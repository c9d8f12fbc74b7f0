//! Tier 1 of the fast path: the writer's own layout of a record line, read back in the
//! writer's order.
//!
//! `TraceWriter` writes every record the same way (`trace/writer.rs`): no whitespace, `op`
//! first, then `name`, the op's fields in a fixed order with defaults left out, `thread`, `at`.
//! This reads exactly that layout, comparing each expected key as a literal and building the
//! [`Record`] directly: no key lookup, no duplicate or `null` bookkeeping (each key is matched
//! at most once, and only where the writer puts it). Anything else (another order, spaces, an
//! unknown field, `null`, an unknown op) makes it give up, and tier 2 (`general.rs`) reads the
//! line.
//!
//! Within that layout it accepts what the writer leaves out too (an explicit `"device":0`), and
//! its values and defaults are those of `RawRecord::take_parsed`, which the differential tests
//! hold it to. The op's fields are read in the order its struct literal below lists them
//! (Rust evaluates field expressions in source order), which is the writer's order.

use super::access;
use super::cursor::Cursor;
use super::keys;
use crate::trace::record::{Access, MemSpace, Op, OpKind, Pool, Record, StreamFlags, StreamKind};
use crate::trace::spare::SpareParts;

/// The record on the line, written to `out` with strings and lists from `spare` (its name and
/// call site in the strings `out` holds, a launch's lists in those of the launch `out` holds),
/// if it is in the writer's layout; else `None`, and `out` keeps its line, thread, name and
/// call site, but a launch line declined after its stream has made `out`'s op a launch on
/// that stream with lists partly written over (whoever fills `out` next keeps them).
#[inline(always)]
pub(super) fn record(c: &mut Cursor<'_>, spare: &mut SpareParts, out: &mut Record) -> Option<()> {
    record_then(c, spare, out, |c| c.at_end().then_some(()))
}

/// [`record`], where what must follow the record's closing brace is `end`'s to check, and its
/// answer is returned: for [`record`], that the rest of the line is whitespace; for a line read
/// off the input's buffer, that the line ends there.
#[inline(always)]
pub(super) fn record_then<T>(
    c: &mut Cursor<'_>,
    spare: &mut SpareParts,
    out: &mut Record,
    end: impl FnOnce(&mut Cursor<'_>) -> Option<T>,
) -> Option<T> {
    c.literal(br#"{"op":""#)?;
    let kind = match c.window().and_then(keys::common_op) {
        Some((kind, len)) => {
            c.advance(len);
            kind
        }
        None => super::op_kind(c.string_body()?)?,
    };
    let name = string(c, br#","name":""#)?;
    // A launch, the most common record, is filled in where `out` holds one (a declined line
    // leaves its lists there for whoever fills `out` next to keep); other ops are built.
    let op = if kind == OpKind::Launch {
        launch(c, name.is_some(), spare, &mut out.op)?;
        None
    } else {
        Some(op(c, kind, spare)?)
    };
    let Some(((thread, at), ended)) = rest(c, end) else {
        // Declined after the op's lists were made: they go back for the next record.
        if let Some(mut op) = op {
            spare.reclaim_lists(&mut op);
        }
        return None;
    };
    // Written field by field: the strings `out` holds are filled again where they are.
    out.line = 0;
    out.thread = thread;
    spare.set_string(&mut out.at, at);
    spare.set_string(&mut out.name, name);
    if let Some(op) = op {
        spare.reclaim_lists(&mut out.op);
        out.op = op;
    }
    Some(ended)
}

/// What follows the op: the thread and call site (where present), the closing brace, and
/// what `end` checks after it.
#[inline(always)]
fn rest<'a, T>(
    c: &mut Cursor<'a>,
    end: impl FnOnce(&mut Cursor<'a>) -> Option<T>,
) -> Option<((u64, Option<&'a str>), T)> {
    // Most records end here: one comparison instead of two for absent keys.
    let (thread, at) = if c.at(b'}') {
        (0, None)
    } else {
        let thread = number(c, br#","thread":"#)?.unwrap_or(0);
        (thread, string(c, br#","at":""#)?)
    };
    c.literal(b"}")?;
    Some(((thread, at), end(c)?))
}

/// A launch's fields, in the writer's order, written into `held` (made a launch by
/// [`SpareParts::make_launch`]), whose lists are written over where they are. `named`: the record has
/// a `name` (a launch needs one).
#[inline(always)]
fn launch(c: &mut Cursor<'_>, named: bool, spare: &mut SpareParts, held: &mut Op) -> Option<()> {
    if !named {
        return None;
    }
    let stream = required(c, br#","stream":"#)?;
    let [reads, writes, atomics] = spare.make_launch(held, stream);
    list(c, br#","reads":"#, spare, reads)?;
    list(c, br#","writes":"#, spare, writes)?;
    list(c, br#","atomics":"#, spare, atomics)
}

/// The fields of an op other than a launch, in the writer's order.
#[inline(always)]
fn op(c: &mut Cursor<'_>, kind: OpKind, spare: &mut SpareParts) -> Option<Op> {
    Some(match kind {
        OpKind::Launch => unreachable!("a launch is read by `launch`"),
        OpKind::Stream => Op::Stream {
            id: required(c, br#","id":"#)?,
            device: device(c)?,
            kind: StreamKind::parse(string(c, br#","kind":""#)??)?,
            flags: match string(c, br#","flags":""#)? {
                Some(flags) => StreamFlags::parse(flags)?,
                None => StreamFlags::Blocking,
            },
        },
        OpKind::Event => Op::Event {
            id: required(c, br#","id":"#)?,
        },
        OpKind::EventDestroy => Op::EventDestroy {
            id: required(c, br#","id":"#)?,
        },
        OpKind::StreamDestroy => Op::StreamDestroy {
            id: required(c, br#","id":"#)?,
        },
        OpKind::Alloc => {
            let buf = required(c, br#","buf":"#)?;
            let bytes = required(c, br#","bytes":"#)?;
            let device = device(c)?;
            let space = MemSpace::parse(string(c, br#","space":""#)??)?;
            let stream = number(c, br#","stream":"#)?;
            let addr = number(c, br#","addr":"#)?;
            let pool = match string(c, br#","pool":""#)? {
                Some(pool) => Pool::parse(pool)?,
                None => Pool::Driver,
            };
            // A caching block needs its address.
            if pool == Pool::Caching && addr.is_none() {
                return None;
            }
            Op::Alloc {
                buf,
                bytes,
                device,
                space,
                stream,
                addr,
                pool,
            }
        }
        OpKind::Free => Op::Free {
            buf: required(c, br#","buf":"#)?,
            stream: number(c, br#","stream":"#)?,
        },
        OpKind::Memcpy => Op::Memcpy {
            stream: required(c, br#","stream":"#)?,
            src: one(c, br#","src":"#, spare)?,
            dst: one(c, br#","dst":"#, spare)?,
            blocking: boolean(c, br#","blocking":"#)?,
        },
        OpKind::Memset => Op::Memset {
            stream: required(c, br#","stream":"#)?,
            dst: one(c, br#","dst":"#, spare)?,
            blocking: boolean(c, br#","blocking":"#)?,
        },
        OpKind::HostFunc => {
            let stream = required(c, br#","stream":"#)?;
            let (reads, writes) = reads_and_writes(c, spare)?;
            Op::HostFunc {
                stream,
                reads,
                writes,
            }
        }
        OpKind::HostAccess => {
            let (reads, writes) = reads_and_writes(c, spare)?;
            Op::HostAccess { reads, writes }
        }
        OpKind::Record => Op::Record {
            event: required(c, br#","event":"#)?,
            stream: required(c, br#","stream":"#)?,
        },
        OpKind::Wait => Op::Wait {
            stream: required(c, br#","stream":"#)?,
            event: required(c, br#","event":"#)?,
        },
        OpKind::EventSync => Op::EventSync {
            event: required(c, br#","event":"#)?,
        },
        OpKind::EventQuery => Op::EventQuery {
            event: required(c, br#","event":"#)?,
            done: boolean(c, br#","done":"#)?,
        },
        OpKind::StreamSync => Op::StreamSync {
            stream: required(c, br#","stream":"#)?,
        },
        OpKind::StreamQuery => Op::StreamQuery {
            stream: required(c, br#","stream":"#)?,
            done: boolean(c, br#","done":"#)?,
        },
        OpKind::DeviceSync => Op::DeviceSync { device: device(c)? },
        OpKind::RecordStream => Op::RecordStream {
            buf: required(c, br#","buf":"#)?,
            stream: required(c, br#","stream":"#)?,
        },
        OpKind::GraphBegin => Op::GraphBegin {
            graph: required(c, br#","graph":"#)?,
            stream: required(c, br#","stream":"#)?,
        },
        OpKind::GraphEnd => Op::GraphEnd {
            graph: required(c, br#","graph":"#)?,
            stream: required(c, br#","stream":"#)?,
        },
        OpKind::GraphLaunch => Op::GraphLaunch {
            graph: required(c, br#","graph":"#)?,
            stream: required(c, br#","stream":"#)?,
        },
        OpKind::GraphDestroy => Op::GraphDestroy {
            graph: required(c, br#","graph":"#)?,
        },
    })
}

// Each reader below returns `None` to give up; the optional ones return `Some(None)` where the
// key is not next (the field is absent).

/// `key` (`,"name":`) and an unsigned integer; the key must be next.
#[inline(always)]
fn required(c: &mut Cursor<'_>, key: &[u8]) -> Option<u64> {
    c.literal(key)?;
    c.digits()
}

/// `key` and an unsigned integer, if the key is next.
#[inline(always)]
fn number(c: &mut Cursor<'_>, key: &[u8]) -> Option<Option<u64>> {
    if c.literal(key).is_none() {
        return Some(None);
    }
    c.digits().map(Some)
}

/// `,"device":` and a device ordinal if next, else device 0.
#[inline(always)]
fn device(c: &mut Cursor<'_>) -> Option<u32> {
    match number(c, br#","device":"#)? {
        Some(device) => u32::try_from(device).ok(),
        None => Some(0),
    }
}

/// `key` (`,"name":"`, opening quote included) and the rest of a string, if the key is next.
#[inline(always)]
fn string<'a>(c: &mut Cursor<'a>, key: &[u8]) -> Option<Option<&'a str>> {
    if c.literal(key).is_none() {
        return Some(None);
    }
    c.string_body().map(Some)
}

/// `key` and `true` or `false`; the key must be next.
#[inline(always)]
fn boolean(c: &mut Cursor<'_>, key: &[u8]) -> Option<bool> {
    c.literal(key)?;
    if c.literal(b"true").is_some() {
        Some(true)
    } else {
        c.literal(b"false").map(|()| false)
    }
}

/// `key` and one access; the key must be next.
#[inline(always)]
fn one(c: &mut Cursor<'_>, key: &[u8], spare: &mut SpareParts) -> Option<Access> {
    c.literal(key)?;
    access::written_one(c, spare)
}

/// `reads` and `writes` lists ([`list`]); when either is not in the writer's form, what was
/// read goes back to `spare`.
#[inline(always)]
fn reads_and_writes(
    c: &mut Cursor<'_>,
    spare: &mut SpareParts,
) -> Option<(Vec<Access>, Vec<Access>)> {
    let (mut reads, mut writes) = (Vec::new(), Vec::new());
    let read = list(c, br#","reads":"#, spare, &mut reads)
        .and_then(|()| list(c, br#","writes":"#, spare, &mut writes));
    if read.is_none() {
        spare.keep_list(reads);
        spare.keep_list(writes);
        return None;
    }
    Some((reads, writes))
}

/// `key` and a list of accesses written over `into` if the key is next, else `into` emptied.
/// On `None`, `into` holds what was read before and what it held.
#[inline(always)]
fn list(
    c: &mut Cursor<'_>,
    key: &[u8],
    spare: &mut SpareParts,
    into: &mut Vec<Access>,
) -> Option<()> {
    if c.literal(key).is_none() {
        spare.truncate(into, 0);
        return Some(());
    }
    access::written_list(c, spare, into)
}
