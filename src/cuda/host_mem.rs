//! [`HostMem`]: the host memory cudarc copies take (`HostSlice`), and what the sanitizer needs
//! to know of it (pageable, or a tracked pinned buffer).

use cudarc::driver::HostSlice;

use super::buffer::Tracked;
use super::pinned::PinnedBuffer;
use super::records::HostMemory;

/// Host memory a copy reads or writes: `[T]`, `Vec<T>`, `[T; N]` (pageable) or
/// [`PinnedBuffer`].
pub trait HostMem<T> {
    #[doc(hidden)]
    type Cuda: HostSlice<T> + ?Sized;
    #[doc(hidden)]
    fn cuda(&self) -> &Self::Cuda;
    #[doc(hidden)]
    fn cuda_mut(&mut self) -> &mut Self::Cuda;
    /// `None` for pageable memory; the pinned buffer's reference otherwise (itself `None`
    /// when it belongs to an unsanitized context).
    #[doc(hidden)]
    fn pinned(&self) -> HostMemory;
}

impl<T> HostMem<T> for [T] {
    type Cuda = [T];
    fn cuda(&self) -> &[T] {
        self
    }
    fn cuda_mut(&mut self) -> &mut [T] {
        self
    }
    fn pinned(&self) -> HostMemory {
        HostMemory::Pageable
    }
}

impl<T> HostMem<T> for Vec<T> {
    type Cuda = Vec<T>;
    fn cuda(&self) -> &Vec<T> {
        self
    }
    fn cuda_mut(&mut self) -> &mut Vec<T> {
        self
    }
    fn pinned(&self) -> HostMemory {
        HostMemory::Pageable
    }
}

impl<T, const N: usize> HostMem<T> for [T; N] {
    type Cuda = [T; N];
    fn cuda(&self) -> &[T; N] {
        self
    }
    fn cuda_mut(&mut self) -> &mut [T; N] {
        self
    }
    fn pinned(&self) -> HostMemory {
        HostMemory::Pageable
    }
}

impl<T> HostMem<T> for PinnedBuffer<T> {
    type Cuda = cudarc::driver::PinnedHostSlice<T>;
    fn cuda(&self) -> &Self::Cuda {
        self.cudarc()
    }
    fn cuda_mut(&mut self) -> &mut Self::Cuda {
        PinnedBuffer::cuda_mut(self)
    }
    fn pinned(&self) -> HostMemory {
        HostMemory::Pinned(self.buf_ref())
    }
}
