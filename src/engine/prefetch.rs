//! Software prefetch: start loading memory the engine will read a few records from now, so
//! that the load overlaps the work on the records before it instead of stalling it.

use std::convert::Infallible;

use crate::trace::record::{BufId, Op, Record};

#[cfg(test)]
thread_local! {
    /// How many values [`lines`] was asked to load on this thread (tests check that the
    /// prefetch runs where they expect it to).
    pub(super) static ISSUED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Calls `f` with every buffer whose state applying `op` reads: those of its accesses and of a
/// free (not a graph launch's nodes, nor a `record_stream`'s block).
#[inline(always)]
pub(super) fn for_each_buffer(op: &Op, mut f: impl FnMut(BufId)) {
    if let Op::Free { buf, .. } = op {
        // A free writes the whole buffer's state.
        return f(*buf);
    }
    let _ = op.try_for_each_access(|a, _| {
        f(a.buf);
        Ok::<(), Infallible>(())
    });
}

/// Starts loading the cache lines of `value` (at most the first two) into the CPU's caches.
/// A hint only: it has no architectural effect (it cannot fault or change memory, whatever the
/// address), and is a no-op where unsupported.
#[inline(always)]
pub(super) fn lines<T>(value: &T) {
    count_issued();
    let p = (value as *const T).cast::<u8>();
    hint(p);
    if std::mem::size_of::<T>() > 64 {
        hint(p.wrapping_add(64));
    }
}

/// Starts loading the cache lines of the `BYTES` bytes from `p`, as [`lines`] does a value's:
/// a hint every 64 bytes and one for the last byte (whose line the steps miss when `p` is not
/// at the start of a line). `BYTES` is a constant, so the hints unroll: no loop, no branch.
#[inline(always)]
pub(super) fn span<const BYTES: usize>(p: *const u8) {
    count_issued();
    let mut offset = 0;
    while offset < BYTES {
        hint(p.wrapping_add(offset));
        offset += 64;
    }
    if BYTES > 0 {
        hint(p.wrapping_add(BYTES - 1));
    }
}

/// Starts loading the cache line at `p`, as [`lines`] does a value's.
#[inline(always)]
fn line_at(p: *const u8) {
    count_issued();
    hint(p);
}

/// Counts one prefetch asked for, in tests ([`ISSUED`]), where it issues one.
#[inline(always)]
fn count_issued() {
    #[cfg(all(test, target_arch = "x86_64"))]
    ISSUED.with(|n| n.set(n.get() + 1));
}

/// The CPU's prefetch of the cache line at `p`.
#[inline(always)]
fn hint(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: SSE is part of every x86_64 CPU, and a prefetch has no architectural effect:
        // it cannot fault or change memory, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// How many records ahead a caller of [`record_parts`] should ask for them: what
/// `streamsan check` does, on the engine's thread, for the records its parsing thread wrote.
/// Chosen there on the binary encoding of 2 M records of the benchmark workload, where 4 and
/// 16 records ahead gained less than 8 (docs/performance.md, seventh round). The parsing
/// thread uses it too, untuned, for the records it is about to read into again.
pub const RECORD_PARTS_AHEAD: usize = 8;

/// Starts loading the parts of `record` that sit apart from it on the heap and that applying
/// it reads first: its name and location (hashed to find what the engine made of records like
/// it) and its access lists. In `check` they move between the two threads' cores: the parsing
/// thread writes them, the engine's thread reads them, and the parsing thread reuses them for
/// a later record.
#[inline]
pub fn record_parts(record: &Record) {
    for text in [&record.name, &record.at].into_iter().flatten() {
        line_at(text.as_ptr());
    }
    match &record.op {
        Op::Launch { reads, writes, .. }
        | Op::HostFunc { reads, writes, .. }
        | Op::HostAccess { reads, writes } => {
            line_at(reads.as_ptr().cast());
            line_at(writes.as_ptr().cast());
        }
        _ => {}
    }
}
