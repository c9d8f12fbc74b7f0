//! The binary encoding of trace format v1 (`.sstb`): the same header and records as JSON Lines,
//! framed for decode speed and size. `docs/trace-format.md` ("Binary encoding") specifies the
//! byte layout; this module is its implementation.
//!
//! A file is the magic ([`MAGIC`]), a layout version byte, the header object as JSON text, then
//! frames: a tag byte, a LEB128 body length, the body. An op's record is one frame (its tag is
//! the op); strings are defined once in frames of their own and referred to by index; gap frames
//! keep the line numbers of blank lines; an end frame closes the file, so truncation anywhere is
//! detected.
//!
//! [`TraceReader`](super::TraceReader) picks this decoder when the input starts with the
//! magic's first byte, which no JSON Lines trace can start with. [`BinaryWriter`] writes the
//! encoding; [`convert()`] copies a trace from either encoding into either writer.

pub mod convert;
pub(crate) mod decoder;
mod encode;
mod fields;
mod strings;
mod varint;
pub mod writer;

pub use convert::{ConvertError, Converted, WriteTrace, convert};
pub use writer::BinaryWriter;

use super::record::OpKind;

/// The first bytes of every binary trace: `\x93SSTB\r\n\x1a`. `0x93` is a UTF-8 continuation
/// byte, so no UTF-8 text (no JSON Lines trace) starts with it; the `\r\n` and `\x1a` show
/// damage by text-mode transfers, as PNG's signature does.
pub const MAGIC: [u8; 8] = [0x93, b'S', b'S', b'T', b'B', b'\r', b'\n', 0x1a];

/// The version of the byte layout (framing, field encodings). It changes only if the layout
/// changes incompatibly; new ops and fields follow the trace's `minor`, as in JSON Lines.
pub const LAYOUT_VERSION: u8 = 1;

/// The file name extension this crate uses for binary traces (`trace.sstb`).
pub const EXTENSION: &str = "sstb";

/// The most strings one file may define (a reader refuses more, so its table stays bounded).
pub const MAX_STRINGS: usize = 1 << 20;

/// The most bytes of string text one file may define.
pub const MAX_STRING_BYTES: usize = 64 << 20;

/// Frame tags. `0x00`-`0x0f` are frames that carry no op; `0x10` + i is the i-th op of
/// [`OpKind::ALL`]; ops that later minors add take the tags after those, and from
/// [`tag::FIRST_NAMED`] on start their body with their name.
pub(crate) mod tag {
    /// The end of the trace: an empty body, and nothing after it.
    pub const END: u8 = 0x00;
    /// Lines without a record (blank lines): a varint count.
    pub const GAP: u8 = 0x01;
    /// One record line kept as JSON text (an op the writer does not know).
    pub const JSON: u8 = 0x02;
    /// Defines the next string of the table: its UTF-8 text.
    pub const STRING: u8 = 0x03;
    /// The tag of the first op, [`OpKind::ALL`](super::OpKind::ALL)`[0]`.
    pub const FIRST_OP: u8 = 0x10;
    /// The first tag after layout 1's first table (the ops of minors 0 to 2): from here on an
    /// op's body starts with its name, so that a reader that predates the op can skip it.
    pub const FIRST_NAMED: u8 = 0x26;
}

/// The bits of a record's flags byte. The first three are common to every op; the others mean
/// what each op's layout says (`docs/trace-format.md`).
pub(crate) mod flag {
    /// A `thread` varint follows (else thread 0).
    pub const THREAD: u8 = 0x01;
    /// A `name` string follows.
    pub const NAME: u8 = 0x02;
    /// An `at` string follows.
    pub const AT: u8 = 0x04;
    /// `device` follows (stream, alloc, device_sync); or the op's boolean is true (`blocking`
    /// of memcpy and memset, `done` of the queries).
    pub const BIT3: u8 = 0x08;
    /// `stream` follows (alloc, free); or, for a stream, it is non-blocking.
    pub const BIT4: u8 = 0x10;
    /// `addr` follows (alloc).
    pub const ADDR: u8 = 0x20;
    /// A caching allocator's block (alloc, minor 1).
    pub const CACHING: u8 = 0x40;
    /// The bits every op may set.
    pub const COMMON: u8 = THREAD | NAME | AT;
}

/// The bits of an access's head byte: a range and an argument name may follow; the low five
/// bits of the buffer id are in bits 2-6, and bit 7 says the rest of the id follows.
pub(crate) mod access_bit {
    pub const RANGE: u8 = 0x01;
    pub const ARG: u8 = 0x02;
    pub const MORE: u8 = 0x80;
    /// How far the buffer id's low bits are shifted in the head byte.
    pub const ID_SHIFT: u32 = 2;
    /// How many bits of the buffer id the head byte holds.
    pub const ID_BITS: u32 = 5;
}

/// The frame tag of `kind`.
pub(crate) fn op_tag(kind: OpKind) -> u8 {
    tag::FIRST_OP + kind as u8
}

/// Whether an op frame of `tag` starts its body with the op's name.
pub(crate) fn named(tag: u8) -> bool {
    tag >= tag::FIRST_NAMED
}

/// The op of a frame tag, if it is one this crate knows.
pub(crate) fn tag_op(tag: u8) -> Option<OpKind> {
    let index = tag.checked_sub(tag::FIRST_OP)?;
    OpKind::ALL.get(usize::from(index)).copied()
}

/// The flag bits an op of `kind` may set (beyond them, a newer minor's additions).
pub(crate) fn allowed_flags(kind: OpKind) -> u8 {
    use flag::*;
    COMMON
        | match kind {
            OpKind::Stream => BIT3 | BIT4,
            OpKind::Launch => BIT3,
            OpKind::Alloc => BIT3 | BIT4 | ADDR | CACHING,
            OpKind::Free => BIT4,
            OpKind::Memcpy
            | OpKind::Memset
            | OpKind::EventQuery
            | OpKind::StreamQuery
            | OpKind::DeviceSync => BIT3,
            _ => 0,
        }
}

/// True when `bytes` (the start of an input) begin as a binary trace does. One byte decides:
/// the magic's first byte cannot start a JSON Lines trace.
pub fn looks_binary(bytes: &[u8]) -> bool {
    bytes.first() == Some(&MAGIC[0])
}

#[cfg(test)]
mod tests;
