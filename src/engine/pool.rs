//! Caching allocators (trace v1 minor 1): blocks that a pool hands out again after they were
//! freed, as PyTorch's CUDA and pinned-host caching allocators do.
//!
//! The rules (DESIGN.md, "Caching allocators"; PyTorch's documentation of the CUDA caching
//! allocator and of `Tensor.record_stream`):
//! - a caching `alloc` is no access: the bytes are not written;
//! - a caching `free` returns the bytes to the pool: not a free-while-in-use, but the buffer id
//!   ends (a later use is a use after free) and the bytes keep their history **by device
//!   address**;
//! - a later caching block on (part of) the same bytes is checked against what the previous
//!   occupants did to those bytes, exactly as if one buffer had lived on;
//! - `record_stream(buf, s)`: "the tensor memory is not reused for another tensor until all work
//!   queued on stream at the time of deallocation will be complete", so the host thread that
//!   makes the reusing `alloc` first learns what `s` had done at the free;
//! - a block freed while a use on a stream other than its pool's is unordered with the free and
//!   no `record_stream` covers that stream is a latent race: a warning.
//!
//! History that nothing can race with any more is dropped: bytes whose every stamp every host
//! thread already knows (checked every [`SWEEP_EVERY`] caching frees, or less often while that
//! state is large: every later access is made or enqueued by a host thread, R1), and bytes a new
//! block took over. A host thread first seen after a sweep is treated as knowing what was
//! dropped.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::clocks::ActorKind;
use super::finding::{StreamInfo, WarningFact};
use super::objects::Retired;
use super::shadow::{Cell, Stamp};
use super::vclock::{ActorIdx, VClock};
use super::{Engine, InputErrorKind, Out};
use crate::trace::record::{BufId, DeviceId};

/// How many caching frees go between two sweeps of the history.
pub const SWEEP_EVERY: u64 = 1024;

/// The live caching blocks of each device: a caching `alloc` over bytes of one of them is
/// refused (`CachingOverlap`). Public so that a front end that checks on another thread
/// (the Python Session) can refuse such an alloc at once, with the engine's own rule.
#[derive(Debug, Default)]
pub struct LiveBlocks {
    /// Start address -> (end address, buffer id).
    by_device: FxHashMap<DeviceId, BTreeMap<u64, (u64, BufId)>>,
}

impl LiveBlocks {
    /// The live block that `[start, end)` overlaps on `device`, if any.
    fn overlapping(&self, device: DeviceId, start: u64, end: u64) -> Option<BufId> {
        let live = self.by_device.get(&device)?;
        live.range(..end)
            .next_back()
            .filter(|(_, (e, _))| *e > start)
            .map(|(_, (_, b))| *b)
    }

    /// Refuses caching block `buf` on `[start, end)` of `device` when it overlaps a live one.
    pub fn check(
        &self,
        buf: BufId,
        device: DeviceId,
        start: u64,
        end: u64,
    ) -> Result<(), InputErrorKind> {
        match self.overlapping(device, start, end) {
            Some(other) => Err(InputErrorKind::CachingOverlap {
                buf,
                addr: start,
                end,
                other,
                device,
            }),
            None => Ok(()),
        }
    }

    /// Block `buf` is live on `[start, end)` of `device`.
    pub fn insert(&mut self, device: DeviceId, start: u64, end: u64, buf: BufId) {
        self.by_device
            .entry(device)
            .or_default()
            .insert(start, (end, buf));
    }

    /// Block `buf` at `start` of `device` was freed (another block there is left alone: a
    /// block of no bytes is never entered).
    pub fn remove(&mut self, device: DeviceId, start: u64, buf: BufId) {
        if let Some(live) = self.by_device.get_mut(&device)
            && live.get(&start).is_some_and(|&(_, b)| b == buf)
        {
            live.remove(&start);
        }
    }
}

/// The caching pools' bytes, by device address.
#[derive(Debug, Default)]
pub(super) struct Pools {
    live: LiveBlocks,
    /// Freed bytes with a history: start address -> piece.
    freed: FxHashMap<DeviceId, BTreeMap<u64, Piece>>,
    frees_since_sweep: u64,
}

/// A run of freed bytes with one state.
#[derive(Clone, Debug)]
struct Piece {
    end: u64,
    cell: Cell,
    /// What each `record_stream` stream had done at the block's free: a reusing allocation
    /// waits for it.
    waits: Arc<[VClock]>,
}

impl Pools {
    /// The freed pieces overlapping `[start, end)`, cut to it and taken out of the history,
    /// with offsets relative to `start`.
    fn take(&mut self, device: DeviceId, start: u64, end: u64) -> Vec<(u64, u64, Piece)> {
        let Some(freed) = self.freed.get_mut(&device) else {
            return Vec::new();
        };
        // Pieces that begin before `start` but reach into the range are split first.
        let split = freed
            .range(..start)
            .next_back()
            .filter(|(_, p)| p.end > start)
            .map(|(&s, p)| (s, p.clone()));
        if let Some((s, tail)) = split {
            freed.get_mut(&s).expect("listed").end = start;
            freed.insert(start, tail);
        }
        let keys: Vec<u64> = freed.range(start..end).map(|(k, _)| *k).collect();
        let mut out = Vec::new();
        for k in keys {
            let mut p = freed.remove(&k).expect("listed");
            if p.end > end {
                let mut rest = p.clone();
                rest.end = p.end;
                freed.insert(end, rest);
                p.end = end;
            }
            out.push((k - start, p.end - start, p));
        }
        out
    }
}

impl Engine {
    /// A caching `alloc` of `[addr, addr + bytes)`: checks the bytes are not in a live block,
    /// takes over their history (as cells for the new buffer's shadow state) and makes the
    /// calling host thread wait for what `record_stream` promised.
    pub(super) fn caching_alloc(
        &mut self,
        buf: BufId,
        device: DeviceId,
        addr: u64,
        bytes: u64,
    ) -> Result<Vec<(u64, u64, Cell)>, InputErrorKind> {
        let end = addr.checked_add(bytes).ok_or_else(|| {
            InputErrorKind::Invalid(format!(
                "a caching block at address {addr} of {bytes} bytes ends beyond the address space"
            ))
        })?;
        if bytes > 0 {
            self.pools.live.check(buf, device, addr, end)?;
        }
        let pieces = self.pools.take(device, addr, end);
        let host = self.host();
        let via = self.via();
        let mut seen: FxHashSet<*const [VClock]> = FxHashSet::default();
        for (_, _, p) in &pieces {
            if seen.insert(Arc::as_ptr(&p.waits)) {
                for clock in p.waits.iter() {
                    self.actors.join_clock(host, clock, via);
                }
            }
        }
        if bytes > 0 {
            self.pools.live.insert(device, addr, end, buf);
        }
        Ok(pieces.into_iter().map(|(s, e, p)| (s, e, p.cell)).collect())
    }

    /// A driver allocation on bytes a caching pool used: the driver's memory is fresh, so the
    /// pool's history of those bytes ends.
    pub(super) fn forget_history(&mut self, device: DeviceId, addr: u64, bytes: u64) {
        let end = addr.saturating_add(bytes);
        self.pools.take(device, addr, end);
    }

    /// A caching `free` of `buf` by the calling host thread, whose stamp is `stamp`: warns of
    /// uses the pool could reuse the bytes under, and moves the bytes' history to the
    /// address-keyed history.
    pub(super) fn caching_free(&mut self, buf: BufId, stamp: Stamp, out: &mut Out<'_>) {
        let b = self.buffers.get_mut(&buf).expect("checked by the caller");
        let shadow = std::mem::replace(
            &mut b.shadow,
            super::shadow::RangeMap::new(0, Cell::default()),
        );
        let info = b.info.clone();
        let record_streams = self.record_streams.remove(&buf).unwrap_or_default();
        let (device, addr) = (info.device, info.addr.unwrap_or(0));
        self.pools.live.remove(device, addr, buf);
        let pool_actor = info
            .alloc_stream
            .as_ref()
            .and_then(|s| self.stream_actor(s.id, s.ordinal));
        let host = stamp.epoch.actor;
        // Uses by other streams that the free does not follow and no record_stream covers.
        let mut exposed: Vec<(StreamInfo, u64)> = Vec::new();
        for s in shadow.stamps() {
            let key = self.sites.of(&s.site);
            if !key.on_stream || Some(s.epoch.actor) == pool_actor {
                continue;
            }
            if self.actors.clock(host).covers(s.epoch) {
                continue;
            }
            let Some(stream) = self.stream_of_actor(s.epoch.actor, key.launch_line(&s.site)) else {
                continue;
            };
            let named = (stream.id, stream.ordinal);
            if record_streams.contains(&named)
                || exposed.iter().any(|(e, _)| e.ordinal == stream.ordinal)
            {
                continue;
            }
            exposed.push((stream, key.record_line(&s.site)));
        }
        if !exposed.is_empty() {
            let (streams, lines) = exposed.into_iter().unzip();
            self.warn(
                out,
                WarningFact::CachingFreeInUse {
                    buffer: (*info).clone(),
                    streams,
                    lines,
                },
            );
        }
        // What the record_stream streams had done by now: the reusing allocation waits for it.
        let waits: Arc<[VClock]> = record_streams
            .iter()
            .filter_map(|&(id, ordinal)| self.stream_actor(id, ordinal))
            .map(|actor| self.actors.clock(actor).clone())
            .collect();
        let freed = self.pools.freed.entry(device).or_default();
        for (start, end, cell) in shadow.pieces() {
            // Bytes never accessed have no history, but a reuse of them still waits for what
            // record_stream promised (R16: "any of those bytes").
            if *cell == Cell::default() && waits.is_empty() {
                continue;
            }
            freed.insert(
                addr + start,
                Piece {
                    end: addr + end,
                    cell: cell.clone(),
                    waits: waits.clone(),
                },
            );
        }
        self.retired
            .insert(info.ordinal, Retired { info, freed: stamp });
        self.pools.frees_since_sweep += 1;
        if self.pools.frees_since_sweep >= self.sweep_interval() {
            self.pools.frees_since_sweep = 0;
            self.sweep_history();
        }
    }

    /// The stream an access by `actor` was on: its own stream, or for a graph node the stream
    /// its launch ran on.
    fn stream_of_actor(&self, actor: ActorIdx, launch: u64) -> Option<StreamInfo> {
        match self.actors.kind(actor) {
            ActorKind::Stream(id) => self.stream_of(actor, id).cloned(),
            ActorKind::Lane { graph, .. } => {
                let id = self.launch_stream(graph, launch)?;
                self.stream_or_ended(id).map(|(_, info)| info.clone())
            }
            ActorKind::Host(_) => None,
        }
    }

    /// Caching frees between two sweeps: [`SWEEP_EVERY`], or more while the state a sweep
    /// walks (buffers, their ids' tombstones, freed pieces) is larger, so that sweeping costs
    /// a bounded amount per free however long the program runs without synchronizing.
    fn sweep_interval(&self) -> u64 {
        let walked =
            self.buffers.len() + self.pools.freed.values().map(BTreeMap::len).sum::<usize>();
        SWEEP_EVERY.max(walked as u64 / 4)
    }

    /// How many runs of freed bytes the pools remember.
    #[cfg(test)]
    pub(super) fn history_pieces(&self) -> usize {
        self.pools.freed.values().map(BTreeMap::len).sum()
    }

    /// Drops history every actor already knows, and the retired buffers nothing refers to.
    pub(super) fn sweep_history(&mut self) {
        let known = self.actors.known_by_all_hosts();
        let covered =
            |s: &Stamp| s.epoch.tick <= known.get(s.epoch.actor.index()).copied().unwrap_or(0);
        let clock_known = |c: &VClock| {
            c.as_slice()
                .iter()
                .enumerate()
                .all(|(i, &t)| t <= known.get(i).copied().unwrap_or(0))
        };
        for pieces in self.pools.freed.values_mut() {
            pieces.retain(|_, p| {
                !(p.cell.write.iter().all(covered)
                    && p.cell.reads.iter().all(covered)
                    && p.cell.atomics.iter().flat_map(|a| a.iter()).all(covered)
                    && p.waits.iter().all(clock_known))
            });
        }
        // Retired buffers still named by some stamp, or by a live graph's node.
        let mut named: FxHashSet<u32> = self.graph_refs.keys().copied().collect();
        for b in self.buffers.values() {
            named.extend(b.shadow.stamps().map(|s| s.site.buffer.get()));
        }
        for pieces in self.pools.freed.values() {
            for p in pieces.values() {
                named.extend(
                    p.cell
                        .write
                        .iter()
                        .chain(&p.cell.reads)
                        .chain(p.cell.atomics.iter().flat_map(|a| a.iter()))
                        .map(|s| s.site.buffer.get()),
                );
            }
        }
        self.retired.retain(|ordinal, _| named.contains(ordinal));
    }
}
