//! [`CudaView`] and [`CudaViewMut`]: cudarc's `&[T]` and `&mut [T]` on the device, each with the
//! byte range it covers in its allocation, so that accesses through views of one buffer overlap
//! exactly as their bytes do. Every method is cudarc's.

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use cudarc::driver::sys;

use super::device_ptr::{BufRef, SyncOnDrop, Tracked};
use super::stream::CudaStream;

/// `&[T]` on the device: cudarc's `CudaView` and its bytes. Made by [`super::CudaSlice::slice`]
/// and friends.
#[derive(Debug)]
pub struct CudaView<'a, T> {
    pub(crate) cuda: cudarc::driver::CudaView<'a, T>,
    pub(crate) buf: Option<BufRef>,
    pub(crate) stream: &'a Arc<CudaStream>,
}

/// `&mut [T]` on the device: cudarc's `CudaViewMut` and its bytes.
#[derive(Debug)]
pub struct CudaViewMut<'a, T> {
    pub(crate) cuda: cudarc::driver::CudaViewMut<'a, T>,
    pub(crate) buf: Option<BufRef>,
    pub(crate) stream: &'a Arc<CudaStream>,
}

/// What both views have: their length, stream and cudarc view.
macro_rules! view_basics {
    ($view:ident) => {
        impl<'a, T> $view<'a, T> {
            pub fn len(&self) -> usize {
                self.cuda.len()
            }

            pub fn is_empty(&self) -> bool {
                self.cuda.is_empty()
            }

            pub(crate) fn stream_ref(&self) -> &Arc<CudaStream> {
                self.stream
            }

            pub(crate) fn cuda_ref(&self) -> &cudarc::driver::$view<'a, T> {
                &self.cuda
            }

            /// The wrapped cudarc view. Work done through it directly is not recorded.
            pub fn cudarc(&self) -> &cudarc::driver::$view<'a, T> {
                &self.cuda
            }
        }
    };
}

view_basics!(CudaView);
view_basics!(CudaViewMut);

/// `start..end` of `len` elements, or `None` when out of bounds (cudarc's `to_range`).
pub(crate) fn to_range(range: impl RangeBounds<usize>, len: usize) -> Option<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&n) => n,
        Bound::Excluded(&n) => n.checked_add(1)?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&n) => n.checked_add(1)?,
        Bound::Excluded(&n) => n,
        Bound::Unbounded => len,
    };
    (start <= end && end <= len).then_some((start, end))
}

/// The bytes of elements `start..start + len` of `T` inside `buf`.
pub(crate) fn elems<T>(buf: Option<BufRef>, start: usize, len: usize) -> Option<BufRef> {
    let size = size_of::<T>() as u64;
    buf.map(|b| b.sub(start as u64 * size, len as u64 * size))
}

impl<'a, T> CudaView<'a, T> {
    /// Elements `bounds` of this view; panics when out of bounds.
    pub fn slice(&self, bounds: impl RangeBounds<usize>) -> Self {
        self.try_slice(bounds).expect("slice out of bounds")
    }

    /// Elements `bounds`, or `None` when out of bounds.
    pub fn try_slice(&self, bounds: impl RangeBounds<usize>) -> Option<Self> {
        let (start, end) = to_range(bounds, self.len())?;
        Some(CudaView {
            cuda: self.cuda.try_slice(start..end)?,
            buf: elems::<T>(self.buf, start, end - start),
            stream: self.stream,
        })
    }

    /// The bytes as `len` elements of `S`, or `None` when they do not fit.
    ///
    /// # Safety
    /// As cudarc's: the bytes may not be valid values of `S`.
    pub unsafe fn transmute<S>(&self, len: usize) -> Option<CudaView<'a, S>> {
        Some(CudaView {
            cuda: unsafe { self.cuda.transmute::<S>(len) }?,
            buf: elems::<S>(self.buf, 0, len),
            stream: self.stream,
        })
    }

    /// Two views at `mid`; panics when out of bounds.
    pub fn split_at(&self, mid: usize) -> (Self, Self) {
        self.try_split_at(mid).expect("split_at out of bounds")
    }

    /// Two views at `mid`, or `None` when out of bounds.
    pub fn try_split_at(&self, mid: usize) -> Option<(Self, Self)> {
        Some((self.try_slice(..mid)?, self.try_slice(mid..)?))
    }

    /// Views of `chunk_size` elements; `chunk_size` must divide the length (cudarc asserts it).
    pub fn chunks_exact(&self, chunk_size: usize) -> impl Iterator<Item = CudaView<'a, T>> + '_ {
        assert!(self.len().is_multiple_of(chunk_size));
        (0..self.len() / chunk_size).map(move |i| self.slice(i * chunk_size..(i + 1) * chunk_size))
    }

    /// [`super::DevicePtr::device_ptr`] with the guard living as long as the view.
    #[track_caller]
    pub fn view_ptr(self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        let buf = self.buf;
        let cuda = self.cuda;
        super::device_ptr::take_ptr(buf, stream, false, move |s| cuda.view_ptr(s))
    }
}

impl<'a, T> CudaViewMut<'a, T> {
    pub(crate) fn cuda_mut_ref(&mut self) -> &mut cudarc::driver::CudaViewMut<'a, T> {
        &mut self.cuda
    }

    /// This view, read-only.
    pub fn as_view<'b>(&'b self) -> CudaView<'b, T> {
        CudaView {
            cuda: self.cuda.as_view(),
            buf: self.buf,
            stream: self.stream,
        }
    }

    /// This view, read-only, for as long as it lived.
    pub fn into_view(self) -> CudaView<'a, T> {
        CudaView {
            cuda: self.cuda.into_view(),
            buf: self.buf,
            stream: self.stream,
        }
    }

    /// Elements `bounds`, read-only; panics when out of bounds.
    pub fn slice<'b>(&'b self, bounds: impl RangeBounds<usize>) -> CudaView<'b, T> {
        self.as_view().slice(bounds)
    }

    /// Elements `bounds`, read-only, or `None`.
    pub fn try_slice<'b>(&'b self, bounds: impl RangeBounds<usize>) -> Option<CudaView<'b, T>> {
        self.as_view().try_slice(bounds)
    }

    /// The bytes as `len` elements of `S`, read-only.
    ///
    /// # Safety
    /// As cudarc's: the bytes may not be valid values of `S`.
    pub unsafe fn transmute<'b, S>(&'b self, len: usize) -> Option<CudaView<'b, S>> {
        unsafe { self.as_view().transmute(len) }
    }

    /// Elements `bounds`, mutable; panics when out of bounds.
    pub fn slice_mut<'b>(&'b mut self, bounds: impl RangeBounds<usize>) -> CudaViewMut<'b, T> {
        self.try_slice_mut(bounds).expect("slice_mut out of bounds")
    }

    /// Elements `bounds`, mutable, or `None`.
    pub fn try_slice_mut<'b>(
        &'b mut self,
        bounds: impl RangeBounds<usize>,
    ) -> Option<CudaViewMut<'b, T>> {
        let (start, end) = to_range(bounds, self.len())?;
        Some(CudaViewMut {
            buf: elems::<T>(self.buf, start, end - start),
            cuda: self.cuda.try_slice_mut(start..end)?,
            stream: self.stream,
        })
    }

    /// Two disjoint mutable views at `mid`; panics when out of bounds.
    pub fn split_at_mut<'b>(&'b mut self, mid: usize) -> (CudaViewMut<'b, T>, CudaViewMut<'b, T>) {
        self.try_split_at_mut(mid)
            .expect("split_at_mut out of bounds")
    }

    /// Two disjoint mutable views at `mid`, or `None`.
    pub fn try_split_at_mut<'b>(
        &'b mut self,
        mid: usize,
    ) -> Option<(CudaViewMut<'b, T>, CudaViewMut<'b, T>)> {
        let len = self.len();
        let (buf, stream) = (self.buf, self.stream);
        let (a, b) = self.cuda.try_split_at_mut(mid)?;
        Some((
            CudaViewMut {
                cuda: a,
                buf: elems::<T>(buf, 0, mid),
                stream,
            },
            CudaViewMut {
                cuda: b,
                buf: elems::<T>(buf, mid, len - mid),
                stream,
            },
        ))
    }

    /// Mutable views of `chunk_size` elements; `chunk_size` must divide the length.
    pub fn chunks_exact_mut(self, chunk_size: usize) -> impl Iterator<Item = CudaViewMut<'a, T>> {
        let (buf, stream) = (self.buf, self.stream);
        self.cuda
            .chunks_exact_mut(chunk_size)
            .enumerate()
            .map(move |(i, cuda)| CudaViewMut {
                cuda,
                buf: elems::<T>(buf, i * chunk_size, chunk_size),
                stream,
            })
    }

    /// The bytes as `len` elements of `S`, mutable.
    ///
    /// # Safety
    /// As cudarc's: the bytes may not be valid values of `S`.
    pub unsafe fn transmute_mut<'b, S>(&'b mut self, len: usize) -> Option<CudaViewMut<'b, S>> {
        let buf = elems::<S>(self.buf, 0, len);
        Some(CudaViewMut {
            cuda: unsafe { self.cuda.transmute_mut::<S>(len) }?,
            buf,
            stream: self.stream,
        })
    }

    /// [`super::DevicePtr::device_ptr`] with the guard living as long as the view.
    #[track_caller]
    pub fn view_ptr(self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        let buf = self.buf;
        let cuda = self.cuda;
        super::device_ptr::take_ptr(buf, stream, false, move |s| cuda.view_ptr(s))
    }

    /// [`super::DevicePtrMut::device_ptr_mut`] with the guard living as long as the view.
    #[track_caller]
    pub fn view_ptr_mut(self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
        let buf = self.buf;
        let cuda = self.cuda;
        super::device_ptr::take_ptr(buf, stream, true, move |s| cuda.view_ptr_mut(s))
    }
}

impl<T> Tracked for CudaView<'_, T> {
    fn buf_ref(&self) -> Option<BufRef> {
        self.buf
    }
}

impl<T> Tracked for CudaViewMut<'_, T> {
    fn buf_ref(&self) -> Option<BufRef> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_cudarc() {
        assert_eq!(to_range(.., 8), Some((0, 8)));
        assert_eq!(to_range(2..=3, 8), Some((2, 4)));
        assert_eq!(to_range((Bound::Included(3), Bound::Excluded(2)), 8), None);
        assert_eq!(to_range(..9, 8), None);
        assert_eq!(to_range(..=usize::MAX, 8), None);
    }

    #[test]
    fn element_ranges_become_byte_ranges_inside_the_allocation() {
        let whole = BufRef {
            owner: 1,
            id: 3,
            off: 0,
            len: 64,
            bytes: 64,
            ..BufRef::FOREIGN
        };
        let view = elems::<f32>(Some(whole), 4, 8).unwrap();
        assert_eq!((view.off, view.len), (16, 32));
        let inner = elems::<u8>(Some(view), 2, 3).unwrap();
        assert_eq!((inner.off, inner.len), (18, 3));
        assert!(elems::<f32>(None, 0, 1).is_none());
    }
}
