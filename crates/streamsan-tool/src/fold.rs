//! Folding a launch's logged device accesses into exact byte ranges per allocation.
//!
//! The device log holds one entry per warp-folded run of bytes (kernels/sanitizer_patches.cu);
//! here runs of one kind are sorted, merged where they overlap or touch, and cut at allocation
//! boundaries. Nothing is widened: every byte of a folded range was logged, and every logged
//! byte that lies in a known allocation is in exactly one range. Bytes in no known allocation
//! (memory the API never reported, e.g. from a library's own virtual-memory mapping) are
//! counted, not checked.

use std::collections::BTreeMap;

use streamsan::trace::record::{Access, BufId};

/// One logged access run: `len` bytes from `addr`. Laid out as the device writes it
/// (little-endian: the u64 address, then the u32 length and the u32 kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(C)]
pub struct Entry {
    pub addr: u64,
    pub len: u32,
    /// 1 read, 2 write, 3 atomic (read-modify-write).
    pub kind: u32,
}

pub const READ: u32 = 1;
pub const WRITE: u32 = 2;
pub const ATOMIC: u32 = 3;

/// A live allocation: its trace id and size, keyed by base address in [`Allocations`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub buf: BufId,
    pub bytes: u64,
}

/// The live allocations by base address.
pub type Allocations = BTreeMap<u64, Allocation>;

/// What a launch read and wrote, per allocation.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Folded {
    pub reads: Vec<Access>,
    pub writes: Vec<Access>,
    /// Bytes updated by atomic instructions: a launch's `atomics` (they race with unordered
    /// plain accesses, not with other atomics).
    pub atomics: Vec<Access>,
    /// Bytes logged outside every known allocation.
    pub unattributed_bytes: u64,
}

/// Folds `entries` against `live`. Atomics are kept apart from plain writes: the engine checks
/// them against plain accesses only (the ordering model's R19).
pub fn fold(entries: &[Entry], live: &Allocations) -> Folded {
    if let Some(folded) = fold_by_bitmap(entries, live) {
        return folded;
    }
    let mut entries = entries.to_vec();
    premerge(&mut entries);
    radix_sort(&mut entries);
    fold_sorted(&entries, live)
}

thread_local! {
    /// The bitmaps of [`fold_by_bitmap`], kept between launches (all zero between calls: the
    /// scan clears what it reads), so a launch pays for no fresh pages; and whether a fold
    /// that set bits ended before clearing them (a panic), so the next one clears all first.
    static BITS: std::cell::RefCell<(Vec<u64>, bool)> =
        const { std::cell::RefCell::new((Vec::new(), false)) };
}

/// Scratch kept between launches up to this many words (32 MiB); a larger one is freed
/// after its launch.
const KEEP_WORDS: usize = 1 << 22;

/// Folds without sorting where the log is long and its bytes lie close together (a kernel
/// sweeping a few buffers): one bit per granule over each kind's span, set entry by entry,
/// then read back run by run. The granule is the largest power of two, up to 64 bytes, that
/// divides every entry's address and length, so a bit never stands for a byte that was not
/// logged. Same runs as sorting and merging (a run is a maximal set of touching logged bytes),
/// in the same order (by kind, then address). `None` where the bitmaps would cost more than
/// the log they replace: the caller sorts.
fn fold_by_bitmap(entries: &[Entry], live: &Allocations) -> Option<Folded> {
    if entries.len() < 512 {
        return None;
    }
    // One span for all kinds (1 read, 2 write, 3 atomic): the lowest address and the highest
    // end; which kinds occur; and the low bits any address or length has.
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    let (mut kinds, mut low_bits, mut bad) = (0u32, 64u64, false);
    for e in entries {
        let end = e.addr.wrapping_add(u64::from(e.len));
        bad |= !(1..=3).contains(&e.kind) || e.len == 0 || end < e.addr;
        lo = lo.min(e.addr);
        hi = hi.max(end);
        kinds |= 1 << (e.kind & 31);
        low_bits |= e.addr | u64::from(e.len);
    }
    if bad {
        return None;
    }
    let shift = low_bits.trailing_zeros();
    let per_kind = ((hi - lo) >> shift).div_ceil(64) as usize;
    // Words to clear and scan, at most as many bytes as the log itself: a sparse log sorts
    // instead.
    let words = per_kind * kinds.count_ones() as usize;
    if words as u64 > 2 * entries.len() as u64 + 4096 {
        return None;
    }
    // Each present kind's bitmap: its first word in the scratch.
    let mut first = [usize::MAX; 4];
    let mut next = 0;
    for (k, slot) in first.iter_mut().enumerate().skip(1) {
        if kinds & (1 << k) != 0 {
            *slot = next;
            next += per_kind;
        }
    }
    BITS.with(|cell| {
        let mut guard = cell.borrow_mut();
        let (bits, dirty) = &mut *guard;
        if std::mem::replace(dirty, true) {
            bits.fill(0);
        }
        if bits.len() < words {
            bits.resize(words, 0);
        }
        for e in entries {
            let from = (e.addr - lo) >> shift;
            let to = (e.addr - lo + u64::from(e.len)) >> shift;
            let base = first[e.kind as usize];
            set_bits(&mut bits[base..base + per_kind], from, to);
        }
        let mut out = Folded::default();
        for kind in 1..=3u32 {
            let base = first[kind as usize];
            if base == usize::MAX {
                continue;
            }
            for (start, stop) in take_runs(&mut bits[base..base + per_kind]) {
                attribute(
                    lo + (start << shift),
                    lo + (stop << shift),
                    kind,
                    live,
                    &mut out,
                );
            }
        }
        *dirty = false;
        if bits.len() > KEEP_WORDS {
            *bits = Vec::new();
        }
        Some(out)
    })
}

/// Sets bits `[from, to)`.
#[inline(always)]
fn set_bits(bits: &mut [u64], from: u64, to: u64) {
    if from >= to {
        return;
    }
    let (first, last) = ((from / 64) as usize, ((to - 1) / 64) as usize);
    let head = !0u64 << (from % 64);
    let tail = !0u64 >> (63 - (to - 1) % 64);
    if first == last {
        bits[first] |= head & tail;
        return;
    }
    bits[first] |= head;
    for w in &mut bits[first + 1..last] {
        *w = !0;
    }
    bits[last] |= tail;
}

/// The maximal runs of set bits, as `[start, end)` bit positions, in order; clears the bits.
fn take_runs(bits: &mut [u64]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut open: Option<u64> = None;
    let n = bits.len();
    for (i, word) in bits.iter_mut().enumerate() {
        let w = std::mem::take(word);
        match (w, open) {
            (0, None) | (u64::MAX, Some(_)) => continue,
            _ => {}
        }
        let base = i as u64 * 64;
        let mut at = 0u32;
        while at < 64 {
            let rest = w >> at;
            match open {
                None => {
                    if rest == 0 {
                        break;
                    }
                    at += rest.trailing_zeros();
                    open = Some(base + u64::from(at));
                }
                Some(start) => {
                    let ones = rest.trailing_ones();
                    if ones >= 64 - at {
                        break; // the run goes on into the next word
                    }
                    at += ones;
                    out.push((start, base + u64::from(at)));
                    open = None;
                }
            }
        }
    }
    if let Some(start) = open {
        out.push((start, n as u64 * 64));
    }
    out
}

/// The reference for [`fold`]'s tests: a comparison sort, no pre-merge.
#[cfg(test)]
fn fold_sorting(entries: &mut [Entry], live: &Allocations) -> Folded {
    entries.sort_unstable_by_key(|e| (e.kind, e.addr));
    fold_sorted(entries, live)
}

/// Merges entries sorted by (kind, address) into maximal runs and attributes each.
fn fold_sorted(entries: &[Entry], live: &Allocations) -> Folded {
    let mut out = Folded::default();
    let mut i = 0;
    while i < entries.len() {
        let kind = entries[i].kind;
        let (start, mut end) = (entries[i].addr, entries[i].addr + u64::from(entries[i].len));
        i += 1;
        while i < entries.len() && entries[i].kind == kind && entries[i].addr <= end {
            end = end.max(entries[i].addr + u64::from(entries[i].len));
            i += 1;
        }
        attribute(start, end, kind, live, &mut out);
    }
    out
}

/// Sorts by (kind, address): an LSD radix sort, 11 bits a pass, on the address relative to
/// the smallest one with the kind above it, so a log that spans a few allocations takes two
/// or three passes: several times faster than a comparison sort on logs of tens of thousands
/// of entries in scrambled warp order.
fn radix_sort(entries: &mut Vec<Entry>) {
    if entries.len() < 512 {
        entries.sort_unstable_by_key(|e| (e.kind, e.addr));
        return;
    }
    let min = entries.iter().map(|e| e.addr).min().unwrap_or(0);
    let span = entries.iter().map(|e| e.addr - min).max().unwrap_or(0);
    let bits = 64 - span.leading_zeros();
    if bits > 60 {
        entries.sort_unstable_by_key(|e| (e.kind, e.addr));
        return;
    }
    let key = |e: &Entry| (u64::from(e.kind.min(3)) << bits) | (e.addr - min);
    let total = bits + 2;
    // Kept between launches, so a launch pays for no fresh pages.
    let mut scratch = SORT_SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    scratch.resize(
        entries.len(),
        Entry {
            addr: 0,
            len: 0,
            kind: 0,
        },
    );
    let mut shift = 0;
    while shift < total {
        let digit = |e: &Entry| ((key(e) >> shift) & 0x7ff) as usize;
        let mut counts = [0usize; 2049];
        for e in entries.iter() {
            counts[digit(e) + 1] += 1;
        }
        for d in 0..2048 {
            counts[d + 1] += counts[d];
        }
        for e in entries.iter() {
            let d = digit(e);
            scratch[counts[d]] = *e;
            counts[d] += 1;
        }
        std::mem::swap(entries, &mut scratch);
        shift += 11;
    }
    if scratch.len() <= KEEP_WORDS / 2 {
        SORT_SCRATCH.with(|s| *s.borrow_mut() = scratch);
    }
}

thread_local! {
    /// The second buffer of [`radix_sort`].
    static SORT_SCRATCH: std::cell::RefCell<Vec<Entry>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Merges each entry into the one before it in log order where they are of one kind and
/// the later one starts inside or right after the earlier one: a warp's consecutive accesses,
/// and warps that log one after another, shrink to one entry before the sort. Only exact
/// unions are taken: the result covers the same bytes.
fn premerge(entries: &mut Vec<Entry>) {
    let mut out = 0;
    for i in 0..entries.len() {
        let e = entries[i];
        if out > 0 {
            let last = &mut entries[out - 1];
            let last_end = last.addr + u64::from(last.len);
            let e_end = e.addr + u64::from(e.len);
            if last.kind == e.kind && e.addr <= last_end && e.addr >= last.addr {
                let end = last_end.max(e_end);
                if let Ok(len) = u32::try_from(end - last.addr) {
                    last.len = len;
                    continue;
                }
            }
        }
        entries[out] = e;
        out += 1;
    }
    entries.truncate(out);
}

/// Cuts `[start, end)` at allocation boundaries and adds each piece to `out`.
fn attribute(start: u64, end: u64, kind: u32, live: &Allocations, out: &mut Folded) {
    let mut at = start;
    while at < end {
        let containing = live
            .range(..=at)
            .next_back()
            .filter(|(base, a)| at < **base + a.bytes);
        match containing {
            Some((&base, a)) => {
                let piece_end = end.min(base + a.bytes);
                let access = Access::bytes(a.buf, at - base, piece_end - at);
                match kind {
                    READ => out.reads.push(access),
                    ATOMIC => out.atomics.push(access),
                    _ => out.writes.push(access),
                }
                at = piece_end;
            }
            None => {
                // Skip to the next allocation, counting the gap.
                let next = live.range(at..end).next().map_or(end, |(b, _)| *b);
                out.unattributed_bytes += next - at;
                at = next;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed pseudo-random sequence (an LCG from `seed`): each call gives a number below `m`.
    fn lcg(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut x = seed;
        move |m| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        }
    }

    fn live() -> Allocations {
        let mut m = Allocations::new();
        m.insert(
            0x1000,
            Allocation {
                buf: 1,
                bytes: 0x100,
            },
        );
        m.insert(
            0x1100,
            Allocation {
                buf: 2,
                bytes: 0x100,
            },
        );
        m.insert(
            0x2000,
            Allocation {
                buf: 3,
                bytes: 0x40,
            },
        );
        m
    }

    fn e(addr: u64, len: u32, kind: u32) -> Entry {
        Entry { addr, len, kind }
    }

    #[test]
    fn touching_runs_merge_and_gaps_stay_gaps() {
        // A warp's 128 bytes, the next warp's 128 bytes, then every other float.
        let mut entries = vec![e(0x1080, 0x80, WRITE), e(0x1000, 0x80, WRITE)];
        entries.extend((0..4).map(|i| e(0x2000 + 8 * i, 4, READ)));
        let f = fold(&entries, &live());
        // 0x1000..0x1100 is all of buffer 1.
        assert_eq!(f.writes, vec![Access::bytes(1, 0, 0x100)]);
        assert_eq!(
            f.reads,
            (0..4)
                .map(|i| Access::bytes(3, 8 * i, 4))
                .collect::<Vec<_>>()
        );
        assert_eq!(f.unattributed_bytes, 0);
    }

    #[test]
    fn a_run_across_two_allocations_is_cut_at_the_boundary() {
        let f = fold(&[e(0x10f0, 0x20, READ)], &live());
        assert_eq!(
            f.reads,
            vec![Access::bytes(1, 0xf0, 0x10), Access::bytes(2, 0, 0x10)]
        );
    }

    #[test]
    fn bytes_outside_every_allocation_are_counted_not_checked() {
        // 0x1f00..0x2010: 0x100 bytes before buffer 3, then 0x10 of it.
        let f = fold(&[e(0x1f00, 0x110, WRITE), e(0x9000, 8, READ)], &live());
        assert_eq!(f.writes, vec![Access::bytes(3, 0, 0x10)]);
        assert!(f.reads.is_empty());
        assert_eq!(f.unattributed_bytes, 0x108);
    }

    #[test]
    fn atomics_are_kept_apart_and_do_not_merge_with_plain_writes() {
        let f = fold(&[e(0x1000, 4, ATOMIC), e(0x1004, 4, WRITE)], &live());
        assert_eq!(f.writes, vec![Access::bytes(1, 4, 4)]);
        assert_eq!(f.atomics, vec![Access::bytes(1, 0, 4)]);
    }

    #[test]
    fn merging_in_log_order_keeps_exactly_the_same_bytes() {
        // Warps in order, one inside an earlier run, another kind between, a gap.
        let mut entries = vec![
            e(0x1000, 0x20, READ),
            e(0x1020, 0x20, READ),
            e(0x1010, 0x08, READ),
            e(0x1040, 0x10, WRITE),
            e(0x1048, 0x10, READ),
            e(0x1080, 0x10, READ),
        ];
        premerge(&mut entries);
        assert_eq!(
            entries,
            vec![
                e(0x1000, 0x40, READ),
                e(0x1040, 0x10, WRITE),
                e(0x1048, 0x10, READ),
                e(0x1080, 0x10, READ)
            ]
        );
        let f = fold(&entries, &live());
        assert_eq!(
            f.reads,
            vec![
                Access::bytes(1, 0, 0x40),
                Access::bytes(1, 0x48, 0x10),
                Access::bytes(1, 0x80, 0x10)
            ]
        );
    }

    #[test]
    fn the_pre_merge_never_changes_the_result() {
        // Pseudo-random logs (a fixed LCG): runs near each other, of all kinds, some crossing
        // allocation boundaries or outside every allocation.
        let mut next = lcg(0x2545_f491_4f6c_dd1d);
        for _ in 0..500 {
            let entries: Vec<Entry> = (0..next(40) + 1)
                .map(|_| {
                    e(
                        0x0f80 + next(0x1100),
                        1 + next(0x60) as u32,
                        1 + next(3) as u32,
                    )
                })
                .collect();
            let expected = fold_sorting(&mut entries.clone(), &live());
            assert_eq!(fold(&entries, &live()), expected, "{entries:?}");
        }
    }

    #[test]
    fn long_logs_fold_as_the_reference_does() {
        // Past the radix sort's threshold: scrambled warps, all kinds, odd lengths, spans
        // across and outside allocations.
        let mut next = lcg(7);
        for n in [512, 3000, 20000] {
            let entries: Vec<Entry> = (0..n)
                .map(|_| {
                    e(
                        0x0f00 + next(0x1200) * 4,
                        1 + next(200) as u32,
                        1 + next(3) as u32,
                    )
                })
                .collect();
            let expected = fold_sorting(&mut entries.clone(), &live());
            assert_eq!(fold(&entries, &live()), expected);
        }
    }

    /// The log of tests/run_gpu/apps/bench.cu's `scale` on 1 Mi floats as the device writes it:
    /// each warp a 128-byte read of `x` and a 128-byte write of `y`, warps in scrambled order.
    fn scale_log(n_floats: u64) -> (Vec<Entry>, Allocations) {
        let (x, y) = (0x7f00_0000_0000u64, 0x7f00_0040_0000u64 + 0x20_0000);
        let bytes = n_floats * 4;
        let mut live = Allocations::new();
        live.insert(x, Allocation { buf: 1, bytes });
        live.insert(y, Allocation { buf: 2, bytes });
        let warps = bytes / 128;
        let mut order: Vec<u64> = (0..warps).collect();
        let mut next = lcg(11);
        for i in (1..order.len()).rev() {
            order.swap(i, next(i as u64 + 1) as usize);
        }
        let mut log = Vec::new();
        for w in order {
            log.push(e(x + w * 128, 128, READ));
            log.push(e(y + w * 128, 128, WRITE));
        }
        (log, live)
    }

    #[test]
    fn a_scrambled_kernel_log_folds_to_whole_buffers() {
        let (log, live) = scale_log(1 << 16);
        let f = fold(&log, &live);
        assert_eq!(f.reads, vec![Access::bytes(1, 0, 1 << 18)]);
        assert_eq!(f.writes, vec![Access::bytes(2, 0, 1 << 18)]);
        assert_eq!(f, fold_sorting(&mut log.clone(), &live));
    }

    /// Bitmaps with a coarse granule (every entry 64-byte aligned) and with a fine one (one odd
    /// entry among them) give the reference's runs: gaps of one granule stay gaps, runs cross
    /// words, and a run may end at the span's last byte.
    #[test]
    fn granules_never_stand_for_bytes_not_logged() {
        let mut next = lcg(3);
        let mut live = Allocations::new();
        live.insert(
            0x10_0000,
            Allocation {
                buf: 1,
                bytes: 0x4_0000,
            },
        );
        live.insert(
            0x14_0000,
            Allocation {
                buf: 2,
                bytes: 0x4_0000,
            },
        );
        for odd in [false, true] {
            let mut entries: Vec<Entry> = (0..4000)
                .map(|_| {
                    e(
                        0x10_0000 + next(0x2000) * 64,
                        64 * (1 + next(3) as u32),
                        1 + next(3) as u32,
                    )
                })
                .collect();
            if odd {
                entries.push(e(0x10_0003, 5, WRITE));
            }
            entries.push(e(0x18_0000 - 64, 64, READ));
            let expected = fold_sorting(&mut entries.clone(), &live);
            assert_eq!(fold(&entries, &live), expected, "odd: {odd}");
        }
    }

    /// A fold that ended before clearing its bits (a panic in the tool) leaves them set; the
    /// next fold on the thread starts from clean bitmaps.
    #[test]
    fn bits_left_by_an_interrupted_fold_are_cleared_first() {
        let (log, live) = scale_log(1 << 14);
        let expected = fold(&log, &live);
        BITS.with(|cell| {
            let (bits, dirty) = &mut *cell.borrow_mut();
            bits.iter_mut().for_each(|w| *w = !0);
            *dirty = true;
        });
        assert_eq!(fold(&log, &live), expected);
    }

    /// How long a 1 Mi-float kernel's log takes to fold (`cargo test --release -p
    /// streamsan-tool fold_time -- --ignored --nocapture`): a measurement, not a test.
    #[test]
    #[ignore = "a measurement, run by hand in release"]
    fn fold_time() {
        let (log, live) = scale_log(1 << 20);
        let mut times = Vec::new();
        for _ in 0..101 {
            let t = std::time::Instant::now();
            let f = fold(&log, &live);
            times.push(t.elapsed().as_secs_f64() * 1e6);
            assert_eq!(f.reads.len(), 1);
        }
        times.sort_by(f64::total_cmp);
        eprintln!(
            "fold of {} entries: median {:.0} us (min {:.0})",
            log.len(),
            times[50],
            times[0]
        );
    }

    #[test]
    fn overlapping_entries_fold_to_their_union() {
        // A broadcast read logged by several warps, and a read inside another.
        let f = fold(
            &[
                e(0x1010, 4, READ),
                e(0x1010, 4, READ),
                e(0x1000, 0x20, READ),
            ],
            &live(),
        );
        assert_eq!(f.reads, vec![Access::bytes(1, 0, 0x20)]);
    }
}
