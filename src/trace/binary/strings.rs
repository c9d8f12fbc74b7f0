//! The string table: kernel names, source locations and argument names are defined once, in a
//! string frame, and referred to by index afterwards, so a repeated name costs a byte or two.
//! Both sides stop adding strings at the same limits ([`MAX_STRINGS`], [`MAX_STRING_BYTES`]):
//! the writer then writes strings literally, and a reader refuses a file that defines more, so
//! memory stays bounded whatever the trace's length.

use rustc_hash::FxHashMap;

use super::{MAX_STRING_BYTES, MAX_STRINGS};

/// How the writer refers to a string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ref {
    /// Defined earlier, at this index.
    Known(u32),
    /// Not defined yet: the writer defines it (a string frame) before the record using it, and
    /// it gets this index.
    New(u32),
    /// The table is full: the text goes inline in the record.
    Literal,
}

/// The writer's side: which strings have which index.
#[derive(Debug, Default)]
pub(crate) struct Interner {
    index: FxHashMap<Box<str>, u32>,
    bytes: usize,
}

impl Interner {
    /// How `s` is referred to; a [`Ref::New`] string is in the table from now on.
    pub(crate) fn intern(&mut self, s: &str) -> Ref {
        if let Some(&i) = self.index.get(s) {
            return Ref::Known(i);
        }
        if !fits(self.index.len(), self.bytes, s.len()) {
            return Ref::Literal;
        }
        let i = self.index.len() as u32;
        self.bytes += s.len();
        self.index.insert(s.into(), i);
        Ref::New(i)
    }

    /// Forgets the strings added since the table held `len` strings (a record that could not
    /// be written must not leave definitions behind that were never written).
    pub(crate) fn truncate(&mut self, len: usize) {
        if self.index.len() > len {
            let bytes = &mut self.bytes;
            self.index.retain(|s, i| {
                let keep = (*i as usize) < len;
                if !keep {
                    *bytes -= s.len();
                }
                keep
            });
        }
    }

    /// How many strings are defined.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }
}

/// Whether a table of `count` strings and `bytes` bytes may take one more of `len` bytes.
fn fits(count: usize, bytes: usize, len: usize) -> bool {
    count < MAX_STRINGS && bytes + len <= MAX_STRING_BYTES
}

/// Why a string frame was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DefineError {
    /// The text is not UTF-8; the offset of the first invalid byte.
    NotUtf8 { valid_up_to: usize },
    /// The table is full.
    Full,
}

/// The reader's side: the strings defined so far, by index.
#[derive(Debug, Default)]
pub(crate) struct StringTable {
    strings: Vec<Box<str>>,
    bytes: usize,
}

impl StringTable {
    /// Defines the next string.
    pub(crate) fn define(&mut self, text: &[u8]) -> Result<(), DefineError> {
        if !fits(self.strings.len(), self.bytes, text.len()) {
            return Err(DefineError::Full);
        }
        let s = std::str::from_utf8(text).map_err(|e| DefineError::NotUtf8 {
            valid_up_to: e.valid_up_to(),
        })?;
        self.bytes += s.len();
        self.strings.push(s.into());
        Ok(())
    }

    /// String `i`, if defined.
    #[inline]
    pub(crate) fn get(&self, i: u64) -> Option<&str> {
        self.strings.get(usize::try_from(i).ok()?).map(|s| &**s)
    }

    /// How many strings are defined.
    pub(crate) fn len(&self) -> usize {
        self.strings.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_use_defines_then_refers() {
        let mut w = Interner::default();
        assert_eq!(w.intern("gemm"), Ref::New(0));
        assert_eq!(w.intern("axpy"), Ref::New(1));
        assert_eq!(w.intern("gemm"), Ref::Known(0));
        assert_eq!(w.len(), 2);
        w.truncate(1);
        assert_eq!(w.intern("axpy"), Ref::New(1));
        assert_eq!(w.intern("gemm"), Ref::Known(0));

        let mut r = StringTable::default();
        r.define(b"gemm").unwrap();
        assert_eq!(r.get(0), Some("gemm"));
        assert_eq!(r.get(1), None);
        assert_eq!(r.get(u64::MAX), None);
        assert_eq!(
            r.define(b"a\xffb"),
            Err(DefineError::NotUtf8 { valid_up_to: 1 })
        );
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn both_sides_stop_at_the_same_limit() {
        let big = "x".repeat(MAX_STRING_BYTES / 2);
        let mut w = Interner::default();
        let mut r = StringTable::default();
        assert_eq!(w.intern(&big), Ref::New(0));
        r.define(big.as_bytes()).unwrap();
        let bigger = "y".repeat(MAX_STRING_BYTES / 2 + 1);
        assert_eq!(w.intern(&bigger), Ref::Literal);
        assert_eq!(r.define(bigger.as_bytes()), Err(DefineError::Full));
        // Smaller strings still fit.
        assert_eq!(w.intern("z"), Ref::New(1));
        r.define(b"z").unwrap();
    }
}
