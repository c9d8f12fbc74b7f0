//! Asking the CPU early for memory the program's thread is about to write.
//!
//! The online layer writes, on every call, memory that no longer sits writable in this core's
//! cache: the checker's batch slots and the access lists they own, which the checker thread
//! read on another core since this thread last wrote them (so this core holds them shared, at
//! best), and the trace file's next bytes. A store to such a line waits for the other copies
//! to be invalidated; the stores queue up, and the next load that needs one of them (or the
//! lock's release) waits for all of them. `PREFETCHW` starts that work early, while the call
//! goes on. A read prefetch does not help there (the line is already present, shared): on the
//! batch slots it was slower than nothing.

use std::sync::atomic::{AtomicU8, Ordering};

/// Whether the CPU has `PREFETCHW`: unknown until first asked, then no or yes.
static PREFETCHW: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
const NO: u8 = 1;
const YES: u8 = 2;

/// Asks for the cache lines of `[p, p + len)` to be made writable in this core's cache, where
/// the CPU can (x86_64 with `PREFETCHW`: every Intel CPU since Broadwell, every AMD64 one);
/// elsewhere, nothing. It changes no byte.
#[inline(always)]
pub(crate) fn for_write<T>(p: *const T, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if len == 0 || !has_prefetchw() {
            return;
        }
        let (start, end) = (p as usize, (p as usize).saturating_add(len));
        let mut line = start & !(CACHE_LINE - 1);
        while line < end {
            // SAFETY: a prefetch has no architectural effect and does not fault; the CPU has
            // the instruction (checked above).
            unsafe {
                std::arch::asm!(
                    "prefetchw [{}]",
                    in(reg) line,
                    options(nostack, preserves_flags, readonly)
                );
            }
            line += CACHE_LINE;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// The CPU's cache line.
const CACHE_LINE: usize = 64;

/// Whether the CPU has `PREFETCHW`, asked once.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn has_prefetchw() -> bool {
    match PREFETCHW.load(Ordering::Relaxed) {
        YES => true,
        NO => false,
        _ => detect(),
    }
}

/// CPUID leaf 0x80000001's ECX bit 8 says so; AMD's 64-bit CPUs all have the instruction
/// whatever a hypervisor shows of that bit (Linux reasons the same way: "3DNow or LM implies
/// PREFETCHW"), and so do those with 3DNow! (EDX bit 31).
#[cfg(target_arch = "x86_64")]
#[cold]
fn detect() -> bool {
    use std::arch::x86_64::__cpuid;
    // SAFETY: CPUID exists on every x86_64 CPU; leaf 0x80000001 is read only where the
    // highest extended leaf (leaf 0x80000000's EAX) includes it.
    #[allow(unused_unsafe)]
    let has = unsafe {
        let vendor = __cpuid(0);
        let amd = (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        let bits = (__cpuid(0x8000_0000).eax >= 0x8000_0001).then(|| __cpuid(0x8000_0001));
        amd || bits.is_some_and(|b| b.ecx & (1 << 8) != 0 || b.edx & (1 << 31) != 0)
    };
    PREFETCHW.store(if has { YES } else { NO }, Ordering::Relaxed);
    has
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_range_can_be_asked_for() {
        // A range of many lines, one across two lines, an empty one: nothing changes.
        let bytes = vec![7u8; 1000];
        for_write(bytes.as_ptr(), bytes.len());
        for_write(bytes.as_ptr().wrapping_add(63), 2);
        for_write(bytes.as_ptr(), 0);
        assert!(bytes.iter().all(|&b| b == 7));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_answer_is_asked_once_and_kept() {
        let first = has_prefetchw();
        assert_ne!(PREFETCHW.load(Ordering::Relaxed), UNKNOWN);
        assert_eq!(has_prefetchw(), first);
        assert_eq!(detect(), first, "asked again, the same answer");
    }
}
