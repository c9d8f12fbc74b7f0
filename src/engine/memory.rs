//! Everything that touches bytes: allocation and free (R12), launches and host functions
//! (R14), copies (R8), memsets (R9), host code (R13), and the per-access check against the
//! shadow state (R10, R11).

use std::num::NonZeroU32;
use std::sync::Arc;

use super::finding::{AccessKind, BufferInfo, RaceKind, WarningFact};
use super::objects::BufferState;
use super::shadow::{Cell, Conflict, RangeMap, SiteRef, Stamp};
use super::sites::SiteKey;
use super::vclock::Epoch;
use super::{Engine, InputError, InputErrorKind, Out, Performer};
use crate::trace::record::{Access, BufId, DeviceId, MemSpace, Op, OpKind, Pool, Record, StreamId};

/// Where an allocation's memory is: the fields of an `alloc` besides its id and size.
#[derive(Clone, Copy, Debug)]
pub(super) struct Placement {
    pub device: DeviceId,
    pub space: MemSpace,
    pub stream: Option<StreamId>,
    pub addr: Option<u64>,
    pub pool: Pool,
}

/// The parts of a stamp that all accesses by one performer in the current record share
/// ([`Engine::toucher`]).
#[derive(Clone, Copy, Debug)]
struct Toucher {
    by: Performer,
    epoch: Epoch,
    /// The line the accesses run at (`Current::runs_at`).
    line: u64,
}

impl Toucher {
    /// The stamp of an access at site `key` to the buffer of ordinal `buffer`.
    #[inline(always)]
    fn stamp(self, key: u32, buffer: u32) -> Stamp {
        Stamp {
            epoch: self.epoch,
            site: SiteRef {
                line: self.line,
                buffer: NonZeroU32::new(buffer).expect("buffer ordinals start at 1"),
                key,
            },
        }
    }
}

/// The line of the free that made `b` a tombstone (0 for a live buffer, or none).
fn freed_line(b: Option<&BufferState>) -> u64 {
    b.and_then(|b| b.freed.as_deref())
        .map_or(0, |f| f.site.line)
}

impl Placement {
    /// The placement of an `alloc` op (`None` for any other op).
    pub(super) fn of(op: &Op) -> Option<Placement> {
        match *op {
            Op::Alloc {
                device,
                space,
                stream,
                addr,
                pool,
                ..
            } => Some(Placement {
                device,
                space,
                stream,
                addr,
                pool,
            }),
            _ => None,
        }
    }
}

impl Engine {
    /// R12, and for caching blocks `pool.rs`. `in_graph`: a stream-ordered allocation captured
    /// into a graph, whose birth write its allocation node makes at each launch
    /// (`graph_memory.rs`), not now.
    pub(super) fn alloc(
        &mut self,
        record: &Record,
        buf: BufId,
        bytes: u64,
        place: Placement,
        in_graph: bool,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        if let Some(b) = self.buffers.get(&buf) {
            if b.freed.is_none() {
                let first = b.info.alloc_line;
                return Err(self.input_error(InputErrorKind::BufferRedeclared { id: buf, first }));
            }
            if let Some(kind) = self.check_id_reuse(buf, b.info.ordinal) {
                return Err(self.input_error(kind));
            }
        }
        let alloc_stream = match place.stream.map(|s| self.stream(s)) {
            None => None,
            Some(Ok(s)) => Some(s.info.clone()),
            Some(Err(kind)) => return Err(self.input_error(kind)),
        };
        let ordinal = self.next_buffer_ordinal;
        let shadow = match (place.pool, place.stream, place.addr) {
            (Pool::Caching, _, Some(addr)) => {
                // No access: the block's bytes keep what earlier blocks did to them.
                let pieces = self
                    .caching_alloc(buf, place.device, addr, bytes)
                    .map_err(|kind| self.input_error(kind))?;
                RangeMap::from_pieces(bytes, pieces)
            }
            // R12: a host allocation is usable by every stream at once (no birth write that
            // could race); a stream-ordered one is a birth write on its stream (a graph's at
            // each launch, by its allocation node).
            (_, stream, addr) => {
                if let Some(addr) = addr {
                    self.forget_history(place.device, addr, bytes);
                }
                match stream {
                    Some(s) if !in_graph => {
                        let on = self.begin_op(s, out)?;
                        self.born(on, ordinal, bytes)
                    }
                    _ => RangeMap::new(bytes, Cell::default()),
                }
            }
        };
        self.retire_reused_id(buf);
        self.record_streams.remove(&buf);
        self.next_buffer_ordinal += 1;
        self.stats.buffers += 1;
        if place.pool == Pool::Caching {
            self.stats.caching_blocks += 1;
        }
        let info = Arc::new(BufferInfo {
            id: buf,
            ordinal,
            name: record.name.clone(),
            bytes,
            space: place.space,
            device: place.device,
            alloc_line: record.line,
            alloc_at: record.at.clone(),
            alloc_stream,
            addr: place.addr,
            pool: place.pool,
        });
        self.note_buffer(&info);
        if !self.forgotten.is_empty() {
            self.forgotten.remove(buf);
        }
        self.buffers.insert(
            buf,
            BufferState {
                bytes,
                ordinal,
                info,
                shadow,
                freed: None,
            },
        );
        self.live_buffers += 1;
        Ok(())
    }

    /// The state of a buffer of allocation `ordinal` and `bytes` just allocated by `by`: one
    /// birth write over all its bytes (R12).
    pub(super) fn born(&mut self, by: Performer, ordinal: u32, bytes: u64) -> RangeMap {
        let write = Some(self.stamp(by, AccessKind::Allocate, None, ordinal));
        RangeMap::new(
            bytes,
            Cell {
                write,
                ..Cell::default()
            },
        )
    }

    /// An id allocated again: its old (freed) buffer is kept for reports while a live graph's
    /// nodes still refer to it.
    fn retire_reused_id(&mut self, buf: BufId) {
        if let Some(old) = self.buffers.get(&buf)
            && let Some(freed) = old.freed.as_deref().copied()
            && self.graph_refs.contains_key(&old.info.ordinal)
        {
            let info = old.info.clone();
            self.retired
                .entry(info.ordinal)
                .or_insert(super::objects::Retired { info, freed });
        }
    }

    /// R12: a free is a death write over the whole buffer, by the host thread (cudaFree) or on
    /// its stream (cudaFreeAsync). A caching block's free only returns it to its pool
    /// (`pool.rs`).
    pub(super) fn free(
        &mut self,
        buf: BufId,
        stream: Option<StreamId>,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        let Some(b) = self.buffers.get(&buf) else {
            return Err(self.input_error(self.missing(buf, "freed again")));
        };
        if let Some(f) = &b.freed {
            let first = self.sites.of(&f.site).record_line(&f.site);
            return Err(self.input_error(InputErrorKind::DoubleFree { id: buf, first }));
        }
        let ordinal = b.info.ordinal;
        if let Some(kind) = self.check_program_free(buf, ordinal) {
            return Err(self.input_error(kind));
        }
        let b = &self.buffers[&buf];
        if b.info.pool == Pool::Caching {
            let by = self.host_performs();
            let stamp = self.stamp(by, AccessKind::Free, None, ordinal);
            self.buffers.get_mut(&buf).expect("checked above").freed = Some(Box::new(stamp));
            self.note_buffer(&self.buffers[&buf].info.clone());
            self.caching_free(buf, stamp, out);
            self.keep_tombstone(buf, ordinal);
            self.live_buffers -= 1;
            return Ok(());
        }
        let by = match stream {
            Some(s) => self.begin_op(s, out)?,
            None => self.host_performs(),
        };
        self.free_by(buf, by, out)
    }

    /// The free of live buffer `buf` (not a caching block) by `by`: its death write over the
    /// whole buffer, then its tombstone (R12).
    pub(super) fn free_by(
        &mut self,
        buf: BufId,
        by: Performer,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        let (bytes, ordinal) = {
            let info = &self.buffers[&buf].info;
            (info.bytes, info.ordinal)
        };
        let stamp = self.touch(by, &Access::bytes(buf, 0, bytes), AccessKind::Free, out)?;
        let b = self.buffers.get_mut(&buf).expect("a live buffer");
        b.freed = stamp.map(Box::new);
        b.shadow = RangeMap::new(0, Cell::default());
        self.record_streams.remove(&buf);
        self.keep_tombstone(buf, ordinal);
        self.live_buffers -= 1;
        self.forget_freed_graph_allocation(ordinal);
        Ok(())
    }

    /// Keeps the tombstone of buffer `buf` (allocation `ordinal`), just freed, and lets the
    /// oldest kept one go when there are more than `keep_freed`: its id is only remembered as
    /// forgotten, and a node of a live graph that names it still finds it among the retired.
    /// An entry names the free by its line, as a graph allocation is freed again, under the same
    /// ordinal, by every launch.
    fn keep_tombstone(&mut self, buf: BufId, ordinal: u32) {
        let line = freed_line(self.buffers.get(&buf));
        self.freed_kept.push_back((buf, ordinal, line));
        while self.freed_kept.len() > self.keep_freed {
            let Some((id, ordinal, line)) = self.freed_kept.pop_front() else {
                break;
            };
            // Allocated again since (a later free queued it anew), or already gone.
            let still_freed = self
                .buffers
                .get(&id)
                .filter(|b| {
                    b.ordinal == ordinal && b.freed.is_some() && freed_line(Some(b)) == line
                })
                .map(|b| b.info.space);
            if let Some(space) = still_freed
                && !self.keeps_tombstone(ordinal)
            {
                self.retire_reused_id(id);
                self.buffers.remove(id);
                self.forgotten.insert(id, space);
            }
        }
    }

    /// A kernel launch or a host function: reads, writes and atomic updates on the stream
    /// (R14, R19).
    pub(super) fn launch(
        &mut self,
        stream: StreamId,
        reads: &[Access],
        writes: &[Access],
        atomics: &[Access],
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        let on = self.begin_op(stream, out)?;
        let at = self.toucher(on);
        for a in reads {
            self.touch_as(at, a, AccessKind::Read, out)?;
        }
        for a in writes {
            self.touch_as(at, a, AccessKind::Write, out)?;
        }
        for a in atomics {
            self.touch_as(at, a, AccessKind::Atomic, out)?;
        }
        Ok(())
    }

    /// R8, API synchronization behaviour, "Memcpy".
    pub(super) fn memcpy(
        &mut self,
        stream: StreamId,
        src: &Access,
        dst: &Access,
        blocking: bool,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        self.check_accesses([src, dst])?;
        if let Err(kind) = self.stream(stream) {
            return Err(self.input_error(kind));
        }
        let host_side = |s: MemSpace| matches!(s, MemSpace::Host | MemSpace::Pinned);
        let (from, to) = (self.space_of(src.buf), self.space_of(dst.buf));
        if blocking && from == MemSpace::Host && !host_side(to) {
            // Pageable host -> device, synchronous: a stream sync before the copy starts; the
            // host has read the source when the call returns, the device write may not have
            // landed.
            self.host_joins_stream(stream, true);
            let host = self.host_performs();
            self.touch(host, src, AccessKind::Read, out)?;
            let on = self.begin_op(stream, out)?;
            self.touch(on, dst, AccessKind::Write, out)?;
            return Ok(());
        }
        let on = self.begin_op(stream, out)?;
        self.touch(on, src, AccessKind::Read, out)?;
        self.touch(on, dst, AccessKind::Write, out)?;
        let host_waits = if blocking {
            // pinned -> device, device -> any host memory, host -> host; not device -> device.
            host_side(from) || host_side(to)
        } else {
            // Async: only host -> host is fully synchronous.
            host_side(from) && host_side(to)
        };
        if host_waits {
            self.host_joins_stream(stream, false);
        }
        Ok(())
    }

    pub(super) fn memset(
        &mut self,
        stream: StreamId,
        dst: &Access,
        blocking: bool,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        self.check_accesses([dst])?;
        let on = self.begin_op(stream, out)?;
        self.touch(on, dst, AccessKind::Write, out)?;
        // R9: a synchronous memset of pinned memory is synchronous to the host; otherwise (and
        // always for the async variant) it is not.
        if blocking && self.space_of(dst.buf) == MemSpace::Pinned {
            self.host_joins_stream(stream, false);
        }
        Ok(())
    }

    /// Host code touching host-visible memory: accesses by the host thread (R13).
    pub(super) fn host_access(
        &mut self,
        reads: &[Access],
        writes: &[Access],
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        self.check_accesses(reads.iter().chain(writes))?;
        let host = self.host_performs();
        for (list, kind) in [(reads, AccessKind::Read), (writes, AccessKind::Write)] {
            for access in list {
                // R13: host code cannot touch device memory; say so, check nothing.
                if self.buffers.slot(access.buf).is_some()
                    && self.space_of(access.buf) == MemSpace::Device
                {
                    let info = self.buffers[&access.buf].info.clone();
                    self.note_buffer(&info);
                    let buffer = (*info).clone();
                    self.warn(
                        out,
                        WarningFact::HostAccessToDevice {
                            buffer,
                            access: kind,
                        },
                    );
                    continue;
                }
                self.touch(host, access, kind, out)?;
            }
        }
        Ok(())
    }

    /// The calling host thread performs an access of its own (it ticks).
    fn host_performs(&mut self) -> Performer {
        let actor = self.host();
        self.actors.tick(actor, self.current.line);
        Performer {
            actor,
            on_stream: false,
        }
    }

    /// Validates ids and bounds of all accesses of a record before any state changes.
    fn check_accesses<'a>(
        &self,
        accesses: impl IntoIterator<Item = &'a Access>,
    ) -> Result<(), InputError> {
        for a in accesses {
            match self.buffers.get(&a.buf) {
                Some(b) => byte_range(a, b.bytes).map_err(|kind| self.input_error(kind))?,
                // Checked no further: the access will only be warned about (`touch`).
                None if self.forgotten.contains(a.buf) => (0, 0),
                None => return Err(self.input_error(InputErrorKind::UndeclaredBuffer(a.buf))),
            };
        }
        Ok(())
    }

    /// The error for buffer `buf`, not in the table, named by a call that needs it live
    /// (`what` it does: "freed again", ...): undeclared, or freed so long ago that only its id
    /// is remembered.
    pub(super) fn missing(&self, buf: BufId, what: &str) -> InputErrorKind {
        if self.forgotten.contains(buf) {
            InputErrorKind::Invalid(format!(
                "buffer {buf} is {what}, but it was freed earlier (before the last {} frees, \
                 whose buffers streamsan keeps; expected a live buffer)",
                self.keep_freed
            ))
        } else {
            InputErrorKind::UndeclaredBuffer(buf)
        }
    }

    /// An access to buffer `buf`, freed before the kept frees: warned about, not checked.
    pub(super) fn warn_forgotten(&mut self, out: &mut Out<'_>, buf: BufId) {
        let kept = self.keep_freed as u64;
        self.warn(out, WarningFact::ForgottenBuffer { id: buf, kept });
    }

    /// Checks and records one access (R10, R11, R12). Returns the access's stamp, or `None`
    /// when the buffer was already freed (a use-after-free, reported here).
    ///
    /// Out of line: inlined into `dispatch` it made the engine slower by the clock, though it
    /// ran fewer instructions.
    #[inline(never)]
    pub(super) fn touch(
        &mut self,
        by: Performer,
        access: &Access,
        kind: AccessKind,
        out: &mut Out<'_>,
    ) -> Result<Option<Stamp>, InputError> {
        let at = self.toucher(by);
        self.touch_as(at, access, kind, out)
    }

    /// What every access by `by` in the current record shares, looked up once for all of a
    /// launch's accesses: no access ticks its performer, so the epoch stays the same.
    #[inline(always)]
    fn toucher(&self, by: Performer) -> Toucher {
        Toucher {
            by,
            epoch: self.actors.now(by.actor),
            line: self.current.runs_at(),
        }
    }

    /// Checks and records one access made `at` (from [`Engine::toucher`]): its stamp, or
    /// `None` when nothing was checked (a forgotten buffer, a use after free).
    #[inline(always)]
    fn touch_as(
        &mut self,
        at: Toucher,
        access: &Access,
        kind: AccessKind,
        out: &mut Out<'_>,
    ) -> Result<Option<Stamp>, InputError> {
        let Some(slot) = self.buffers.slot(access.buf) else {
            return self.untracked(access.buf, out);
        };
        // The site first: making one may intern, which borrows the whole engine.
        let key = self.site_key(at.by, kind, access.arg.as_deref());
        let b = self.buffers.at_mut(slot);
        let stamp = at.stamp(key, b.ordinal);
        let (start, end) = match byte_range(access, b.bytes) {
            Ok(range) => range,
            Err(kind) => return Err(self.input_error(kind)),
        };
        if self.resolved.is_some() || b.freed.is_some() {
            return Ok(self.touch_noted_or_freed(slot, stamp, kind, (start, end), out));
        }
        self.conflicts.clear();
        b.shadow.access(
            start,
            end,
            stamp,
            kind,
            self.actors.clock(at.by.actor),
            &mut self.conflicts,
        );
        if !self.conflicts.is_empty() {
            self.report_conflicts(slot, stamp, out);
        }
        Ok(Some(stamp))
    }

    /// [`Engine::touch_as`] to a buffer not in the table: a use after free the engine can no
    /// longer report as a race (warned about), or an input error.
    #[cold]
    #[inline(never)]
    fn untracked(&mut self, buf: BufId, out: &mut Out<'_>) -> Result<Option<Stamp>, InputError> {
        if self.forgotten.contains(buf) {
            self.warn_forgotten(out, buf);
            return Ok(None);
        }
        Err(self.input_error(InputErrorKind::UndeclaredBuffer(buf)))
    }

    /// [`Engine::touch_as`] when observing (the buffer is noted) or to a freed buffer (a use
    /// after free, reported; nothing else is checked). Out of line, as neither is the common
    /// path; it ends as the common path does, written out in each, since a branch back into
    /// the common path made every access cost more.
    #[cold]
    #[inline(never)]
    fn touch_noted_or_freed(
        &mut self,
        slot: usize,
        stamp: Stamp,
        kind: AccessKind,
        (start, end): (u64, u64),
        out: &mut Out<'_>,
    ) -> Option<Stamp> {
        let b = self.buffers.at_mut(slot);
        if let Some(r) = &mut self.resolved {
            r.buffers.push(b.info.clone());
        }
        if let Some(freed) = b.freed.as_deref().copied() {
            let c = Conflict {
                kind: RaceKind::UseAfterFree,
                previous: freed,
                start,
                end,
            };
            let info = b.info.clone();
            self.report(out, &info, c, stamp);
            return None;
        }
        self.conflicts.clear();
        b.shadow.access(
            start,
            end,
            stamp,
            kind,
            self.actors.clock(stamp.epoch.actor),
            &mut self.conflicts,
        );
        if !self.conflicts.is_empty() {
            self.report_conflicts(slot, stamp, out);
        }
        Some(stamp)
    }

    /// Reports the conflicts the access `stamp` to the buffer in `slot` found.
    #[cold]
    #[inline(never)]
    fn report_conflicts(&mut self, slot: usize, stamp: Stamp, out: &mut Out<'_>) {
        let info = self.buffers.at_mut(slot).info.clone();
        let conflicts = std::mem::take(&mut self.conflicts);
        for c in &conflicts {
            self.report(out, &info, *c, stamp);
        }
        self.conflicts = conflicts;
    }

    /// The stamp of an access the current record makes now, to the buffer of ordinal `buffer`.
    #[inline]
    pub(super) fn stamp(
        &mut self,
        by: Performer,
        access: AccessKind,
        arg: Option<&str>,
        buffer: u32,
    ) -> Stamp {
        let key = self.site_key(by, access, arg);
        self.toucher(by).stamp(key, buffer)
    }

    /// The interned site of an access of `access` by `by`, named `arg`, that the current record
    /// makes now. The accesses of one record share all of their site but the kind and the
    /// argument: after the first, the site is the record's.
    #[inline(always)]
    fn site_key(&mut self, by: Performer, access: AccessKind, arg: Option<&str>) -> u32 {
        let key = self.current.sites[site_slot(access, by)];
        if arg.is_some() || key == super::sites::NO_SITE {
            return self.new_site(by, access, arg);
        }
        key
    }

    /// The interned site of the current record's access of `access` by `by`, named `arg`, when
    /// the record does not have it yet: kept for its next accesses when it has no argument name.
    #[cold]
    #[inline(never)]
    fn new_site(&mut self, by: Performer, access: AccessKind, arg: Option<&str>) -> u32 {
        let cached = arg.is_none().then(|| site_slot(access, by));
        debug_assert!(
            self.current.op.accesses_memory() || self.current.op == OpKind::GraphLaunch,
            "only records that access memory have their name interned (a graph launch's free of \
             what its previous launch left allocated names no kernel)"
        );
        let host = self.host();
        let c = self.current;
        // A node runs at its launch: that is its stamp's line; where it was captured is kept
        // in the key.
        let captured = (c.launch > 0).then_some(c.line);
        let key = SiteKey {
            captured,
            host,
            on_stream: by.on_stream,
            op: c.op,
            access,
            name: c.name,
            arg: self.symbols.intern(arg),
            at: c.at,
        };
        let key = self.sites.intern(key);
        if let Some(i) = cached {
            self.current.sites[i] = key;
            if let Some(memo) = self.current.memo {
                self.sites.remember(memo, i, key);
            }
        }
        key
    }

    /// A node's access at a launch: to the buffer it was captured with (`ordinal`). When that
    /// buffer's id has since been freed and allocated again, the node uses freed memory.
    pub(super) fn touch_captured(
        &mut self,
        by: Performer,
        access: &Access,
        kind: AccessKind,
        ordinal: u32,
        out: &mut Out<'_>,
    ) -> Result<(), InputError> {
        // A buffer forgotten at capture (`graphs::FORGOTTEN_ORDINAL`, warned about then) has
        // no ordinal of its own, and nothing is checked.
        let current = self.buffers.get(&access.buf).map(|b| b.info.ordinal);
        if current == Some(ordinal) {
            return self.touch(by, access, kind, out).map(drop);
        }
        let Some(retired) = self.retired.get(&ordinal) else {
            return Ok(());
        };
        let (info, freed) = (retired.info.clone(), retired.freed);
        let (start, end) = byte_range(access, info.bytes).map_err(|k| self.input_error(k))?;
        let stamp = self.stamp(by, kind, access.arg.as_deref(), ordinal);
        let c = Conflict {
            kind: RaceKind::UseAfterFree,
            previous: freed,
            start,
            end,
        };
        self.report(out, &info, c, stamp);
        Ok(())
    }

    /// `record_stream`: the block's bytes are not reused until the work enqueued on `stream`
    /// before the block's free has completed (PyTorch, `Tensor.record_stream`).
    pub(super) fn record_stream(
        &mut self,
        buf: BufId,
        stream: StreamId,
    ) -> Result<(), InputErrorKind> {
        let named = (stream, self.stream(stream)?.info.ordinal);
        let Some(b) = self.buffers.get_mut(&buf) else {
            return Err(self.missing(buf, "given to record_stream"));
        };
        if b.freed.is_some() {
            return Err(InputErrorKind::Invalid(format!(
                "record_stream on buffer {buf}, which is already freed (expected it before the \
                 free)"
            )));
        }
        let streams = self.record_streams.entry(buf).or_default();
        if !streams.contains(&named) {
            streams.push(named);
        }
        let info = b.info.clone();
        self.note_buffer(&info);
        self.note_stream(stream);
        Ok(())
    }

    /// The memory space of a buffer in the table or forgotten (checked by the caller).
    fn space_of(&self, buf: BufId) -> MemSpace {
        match self.buffers.get(&buf) {
            Some(b) => b.info.space,
            None => self.forgotten.space(buf).expect("a checked buffer"),
        }
    }
}

/// Where a record keeps the site of its accesses of `access` by `by` (`Current::sites`).
fn site_slot(access: AccessKind, by: Performer) -> usize {
    access as usize * 2 + by.on_stream as usize
}

/// The bytes `[start, end)` an access covers in a buffer of `bytes` bytes.
pub(super) fn byte_range(access: &Access, bytes: u64) -> Result<(u64, u64), InputErrorKind> {
    match access.range {
        None => Ok((0, bytes)),
        Some(r) => match r.off.checked_add(r.len) {
            Some(end) if end <= bytes => Ok((r.off, end)),
            _ => Err(InputErrorKind::OutOfBounds {
                id: access.buf,
                off: r.off,
                len: r.len,
                bytes,
            }),
        },
    }
}
