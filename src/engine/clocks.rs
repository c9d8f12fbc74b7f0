//! The actor table: every stream and host thread with its vector clock, and the two verbs of
//! happens-before, `tick` (an actor does something) and `join` (an actor learns what another
//! knew). Each join remembers, per component it raised, the call through which the knowledge
//! arrived, so a report can name the last synchronization between two actors.
//!
//! Actors end (a destroyed stream, the lanes of a destroyed graph); an ended actor's slot is
//! given to a new actor once every host thread knows all of its work, so that the table, and
//! every clock's length, stays bounded by the actors that can still race rather than growing
//! with every stream a program ever made.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::finding::{LastSync, StreamInfo};
use super::vclock::{ActorIdx, Epoch, Tick, VClock};
use crate::trace::record::{GraphId, StreamId, ThreadId};

/// Who an actor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ActorKind {
    Stream(StreamId),
    Host(ThreadId),
    /// The nodes of a graph captured on one stream, as they run at a launch.
    Lane {
        graph: GraphId,
        stream: StreamId,
    },
}

/// A stream or host thread with its vector clock.
#[derive(Debug)]
struct Actor {
    kind: ActorKind,
    clock: VClock,
    /// `learned[i]`: the call through which this actor last learned more of actor `i`.
    learned: Vec<Option<LastSync>>,
    /// Bumped whenever `clock` changes, so a stream can skip re-joining a host clock it has
    /// already joined (the common case: a host enqueuing many operations between syncs).
    version: u64,
    /// The trace line of the actor's latest operation (0 before any).
    last_line: u64,
}

/// An actor that has ended (its stream destroyed, its graph destroyed), whose slot is not
/// yet given to another.
#[derive(Debug)]
pub(super) struct Ended {
    pub actor: ActorIdx,
    /// Its own tick when it ended: all of its work.
    last: Tick,
    /// For a destroyed stream: what reports name it by, and whether the legacy stream still
    /// waits for its work (R6, R20).
    pub stream: Option<EndedStream>,
}

/// What a destroyed stream leaves: its work may still be running (R20).
#[derive(Debug)]
pub(super) struct EndedStream {
    pub info: StreamInfo,
    pub blocking: bool,
}

/// How many ended actors a new actor looks at for a slot to take: a bounded cost per new
/// actor, however many ended actors wait for a host thread to learn their work.
const SLOT_CANDIDATES: usize = 8;

/// How many former actors of reused slots are kept to name the maker of an old stamp: a
/// use after free reports the free however long ago it was (tombstones are kept for the last
/// 131,072 frees), so a free by a destroyed stream must still be named as that stream.
const FORMERS_KEPT: usize = 65_536;

/// An actor whose slot went to another: who it was, and its last tick (its stamps are those
/// of the slot at or below it, above the slot's previous former actor's).
#[derive(Debug)]
struct Former {
    actor: ActorIdx,
    last: Tick,
    kind: ActorKind,
    stream: Option<StreamInfo>,
}

/// Who made a stamp.
#[derive(Debug)]
pub(super) enum Maker<'a> {
    /// The slot's actor now.
    Now(ActorKind),
    /// An actor whose slot went to another: a destroyed stream names itself.
    Former {
        kind: ActorKind,
        stream: Option<&'a StreamInfo>,
    },
}

/// Every actor, with the host threads found by thread id.
#[derive(Debug, Default)]
pub(super) struct Actors {
    list: Vec<Actor>,
    threads: FxHashMap<ThreadId, ActorIdx>,
    /// The last (thread, actor) looked up: most traces issue from one thread.
    last_thread: Option<(ThreadId, ActorIdx)>,
    /// Ended actors whose slots are not yet reused, oldest first.
    ended: VecDeque<Ended>,
    /// For each reused slot, the last tick of the actors that held it: every host thread knew
    /// it when the slot was given away, and every new actor starts knowing it (an operation is
    /// made or enqueued by a host thread and first learns what that thread knows, R1; a host
    /// thread first seen later is taken to know it, as R16's dropped history).
    floor: VClock,
    /// The latest [`FORMERS_KEPT`] actors whose slots went to others, oldest first.
    formers: VecDeque<Former>,
}

impl Actors {
    /// A new actor that knows only the floor: an ended actor's slot when every host thread
    /// knows that actor's work, else a new slot.
    pub(super) fn add(&mut self, kind: ActorKind) -> ActorIdx {
        if let Some((actor, last, stream)) = self.take_ended_slot() {
            if self.formers.len() == FORMERS_KEPT {
                self.formers.pop_front();
            }
            let a = &mut self.list[actor.index()];
            self.formers.push_back(Former {
                actor,
                last,
                kind: a.kind,
                stream: stream.map(|s| s.info),
            });
            a.kind = kind;
            a.clock.clone_from(&self.floor);
            a.learned.clear();
            a.version += 1;
            a.last_line = 0;
            // What others learned of the slot's old actor says nothing of the new one.
            for other in &mut self.list {
                if let Some(l) = other.learned.get_mut(actor.index()) {
                    *l = None;
                }
            }
            return actor;
        }
        self.list.push(Actor {
            kind,
            clock: self.floor.clone(),
            learned: Vec::new(),
            version: 0,
            last_line: 0,
        });
        ActorIdx((self.list.len() - 1) as u32)
    }

    /// `actor` does nothing more; `stream` for a destroyed stream.
    pub(super) fn end(&mut self, actor: ActorIdx, stream: Option<EndedStream>) {
        let last = self.own_tick(actor);
        self.ended.push_back(Ended {
            actor,
            last,
            stream,
        });
    }

    /// The destroyed streams whose slots are not reused yet: their work may still run.
    pub(super) fn ended_streams(&self) -> impl Iterator<Item = (ActorIdx, &EndedStream)> {
        self.ended
            .iter()
            .filter_map(|e| e.stream.as_ref().map(|s| (e.actor, s)))
    }

    /// An ended actor's slot whose work every host thread knows, taken off the ended list
    /// and its last tick raised into the floor. Looks at the oldest few; those not yet known
    /// go to the back, so that one a host thread never learns does not block the others.
    fn take_ended_slot(&mut self) -> Option<(ActorIdx, Tick, Option<EndedStream>)> {
        for _ in 0..SLOT_CANDIDATES.min(self.ended.len()) {
            let e = self.ended.pop_front().expect("counted");
            let known = self
                .threads
                .values()
                .all(|&h| self.list[h.index()].clock.get(e.actor) >= e.last);
            if known {
                self.floor.raise(e.actor, e.last);
                return Some((e.actor, e.last, e.stream));
            }
            self.ended.push_back(e);
        }
        None
    }

    /// The actor of host thread `thread`, made on first use.
    #[inline]
    pub(super) fn host(&mut self, thread: ThreadId) -> ActorIdx {
        if let Some((t, a)) = self.last_thread
            && t == thread
        {
            return a;
        }
        self.host_looked_up(thread)
    }

    /// [`Actors::host`] of a thread other than the last one asked about.
    #[inline(never)]
    fn host_looked_up(&mut self, thread: ThreadId) -> ActorIdx {
        let a = match self.threads.get(&thread) {
            Some(&a) => a,
            None => {
                let a = self.add(ActorKind::Host(thread));
                self.threads.insert(thread, a);
                a
            }
        };
        self.last_thread = Some((thread, a));
        a
    }

    /// How many slots the table holds (live and ended actors).
    #[cfg(test)]
    pub(super) fn slots(&self) -> usize {
        self.list.len()
    }

    pub(super) fn kind(&self, actor: ActorIdx) -> ActorKind {
        self.list[actor.index()].kind
    }

    /// Who made a stamp at `epoch`: the slot's actor now, or the former actor of the slot
    /// whose work it was (`None` once that one is no longer kept).
    pub(super) fn maker(&self, epoch: Epoch) -> Option<Maker<'_>> {
        if epoch.tick > self.floor.get(epoch.actor) {
            return Some(Maker::Now(self.kind(epoch.actor)));
        }
        let former = self
            .formers
            .iter()
            .filter(|f| f.actor == epoch.actor && f.last >= epoch.tick)
            .min_by_key(|f| f.last)?;
        Some(Maker::Former {
            kind: former.kind,
            stream: former.stream.as_ref(),
        })
    }

    pub(super) fn clock(&self, actor: ActorIdx) -> &VClock {
        &self.list[actor.index()].clock
    }

    /// The clock's version: it changes whenever the clock does.
    pub(super) fn version(&self, actor: ActorIdx) -> u64 {
        self.list[actor.index()].version
    }

    /// The actor's own count of its operations so far.
    pub(super) fn now(&self, actor: ActorIdx) -> Epoch {
        Epoch {
            actor,
            tick: self.own_tick(actor),
        }
    }

    fn own_tick(&self, actor: ActorIdx) -> Tick {
        self.clock(actor).get(actor)
    }

    /// The actor performs an operation, the record at `line`.
    #[inline]
    pub(super) fn tick(&mut self, actor: ActorIdx, line: u64) {
        let a = &mut self.list[actor.index()];
        a.clock.tick(actor);
        a.version += 1;
        a.last_line = line;
    }

    /// The trace line of the actor's latest operation.
    pub(super) fn last_line(&self, actor: ActorIdx) -> u64 {
        self.list[actor.index()].last_line
    }

    /// `dst` learns everything `src` knows, through the call `via`.
    pub(super) fn join(&mut self, dst: ActorIdx, src: ActorIdx, via: LastSync) {
        if dst == src {
            return;
        }
        let clock = std::mem::take(&mut self.list[src.index()].clock);
        self.join_clock(dst, &clock, via);
        self.list[src.index()].clock = clock;
    }

    /// `dst` learns everything in `clock`, through the call `via`. True when it learned
    /// something new.
    pub(super) fn join_clock(&mut self, dst: ActorIdx, clock: &VClock, via: LastSync) -> bool {
        let a = &mut self.list[dst.index()];
        let floor = &self.floor;
        let mut changed = false;
        let learned = &mut a.learned;
        a.clock.join_with(clock, |actor| {
            changed = true;
            // Up to the floor it learned of the slot's earlier actors, not of its actor now.
            if clock.get(actor) <= floor.get(actor) {
                return;
            }
            let i = actor.index();
            if learned.len() <= i {
                learned.resize(i + 1, None);
            }
            learned[i] = Some(via);
        });
        if changed {
            a.version += 1;
        }
        changed
    }

    /// What every host thread knows of each actor: the component-wise minimum of the host
    /// threads' clocks (all zeros when there is none). Every later access is made by a host
    /// thread or enqueued by one, and an enqueued operation first learns what its host thread
    /// knows (R1), so a stamp this covers can race with no later access (by the actors seen so
    /// far).
    pub(super) fn known_by_all_hosts(&self) -> Vec<Tick> {
        let n = self.list.len();
        let hosts: Vec<&Actor> = self
            .list
            .iter()
            .filter(|a| matches!(a.kind, ActorKind::Host(_)))
            .collect();
        (0..n)
            .map(|i| {
                let a = ActorIdx(i as u32);
                hosts.iter().map(|x| x.clock.get(a)).min().unwrap_or(0)
            })
            .collect()
    }

    /// The call through which `actor` last learned more of `other`'s work, if it ever did.
    pub(super) fn learned(&self, actor: ActorIdx, other: ActorIdx) -> Option<LastSync> {
        self.list[actor.index()]
            .learned
            .get(other.index())
            .copied()
            .flatten()
    }
}

/// Whether `joined` lacks `(actor, version)`; records it. Clocks only grow, so a stream that
/// joined an actor's clock at some version already knows everything up to that version.
pub(super) fn needs_join(joined: &mut Vec<(ActorIdx, u64)>, actor: ActorIdx, version: u64) -> bool {
    match joined.iter_mut().find(|(a, _)| *a == actor) {
        Some((_, v)) if *v == version => false,
        Some((_, v)) => {
            *v = version;
            true
        }
        None => {
            joined.push((actor, version));
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::record::OpKind;

    fn via(line: u64) -> LastSync {
        LastSync {
            line,
            op: OpKind::Wait,
        }
    }

    #[test]
    fn joins_remember_where_knowledge_came_from_and_bump_versions() {
        let mut actors = Actors::default();
        let a = actors.add(ActorKind::Stream(1));
        let b = actors.add(ActorKind::Stream(2));
        actors.tick(a, 3);
        assert_eq!(actors.last_line(a), 3);
        let v = actors.version(b);
        actors.join(b, a, via(7));
        assert_eq!(actors.learned(b, a), Some(via(7)));
        assert!(actors.version(b) > v);
        assert!(actors.clock(b).covers(actors.now(a)));
        // Nothing new: nothing remembered, no new version.
        let v = actors.version(b);
        actors.join(b, a, via(9));
        assert_eq!(actors.learned(b, a), Some(via(7)));
        assert_eq!(actors.version(b), v);
        assert_eq!(actors.learned(a, b), None);
    }

    #[test]
    fn host_threads_get_one_actor_each() {
        let mut actors = Actors::default();
        let t0 = actors.host(0);
        let t5 = actors.host(5);
        assert_ne!(t0, t5);
        assert_eq!(actors.host(0), t0);
        assert_eq!(actors.kind(t5), ActorKind::Host(5));
    }

    #[test]
    fn needs_join_once_per_version() {
        let mut joined = Vec::new();
        assert!(needs_join(&mut joined, ActorIdx(1), 3));
        assert!(!needs_join(&mut joined, ActorIdx(1), 3));
        assert!(needs_join(&mut joined, ActorIdx(1), 4));
        assert!(needs_join(&mut joined, ActorIdx(2), 4));
    }
}
