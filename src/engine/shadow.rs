//! Per-buffer shadow state: for every byte range, the last write and, per actor, the latest
//! read since it (FastTrack's idea, with one read entry per actor instead of a read clock so
//! every unordered read can be named in a report).
//!
//! A buffer's bytes are covered by sorted, disjoint segments that share one state; an access
//! splits segments at its bounds, checks and updates the ones inside, and merges neighbours
//! whose states became equal again. Whole-buffer accesses therefore stay one segment.

use std::num::NonZeroU32;

use smallvec::SmallVec;

use super::finding::{AccessKind, RaceKind};
use super::vclock::{Epoch, VClock};

/// An interned string: 0 is "none".
pub type Sym = u32;

/// Who touched the bytes and from where, in 16 bytes: enough to rebuild a report's
/// [`super::Site`] later (with the engine's [`super::sites::Sites`]), small enough that a
/// buffer's state stays in cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteRef {
    /// The line the access ran at: its record's, or for a graph node its `graph_launch`'s.
    pub line: u64,
    /// The ordinal of the buffer accessed: across a caching block's reuse, the bytes' earlier
    /// stamps name their own buffer. Ordinals start at 1, so an `Option<Stamp>` (a state's
    /// last write) takes no room of its own.
    pub buffer: NonZeroU32,
    /// The rest of the site, interned ([`super::sites::SiteKey`]).
    pub key: u32,
}

/// One access: when (and by which actor), and from where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub epoch: Epoch,
    pub site: SiteRef,
}

/// The state of a run of bytes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Cell {
    /// The last write (including an allocation's birth); `None` when no write can race (fresh
    /// host allocation).
    pub write: Option<Stamp>,
    /// The latest read of each actor since `write` (usually one: inline).
    pub reads: SmallVec<[Stamp; 1]>,
    /// The latest atomic update of each actor since `write` (R19): atomics do not race with
    /// each other, so every unordered one must still be checked by a later plain access.
    /// Boxed: most bytes never see an atomic, and a cell stays small.
    pub atomics: Option<Box<SmallVec<[Stamp; 2]>>>,
}

impl Cell {
    /// Whether `stamp` is among the accesses this state keeps.
    #[inline]
    fn holds(&self, stamp: Stamp) -> bool {
        self.write == Some(stamp)
            || self.reads.contains(&stamp)
            || self.atomics.as_ref().is_some_and(|a| a.contains(&stamp))
    }
}

impl Clone for Cell {
    /// By hand: the reads are `Copy`, so they copy as one slice rather than one by one
    /// (splitting a buffer's state clones a cell on every view access).
    fn clone(&self) -> Cell {
        Cell {
            write: self.write,
            reads: SmallVec::from_slice(&self.reads),
            atomics: self.atomics.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Segment {
    start: u64,
    end: u64,
    cell: Cell,
}

/// An unordered earlier access found by [`RangeMap::access`], over bytes `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub kind: RaceKind,
    pub previous: Stamp,
    pub start: u64,
    pub end: u64,
}

/// How many segments' worth of bytes [`RangeMap::prefetch`] loads, whatever the buffer has:
/// a view of a buffer in one state makes three segments, and a view of a view one more.
const PREFETCHED_SEGMENTS: usize = 4;

/// The shadow state of one buffer of `len` bytes.
///
/// While all its bytes are in one state (the common case: whole-buffer accesses) that state is
/// `cell`, inline, and a whole-buffer access touches no other memory. Once a part of the buffer
/// is accessed alone, its bytes are in segments in `many`, which keeps its allocation when the
/// buffer comes back to one state (a buffer split once is usually split again).
#[derive(Clone, Debug)]
pub struct RangeMap {
    /// The state of every byte while `many` is empty.
    cell: Cell,
    len: u64,
    /// The segments, sorted and covering the buffer, while there are two or more.
    many: Vec<Segment>,
}

impl RangeMap {
    /// A buffer whose bytes all start in `cell`.
    pub fn new(len: u64, cell: Cell) -> RangeMap {
        RangeMap {
            cell,
            len,
            many: Vec::new(),
        }
    }

    /// Starts loading the start of the segments' allocation into the CPU's caches
    /// ([`PREFETCHED_SEGMENTS`] segments' worth, past its end too: a hint of any address is
    /// harmless): the segments there are, or while the bytes are in one state, the room a
    /// view's split will write its three segments to (the allocation kept from an earlier
    /// split). Nothing for a buffer never split.
    #[inline]
    pub fn prefetch(&self) {
        if self.many.capacity() > 0 {
            const BYTES: usize = PREFETCHED_SEGMENTS * std::mem::size_of::<Segment>();
            super::prefetch::span::<BYTES>(self.many.as_ptr().cast());
        }
    }

    /// The runs of bytes and their state, in order: `(start, end, cell)`.
    pub fn pieces(&self) -> impl Iterator<Item = (u64, u64, &Cell)> {
        let one = self.many.is_empty().then_some((0, self.len, &self.cell));
        one.into_iter()
            .chain(self.many.iter().map(|s| (s.start, s.end, &s.cell)))
    }

    /// A buffer of `len` bytes whose runs `pieces` (sorted, disjoint, inside `[0, len)`) have
    /// the given states and every other byte the empty state.
    pub fn from_pieces(len: u64, pieces: impl IntoIterator<Item = (u64, u64, Cell)>) -> RangeMap {
        let mut segments = Vec::new();
        let mut at = 0;
        for (start, end, cell) in pieces {
            debug_assert!(
                at <= start && start < end && end <= len,
                "{at} {start} {end} {len}"
            );
            if at < start {
                segments.push(Segment {
                    start: at,
                    end: start,
                    cell: Cell::default(),
                });
            }
            segments.push(Segment { start, end, cell });
            at = end;
        }
        if at < len || segments.is_empty() {
            segments.push(Segment {
                start: at,
                end: len,
                cell: Cell::default(),
            });
        }
        let mut map = RangeMap {
            cell: Cell::default(),
            len,
            many: segments,
        };
        let n = map.many.len();
        map.coalesce(0, n);
        map
    }

    /// Every stamp the state holds: last writes and reads.
    pub fn stamps(&self) -> impl Iterator<Item = &Stamp> {
        self.pieces().flat_map(|(_, _, cell)| {
            cell.write
                .iter()
                .chain(cell.reads.iter())
                .chain(cell.atomics.iter().flat_map(|a| a.iter()))
        })
    }

    /// Number of segments.
    #[cfg(test)]
    pub fn segments(&self) -> usize {
        self.many.len().max(1)
    }

    /// Checks bytes `[start, end)` as an access of `kind` by `stamp` whose actor knows `clock`,
    /// pushes unordered earlier accesses to `conflicts` (merging byte ranges of the same
    /// previous access), then records the access. `Free` checks like a write and reports
    /// free-while-in-use.
    #[inline(always)]
    pub fn access(
        &mut self,
        start: u64,
        end: u64,
        stamp: Stamp,
        kind: AccessKind,
        clock: &VClock,
        conflicts: &mut Vec<Conflict>,
    ) {
        if start == 0 && end == self.len && end > 0 && self.many.is_empty() {
            // The common case, in line: a whole-buffer access to a buffer in one state.
            check_and_update(&mut self.cell, (start, end), stamp, kind, clock, conflicts);
        } else {
            self.access_some(start, end, stamp, kind, clock, conflicts);
        }
    }

    /// [`RangeMap::access`] to part of the buffer, or to a buffer in several states (or of no
    /// bytes): out of line, so that the common case stays small where it is inlined.
    #[inline(never)]
    fn access_some(
        &mut self,
        start: u64,
        end: u64,
        stamp: Stamp,
        kind: AccessKind,
        clock: &VClock,
        conflicts: &mut Vec<Conflict>,
    ) {
        if start >= end {
            return;
        }
        let whole = start == 0 && end == self.len;
        if self.many.is_empty() {
            self.access_part_of_one(start, end, stamp, kind, clock, conflicts);
            return;
        }
        // The segments cover the buffer: a whole-buffer access splits none of them.
        let (first, last) = if whole {
            (0, self.many.len())
        } else {
            (self.split_at(start), self.split_at(end)) // `last` is exclusive
        };
        for seg in &mut self.many[first..last] {
            check_and_update(
                &mut seg.cell,
                (seg.start, seg.end),
                stamp,
                kind,
                clock,
                conflicts,
            );
        }
        if kind.writes_plainly() {
            // After a plain write (or an allocation, or a free) the bytes written share one
            // state: one segment, without comparing them.
            if last - first > 1 {
                self.many[first].end = self.many[last - 1].end;
                self.many.drain(first + 1..last);
            }
            // That state is the stamp alone: a neighbour equals it only if it holds the stamp
            // too (the same record wrote it).
            let holds = |i: Option<usize>| {
                i.and_then(|i| self.many.get(i))
                    .is_some_and(|s| s.cell.holds(stamp))
            };
            if holds(first.checked_sub(1)) || holds(Some(first + 1)) {
                self.coalesce(first.saturating_sub(1), (first + 2).min(self.many.len()));
            } else {
                self.back_to_one();
            }
            return;
        }
        self.coalesce(first.saturating_sub(1), (last + 1).min(self.many.len()));
    }

    /// [`RangeMap::access`] to part of a buffer whose bytes are all in one state (a view of a
    /// buffer last accessed whole): the accessed bytes get the new state and the bytes either
    /// side keep the old, made in one pass rather than by two splits and a merge.
    fn access_part_of_one(
        &mut self,
        start: u64,
        end: u64,
        stamp: Stamp,
        kind: AccessKind,
        clock: &VClock,
        conflicts: &mut Vec<Conflict>,
    ) {
        let len = self.len;
        // After the access the middle holds the stamp: it can equal the bytes either side only
        // if they held it already (the same record accessed them).
        let may_merge = self.cell.holds(stamp);
        let mut middle = Segment {
            start,
            end,
            cell: self.cell.clone(),
        };
        check_and_update(
            &mut middle.cell,
            (start, end),
            stamp,
            kind,
            clock,
            conflicts,
        );
        // The old state goes to the bytes either side, moved to the last of them.
        if start > 0 {
            let cell = if end < len {
                self.cell.clone()
            } else {
                std::mem::take(&mut self.cell)
            };
            self.many.push(Segment {
                start: 0,
                end: start,
                cell,
            });
        }
        self.many.push(middle);
        if end < len {
            self.many.push(Segment {
                start: end,
                end: len,
                cell: std::mem::take(&mut self.cell),
            });
        }
        if may_merge {
            let n = self.many.len();
            self.coalesce(0, n);
        }
    }

    /// Splits so that a segment starts at `pos` (when `pos` is inside the buffer) and returns
    /// the index of the first segment starting at or after `pos`.
    fn split_at(&mut self, pos: u64) -> usize {
        let i = self.many.partition_point(|s| s.end <= pos);
        if i == self.many.len() {
            return i;
        }
        let seg = &self.many[i];
        if seg.start == pos {
            return i;
        }
        let tail = Segment {
            start: pos,
            end: seg.end,
            cell: seg.cell.clone(),
        };
        self.many[i].end = pos;
        self.many.insert(i + 1, tail);
        i + 1
    }

    /// Merges equal neighbours among `many[from..to]`.
    fn coalesce(&mut self, from: usize, to: usize) {
        let mut i = from;
        let mut to = to;
        while i + 1 < to {
            if self.many[i].cell == self.many[i + 1].cell {
                self.many[i].end = self.many[i + 1].end;
                self.many.remove(i + 1);
                to -= 1;
            } else {
                i += 1;
            }
        }
        self.back_to_one();
    }

    /// Moves the state back inline when one segment is left.
    #[inline]
    fn back_to_one(&mut self) {
        if self.many.len() == 1 {
            self.cell = self.many.pop().expect("one segment").cell;
        }
    }
}

#[inline(always)]
fn check_and_update(
    cell: &mut Cell,
    (start, end): (u64, u64),
    stamp: Stamp,
    access: AccessKind,
    clock: &VClock,
    out: &mut Vec<Conflict>,
) {
    match access {
        AccessKind::Read => {
            if let Some(w) = cell.write
                && !clock.covers(w.epoch)
            {
                push(out, RaceKind::ReadAfterWrite, w, start, end);
            }
            if let Some(atomics) = &cell.atomics {
                unordered_atomics(atomics, RaceKind::ReadAfterWrite, clock, out, (start, end));
            }
            latest_per_actor(&mut cell.reads, stamp);
        }
        AccessKind::Atomic => atomic(cell, stamp, clock, out, (start, end)),
        AccessKind::Write | AccessKind::Allocate | AccessKind::Free => {
            let free = access == AccessKind::Free;
            let (after_write, after_read) = if free {
                (RaceKind::FreeWhileInUse, RaceKind::FreeWhileInUse)
            } else {
                (RaceKind::WriteAfterWrite, RaceKind::WriteAfterRead)
            };
            if let Some(w) = cell.write
                && !clock.covers(w.epoch)
            {
                push(out, after_write, w, start, end);
            }
            for r in &cell.reads {
                if !clock.covers(r.epoch) {
                    push(out, after_read, *r, start, end);
                }
            }
            if let Some(atomics) = cell.atomics.take() {
                unordered_atomics(&atomics, after_write, clock, out, (start, end));
            }
            cell.write = Some(stamp);
            cell.reads.clear();
        }
    }
}

/// R19: an atomic is checked against plain accesses only; the write and the reads stay, since
/// a later plain access must still be ordered after them or be reported. Out of line: most
/// programs have few atomics, and the common path stays small.
#[cold]
#[inline(never)]
fn atomic(
    cell: &mut Cell,
    stamp: Stamp,
    clock: &VClock,
    out: &mut Vec<Conflict>,
    (start, end): (u64, u64),
) {
    if let Some(w) = cell.write
        && !clock.covers(w.epoch)
    {
        push(out, RaceKind::WriteAfterWrite, w, start, end);
    }
    for r in &cell.reads {
        if !clock.covers(r.epoch) {
            push(out, RaceKind::WriteAfterRead, *r, start, end);
        }
    }
    latest_per_actor(cell.atomics.get_or_insert_default(), stamp);
}

/// Reports each of `atomics` that `clock` does not cover as a conflict of `kind`.
#[cold]
#[inline(never)]
fn unordered_atomics(
    atomics: &[Stamp],
    kind: RaceKind,
    clock: &VClock,
    out: &mut Vec<Conflict>,
    (start, end): (u64, u64),
) {
    for a in atomics {
        if !clock.covers(a.epoch) {
            push(out, kind, *a, start, end);
        }
    }
}

/// Keeps `stamp` as its actor's latest entry in `list`.
fn latest_per_actor<A: smallvec::Array<Item = Stamp>>(list: &mut SmallVec<A>, stamp: Stamp) {
    match list.iter_mut().find(|r| r.epoch.actor == stamp.epoch.actor) {
        Some(r) => *r = stamp,
        None => list.push(stamp),
    }
}

/// Adds a conflict, extending an earlier one with the same previous access and kind.
fn push(out: &mut Vec<Conflict>, kind: RaceKind, previous: Stamp, start: u64, end: u64) {
    if let Some(c) = out
        .iter_mut()
        .find(|c| c.kind == kind && c.previous == previous)
    {
        c.start = c.start.min(start);
        c.end = c.end.max(end);
    } else {
        out.push(Conflict {
            kind,
            previous,
            start,
            end,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::vclock::ActorIdx;

    /// Actor `actor`'s `tick`-th operation, at trace line `line`.
    fn stamp(actor: u32, tick: u32, line: u64) -> Stamp {
        let actor = ActorIdx(actor);
        Stamp {
            epoch: Epoch { actor, tick },
            site: SiteRef {
                line,
                buffer: NonZeroU32::MIN,
                key: 0,
            },
        }
    }

    fn clock(ticks: &[u32]) -> VClock {
        let mut c = VClock::new();
        for (a, &t) in ticks.iter().enumerate() {
            for _ in 0..t {
                c.tick(ActorIdx(a as u32));
            }
        }
        c
    }

    /// One access to bytes `range` by actor `who.0` at its tick `who.1` (trace line `line`),
    /// which knows `knows`; the conflicts it finds.
    fn access(
        m: &mut RangeMap,
        range: (u64, u64),
        who: (u32, u32, u64),
        kind: AccessKind,
        knows: &[u32],
    ) -> Vec<Conflict> {
        let mut out = Vec::new();
        let (actor, tick, line) = who;
        let s = stamp(actor, tick, line);
        m.access(range.0, range.1, s, kind, &clock(knows), &mut out);
        out
    }

    use AccessKind::{Atomic, Free, Read, Write};

    #[test]
    fn unordered_read_after_write_is_reported_on_the_overlap_only() {
        let mut m = RangeMap::new(100, Cell::default());
        assert!(access(&mut m, (0, 50), (0, 1, 2), Write, &[1]).is_empty());
        let out = access(&mut m, (40, 80), (1, 1, 3), Read, &[0, 1]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].kind, RaceKind::ReadAfterWrite);
        assert_eq!((out[0].start, out[0].end), (40, 50));
        assert_eq!(out[0].previous.site.line, 2);
    }

    #[test]
    fn disjoint_ranges_never_conflict() {
        let mut m = RangeMap::new(100, Cell::default());
        assert!(access(&mut m, (0, 50), (0, 1, 2), Write, &[1]).is_empty());
        assert!(access(&mut m, (50, 100), (1, 1, 3), Write, &[0, 1]).is_empty());
    }

    #[test]
    fn ordered_accesses_do_not_conflict() {
        let mut m = RangeMap::new(8, Cell::default());
        assert!(access(&mut m, (0, 8), (0, 1, 2), Write, &[1]).is_empty());
        assert!(access(&mut m, (0, 8), (1, 1, 3), Read, &[1, 1]).is_empty());
    }

    #[test]
    fn write_conflicts_with_each_unordered_read_and_the_last_write() {
        let mut m = RangeMap::new(8, Cell::default());
        assert!(access(&mut m, (0, 8), (0, 1, 2), Write, &[1]).is_empty());
        assert!(access(&mut m, (0, 8), (1, 1, 3), Read, &[1, 1]).is_empty());
        assert!(access(&mut m, (0, 8), (2, 1, 4), Read, &[1, 0, 1]).is_empty());
        // Actor 3 knows actor 1's read but neither the write nor actor 2's read.
        let out = access(&mut m, (0, 8), (3, 1, 5), Write, &[0, 1, 0, 1]);
        let mut got: Vec<_> = out.iter().map(|c| (c.kind, c.previous.site.line)).collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (RaceKind::WriteAfterRead, 4),
                (RaceKind::WriteAfterWrite, 2)
            ]
        );
    }

    #[test]
    fn latest_read_per_actor_replaces_the_earlier_one() {
        let mut m = RangeMap::new(8, Cell::default());
        access(&mut m, (0, 8), (1, 1, 3), Read, &[0, 1]);
        access(&mut m, (0, 8), (1, 2, 4), Read, &[0, 2]);
        let out = access(&mut m, (0, 8), (0, 1, 5), Write, &[1]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].previous.site.line, 4);
    }

    /// R19: unordered atomics on two actors do not race; every one of them still races with a
    /// later plain read, write or free that is not ordered after it.
    #[test]
    fn atomics_race_only_with_plain_accesses() {
        let mut m = RangeMap::new(8, Cell::default());
        assert!(access(&mut m, (0, 8), (0, 1, 2), Atomic, &[1]).is_empty());
        assert!(access(&mut m, (0, 8), (1, 1, 3), Atomic, &[0, 1]).is_empty());
        // A reader that knows actor 0's atomic but not actor 1's.
        let out = access(&mut m, (0, 4), (2, 1, 4), Read, &[1, 0, 1]);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].kind, out[0].previous.site.line),
            (RaceKind::ReadAfterWrite, 3)
        );
        // An atomic after that unordered read races with it, not with the other atomics.
        let out = access(&mut m, (0, 8), (0, 2, 5), Atomic, &[2]);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].kind, out[0].previous.site.line, out[0].end),
            (RaceKind::WriteAfterRead, 4, 4)
        );
        // A free that knows nothing: every atomic (the latest of each actor) and the read.
        let out = access(&mut m, (0, 8), (3, 1, 6), Free, &[0, 0, 0, 1]);
        let mut got: Vec<_> = out.iter().map(|c| (c.kind, c.previous.site.line)).collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (RaceKind::FreeWhileInUse, 3),
                (RaceKind::FreeWhileInUse, 4),
                (RaceKind::FreeWhileInUse, 5)
            ]
        );
    }

    #[test]
    fn an_atomic_races_with_an_unordered_plain_write_and_a_plain_write_ends_the_atomics() {
        let mut m = RangeMap::new(8, Cell::default());
        assert!(access(&mut m, (0, 8), (0, 1, 2), Write, &[1]).is_empty());
        let out = access(&mut m, (0, 8), (1, 1, 3), Atomic, &[0, 1]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].kind, RaceKind::WriteAfterWrite);
        // A plain write ordered after the atomic (actor 0 learned actor 1's tick 1) ends it.
        assert!(access(&mut m, (0, 8), (0, 2, 4), Write, &[2, 1]).is_empty());
        assert!(access(&mut m, (0, 8), (2, 1, 5), Read, &[2, 1, 1]).is_empty());
    }

    #[test]
    fn free_reports_free_while_in_use() {
        let mut m = RangeMap::new(8, Cell::default());
        access(&mut m, (0, 8), (1, 1, 3), Read, &[0, 1]);
        let out = access(&mut m, (0, 8), (0, 1, 4), Free, &[1]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].kind, RaceKind::FreeWhileInUse);
    }

    #[test]
    fn conflicts_over_several_segments_merge_into_one_range() {
        let mut m = RangeMap::new(100, Cell::default());
        access(&mut m, (0, 100), (0, 1, 2), Write, &[1]);
        // Actor 1 reads the middle (ordered), splitting the buffer into three segments.
        assert!(access(&mut m, (30, 60), (1, 1, 3), Read, &[1, 1]).is_empty());
        assert_eq!(m.segments(), 3);
        // Actor 2, unordered with the write, reads everything.
        let out = access(&mut m, (0, 100), (2, 1, 4), Read, &[0, 0, 1]);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].start, out[0].end), (0, 100));
    }

    #[test]
    fn a_whole_write_coalesces_segments() {
        let mut m = RangeMap::new(100, Cell::default());
        access(&mut m, (10, 20), (0, 1, 2), Write, &[1]);
        access(&mut m, (50, 70), (0, 2, 3), Write, &[2]);
        assert_eq!(m.segments(), 5);
        access(&mut m, (0, 100), (0, 3, 4), Write, &[3]);
        assert_eq!(m.segments(), 1);
    }

    /// The same random accesses applied to a range map and to one state per byte (each byte
    /// checked on its own): the same conflicts in the same order, the same state for every
    /// byte, and no two neighbouring segments in equal states. This pins the segment
    /// arithmetic (splits, the one-pass split of a buffer in one state, merges) to the
    /// definition.
    #[test]
    fn segments_behave_as_one_state_per_byte() {
        const LEN: u64 = 24;
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let kinds = [Read, Write, Atomic, AccessKind::Allocate, Free];
        for _ in 0..2000 {
            let mut map = RangeMap::new(LEN, Cell::default());
            let mut bytes: Vec<Segment> = (0..LEN)
                .map(|b| Segment {
                    start: b,
                    end: b + 1,
                    cell: Cell::default(),
                })
                .collect();
            let mut ticks = [0u32; 3];
            for line in 2..2 + next(12) + 1 {
                let actor = next(3) as usize;
                ticks[actor] += 1;
                // What the actor knows of the others: anything up to their latest tick.
                let knows: Vec<u32> = (0..3)
                    .map(|a| {
                        if a == actor {
                            ticks[a]
                        } else {
                            next(ticks[a] as u64 + 1) as u32
                        }
                    })
                    .collect();
                let (clock, s) = (clock(&knows), stamp(actor as u32, ticks[actor], line));
                let kind = kinds[next(kinds.len() as u64) as usize];
                // Once or twice in one record (one stamp), as a record may name a buffer twice.
                for _ in 0..1 + next(2) {
                    // Whole buffer, an edge, or a middle part: every shape of split.
                    let (start, end) = match next(3) {
                        0 => (0, LEN),
                        _ => {
                            let a = next(LEN);
                            (a, a + 1 + next(LEN - a))
                        }
                    };
                    let mut got = Vec::new();
                    map.access(start, end, s, kind, &clock, &mut got);
                    let mut want = Vec::new();
                    for b in &mut bytes[start as usize..end as usize] {
                        let range = (b.start, b.end);
                        check_and_update(&mut b.cell, range, s, kind, &clock, &mut want);
                    }
                    assert_eq!(got, want, "{kind:?} [{start}, {end}) at line {line}");
                }
                let mut at = 0;
                let pieces: Vec<_> = map.pieces().collect();
                for (i, &(a, b, cell)) in pieces.iter().enumerate() {
                    assert_eq!(a, at, "segments cover the buffer in order");
                    assert!(a < b);
                    for byte in a..b {
                        assert_eq!(cell, &bytes[byte as usize].cell, "byte {byte}");
                    }
                    if i > 0 {
                        let before = pieces[i - 1].2;
                        assert_ne!(before, cell, "neighbours at {a} are not merged");
                    }
                    at = b;
                }
                assert_eq!(at, LEN);
            }
        }
    }
}
