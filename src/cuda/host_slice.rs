//! cudarc's [`HostSlice`]: the host memory copies take — `[T]`, `Vec<T>`, `[T; N]` (pageable)
//! and [`PinnedHostSlice`] — and what the sanitizer needs to know of it.

use std::panic::Location;

use super::device_ptr::{BufRef, SyncOnDrop, Tracked};
use super::model::{self, HostEnd};
use super::pinned::PinnedHostSlice;
use super::records::HostMemory;
use super::stream::CudaStream;

/// cudarc's `HostSlice`: host memory a copy reads or writes.
pub trait HostSlice<T> {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The memory, for an operation on `stream`: for pinned memory, `stream` first waits for
    /// its last copy, and the guard records this use when dropped (both recorded, as cudarc
    /// makes them; the operation made with the slice is not).
    ///
    /// # Safety
    /// As cudarc's: only for use with `stream`.
    unsafe fn stream_synced_slice<'a>(
        &'a self,
        stream: &'a CudaStream,
    ) -> (&'a [T], SyncOnDrop<'a>);

    /// [`HostSlice::stream_synced_slice`], mutable.
    ///
    /// # Safety
    /// As cudarc's: only for use with `stream`.
    unsafe fn stream_synced_mut_slice<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (&'a mut [T], SyncOnDrop<'a>);

    #[doc(hidden)]
    type Cuda: cudarc::driver::HostSlice<T> + ?Sized;
    #[doc(hidden)]
    fn cuda(&self) -> &Self::Cuda;
    #[doc(hidden)]
    fn cuda_mut(&mut self) -> &mut Self::Cuda;
    /// Pageable, or the pinned buffer's reference.
    #[doc(hidden)]
    fn pinned(&self) -> HostMemory;
}

macro_rules! pageable {
    ($ty:ty $(, const $n:ident: usize)?) => {
        impl<T $(, const $n: usize)?> HostSlice<T> for $ty {
            fn len(&self) -> usize {
                <[T]>::len(self.as_ref())
            }
            unsafe fn stream_synced_slice<'a>(
                &'a self,
                stream: &'a CudaStream,
            ) -> (&'a [T], SyncOnDrop<'a>) {
                // SAFETY: the caller's obligation; cudarc does nothing for pageable memory.
                let (s, g) = unsafe {
                    cudarc::driver::HostSlice::stream_synced_slice(self, stream.cudarc())
                };
                (s, SyncOnDrop::untracked(g))
            }
            unsafe fn stream_synced_mut_slice<'a>(
                &'a mut self,
                stream: &'a CudaStream,
            ) -> (&'a mut [T], SyncOnDrop<'a>) {
                // SAFETY: as above.
                let (s, g) = unsafe {
                    cudarc::driver::HostSlice::stream_synced_mut_slice(self, stream.cudarc())
                };
                (s, SyncOnDrop::untracked(g))
            }

            type Cuda = $ty;
            fn cuda(&self) -> &Self::Cuda {
                self
            }
            fn cuda_mut(&mut self) -> &mut Self::Cuda {
                self
            }
            fn pinned(&self) -> HostMemory {
                HostMemory::Pageable
            }
        }
    };
}

pageable!([T]);
pageable!(Vec<T>);
pageable!([T; N], const N: usize);

impl<T> HostSlice<T> for PinnedHostSlice<T> {
    fn len(&self) -> usize {
        PinnedHostSlice::len(self)
    }

    #[track_caller]
    unsafe fn stream_synced_slice<'a>(
        &'a self,
        stream: &'a CudaStream,
    ) -> (&'a [T], SyncOnDrop<'a>) {
        let at = Location::caller();
        let buf = self.buf_ref();
        // SAFETY: the caller's obligation.
        let (slice, guard) = unsafe {
            cudarc::driver::HostSlice::stream_synced_slice(self.cudarc(), stream.cudarc())
        };
        (slice, pinned_guard(buf, stream, at, guard))
    }

    #[track_caller]
    unsafe fn stream_synced_mut_slice<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (&'a mut [T], SyncOnDrop<'a>) {
        let at = Location::caller();
        let buf = self.buf_ref();
        // SAFETY: the caller's obligation.
        let (slice, guard) = unsafe {
            cudarc::driver::HostSlice::stream_synced_mut_slice(self.cuda_mut_ref(), stream.cudarc())
        };
        (slice, pinned_guard(buf, stream, at, guard))
    }

    type Cuda = cudarc::driver::PinnedHostSlice<T>;
    fn cuda(&self) -> &Self::Cuda {
        self.cudarc()
    }
    fn cuda_mut(&mut self) -> &mut Self::Cuda {
        self.cuda_mut_ref()
    }
    fn pinned(&self) -> HostMemory {
        HostMemory::Pinned(self.buf_ref())
    }
}

/// Records cudarc's unconditional wait on the pinned event (core.rs:1583, 1593) and has the
/// guard record the event's record (made only while managing).
fn pinned_guard<'a>(
    buf: Option<BufRef>,
    stream: &'a CudaStream,
    at: &'static Location<'static>,
    guard: cudarc::driver::SyncOnDrop<'a>,
) -> SyncOnDrop<'a> {
    let owned = stream.san().zip(buf).filter(|(san, b)| san.owns(b.owner));
    let Some((san, Some(p))) = owned.map(|(san, b)| (san, b.pinned)) else {
        return SyncOnDrop::untracked(guard);
    };
    let mut call = san.begin(Some(at));
    let id = stream.id_in(&mut call);
    model::wait_pinned(&mut call.steps, id, HostEnd::Pinned(p));
    call.finish();
    SyncOnDrop::recording(guard, san, stream, p.record_step(id))
}
