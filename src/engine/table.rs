//! Objects by trace id in dense slots: the ids recorders write are arbitrary `u64` handles, but
//! most are small counters, so an id below [`DIRECT_IDS`] finds its slot by indexing a vector
//! and only larger ids (device pointers, say) go through a hash map. The values sit next to
//! each other, so the hot path reads one small index entry and one value, never a hash bucket
//! holding a whole object.

use rustc_hash::FxHashMap;

/// Ids below this are indexed directly (at most 4 bytes each, grown on demand).
pub(super) const DIRECT_IDS: u64 = 1 << 22;

/// A map from trace ids to values. Entries are never removed (the engine keeps tombstones of
/// freed objects by id until the id is used again, which replaces the value in its slot).
#[derive(Debug)]
pub(super) struct IdTable<V> {
    /// `slot + 1` of each id below [`DIRECT_IDS`]; 0 when absent.
    direct: Vec<u32>,
    /// Slots of larger ids.
    spill: FxHashMap<u64, u32>,
    values: Vec<V>,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            direct: Vec::new(),
            spill: FxHashMap::default(),
            values: Vec::new(),
        }
    }
}

impl<V> IdTable<V> {
    /// The slot of `id`, if present.
    #[inline]
    pub(super) fn slot(&self, id: u64) -> Option<usize> {
        if id < DIRECT_IDS {
            match self.direct.get(id as usize) {
                Some(&s) if s != 0 => Some(s as usize - 1),
                _ => None,
            }
        } else {
            self.spill.get(&id).map(|&s| s as usize)
        }
    }

    #[inline]
    pub(super) fn get(&self, id: &u64) -> Option<&V> {
        self.slot(*id).map(|s| &self.values[s])
    }

    #[inline]
    pub(super) fn get_mut(&mut self, id: &u64) -> Option<&mut V> {
        self.slot(*id).map(|s| &mut self.values[s])
    }

    /// The value in `slot` (from [`IdTable::slot`]).
    #[inline]
    pub(super) fn at_mut(&mut self, slot: usize) -> &mut V {
        &mut self.values[slot]
    }

    /// Sets `id`'s value, replacing the one it had.
    pub(super) fn insert(&mut self, id: u64, value: V) {
        if let Some(s) = self.slot(id) {
            self.values[s] = value;
            return;
        }
        let slot = u32::try_from(self.values.len()).expect("fewer than 2^32 objects");
        if id < DIRECT_IDS {
            let i = id as usize;
            if self.direct.len() <= i {
                let len = (i + 1).max(self.direct.len() * 2).min(DIRECT_IDS as usize);
                self.direct.resize(len, 0);
            }
            self.direct[i] = slot + 1;
        } else {
            self.spill.insert(id, slot);
        }
        self.values.push(value);
    }

    /// How many ids have a value (tombstones included).
    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    /// Every value, in order of first insertion of its id.
    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.values.iter()
    }
}

impl<V> std::ops::Index<&u64> for IdTable<V> {
    type Output = V;

    fn index(&self, id: &u64) -> &V {
        self.get(id).expect("an id in the table")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_ids_find_their_values_and_insert_replaces() {
        let mut t = IdTable::default();
        for id in [0, 7, DIRECT_IDS - 1, DIRECT_IDS, u64::MAX, 0x7f00_dead_beef] {
            assert!(t.get(&id).is_none());
            t.insert(id, id.wrapping_mul(3));
        }
        for id in [0, 7, DIRECT_IDS - 1, DIRECT_IDS, u64::MAX, 0x7f00_dead_beef] {
            assert_eq!(t[&id], id.wrapping_mul(3));
        }
        assert!(t.get(&8).is_none());
        t.insert(7, 1);
        assert_eq!(t[&7], 1);
        assert_eq!(t.values().count(), 6, "replacing keeps one slot");
    }
}
