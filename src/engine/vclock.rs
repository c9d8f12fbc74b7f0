//! Vector clocks: the vocabulary of happens-before.
//!
//! Every actor (a stream, or a host thread) has an index; an [`Epoch`] names one point of one
//! actor's history; a [`VClock`] is what an actor knows of every actor's history. `a` happens
//! before an access by actor `b` exactly when `b`'s clock *covers* `a`'s epoch.

/// The index of an actor (stream or host thread) in the engine's actor table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActorIdx(pub u32);

impl ActorIdx {
    /// As an index into per-actor tables.
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// One actor's count of its own operations. Zero means "nothing yet".
pub type Tick = u32;

/// A point in one actor's history: its `tick`-th operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Epoch {
    pub actor: ActorIdx,
    pub tick: Tick,
}

/// A vector clock. Invariant: no trailing zeros, so the derived `Eq` is equality of clocks.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct VClock(Vec<Tick>);

impl Clone for VClock {
    fn clone(&self) -> VClock {
        VClock(self.0.clone())
    }

    /// Reuses this clock's allocation: an event recorded again takes a new snapshot in place.
    fn clone_from(&mut self, source: &VClock) {
        self.0.clone_from(&source.0);
    }
}

impl VClock {
    /// The empty clock: knows of nothing.
    #[cfg(test)]
    pub fn new() -> VClock {
        VClock(Vec::new())
    }

    /// What this clock knows of `actor`.
    #[inline]
    pub fn get(&self, actor: ActorIdx) -> Tick {
        self.0.get(actor.index()).copied().unwrap_or(0)
    }

    /// Advances `actor`'s own component and returns the new epoch.
    #[inline]
    pub fn tick(&mut self, actor: ActorIdx) -> Epoch {
        let i = actor.index();
        if self.0.len() <= i {
            self.0.resize(i + 1, 0);
        }
        self.0[i] += 1;
        debug_assert!(self.is_canonical());
        Epoch {
            actor,
            tick: self.0[i],
        }
    }

    /// Learns that `actor` reached `tick`, if it knew less.
    pub fn raise(&mut self, actor: ActorIdx, tick: Tick) {
        let i = actor.index();
        if tick > self.get(actor) {
            if self.0.len() <= i {
                self.0.resize(i + 1, 0);
            }
            self.0[i] = tick;
        }
        debug_assert!(self.is_canonical());
    }

    /// True when `epoch` happened before (or is) what this clock knows.
    #[inline]
    pub fn covers(&self, epoch: Epoch) -> bool {
        epoch.tick <= self.get(epoch.actor)
    }

    /// Acquire: learn everything `other` knows. Calls `raised(actor)` for each component that
    /// grew, so callers can remember where knowledge arrived from.
    #[inline]
    pub fn join_with(&mut self, other: &VClock, mut raised: impl FnMut(ActorIdx)) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (i, (mine, theirs)) in self.0.iter_mut().zip(other.0.iter()).enumerate() {
            if *theirs > *mine {
                *mine = *theirs;
                raised(ActorIdx(i as u32));
            }
        }
        debug_assert!(self.is_canonical());
    }

    /// The partial order: every component of `self` is at most `other`'s.
    #[cfg(test)]
    pub fn le(&self, other: &VClock) -> bool {
        self.0
            .iter()
            .enumerate()
            .all(|(i, t)| *t <= other.get(ActorIdx(i as u32)))
    }

    /// The type's invariant: no trailing zeros (so the derived `Eq` compares clocks).
    fn is_canonical(&self) -> bool {
        self.0.last() != Some(&0)
    }

    /// The raw components (an actor past the end has seen nothing of itself yet: 0).
    pub fn as_slice(&self) -> &[Tick] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vc(ticks: &[Tick]) -> VClock {
        let mut c = VClock::new();
        for (a, &t) in ticks.iter().enumerate() {
            for _ in 0..t {
                c.tick(ActorIdx(a as u32));
            }
        }
        c
    }

    #[test]
    fn tick_returns_the_new_epoch_and_only_moves_its_actor() {
        let mut c = VClock::new();
        assert_eq!(
            c.tick(ActorIdx(2)),
            Epoch {
                actor: ActorIdx(2),
                tick: 1
            }
        );
        assert_eq!(
            c.tick(ActorIdx(2)),
            Epoch {
                actor: ActorIdx(2),
                tick: 2
            }
        );
        assert_eq!(c.as_slice(), &[0, 0, 2]);
        assert_eq!(c.get(ActorIdx(0)), 0);
        assert_eq!(c.get(ActorIdx(7)), 0);
    }

    #[test]
    fn covers_is_inclusive_and_per_actor() {
        let c = vc(&[3, 1]);
        let at = |actor, tick| Epoch {
            actor: ActorIdx(actor),
            tick,
        };
        assert!(c.covers(at(0, 3)));
        assert!(!c.covers(at(0, 4)));
        assert!(c.covers(at(1, 1)));
        assert!(!c.covers(at(5, 1)));
    }

    #[test]
    fn join_takes_the_maximum_and_reports_raised_components() {
        let mut a = vc(&[3, 0, 1]);
        let b = vc(&[1, 2, 1, 4]);
        let mut raised = Vec::new();
        a.join_with(&b, |i| raised.push(i));
        assert_eq!(a.as_slice(), &[3, 2, 1, 4]);
        assert_eq!(raised, vec![ActorIdx(1), ActorIdx(3)]);
    }

    /// The order in both directions for every pair of a small table.
    #[test]
    fn le_table() {
        let cases: &[(&[Tick], &[Tick], bool, bool)] = &[
            (&[], &[], true, true),
            (&[1], &[], false, true),
            (&[1, 2], &[1, 2], true, true),
            (&[1, 2], &[2, 2], true, false),
            (&[1, 3], &[2, 2], false, false),
            (&[0, 0, 1], &[5], false, false),
        ];
        for (x, y, x_le_y, y_le_x) in cases {
            let (x, y) = (vc(x), vc(y));
            assert_eq!(x.le(&y), *x_le_y, "{x:?} <= {y:?}");
            assert_eq!(y.le(&x), *y_le_x, "{y:?} <= {x:?}");
        }
    }
}
