//! [`Inline`]: the short lists a launch fills while its arguments are pushed.

use std::mem::MaybeUninit;

/// A list of `Copy` items, held inline up to `N` and on the heap beyond: a launch with few
/// buffer arguments records without allocating. It has no `Drop` of its own (unlike
/// `SmallVec`), so a builder holding borrows of temporaries may be dropped after them, as
/// cudarc's `LaunchArgs` (which holds `Vec`s) may.
pub(crate) struct Inline<T: Copy, const N: usize> {
    len: usize,
    /// Items `..len` are initialized while `len <= N`.
    items: [MaybeUninit<T>; N],
    /// All the items once there are more than `N`.
    spill: Vec<T>,
}

impl<T: Copy, const N: usize> Inline<T, N> {
    pub(crate) fn new() -> Self {
        Inline {
            len: 0,
            items: [const { MaybeUninit::uninit() }; N],
            spill: Vec::new(),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, item: T) {
        if self.len < N {
            self.items[self.len].write(item);
        } else {
            if self.len == N {
                let mut spill = Vec::with_capacity(2 * N);
                spill.extend_from_slice(self.inline());
                self.spill = spill;
            }
            self.spill.push(item);
        }
        self.len += 1;
    }

    fn inline(&self) -> &[T] {
        let len = self.len.min(N);
        // SAFETY: items `..len` were written by `push` (`T: Copy`: nothing to drop).
        unsafe { std::slice::from_raw_parts(self.items.as_ptr().cast::<T>(), len) }
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        if self.len <= N {
            self.inline()
        } else {
            &self.spill
        }
    }
}

impl<T: Copy + std::fmt::Debug, const N: usize> std::fmt::Debug for Inline<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_lists_spill_to_the_heap_in_order() {
        let mut list: Inline<u32, 3> = Inline::new();
        assert!(list.as_slice().is_empty());
        for i in 0..3 {
            list.push(i);
        }
        assert_eq!(list.as_slice(), [0, 1, 2]);
        assert!(list.spill.is_empty());
        for i in 3..10 {
            list.push(i);
        }
        let all: Vec<u32> = (0..10).collect();
        assert_eq!(list.as_slice(), all);
        assert_eq!(format!("{list:?}"), format!("{all:?}"));
    }
}
