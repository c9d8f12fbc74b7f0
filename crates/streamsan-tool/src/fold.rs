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

/// One logged access run: `len` bytes from `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
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
pub fn fold(entries: &mut Vec<Entry>, live: &Allocations) -> Folded {
    premerge(entries);
    radix_sort(entries);
    fold_sorted(entries, live)
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
    let mut scratch = vec![
        Entry {
            addr: 0,
            len: 0,
            kind: 0
        };
        entries.len()
    ];
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
        let f = fold(&mut entries, &live());
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
        let f = fold(&mut vec![e(0x10f0, 0x20, READ)], &live());
        assert_eq!(
            f.reads,
            vec![Access::bytes(1, 0xf0, 0x10), Access::bytes(2, 0, 0x10)]
        );
    }

    #[test]
    fn bytes_outside_every_allocation_are_counted_not_checked() {
        // 0x1f00..0x2010: 0x100 bytes before buffer 3, then 0x10 of it.
        let f = fold(
            &mut vec![e(0x1f00, 0x110, WRITE), e(0x9000, 8, READ)],
            &live(),
        );
        assert_eq!(f.writes, vec![Access::bytes(3, 0, 0x10)]);
        assert!(f.reads.is_empty());
        assert_eq!(f.unattributed_bytes, 0x108);
    }

    #[test]
    fn atomics_are_kept_apart_and_do_not_merge_with_plain_writes() {
        let f = fold(
            &mut vec![e(0x1000, 4, ATOMIC), e(0x1004, 4, WRITE)],
            &live(),
        );
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
        let f = fold(&mut entries, &live());
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
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
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
            assert_eq!(fold(&mut entries.clone(), &live()), expected, "{entries:?}");
        }
    }

    #[test]
    fn long_logs_fold_as_the_reference_does() {
        // Past the radix sort's threshold: scrambled warps, all kinds, odd lengths, spans
        // across and outside allocations.
        let mut x: u64 = 7;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
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
            assert_eq!(fold(&mut entries.clone(), &live()), expected);
        }
    }

    #[test]
    fn overlapping_entries_fold_to_their_union() {
        // A broadcast read logged by several warps, and a read inside another.
        let f = fold(
            &mut vec![
                e(0x1010, 4, READ),
                e(0x1010, 4, READ),
                e(0x1000, 0x20, READ),
            ],
            &live(),
        );
        assert_eq!(f.reads, vec![Access::bytes(1, 0, 0x20)]);
    }
}
