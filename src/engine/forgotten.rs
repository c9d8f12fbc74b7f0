//! The ids of freed buffers whose details the engine let go of, with their memory space (a
//! copy's synchronization depends on it), as runs of consecutive ids in one space: recorders
//! that number buffers in allocation order free them in runs too, so the set stays a handful
//! of runs however long the program runs.

use std::collections::BTreeMap;

use crate::trace::record::{BufId, MemSpace};

/// A set of buffer ids kept as disjoint runs `start..=last` of one space each.
#[derive(Debug, Default)]
pub(super) struct Forgotten {
    /// `start -> (last, space)` of each run; runs do not overlap, and touching runs differ
    /// in space.
    runs: BTreeMap<BufId, (BufId, MemSpace)>,
}

impl Forgotten {
    /// True when no id is in the set.
    pub(super) fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// The run holding `id`, if any: `(start, last, space)`.
    fn run_of(&self, id: BufId) -> Option<(BufId, BufId, MemSpace)> {
        let (&start, &(last, space)) = self.runs.range(..=id).next_back()?;
        (id <= last).then_some((start, last, space))
    }

    /// The memory space of forgotten buffer `id`; `None` when `id` is not forgotten.
    pub(super) fn space(&self, id: BufId) -> Option<MemSpace> {
        self.run_of(id).map(|(_, _, space)| space)
    }

    pub(super) fn contains(&self, id: BufId) -> bool {
        self.run_of(id).is_some()
    }

    /// Adds `id`, a buffer of `space`, joining it to the runs of that space either side.
    pub(super) fn insert(&mut self, id: BufId, space: MemSpace) {
        if self.contains(id) {
            return;
        }
        let (mut start, mut last) = (id, id);
        if let Some((s, _, _)) = id
            .checked_sub(1)
            .and_then(|before| self.run_of(before))
            .filter(|run| run.2 == space)
        {
            self.runs.remove(&s);
            start = s;
        }
        if let Some(next) = id.checked_add(1)
            && self.runs.get(&next).is_some_and(|run| run.1 == space)
            && let Some((l, _)) = self.runs.remove(&next)
        {
            last = l;
        }
        self.runs.insert(start, (last, space));
    }

    /// Removes `id` (its buffer was allocated again), splitting its run.
    pub(super) fn remove(&mut self, id: BufId) {
        let Some((start, last, space)) = self.run_of(id) else {
            return;
        };
        self.runs.remove(&start);
        if start < id {
            self.runs.insert(start, (id - 1, space));
        }
        if id < last {
            self.runs.insert(id + 1, (last, space));
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

    const D: MemSpace = MemSpace::Device;

    #[test]
    fn consecutive_ids_stay_one_run_and_removal_splits_it() {
        let mut f = Forgotten::default();
        assert!(f.is_empty());
        for id in 10..1010 {
            f.insert(id, D);
        }
        assert_eq!(f.runs(), 1);
        assert!(f.contains(10) && f.contains(1009));
        assert!(!f.contains(9) && !f.contains(1010));
        f.remove(500);
        assert_eq!(f.runs(), 2);
        assert!(!f.contains(500) && f.contains(499) && f.contains(501));
        f.insert(500, D);
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
            f.insert(id, D);
        }
        assert_eq!(f.runs(), 1);
        assert!((3..=7).all(|id| f.contains(id)));
        assert!(!f.contains(2) && !f.contains(8));
        f.insert(0, D);
        assert_eq!(f.runs(), 2);
        assert!(f.contains(0) && !f.contains(1));
    }

    #[test]
    fn runs_keep_their_space_and_touching_runs_of_two_spaces_stay_apart() {
        let mut f = Forgotten::default();
        for id in 1..=3 {
            f.insert(id, D);
        }
        f.insert(4, MemSpace::Pinned);
        f.insert(5, D);
        assert_eq!(f.runs(), 3);
        assert_eq!(f.space(2), Some(D));
        assert_eq!(f.space(4), Some(MemSpace::Pinned));
        assert_eq!(f.space(5), Some(D));
        assert_eq!(f.space(6), None);
        f.remove(2);
        assert_eq!(
            (f.space(1), f.space(2), f.space(3)),
            (Some(D), None, Some(D))
        );
    }

    #[test]
    fn the_extreme_ids_work() {
        let mut f = Forgotten::default();
        f.insert(0, D);
        f.insert(BufId::MAX, D);
        f.insert(BufId::MAX - 1, D);
        assert!(f.contains(0) && f.contains(BufId::MAX) && f.contains(BufId::MAX - 1));
        assert!(!f.contains(1) && !f.contains(BufId::MAX - 2));
        f.remove(BufId::MAX);
        assert!(!f.contains(BufId::MAX) && f.contains(BufId::MAX - 1));
        f.remove(0);
        assert!(!f.contains(0));
    }
}
