//! A set of ids as a bit per id: the sanitizer numbers its events 1, 2, 3, ... and asks about
//! them around every launch when cudarc's event tracking is on, two per buffer argument. A
//! hash set of tens of thousands of events missed the cache on each question; one bit per
//! event ever made stays in it.

/// Ids below [`DENSE_IDS`] are bits (2 MiB at most); larger ones (the sanitizer's own
/// numbering reaches them only after 16 million events) go to a hash set.
const DENSE_IDS: u64 = 1 << 24;

#[derive(Debug, Default)]
pub(crate) struct IdSet {
    words: Vec<u64>,
    sparse: rustc_hash::FxHashSet<u64>,
}

impl IdSet {
    pub(crate) fn insert(&mut self, id: u64) {
        if id >= DENSE_IDS {
            self.sparse.insert(id);
            return;
        }
        let (word, bit) = ((id / 64) as usize, id % 64);
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        self.words[word] |= 1 << bit;
    }

    pub(crate) fn remove(&mut self, id: u64) {
        if id >= DENSE_IDS {
            self.sparse.remove(&id);
        } else if let Some(w) = self.words.get_mut((id / 64) as usize) {
            *w &= !(1 << (id % 64));
        }
    }

    pub(crate) fn contains(&self, id: u64) -> bool {
        if id >= DENSE_IDS {
            return self.sparse.contains(&id);
        }
        self.words
            .get((id / 64) as usize)
            .is_some_and(|w| w & (1 << (id % 64)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_go_in_and_out_whatever_their_size() {
        let mut s = IdSet::default();
        let ids = [0, 1, 63, 64, 65, 1000, DENSE_IDS - 1, DENSE_IDS, u64::MAX];
        for &id in &ids {
            assert!(!s.contains(id));
            s.insert(id);
            assert!(s.contains(id));
        }
        assert!(!s.contains(2) && !s.contains(999) && !s.contains(DENSE_IDS + 1));
        for &id in &ids {
            s.remove(id);
            assert!(!s.contains(id), "{id}");
        }
        s.remove(123_456);
        assert!(!s.contains(123_456));
    }
}
