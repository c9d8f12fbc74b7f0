//! The primitive encodings: unsigned LEB128 varints, written to a `Vec` and read back through a
//! bounds-checked cursor over one frame body. Nothing here allocates on the read side.

/// Appends `v` as an unsigned LEB128 varint: seven bits a byte, low bits first, the high bit set
/// on every byte but the last (1 byte below 128, at most 10).
pub(crate) fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Why a read from a [`Cursor`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The body ended first.
    End,
    /// A varint longer than 10 bytes, or one whose value does not fit in 64 bits.
    Overflow,
}

/// A read position in one frame body.
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor { bytes, pos: 0 }
    }

    /// The offset of the next byte in the body.
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub(crate) fn byte(&mut self) -> Result<u8, Fault> {
        let b = *self.bytes.get(self.pos).ok_or(Fault::End)?;
        self.pos += 1;
        Ok(b)
    }

    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Fault> {
        if n > self.remaining() {
            return Err(Fault::End);
        }
        let slice = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(slice)
    }

    /// A varint. Overlong encodings of small values are accepted; values beyond 64 bits are
    /// not.
    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64, Fault> {
        // Most values (ids, counts, lengths) fit in one byte.
        if let Some(&b) = self.bytes.get(self.pos)
            && b < 0x80
        {
            self.pos += 1;
            return Ok(u64::from(b));
        }
        self.varint_slow()
    }

    fn varint_slow(&mut self) -> Result<u64, Fault> {
        let mut value = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            if i == 9 && b > 1 {
                return Err(Fault::Overflow);
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(value);
            }
        }
        Err(Fault::Overflow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put(&mut out, v);
        out
    }

    #[test]
    fn known_encodings() {
        assert_eq!(encoded(0), [0]);
        assert_eq!(encoded(127), [0x7f]);
        assert_eq!(encoded(128), [0x80, 0x01]);
        assert_eq!(encoded(300), [0xac, 0x02]);
        assert_eq!(encoded(u64::MAX).len(), 10);
        assert_eq!(*encoded(u64::MAX).last().unwrap(), 1);
    }

    #[test]
    fn round_trip_in_the_fewest_bytes() {
        let mut v = 1u64;
        for shift in 0..64 {
            for x in [v - 1, v, v + 1, v.wrapping_mul(3) >> 1, u64::MAX >> shift] {
                let bytes = encoded(x);
                let bits = 64 - (x | 1).leading_zeros() as usize;
                assert_eq!(bytes.len(), bits.div_ceil(7), "{x}");
                let mut c = Cursor::new(&bytes);
                assert_eq!(c.varint(), Ok(x));
                assert_eq!(c.remaining(), 0);
            }
            v = v.wrapping_shl(1).max(1);
        }
    }

    #[test]
    fn bad_varints_are_faults() {
        assert_eq!(Cursor::new(&[]).varint(), Err(Fault::End));
        assert_eq!(Cursor::new(&[0x80]).varint(), Err(Fault::End));
        // 2^64: the tenth byte may hold one bit only.
        let mut too_big = vec![0x80; 9];
        too_big.push(0x02);
        assert_eq!(Cursor::new(&too_big).varint(), Err(Fault::Overflow));
        // Eleven bytes.
        let mut too_long = vec![0x80; 10];
        too_long.push(0x00);
        assert_eq!(Cursor::new(&too_long).varint(), Err(Fault::Overflow));
        // Overlong zero is still zero.
        assert_eq!(Cursor::new(&[0x80, 0x00]).varint(), Ok(0));
    }

    #[test]
    fn take_and_byte_stop_at_the_end() {
        let mut c = Cursor::new(b"abc");
        assert_eq!(c.take(2), Ok(&b"ab"[..]));
        assert_eq!(c.take(2), Err(Fault::End));
        assert_eq!(c.byte(), Ok(b'c'));
        assert_eq!(c.byte(), Err(Fault::End));
        assert_eq!(c.pos(), 3);
    }
}
