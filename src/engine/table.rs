//! Objects by trace id in dense slots: the ids recorders write are arbitrary `u64` handles, but
//! most are small counters, so an id below [`DIRECT_IDS`] finds its slot by indexing a vector
//! and only larger ids (device pointers, say) go through a hash map. The values sit next to
//! each other, so the hot path reads one small index entry and one value, never a hash bucket
//! holding a whole object.

use rustc_hash::FxHashMap;

/// Ids below this are indexed directly (at most 4 bytes each, grown on demand).
pub(super) const DIRECT_IDS: u64 = 1 << 22;

/// A map from trace ids to values. The engine keeps tombstones of freed objects by id until
/// the id is used again (which replaces the value in its slot) or it lets them go
/// ([`IdTable::remove`]).
#[derive(Debug)]
pub(super) struct IdTable<V> {
    /// `slot + 1` of each id below [`DIRECT_IDS`]; 0 when absent.
    direct: Vec<u32>,
    /// Slots of larger ids.
    spill: FxHashMap<u64, u32>,
    values: Vec<V>,
    /// The id of each slot.
    ids: Vec<u64>,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            direct: Vec::new(),
            spill: FxHashMap::default(),
            values: Vec::new(),
            ids: Vec::new(),
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

    /// Asks the CPU to start loading `id`'s value into its caches, without waiting for it: the
    /// caller knows it will read the value soon (a later record of the batch), and with
    /// thousands of objects the load would otherwise be a stall on the hot path.
    #[inline]
    pub(super) fn prefetch(&self, id: u64) {
        if let Some(value) = self.slot(id).and_then(|s| self.values.get(s)) {
            super::prefetch::lines(value);
        }
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
        self.set_slot(id, slot);
        self.values.push(value);
        self.ids.push(id);
    }

    /// Points `id` at `slot`.
    fn set_slot(&mut self, id: u64, slot: u32) {
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
    }

    /// Takes `id`'s value out; the last slot's value moves into its slot, so slots from
    /// [`IdTable::slot`] are good only until the next removal.
    pub(super) fn remove(&mut self, id: u64) -> Option<V> {
        let slot = self.slot(id)?;
        if id < DIRECT_IDS {
            self.direct[id as usize] = 0;
        } else {
            self.spill.remove(&id);
        }
        let value = self.values.swap_remove(slot);
        self.ids.swap_remove(slot);
        if let Some(&moved) = self.ids.get(slot) {
            self.set_slot(moved, slot as u32);
        }
        Some(value)
    }

    /// How many ids have a value (tombstones included).
    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    /// Every value (in order of first insertion of its id, until a removal).
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

    #[test]
    fn removing_moves_the_last_value_and_keeps_every_other_id() {
        let mut t = IdTable::default();
        let ids = [3, DIRECT_IDS + 5, 9, u64::MAX, 0];
        for id in ids {
            t.insert(id, id ^ 1);
        }
        assert_eq!(t.remove(9), Some(9 ^ 1));
        assert_eq!(t.remove(9), None);
        assert!(t.get(&9).is_none());
        assert_eq!(t.remove(DIRECT_IDS + 5), Some((DIRECT_IDS + 5) ^ 1));
        for id in [3, u64::MAX, 0] {
            assert_eq!(t[&id], id ^ 1);
        }
        assert_eq!(t.len(), 3);
        t.insert(9, 7);
        assert_eq!((t[&9], t.len()), (7, 4));
        for id in [0, 3, 9, u64::MAX] {
            assert!(t.remove(id).is_some());
        }
        assert_eq!(t.len(), 0);
    }
}
