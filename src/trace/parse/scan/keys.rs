//! Keys recognized by their bytes: the common keys are compared as one machine word, closing
//! quote included, instead of being scanned for their end and then matched as strings.
//!
//! A miss is never a decision: the caller then reads the key as a string and looks it up by
//! name (`FieldName::parse`), so a key missing here is only slower.

use crate::trace::parse::fields::FieldName;
use crate::trace::record::OpKind;

/// A key and its closing quote packed little-endian into a word: the word, the mask of the
/// bytes it takes, and how many bytes that is.
type Packed = (u64, u64, usize);

/// `key` followed by its closing quote, packed; `None` for a key that does not fit in 8 bytes.
const fn packed(key: &str) -> Option<Packed> {
    let bytes = key.as_bytes();
    let len = bytes.len() + 1;
    if len > 8 {
        return None;
    }
    let mut word = (b'"' as u64) << (8 * bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        word |= (bytes[i] as u64) << (8 * i);
        i += 1;
    }
    let mask = if len == 8 {
        u64::MAX
    } else {
        (1 << (8 * len)) - 1
    };
    Some((word, mask, len))
}

/// Never matches: the packed form of a name too long for a word.
const NEVER: Packed = (1, 0, 0);

/// The packed spelling of every record field, by `FieldName` discriminant.
const RECORD_KEYS: [Packed; FieldName::ALL.len()] = {
    let mut keys = [NEVER; FieldName::ALL.len()];
    let mut i = 0;
    while i < keys.len() {
        keys[i] = match FieldName::ALL[i] {
            FieldName::Other => NEVER,
            field => match packed(field.name()) {
                Some(key) => key,
                None => NEVER,
            },
        };
        i += 1;
    }
    keys
};

/// The record field whose name and closing quote start `window` (the bytes after the opening
/// quote), with how many bytes that is. Dispatches on the first letter, then compares whole
/// words; `field` is a constant at every call of `is`, so each comparison is two instructions.
#[inline(always)]
pub(super) fn record_key(window: [u8; 8]) -> Option<(FieldName, usize)> {
    use FieldName::*;
    let word = u64::from_le_bytes(window);
    let is = |field: FieldName| {
        let (key, mask, len) = RECORD_KEYS[field as usize];
        (word & mask == key).then_some((field, len))
    };
    match window[0] {
        b'o' => is(Op),
        b'n' => is(Name),
        b's' => is(Stream).or_else(|| is(Src)).or_else(|| is(Space)),
        b'r' => is(Reads),
        b'w' => is(Writes),
        b'a' => is(At).or_else(|| is(Addr)).or_else(|| is(Atomics)),
        b't' => is(Thread),
        b'i' => is(Id),
        b'k' => is(Kind),
        b'f' => is(Flags),
        b'b' => is(Buf).or_else(|| is(Bytes)),
        b'd' => is(Dst).or_else(|| is(Device)).or_else(|| is(Done)),
        b'e' => is(Event),
        b'p' => is(Pool),
        b'g' => is(Graph),
        _ => None,
    }
}

/// The keys of an access object, as the bit each one has in the duplicate check.
pub(super) const ACCESS_BUF: u8 = 1;
pub(super) const ACCESS_OFF: u8 = 2;
pub(super) const ACCESS_LEN: u8 = 4;
pub(super) const ACCESS_ARG: u8 = 8;

/// The access key (`buf`, `off`, `len`, `arg`) whose name and closing quote are `window`.
#[inline(always)]
pub(super) fn access_key(window: [u8; 4]) -> Option<u8> {
    const fn word(key: &[u8; 4]) -> u32 {
        u32::from_le_bytes(*key)
    }
    const BUF: u32 = word(b"buf\"");
    const OFF: u32 = word(b"off\"");
    const LEN: u32 = word(b"len\"");
    const ARG: u32 = word(b"arg\"");
    match u32::from_le_bytes(window) {
        BUF => Some(ACCESS_BUF),
        OFF => Some(ACCESS_OFF),
        LEN => Some(ACCESS_LEN),
        ARG => Some(ACCESS_ARG),
        _ => None,
    }
}

/// The access key spelled `key`, read as a string; `None` for a key to ignore.
pub(super) fn access_key_named(key: &str) -> Option<u8> {
    match key {
        "buf" => Some(ACCESS_BUF),
        "off" => Some(ACCESS_OFF),
        "len" => Some(ACCESS_LEN),
        "arg" => Some(ACCESS_ARG),
        _ => None,
    }
}

/// `launch` and its closing quote, packed: most records of a typical trace are launches.
/// (`OpKind::as_str` is not a `const fn`; a test checks the spelling.)
const LAUNCH: Packed = match packed("launch") {
    Some(key) => key,
    None => NEVER,
};

/// The op whose name and closing quote start `window`: only `launch` this way.
#[inline(always)]
pub(super) fn common_op(window: [u8; 8]) -> Option<(OpKind, usize)> {
    let (key, mask, len) = LAUNCH;
    (u64::from_le_bytes(window) & mask == key).then_some((OpKind::Launch, len))
}
