//! Per-buffer shadow state: for every byte range, the last write and, per actor, the latest
//! read since it (FastTrack's idea, with one read entry per actor instead of a read clock so
//! every unordered read can be named in a report).
//!
//! A buffer's bytes share one base state, except for sorted, disjoint runs of bytes (overlays)
//! in states of their own. An access to part of the buffer gives the bytes it covers overlays
//! (splitting overlays at its bounds), checks and updates them, and drops or merges overlays
//! that became equal to the base or to a touching overlay. Whole-buffer accesses to a buffer in
//! one state therefore touch the base alone, and a view of it adds one overlay.

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
#[derive(Debug, Default, Eq)]
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
    #[inline(always)]
    fn holds(&self, stamp: Stamp) -> bool {
        self.write == Some(stamp)
            || self.reads.contains(&stamp)
            || self.atomics.as_ref().is_some_and(|a| a.contains(&stamp))
    }

    /// Whether recording an access of `kind` by `stamp` ([`update`]) leaves this state as it
    /// is: it holds the stamp already where the access would put it (the same record accessed
    /// these bytes before).
    #[inline(always)]
    fn unchanged_by(&self, stamp: Stamp, kind: AccessKind) -> bool {
        match kind {
            AccessKind::Read => self.reads.contains(&stamp),
            AccessKind::Atomic => self.atomics.as_ref().is_some_and(|a| a.contains(&stamp)),
            AccessKind::Write | AccessKind::Allocate | AccessKind::Free => {
                self.write == Some(stamp) && self.reads.is_empty() && self.atomics.is_none()
            }
        }
    }

    /// This state after an access of `kind` by `stamp` (see [`update`]). A plain write leaves
    /// nothing of the old state: it is not copied.
    #[inline(always)]
    fn updated(&self, stamp: Stamp, kind: AccessKind) -> Cell {
        if kind.writes_plainly() {
            return Cell {
                write: Some(stamp),
                ..Cell::default()
            };
        }
        let mut cell = self.clone();
        update(&mut cell, stamp, kind);
        cell
    }

    /// Whether the reads and atomics since the last write are the same (the rest of `==`).
    #[inline(never)]
    fn same_accesses_since(&self, other: &Cell) -> bool {
        self.reads == other.reads && self.atomics == other.atomics
    }
}

impl Clone for Cell {
    /// By hand: the common state has at most one read and no atomics, and copies as values,
    /// in line; more reads or atomics copy out of line (a view's access copies a state).
    #[inline(always)]
    fn clone(&self) -> Cell {
        let reads = match self.reads.as_slice() {
            [] => SmallVec::new(),
            &[one] => SmallVec::from_buf([one]),
            more => copy_reads(more),
        };
        Cell {
            write: self.write,
            reads,
            atomics: self.atomics.as_deref().map(copy_atomics),
        }
    }
}

/// [`Cell::clone`]'s copy of more than one read.
#[cold]
#[inline(never)]
fn copy_reads(reads: &[Stamp]) -> SmallVec<[Stamp; 1]> {
    SmallVec::from_slice(reads)
}

/// [`Cell::clone`]'s copy of the atomics.
#[cold]
#[inline(never)]
fn copy_atomics(atomics: &SmallVec<[Stamp; 2]>) -> Box<SmallVec<[Stamp; 2]>> {
    Box::new(atomics.clone())
}

impl PartialEq for Cell {
    /// By hand, to be inlined where overlays are compared: states of different writes (the
    /// common unequal pair) differ at the first comparison.
    #[inline(always)]
    fn eq(&self, other: &Cell) -> bool {
        self.write == other.write && self.same_accesses_since(other)
    }
}

/// The bytes `[start, end)` in a state of their own (an overlay).
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

/// How many overlays' worth of bytes [`RangeMap::prefetch`] loads, whatever the buffer has:
/// a view of a buffer in one state makes one overlay, and views of other parts more.
const PREFETCHED_SEGMENTS: usize = 4;

/// The shadow state of one buffer of `len` bytes.
///
/// While all its bytes are in one state (the common case: whole-buffer accesses) that state is
/// `base`, inline, and a whole-buffer access touches no other memory. Once a part of the buffer
/// is accessed alone, that part gets an overlay in `over` and the rest keeps `base`: a view
/// copies one state, not three, and a later whole access checks the rest's state once. `over`
/// keeps its allocation when the buffer comes back to one state (a buffer split once is usually
/// split again).
#[derive(Clone, Debug)]
pub struct RangeMap {
    /// The state of every byte no overlay covers.
    base: Cell,
    len: u64,
    /// The overlays: sorted and disjoint, none in `base`'s state and no two touching ones in
    /// equal states (so [`RangeMap::pieces`] never yields equal neighbours), and not one
    /// covering the whole buffer (that state would be `base`).
    over: Vec<Segment>,
}

impl RangeMap {
    /// A buffer whose bytes all start in `cell`.
    pub fn new(len: u64, cell: Cell) -> RangeMap {
        RangeMap {
            base: cell,
            len,
            over: Vec::new(),
        }
    }

    /// Starts loading the start of the overlays' allocation into the CPU's caches
    /// ([`PREFETCHED_SEGMENTS`] overlays' worth, past its end too: a hint of any address is
    /// harmless): the overlays there are, or while the bytes are in one state, the room a
    /// view's overlay will be written to (the allocation kept from an earlier split). Nothing
    /// for a buffer never split.
    #[inline]
    pub fn prefetch(&self) {
        if self.over.capacity() > 0 {
            const BYTES: usize = PREFETCHED_SEGMENTS * std::mem::size_of::<Segment>();
            super::prefetch::span::<BYTES>(self.over.as_ptr().cast());
        }
    }

    /// The runs of bytes and their state, in order: `(start, end, cell)`. No two neighbours are
    /// in equal states; a buffer in one state is one run (`(0, 0, _)` for a buffer of no bytes).
    pub fn pieces(&self) -> impl Iterator<Item = (u64, u64, &Cell)> {
        let (mut at, mut next, mut done) = (0, 0, false);
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let overlay = self.over.get(next);
            let base_to = overlay.map_or(self.len, |o| o.start);
            if at < base_to || self.over.is_empty() {
                let run = (at, base_to, &self.base);
                at = base_to;
                done = overlay.is_none();
                return Some(run);
            }
            let Some(o) = overlay else {
                done = true;
                return None;
            };
            next += 1;
            at = o.end;
            Some((o.start, o.end, &o.cell))
        })
    }

    /// A buffer of `len` bytes whose runs `pieces` (sorted, disjoint, inside `[0, len)`) have
    /// the given states and every other byte the empty state.
    pub fn from_pieces(len: u64, pieces: impl IntoIterator<Item = (u64, u64, Cell)>) -> RangeMap {
        let mut map = RangeMap::new(len, Cell::default());
        let mut at = 0;
        for (start, end, cell) in pieces {
            debug_assert!(
                at <= start && start < end && end <= len,
                "{at} {start} {end} {len}"
            );
            at = end;
            if cell == map.base {
                continue;
            }
            match map.over.last_mut() {
                Some(last) if last.end == start && last.cell == cell => last.end = end,
                _ => map.over.push(Segment { start, end, cell }),
            }
        }
        map.back_to_one();
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

    /// Number of runs of bytes in different states ([`RangeMap::pieces`]).
    #[cfg(test)]
    pub fn segments(&self) -> usize {
        self.pieces().count()
    }

    /// Panics unless the overlays are as [`RangeMap`] says: sorted, disjoint and inside the
    /// buffer, none in the base's state, no two touching ones equal, not one covering all.
    #[cfg(test)]
    fn assert_invariants(&self) {
        let mut at = 0;
        for (i, o) in self.over.iter().enumerate() {
            assert!(
                at <= o.start && o.start < o.end && o.end <= self.len,
                "{self:?}"
            );
            assert_ne!(o.cell, self.base, "overlay {i} is in the base's state");
            if i > 0 && self.over[i - 1].end == o.start {
                assert_ne!(
                    self.over[i - 1].cell,
                    o.cell,
                    "overlay {i} equals the one before"
                );
            }
            at = o.end;
        }
        let covering = |o: &Segment| o.start == 0 && o.end == self.len;
        assert!(
            !matches!(self.over.as_slice(), [o] if covering(o)),
            "{self:?}"
        );
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
        if start == 0 && end == self.len && end > 0 && self.over.is_empty() {
            // The common case, in line: a whole-buffer access to a buffer in one state.
            check_and_update(&mut self.base, (start, end), stamp, kind, clock, conflicts);
        } else {
            match kind {
                AccessKind::Read => {
                    self.access_some_plain::<false>(start, end, stamp, clock, conflicts)
                }
                AccessKind::Write => {
                    self.access_some_plain::<true>(start, end, stamp, clock, conflicts)
                }
                _ => {
                    let a = Accessing { stamp, kind, clock };
                    self.access_some_other(start, end, a, conflicts);
                }
            }
        }
    }

    /// [`RangeMap::access`] by a plain read (or, with `WRITE`, a plain write) to part of the
    /// buffer, or to a buffer in several states (or of no bytes): out of line, so that the
    /// common case stays small where it is inlined, and one copy for each common kind, so that
    /// the checks inside need not branch on it.
    #[inline(never)]
    fn access_some_plain<const WRITE: bool>(
        &mut self,
        start: u64,
        end: u64,
        stamp: Stamp,
        clock: &VClock,
        conflicts: &mut Vec<Conflict>,
    ) {
        let kind = if WRITE {
            AccessKind::Write
        } else {
            AccessKind::Read
        };
        self.access_some(start, end, Accessing { stamp, kind, clock }, conflicts);
    }

    /// [`RangeMap::access_some_plain`] for the other kinds.
    #[inline(never)]
    fn access_some_other(
        &mut self,
        start: u64,
        end: u64,
        a: Accessing<'_>,
        out: &mut Vec<Conflict>,
    ) {
        self.access_some(start, end, a, out);
    }

    /// [`RangeMap::access`] to part of the buffer, or to a buffer in several states (or of no
    /// bytes).
    #[inline(always)]
    fn access_some(
        &mut self,
        start: u64,
        end: u64,
        access: Accessing<'_>,
        conflicts: &mut Vec<Conflict>,
    ) {
        if start >= end {
            return;
        }
        if self.over.is_empty() {
            self.access_part_of_one(start, end, access, conflicts);
        } else if start == 0 && end == self.len {
            self.access_all(access, conflicts);
        } else {
            self.access_part(start, end, access, conflicts);
        }
    }

    /// [`RangeMap::access`] to part of a buffer whose bytes are all in one state (a view of a
    /// buffer last accessed whole): the part gets an overlay in the new state, the rest keeps
    /// the base.
    #[inline(always)]
    fn access_part_of_one(
        &mut self,
        start: u64,
        end: u64,
        a: Accessing<'_>,
        out: &mut Vec<Conflict>,
    ) {
        check(&self.base, (start, end), a.kind, a.clock, out);
        if !self.base.unchanged_by(a.stamp, a.kind) {
            let cell = self.base.updated(a.stamp, a.kind);
            self.over.push(Segment { start, end, cell });
        }
    }

    /// [`RangeMap::access`] to the whole of a buffer with overlays: every run is checked in
    /// order, the base's runs against the base alone, and the base updated once.
    #[inline(always)]
    fn access_all(&mut self, a: Accessing<'_>, out: &mut Vec<Conflict>) {
        if self.over.len() == 1 {
            return self.access_all_of_two(a, out);
        }
        let mut base_found = None;
        let mut at = 0;
        let writes = a.kind.writes_plainly();
        for o in &mut self.over {
            if at < o.start {
                check_base_run(&self.base, (at, o.start), &mut base_found, a, out);
            }
            check(&o.cell, (o.start, o.end), a.kind, a.clock, out);
            if !writes {
                update(&mut o.cell, a.stamp, a.kind);
            }
            at = o.end;
        }
        if at < self.len {
            check_base_run(&self.base, (at, self.len), &mut base_found, a, out);
        }
        update(&mut self.base, a.stamp, a.kind);
        if writes {
            // Every byte is in the stamp's state alone: the base's.
            self.over.clear();
            return;
        }
        // Every run holds the stamp now, the base too: any may have become equal to another.
        let n = self.over.len();
        self.tidy(0, n, true);
    }

    /// [`RangeMap::access_all`] to a buffer with one overlay (the common split): the base's
    /// bytes either side of it are checked once, unless the first check found something.
    #[inline(always)]
    fn access_all_of_two(&mut self, a: Accessing<'_>, out: &mut Vec<Conflict>) {
        let (base, o) = (&mut self.base, &mut self.over[0]);
        let found = o.start > 0 && check(base, (0, o.start), a.kind, a.clock, out);
        check(&o.cell, (o.start, o.end), a.kind, a.clock, out);
        if o.end < self.len && (o.start == 0 || found) {
            check(base, (o.end, self.len), a.kind, a.clock, out);
        }
        update(base, a.stamp, a.kind);
        // A plain write leaves one state, the base's; otherwise both hold the stamp now.
        let one = a.kind.writes_plainly() || {
            update(&mut o.cell, a.stamp, a.kind);
            o.cell == *base
        };
        if one {
            self.over.clear();
        }
    }

    /// [`RangeMap::access`] to part of a buffer with overlays. The common shapes (the part
    /// inside a run of the base, or exactly one overlay's bytes) are handled without splitting.
    #[inline(always)]
    fn access_part(&mut self, start: u64, end: u64, a: Accessing<'_>, out: &mut Vec<Conflict>) {
        let i = self.over.partition_point(|o| o.end <= start);
        match self.over.get(i) {
            Some(o) if o.start < end => {
                if o.start == start && o.end == end {
                    self.access_overlay(i, a, out);
                } else {
                    self.access_parts(start, end, a, out);
                }
            }
            _ => self.access_part_of_base(i, start, end, a, out),
        }
    }

    /// [`RangeMap::access`] to bytes `[start, end)` in a run of the base, before overlay `i`:
    /// they get an overlay of their own, merged with a touching one in an equal state.
    #[inline(always)]
    fn access_part_of_base(
        &mut self,
        i: usize,
        start: u64,
        end: u64,
        a: Accessing<'_>,
        out: &mut Vec<Conflict>,
    ) {
        check(&self.base, (start, end), a.kind, a.clock, out);
        if self.base.unchanged_by(a.stamp, a.kind) {
            return;
        }
        let cell = self.base.updated(a.stamp, a.kind);
        let before = i > 0 && self.over[i - 1].end == start && self.over[i - 1].cell == cell;
        let after = i < self.over.len() && self.over[i].start == end && self.over[i].cell == cell;
        match (before, after) {
            (true, true) => {
                self.over[i - 1].end = self.over[i].end;
                self.over.remove(i);
            }
            (true, false) => self.over[i - 1].end = end,
            (false, true) => self.over[i].start = start,
            (false, false) => self.over.insert(i, Segment { start, end, cell }),
        }
        self.back_to_one();
    }

    /// [`RangeMap::access`] to exactly the bytes of overlay `i`. The overlay holds the stamp
    /// after it, so it can equal the base or a touching overlay only if that held the stamp
    /// already (the same record accessed it): otherwise nothing is compared.
    #[inline(always)]
    fn access_overlay(&mut self, i: usize, a: Accessing<'_>, out: &mut Vec<Conflict>) {
        let o = &mut self.over[i];
        check_and_update(&mut o.cell, (o.start, o.end), a.stamp, a.kind, a.clock, out);
        let (start, end) = (o.start, o.end);
        let base_too = self.base.holds(a.stamp);
        let may_merge = |j: usize| {
            let n = &self.over[j];
            (n.end == start || n.start == end) && n.cell.holds(a.stamp)
        };
        let before = i > 0 && may_merge(i - 1);
        let after = i + 1 < self.over.len() && may_merge(i + 1);
        if base_too || before || after {
            self.tidy(i.saturating_sub(1), (i + 2).min(self.over.len()), base_too);
        }
    }

    /// [`RangeMap::access`] to part of a buffer with overlays, in general: the overlays are
    /// split at the access's bounds, the base's runs inside get overlays of their own, and all
    /// are checked and updated in order.
    fn access_parts(&mut self, start: u64, end: u64, a: Accessing<'_>, out: &mut Vec<Conflict>) {
        let first = self.split_at(start);
        let mut last = self.split_at(end); // exclusive: `over[first..last]` lie inside
        let (mut at, mut i) = (start, first);
        while at < end {
            match self.over.get_mut(i) {
                Some(o) if i < last && o.start == at => {
                    check_and_update(&mut o.cell, (o.start, o.end), a.stamp, a.kind, a.clock, out);
                    at = o.end;
                }
                _ => {
                    let to = if i < last { self.over[i].start } else { end };
                    check(&self.base, (at, to), a.kind, a.clock, out);
                    let cell = self.base.updated(a.stamp, a.kind);
                    self.over.insert(
                        i,
                        Segment {
                            start: at,
                            end: to,
                            cell,
                        },
                    );
                    last += 1;
                    at = to;
                }
            }
            i += 1;
        }
        if a.kind.writes_plainly() && last - first > 1 {
            // After a plain write (or an allocation, or a free) the bytes written share one
            // state: one overlay, without comparing them.
            self.over[first].end = end;
            self.over.drain(first + 1..last);
            last = first + 1;
        }
        let base_too = self.base.holds(a.stamp);
        self.tidy(
            first.saturating_sub(1),
            (last + 1).min(self.over.len()),
            base_too,
        );
    }

    /// Splits the overlay that `pos` is inside of, if any, so that one starts at `pos`, and
    /// returns the index of the first overlay starting at or after `pos`.
    fn split_at(&mut self, pos: u64) -> usize {
        let i = self.over.partition_point(|o| o.end <= pos);
        let Some(o) = self.over.get(i).filter(|o| o.start < pos) else {
            return i;
        };
        let tail = Segment {
            start: pos,
            end: o.end,
            cell: o.cell.clone(),
        };
        self.over[i].end = pos;
        self.over.insert(i + 1, tail);
        i + 1
    }

    /// After an access to the overlays among `over[from..to]` (but maybe the first and the
    /// last, untouched neighbours): drops those now in the base's state (when `base_too`: an
    /// accessed overlay holds the access's stamp, so it can equal the base only if the base
    /// holds the stamp too) and merges touching equal ones, in one pass.
    fn tidy(&mut self, from: usize, to: usize, base_too: bool) {
        let mut kept = from;
        for i in from..to {
            if base_too && self.over[i].cell == self.base {
                continue;
            }
            if kept > from && self.touching_equal(kept - 1, i) {
                self.over[kept - 1].end = self.over[i].end;
                continue;
            }
            if kept != i {
                self.over.swap(kept, i);
            }
            kept += 1;
        }
        if kept < to {
            self.over.drain(kept..to);
        }
        self.back_to_one();
    }

    /// Whether overlay `i` ends where overlay `j` starts, in an equal state.
    #[inline]
    fn touching_equal(&self, i: usize, j: usize) -> bool {
        let (a, b) = (&self.over[i], &self.over[j]);
        a.end == b.start && a.cell == b.cell
    }

    /// Moves the state to the base when one overlay covers the whole buffer.
    #[inline]
    fn back_to_one(&mut self) {
        if let [o] = self.over.as_slice()
            && o.start == 0
            && o.end == self.len
        {
            self.base = self.over.pop().expect("one overlay").cell;
        }
    }
}

/// What an access checks and records, the same for every run of bytes it covers.
#[derive(Clone, Copy)]
struct Accessing<'a> {
    stamp: Stamp,
    kind: AccessKind,
    clock: &'a VClock,
}

/// Checks the bytes `range` of the base (not updated yet) against access `a`. The base's
/// check finds the same earlier accesses for every run of it (only their ranges differ), so
/// once one found none (`found`), the later runs are not checked.
#[inline]
fn check_base_run(
    base: &Cell,
    range: (u64, u64),
    found: &mut Option<bool>,
    a: Accessing<'_>,
    out: &mut Vec<Conflict>,
) {
    if *found != Some(false) {
        *found = Some(check(base, range, a.kind, a.clock, out));
    }
}

/// Checks bytes `[start, end)` in state `cell` against an access of `access` by `stamp` whose
/// actor knows `clock`, pushing what it is unordered with to `out`, then records it: the
/// definition (the tests check the range map against it byte by byte). [`check`] and [`update`]
/// are its two halves apart, for the base's runs (checked once each, updated once); this one,
/// in one match, is what the common path inlines.
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
        AccessKind::Atomic => {
            atomic(cell, clock, out, (start, end));
            add_atomic(cell, stamp);
        }
        AccessKind::Write | AccessKind::Allocate | AccessKind::Free => {
            let (after_write, after_read) = plain_write_races(access);
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

/// The check half of [`check_and_update`] (the same rules): pushes the accesses in `cell` that
/// an access of `access` by an actor that knows `clock` is unordered with, as conflicts over
/// `[start, end)`. Whether it found any.
#[inline(always)]
fn check(
    cell: &Cell,
    (start, end): (u64, u64),
    access: AccessKind,
    clock: &VClock,
    out: &mut Vec<Conflict>,
) -> bool {
    let mut found = false;
    match access {
        AccessKind::Read => {
            if let Some(w) = &cell.write
                && !clock.covers(w.epoch)
            {
                push(out, RaceKind::ReadAfterWrite, *w, start, end);
                found = true;
            }
            if let Some(atomics) = &cell.atomics {
                found |=
                    unordered_atomics(atomics, RaceKind::ReadAfterWrite, clock, out, (start, end));
            }
        }
        AccessKind::Atomic => found = atomic(cell, clock, out, (start, end)),
        AccessKind::Write | AccessKind::Allocate | AccessKind::Free => {
            let (after_write, after_read) = plain_write_races(access);
            if let Some(w) = &cell.write
                && !clock.covers(w.epoch)
            {
                push(out, after_write, *w, start, end);
                found = true;
            }
            for r in &cell.reads {
                if !clock.covers(r.epoch) {
                    push(out, after_read, *r, start, end);
                    found = true;
                }
            }
            if let Some(atomics) = &cell.atomics {
                found |= unordered_atomics(atomics, after_write, clock, out, (start, end));
            }
        }
    }
    found
}

/// The update half of [`check_and_update`] (the same rules): records the access of `access` by
/// `stamp`.
#[inline(always)]
fn update(cell: &mut Cell, stamp: Stamp, access: AccessKind) {
    match access {
        AccessKind::Read => latest_read(&mut cell.reads, stamp),
        AccessKind::Atomic => add_atomic(cell, stamp),
        AccessKind::Write | AccessKind::Allocate | AccessKind::Free => {
            cell.write = Some(stamp);
            cell.reads.clear();
            if cell.atomics.is_some() {
                cell.atomics = None;
            }
        }
    }
}

/// What a plain write (or allocation, or free) of kind `access` races as, after an earlier
/// write and after an earlier read: a free reports free-while-in-use for both.
#[inline(always)]
fn plain_write_races(access: AccessKind) -> (RaceKind, RaceKind) {
    if access == AccessKind::Free {
        (RaceKind::FreeWhileInUse, RaceKind::FreeWhileInUse)
    } else {
        (RaceKind::WriteAfterWrite, RaceKind::WriteAfterRead)
    }
}

/// R19: an atomic is checked against plain accesses only; the write and the reads stay, since
/// a later plain access must still be ordered after them or be reported. Out of line: most
/// programs have few atomics, and the common path stays small.
#[cold]
#[inline(never)]
fn atomic(cell: &Cell, clock: &VClock, out: &mut Vec<Conflict>, (start, end): (u64, u64)) -> bool {
    let mut found = false;
    if let Some(w) = cell.write
        && !clock.covers(w.epoch)
    {
        push(out, RaceKind::WriteAfterWrite, w, start, end);
        found = true;
    }
    for r in &cell.reads {
        if !clock.covers(r.epoch) {
            push(out, RaceKind::WriteAfterRead, *r, start, end);
            found = true;
        }
    }
    found
}

/// Records atomic update `stamp` ([`atomic`]'s update). Out of line, as [`atomic`] is.
#[cold]
#[inline(never)]
fn add_atomic(cell: &mut Cell, stamp: Stamp) {
    latest_per_actor(cell.atomics.get_or_insert_default(), stamp);
}

/// Reports each of `atomics` that `clock` does not cover as a conflict of `kind`; whether any.
#[cold]
#[inline(never)]
fn unordered_atomics(
    atomics: &[Stamp],
    kind: RaceKind,
    clock: &VClock,
    out: &mut Vec<Conflict>,
    (start, end): (u64, u64),
) -> bool {
    let mut found = false;
    for a in atomics {
        if !clock.covers(a.epoch) {
            push(out, kind, *a, start, end);
            found = true;
        }
    }
    found
}

/// [`latest_per_actor`] for reads, with the first read after a write (the common case) stored
/// as a value rather than pushed.
#[inline(always)]
fn latest_read(reads: &mut SmallVec<[Stamp; 1]>, stamp: Stamp) {
    if reads.is_empty() && !reads.spilled() {
        *reads = SmallVec::from_buf([stamp]);
    } else {
        latest_per_actor(reads, stamp);
    }
}

/// Keeps `stamp` as its actor's latest entry in `list`.
#[inline(always)]
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

    /// A view of a buffer in one state gives the view's bytes an overlay and leaves the rest
    /// in the base (three runs, one state copied); a whole write brings it back to one state,
    /// inline, keeping the overlays' allocation for the next view.
    #[test]
    fn a_view_adds_one_overlay_and_a_whole_write_ends_it() {
        let mut m = RangeMap::new(100, Cell::default());
        access(&mut m, (0, 100), (0, 1, 2), Write, &[1]);
        access(&mut m, (25, 50), (0, 2, 3), Write, &[2]);
        assert_eq!((m.segments(), m.over.len()), (3, 1));
        // A whole read keeps the two states apart; a read of the view's bytes alone as well.
        access(&mut m, (0, 100), (0, 3, 4), Read, &[3]);
        access(&mut m, (25, 50), (0, 4, 5), Read, &[4]);
        assert_eq!((m.segments(), m.over.len()), (3, 1));
        access(&mut m, (0, 100), (0, 5, 6), Write, &[5]);
        assert_eq!((m.segments(), m.over.len()), (1, 0));
        assert!(m.over.capacity() > 0);
    }

    /// Conflicts come in the order of the bytes, the base's runs either side of an overlay
    /// counting as the bytes they are: the base's conflict first (over both of its runs), then
    /// the overlay's.
    #[test]
    fn conflicts_come_in_byte_order_across_the_base_and_an_overlay() {
        let mut m = RangeMap::new(100, Cell::default());
        access(&mut m, (0, 100), (0, 1, 2), Write, &[1]);
        // Actor 1, after actor 0's write, writes the middle.
        assert!(access(&mut m, (40, 60), (1, 1, 3), Write, &[1, 1]).is_empty());
        // Actor 2, knowing neither, reads everything.
        let out = access(&mut m, (0, 100), (2, 1, 4), Read, &[0, 0, 1]);
        let got: Vec<_> = out
            .iter()
            .map(|c| (c.previous.site.line, c.start, c.end))
            .collect();
        assert_eq!(got, vec![(2, 0, 100), (3, 40, 60)]);
        // With the overlay first, its conflict comes first.
        let mut m = RangeMap::new(100, Cell::default());
        access(&mut m, (0, 100), (0, 1, 2), Write, &[1]);
        access(&mut m, (0, 10), (1, 1, 3), Write, &[1, 1]);
        let out = access(&mut m, (0, 100), (2, 1, 4), Read, &[0, 0, 1]);
        let got: Vec<_> = out
            .iter()
            .map(|c| (c.previous.site.line, c.start, c.end))
            .collect();
        assert_eq!(got, vec![(3, 0, 10), (2, 10, 100)]);
    }

    /// Deterministic random numbers (xorshift64).
    struct Rng(u64);

    impl Rng {
        /// A number below `n`.
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }

        /// A stamp at trace line `line` by one of three actors, at a tick from 1 to 4.
        fn stamp(&mut self, line: u64) -> Stamp {
            stamp(self.below(3) as u32, 1 + self.below(4) as u32, line)
        }

        /// A random state with stamps from line `line` on: a write or none, up to two reads,
        /// atomics or none.
        fn cell(&mut self, line: u64) -> Cell {
            let mut cell = Cell::default();
            if self.below(3) > 0 {
                cell.write = Some(self.stamp(line));
            }
            for i in 0..self.below(3) {
                latest_per_actor(&mut cell.reads, self.stamp(line + 1 + i));
            }
            if self.below(3) == 0 {
                latest_per_actor(cell.atomics.get_or_insert_default(), self.stamp(line + 3));
            }
            cell
        }
    }

    /// [`check`] then [`update`] do what [`check_and_update`] does, for random states (a write
    /// or none, up to two reads, atomics or none) and random accesses and clocks.
    #[test]
    fn check_then_update_is_check_and_update() {
        let mut rng = Rng(0x0123_4567_89ab_cdef);
        let kinds = [Read, Write, Atomic, AccessKind::Allocate, Free];
        for line in (0..5000).map(|i| i * 8) {
            let mut cell = rng.cell(line);
            let (by, kind) = (rng.stamp(line + 4), kinds[rng.below(5) as usize]);
            let knows: Vec<u32> = (0..3).map(|_| rng.below(5) as u32).collect();
            let clock = clock(&knows);
            let (mut want, mut want_cell) = (Vec::new(), cell.clone());
            check_and_update(&mut want_cell, (0, 8), by, kind, &clock, &mut want);
            let mut got = Vec::new();
            let found = check(&cell, (0, 8), kind, &clock, &mut got);
            update(&mut cell, by, kind);
            assert_eq!(got, want);
            assert_eq!(found, !want.is_empty());
            assert_eq!(cell, want_cell);
        }
    }

    /// The same random accesses applied to a range map and to one state per byte (each byte
    /// checked on its own): the same conflicts in the same order, the same state for every
    /// byte, and no two neighbouring segments in equal states. This pins the segment
    /// arithmetic (overlays made, split, merged into each other or dropped into the base) to
    /// the definition.
    #[test]
    fn segments_behave_as_one_state_per_byte() {
        same_as_one_state_per_byte(0x9e37_79b9_7f4a_7c15, 2000, 12);
    }

    /// [`segments_behave_as_one_state_per_byte`] with longer runs of accesses, so that a
    /// buffer gathers several overlays before a whole write ends them.
    #[test]
    fn many_overlays_behave_as_one_state_per_byte() {
        same_as_one_state_per_byte(0x2545_f491_4f6c_dd1d, 500, 48);
    }

    /// As [`segments_behave_as_one_state_per_byte`], over the shapes that test does not draw:
    /// buffers of other lengths (none and one byte too), states made by
    /// [`RangeMap::from_pieces`] (gaps, equal neighbours, earlier stamps of every kind), kinds
    /// mixed within one record, and accesses shaped by the runs already there (exactly one
    /// run, a span of runs, a run one byte wider or narrower, no bytes).
    #[test]
    fn every_shape_behaves_as_one_state_per_byte() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let kinds = [Read, Write, Atomic, AccessKind::Allocate, Free];
        for len in [0u64, 1, 2, 3, 5, 8, 13, 64] {
            for _ in 0..150 {
                // The starting state: one state, or pieces with gaps and equal neighbours.
                let (mut map, mut bytes) = if rng.below(2) == 0 {
                    let cell = rng.cell(1000);
                    (RangeMap::new(len, cell.clone()), vec![cell; len as usize])
                } else {
                    let (mut pieces, mut at) = (Vec::<(u64, u64, Cell)>::new(), 0);
                    while at < len {
                        let start = at + rng.below(3).min(len - at);
                        if start == len {
                            break;
                        }
                        let end = start + 1 + rng.below(len - start);
                        let cell = match pieces.last() {
                            Some(last) if rng.below(3) == 0 => last.2.clone(),
                            _ => rng.cell(1000),
                        };
                        pieces.push((start, end, cell));
                        at = end;
                    }
                    let mut bytes = vec![Cell::default(); len as usize];
                    for (start, end, cell) in &pieces {
                        for b in *start..*end {
                            bytes[b as usize] = cell.clone();
                        }
                    }
                    (RangeMap::from_pieces(len, pieces), bytes)
                };
                map.assert_invariants();
                let mut ticks = [4u32; 3];
                for line in 2..2 + rng.below(24) {
                    let actor = rng.below(3) as usize;
                    ticks[actor] += 1;
                    let knows: Vec<u32> = (0..3)
                        .map(|a| {
                            if a == actor {
                                ticks[a]
                            } else {
                                rng.below(u64::from(ticks[a]) + 1) as u32
                            }
                        })
                        .collect();
                    let (clock, by) = (clock(&knows), stamp(actor as u32, ticks[actor], line));
                    for _ in 0..1 + rng.below(3) {
                        let kind = kinds[rng.below(5) as usize];
                        let runs: Vec<(u64, u64)> = map.pieces().map(|(a, b, _)| (a, b)).collect();
                        let run = runs[rng.below(runs.len() as u64) as usize];
                        let (start, end) = match rng.below(7) {
                            0 => (0, len),
                            1 if len >= 4 => {
                                let q = len / 4 * rng.below(4);
                                (q, q + len / 4)
                            }
                            2 => run,
                            3 => (
                                run.0,
                                runs[rng.below(runs.len() as u64) as usize].1.max(run.1),
                            ),
                            4 => (run.0.saturating_sub(1), (run.1 + 1).min(len)),
                            5 => (run.0 + u64::from(run.1 > run.0 + 1), run.1),
                            _ => {
                                let a = rng.below(len + 1);
                                (a, a + rng.below(len - a + 1))
                            }
                        };
                        let mut got = Vec::new();
                        map.access(start, end, by, kind, &clock, &mut got);
                        let mut want = Vec::new();
                        for byte in start..end {
                            let cell = &mut bytes[byte as usize];
                            check_and_update(cell, (byte, byte + 1), by, kind, &clock, &mut want);
                        }
                        let what = format!("{kind:?} [{start}, {end}) at line {line}, len {len}");
                        assert_eq!(got, want, "{what}");
                        map.assert_invariants();
                        let mut at = 0;
                        let pieces: Vec<_> = map.pieces().collect();
                        for (i, &(a, b, cell)) in pieces.iter().enumerate() {
                            assert_eq!(a, at, "{what}");
                            for byte in a..b {
                                assert_eq!(cell, &bytes[byte as usize], "byte {byte}: {what}");
                            }
                            if i > 0 {
                                assert_ne!(pieces[i - 1].2, cell, "neighbours at {a}: {what}");
                            }
                            at = b;
                        }
                        assert_eq!(at, len, "{what}");
                    }
                }
            }
        }
    }

    /// `runs` random runs of up to `records` records each, from seed `rng`.
    fn same_as_one_state_per_byte(mut rng: u64, runs: usize, records: u64) {
        const LEN: u64 = 24;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let kinds = [Read, Write, Atomic, AccessKind::Allocate, Free];
        for _ in 0..runs {
            let mut map = RangeMap::new(LEN, Cell::default());
            let mut bytes: Vec<Segment> = (0..LEN)
                .map(|b| Segment {
                    start: b,
                    end: b + 1,
                    cell: Cell::default(),
                })
                .collect();
            let mut ticks = [0u32; 3];
            for line in 2..2 + next(records) + 1 {
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
                    // Whole buffer, an edge, or a middle part: every shape of split; and
                    // aligned quarters, as views are, which meet an overlay's bytes exactly
                    // or the base's beside it.
                    let (start, end) = match next(4) {
                        0 => (0, LEN),
                        1 => {
                            let q = next(4) * LEN / 4;
                            (q, q + LEN / 4)
                        }
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
                    map.assert_invariants();
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
