//! What the engine made of the last records' name, location, op and thread (their symbols and
//! their sites' memo, [`super::sites::Sites::of_record`]), in a direct-mapped cache keyed by a
//! hash of the raw strings: a program calls the same kernels from the same places over and
//! over, and a hit costs one hash and two string comparisons instead of two interned lookups
//! and a hashed key.

use std::hash::{BuildHasher, Hash, Hasher};

use rustc_hash::FxBuildHasher;

use super::hints::RecordHint;
use super::sites::RecordKey;
use super::symbols::Symbols;
use crate::trace::record::{OpKind, Record};

/// Entries (a power of two).
pub(super) const SLOTS: usize = 256;

#[derive(Debug)]
pub(super) struct Recent {
    slots: Box<[Option<(u64, RecordKey, u32)>; SLOTS]>,
    /// The same for records that came with a hint ([`super::hints`]), by the hint's slot, with
    /// the hint's number in place of the hash.
    hinted: Box<[Option<(u64, RecordKey, u32)>; SLOTS]>,
}

impl Default for Recent {
    fn default() -> Self {
        Recent {
            slots: Box::new([None; SLOTS]),
            hinted: Box::new([None; SLOTS]),
        }
    }
}

/// The hash of a record's raw key, and its slot.
#[inline]
pub(super) fn hash_of(record: &Record, op: OpKind) -> (u64, usize) {
    let mut h = FxBuildHasher.build_hasher();
    record.name.hash(&mut h);
    record.at.hash(&mut h);
    op.hash(&mut h);
    record.thread.hash(&mut h);
    let hash = h.finish();
    (hash, (hash >> (64 - SLOTS.trailing_zeros())) as usize)
}

impl Recent {
    /// The key and memo made for a record like `record` (of `op`, hashed by [`hash_of`]), if
    /// cached.
    #[inline]
    pub(super) fn find(
        &self,
        (hash, slot): (u64, usize),
        record: &Record,
        op: OpKind,
        symbols: &Symbols,
    ) -> Option<(RecordKey, u32)> {
        let (seen, key, memo) = self.slots[slot]?;
        (seen == hash
            && key.op == op
            && key.thread == record.thread
            && symbols.is(key.name, record.name.as_deref())
            && symbols.is(key.at, record.at.as_deref()))
        .then_some((key, memo))
    }

    /// Caches what was made for the record of hash `hash`.
    pub(super) fn put(&mut self, (hash, slot): (u64, usize), key: RecordKey, memo: u32) {
        self.slots[slot] = Some((hash, key, memo));
    }

    /// The key and memo made for the record that had `hint` before, if cached: no string is
    /// read, as a hint names one content.
    #[inline]
    pub(super) fn find_hinted(&self, hint: RecordHint) -> Option<(RecordKey, u32)> {
        let (seen, key, memo) = self.hinted[hint.slot()]?;
        (seen == hint.id()).then_some((key, memo))
    }

    /// How many hinted records are cached.
    #[cfg(test)]
    pub(super) fn hinted_in_use(&self) -> usize {
        self.hinted.iter().flatten().count()
    }

    /// Caches what was made for the record of `hint`.
    pub(super) fn put_hinted(&mut self, hint: RecordHint, key: RecordKey, memo: u32) {
        self.hinted[hint.slot()] = Some((hint.id(), key, memo));
    }
}
