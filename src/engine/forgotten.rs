//! The ids of freed buffers whose details the engine let go of, as runs of consecutive ids:
//! recorders that number buffers in allocation order free them in runs too, so the set stays
//! a handful of runs however long the program runs.

use std::collections::BTreeMap;

use crate::trace::record::BufId;

/// A set of buffer ids kept as disjoint runs `start..=last`.
#[derive(Debug, Default)]
pub(super) struct Forgotten {
    /// `start -> last` of each run; runs neither overlap nor touch.
    runs: BTreeMap<BufId, BufId>,
}

impl Forgotten {
    /// True when no id is in the set.
    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The run holding `id`, if any.
    fn run_of(&self, id: BufId) -> Option<(BufId, BufId)> {
        let (&start, &last) = self.runs.range(..=id).next_back()?;
        (id <= last).then_some((start, last))
    }

    pub(super) fn contains(&self, id: BufId) -> bool {
        self.run_of(id).is_some()
    }

    /// Adds `id`, joining it to the runs either side.
    pub(super) fn insert(&mut self, id: BufId) {
        if self.contains(id) {
            return;
        }
        let (mut start, mut last) = (id, id);
        if let Some((s, _)) = id.checked_sub(1).and_then(|before| self.run_of(before)) {
            self.runs.remove(&s);
            start = s;
        }
        if let Some(next) = id.checked_add(1)
            && let Some(l) = self.runs.remove(&next)
        {
            last = l;
        }
        self.runs.insert(start, last);
    }

    /// Removes `id` (its buffer was allocated again), splitting its run.
    pub(super) fn remove(&mut self, id: BufId) {
        let Some((start, last)) = self.run_of(id) else {
            return;
        };
        self.runs.remove(&start);
        if start < id {
            self.runs.insert(start, id - 1);
        }
        if id < last {
            self.runs.insert(id + 1, last);
        }
    }

    /// Number of runs (for tests of compactness).
    #[cfg(test)]
    pub(super) fn runs(&self) -> usize {
        self.runs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_ids_stay_one_run_and_removal_splits_it() {
        let mut f = Forgotten::default();
        assert!(f.is_empty());
        for id in 10..1010 {
            f.insert(id);
        }
        assert_eq!(f.runs(), 1);
        assert!(f.contains(10) && f.contains(1009));
        assert!(!f.contains(9) && !f.contains(1010));
        f.remove(500);
        assert_eq!(f.runs(), 2);
        assert!(!f.contains(500) && f.contains(499) && f.contains(501));
        f.insert(500);
        assert_eq!(f.runs(), 1);
        f.remove(10);
        f.remove(1009);
        assert!(!f.contains(10) && f.contains(11) && f.contains(1008) && !f.contains(1009));
        assert_eq!(f.runs(), 1);
    }

    #[test]
    fn ids_out_of_order_join_from_both_sides() {
        let mut f = Forgotten::default();
        for id in [5, 3, 7, 4, 6, 3] {
            f.insert(id);
        }
        assert_eq!(f.runs(), 1);
        assert!((3..=7).all(|id| f.contains(id)));
        assert!(!f.contains(2) && !f.contains(8));
        f.insert(0);
        assert_eq!(f.runs(), 2);
        assert!(f.contains(0) && !f.contains(1));
    }

    #[test]
    fn the_extreme_ids_work() {
        let mut f = Forgotten::default();
        f.insert(0);
        f.insert(BufId::MAX);
        f.insert(BufId::MAX - 1);
        assert!(f.contains(0) && f.contains(BufId::MAX) && f.contains(BufId::MAX - 1));
        assert!(!f.contains(1) && !f.contains(BufId::MAX - 2));
        f.remove(BufId::MAX);
        assert!(!f.contains(BufId::MAX) && f.contains(BufId::MAX - 1));
        f.remove(0);
        assert!(!f.contains(0));
    }
}
