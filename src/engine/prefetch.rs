//! Software prefetch: start loading memory the engine will read a few records from now, so
//! that the load overlaps the work on the records before it instead of stalling it.

use crate::trace::record::{BufId, Op};

/// Calls `f` with the buffer of every access of `op`, in a plain loop (the prefetch runs on
/// every record: an iterator chain here cost more than the loads it saved with few buffers).
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
        _ => {}
    }
}

/// Starts loading the cache lines of `value` (at most the first two) into the CPU's caches.
/// A hint only: it reads nothing and cannot fault, and is a no-op where unsupported.
#[inline(always)]
pub(super) fn lines<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let p = (value as *const T).cast::<i8>();
        // SAFETY: SSE is part of every x86_64 CPU, and a prefetch neither reads nor writes
        // memory (any address is allowed; it cannot fault).
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
