//! Accesses on the fast path: a bare buffer id or an access object, and lists of them, with
//! the checks of `parse/access.rs` (duplicate keys, `buf` required, `off` and `len` together,
//! `off + len` within 64 bits).

use super::cursor::Cursor;
use super::keys::{ACCESS_ARG, ACCESS_BUF, ACCESS_LEN, ACCESS_OFF, access_key, access_key_named};
use crate::trace::record::{Access, ByteRange};
use crate::trace::spare::SpareParts;

/// A list of accesses (`reads`, `writes`); the caller has handled `null`.
pub(super) fn list(c: &mut Cursor<'_>) -> Option<Vec<Access>> {
    c.eat(b'[')?;
    if c.eat_if(b']') {
        return Some(Vec::new());
    }
    // Most lists hold one or two accesses.
    let mut list = Vec::with_capacity(2);
    loop {
        list.push(one(c)?);
        match c.next()? {
            b',' => {}
            b']' => return Some(list),
            _ => return None,
        }
    }
}

/// One access: a bare buffer id or an access object (`null` is the caller's to handle: it is
/// absent for `src` / `dst`, an error in a list).
pub(super) fn one(c: &mut Cursor<'_>) -> Option<Access> {
    if c.peek()? == b'{' {
        object(c)
    } else {
        c.u64().map(Access::whole)
    }
}

/// A list of accesses exactly as the writer writes it: `[7,{"buf":8,"arg":"x"}]`, no
/// whitespace, written over `list` ([`SpareParts::overwrite`]; one from `spare` if it has no
/// room), with strings from `spare`. On `None` (the list is not in that form), `list` holds
/// what was read before and what it held.
pub(super) fn written_list(
    c: &mut Cursor<'_>,
    spare: &mut SpareParts,
    list: &mut Vec<Access>,
) -> Option<()> {
    c.literal(b"[")?;
    if c.literal(b"]").is_some() {
        spare.truncate(list, 0);
        return Some(());
    }
    if list.capacity() == 0 {
        *list = spare.list();
    }
    let mut len = 0;
    loop {
        let access = written_one(c, spare)?;
        spare.overwrite(list, len, access);
        len += 1;
        if c.literal(b",").is_none() {
            c.literal(b"]")?;
            spare.truncate(list, len);
            return Some(());
        }
    }
}

/// One access exactly as the writer writes it: a bare buffer id or [`written_object`].
#[inline(always)]
pub(super) fn written_one(c: &mut Cursor<'_>, spare: &mut SpareParts) -> Option<Access> {
    if c.at(b'{') {
        written_object(c, spare)
    } else {
        c.digits().map(Access::whole)
    }
}

/// `{"buf": B, "off": O, "len": L, "arg": "name"}`: first as the writer writes it, else in
/// any form.
#[inline(always)]
fn object(c: &mut Cursor<'_>) -> Option<Access> {
    let start = c.position();
    if let Some(access) = written_object(c, &mut SpareParts::default()) {
        return Some(access);
    }
    c.rewind(start);
    any_object(c)
}

/// An access object exactly as the writer writes it: `{"buf":B}` or `{"buf":B,"off":O,"len":L}`,
/// either with `,"arg":"name"` before the brace; no whitespace. Its keys are distinct and its
/// values plain, so it needs none of the general loop's checks but the range's.
#[inline(always)]
fn written_object(c: &mut Cursor<'_>, spare: &mut SpareParts) -> Option<Access> {
    c.literal(b"{\"buf\":")?;
    let buf = c.digits()?;
    let range = if c.literal(b",\"off\":").is_some() {
        let off = c.digits()?;
        c.literal(b",\"len\":")?;
        let len = c.digits()?;
        off.checked_add(len)?;
        Some(ByteRange { off, len })
    } else {
        None
    };
    let arg = if c.literal(b",\"arg\":\"").is_some() {
        Some(spare.string(c.string_body()?))
    } else {
        None
    };
    c.literal(b"}")?;
    Some(Access { buf, range, arg })
}

/// An access object in any form: keys in any order, whitespace, `null`s, unknown keys.
#[inline(never)]
fn any_object(c: &mut Cursor<'_>) -> Option<Access> {
    c.eat(b'{')?;
    let (mut buf, mut off, mut len, mut arg) = (None, None, None, None);
    // An empty object lacks `buf`: an error.
    let mut seen = 0u8;
    loop {
        c.eat(b'"')?;
        let key = match c.window().and_then(access_key) {
            Some(key) => {
                c.advance(4);
                Some(key)
            }
            None => access_key_named(c.string_body()?),
        };
        c.eat(b':')?;
        match key {
            None => c.skip_value()?,
            Some(bit) if seen & bit != 0 => return None,
            Some(bit) => {
                seen |= bit;
                // `null` leaves the key absent, as on the serde path.
                if !c.null() {
                    match bit {
                        ACCESS_BUF => buf = Some(c.u64()?),
                        ACCESS_OFF => off = Some(c.u64()?),
                        ACCESS_LEN => len = Some(c.u64()?),
                        ACCESS_ARG => arg = Some(c.string()?),
                        _ => return None,
                    }
                }
            }
        }
        match c.next()? {
            b',' => {}
            b'}' => break,
            _ => return None,
        }
    }
    let range = match (off, len) {
        (None, None) => None,
        (Some(off), Some(len)) => {
            off.checked_add(len)?;
            Some(ByteRange { off, len })
        }
        _ => return None,
    };
    Some(Access {
        buf: buf?,
        range,
        arg: arg.map(str::to_owned),
    })
}
