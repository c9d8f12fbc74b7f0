//! Software prefetch: start loading memory the engine will read a few records from now, so
//! that the load overlaps the work on the records before it instead of stalling it.

use crate::trace::record::{BufId, Op};

#[cfg(test)]
thread_local! {
    /// How many values [`lines`] was asked to load on this thread (tests check that the
    /// prefetch runs where they expect it to).
    pub(super) static ISSUED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Calls `f` with every buffer whose state applying `op` reads: those of its accesses and of a
/// free (not a graph launch's nodes, nor a `record_stream`'s block). In plain loops, not
/// `graphs::node_accesses`'s iterator chains: the prefetch runs on every record, and a first
/// version with chains cost about twice the instructions.
#[inline(always)]
pub(super) fn for_each_buffer(op: &Op, mut f: impl FnMut(BufId)) {
    match op {
        Op::Launch {
            reads,
            writes,
            atomics,
            ..
        } => {
            for a in reads {
                f(a.buf);
            }
            for a in writes {
                f(a.buf);
            }
            for a in atomics {
                f(a.buf);
            }
        }
        Op::HostFunc { reads, writes, .. } | Op::HostAccess { reads, writes } => {
            for a in reads {
                f(a.buf);
            }
            for a in writes {
                f(a.buf);
            }
        }
        Op::Memcpy { src, dst, .. } => {
            f(src.buf);
            f(dst.buf);
        }
        Op::Memset { dst, .. } => f(dst.buf),
        // A free writes the whole buffer's state.
        Op::Free { buf, .. } => f(*buf),
        _ => {}
    }
}

/// Starts loading the cache lines of `value` (at most the first two) into the CPU's caches.
/// A hint only: it has no architectural effect (it cannot fault or change memory, whatever the
/// address), and is a no-op where unsupported.
#[inline(always)]
pub(super) fn lines<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        #[cfg(test)]
        ISSUED.with(|n| n.set(n.get() + 1));
        let p = (value as *const T).cast::<i8>();
        // SAFETY: SSE is part of every x86_64 CPU, and a prefetch has no architectural effect:
        // it cannot fault or change memory, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p);
            if std::mem::size_of::<T>() > 64 {
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
