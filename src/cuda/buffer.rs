//! [`DeviceBuffer`] (cudarc's `CudaSlice`) and its views. A view knows its byte range inside the
//! allocation, so accesses through views of one buffer overlap exactly as their bytes do.

use std::mem::ManuallyDrop;
use std::ops::{Bound, RangeBounds};
use std::panic::Location;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr};

use super::model::{self, FreeKind, PinnedEvent, SliceEvents};
use super::sanitizer::{Sanitizer, StreamSlot};
use super::stream::Stream;
use crate::trace::record::{self, BufId, DeviceId};

/// What the sanitizer knows of one device allocation.
#[derive(Debug)]
pub(crate) struct BufMeta {
    pub(crate) san: Arc<Sanitizer>,
    pub(crate) id: BufId,
    pub(crate) bytes: u64,
    /// cudarc's read / write events, when tracking was on at allocation.
    pub(crate) events: Option<SliceEvents>,
    pub(crate) alloc_stream: StreamSlot,
    pub(crate) device: DeviceId,
}

/// Bytes of one allocation as an access needs them. Not part of the API.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct BufRef {
    /// The owning sanitizer's identity.
    pub(crate) owner: usize,
    pub(crate) id: BufId,
    pub(crate) off: u64,
    pub(crate) len: u64,
    /// The allocation's size.
    pub(crate) bytes: u64,
    pub(crate) events: Option<SliceEvents>,
    pub(crate) pinned: Option<PinnedEvent>,
    /// Where cudarc frees it and takes peer-copy pointers; `None` for pinned memory.
    pub(crate) alloc_stream: Option<(StreamSlot, DeviceId)>,
}

impl BufRef {
    /// Memory of an unsanitized context (owner 0 is no sanitizer).
    pub(crate) const FOREIGN: BufRef = BufRef {
        owner: 0,
        id: 0,
        off: 0,
        len: 0,
        bytes: 0,
        events: None,
        pinned: None,
        alloc_stream: None,
    };

    fn of(meta: &BufMeta, off: u64, len: u64) -> BufRef {
        BufRef {
            owner: meta.san.identity(),
            id: meta.id,
            off,
            len,
            bytes: meta.bytes,
            events: meta.events,
            pinned: None,
            alloc_stream: Some((meta.alloc_stream, meta.device)),
        }
    }

    /// The same start with `len` bytes, cut at the end of the allocation (cudarc's copies may
    /// move more bytes than a view has: see `memcpy_dtoh`).
    pub(crate) fn with_len(mut self, len: u64) -> BufRef {
        self.len = len.min(self.bytes.saturating_sub(self.off));
        self
    }

    /// The bytes accessed: `None` when the range covers the whole buffer.
    pub(crate) fn range(&self) -> Option<record::ByteRange> {
        (self.off != 0 || self.len != self.bytes).then_some(record::ByteRange {
            off: self.off,
            len: self.len,
        })
    }

    /// The trace access: the whole buffer when the range covers it.
    pub(crate) fn access(&self, arg: Option<String>) -> record::Access {
        record::Access {
            buf: self.id,
            range: self.range(),
            arg,
        }
    }
}

/// Memory the sanitizer tracks: device buffers, their views, pinned buffers.
pub trait Tracked {
    /// `None` when the memory belongs to an unsanitized context.
    #[doc(hidden)]
    fn buf_ref(&self) -> Option<BufRef>;
}

/// Device memory a copy reads: [`DeviceBuffer`], [`DeviceView`], [`DeviceViewMut`].
pub trait DeviceSrc<T>: Tracked {
    #[doc(hidden)]
    type Cuda: DevicePtr<T>;
    #[doc(hidden)]
    fn cuda(&self) -> &Self::Cuda;
}

/// Device memory a copy or memset writes: [`DeviceBuffer`], [`DeviceViewMut`].
pub trait DeviceDst<T>: Tracked {
    #[doc(hidden)]
    type Cuda: DevicePtrMut<T>;
    #[doc(hidden)]
    fn cuda_mut(&mut self) -> &mut Self::Cuda;
}

/// `Vec<T>` on the device: cudarc's `CudaSlice`, allocated on a stream and freed on drop on
/// that stream (see [`DeviceBuffer::free`]).
#[derive(Debug)]
pub struct DeviceBuffer<T> {
    pub(crate) slice: ManuallyDrop<CudaSlice<T>>,
    pub(crate) meta: Option<BufMeta>,
    /// The allocation stream, kept alive (a blocking stream made outside cudarc is destroyed
    /// with its last handle).
    stream: Stream,
    free_at: Option<&'static Location<'static>>,
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        let Some(meta) = &self.meta else {
            // SAFETY: dropped once, here.
            unsafe { ManuallyDrop::drop(&mut self.slice) };
            return;
        };
        let mut call = meta.san.begin(self.free_at);
        let alloc_stream = call.stream(meta.alloc_stream, meta.device);
        let ctx = self.slice.context();
        let managing = ctx.is_managing_stream_synchronization();
        let kind = if ctx.has_async_alloc() {
            FreeKind::Async
        } else {
            FreeKind::SyncThenFree
        };
        // SAFETY: dropped once, here.
        unsafe { ManuallyDrop::drop(&mut self.slice) };
        model::plan_slice_drop(
            &mut call.steps,
            meta.id,
            alloc_stream,
            meta.events,
            managing,
            kind,
            None,
        );
        call.finish();
    }
}

impl<T> DeviceBuffer<T> {
    pub(crate) fn new(slice: CudaSlice<T>, meta: Option<BufMeta>, stream: Stream) -> Self {
        DeviceBuffer {
            slice: ManuallyDrop::new(slice),
            meta,
            stream,
            free_at: None,
        }
    }

    /// Frees the buffer now, like dropping it, but with this call's source location in the
    /// trace and in reports (a drop has none).
    #[track_caller]
    pub fn free(mut self) {
        self.free_at = Some(Location::caller());
    }

    /// Elements of `T`.
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slice.is_empty()
    }

    pub fn num_bytes(&self) -> usize {
        self.slice.num_bytes()
    }

    /// The buffer's id in the trace (`b{id}` in reports), when sanitized.
    pub fn id(&self) -> Option<BufId> {
        self.meta.as_ref().map(|m| m.id)
    }

    /// The stream it was allocated on, and will be freed on.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The wrapped cudarc slice. Work done through it directly is not recorded.
    pub fn cudarc(&self) -> &CudaSlice<T> {
        &self.slice
    }

    /// The whole buffer as a view.
    pub fn as_view(&self) -> DeviceView<'_, T> {
        DeviceView {
            view: self.slice.as_view(),
            meta: self.meta.as_ref(),
            off: 0,
        }
    }

    /// The whole buffer as a mutable view.
    pub fn as_view_mut(&mut self) -> DeviceViewMut<'_, T> {
        DeviceViewMut {
            view: self.slice.as_view_mut(),
            meta: self.meta.as_ref(),
            off: 0,
        }
    }

    /// Elements `range` as a view; panics when out of bounds.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> DeviceView<'_, T> {
        self.as_view().into_slice(range)
    }

    /// Elements `range` as a mutable view; panics when out of bounds.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> DeviceViewMut<'_, T> {
        let (start, end) = elem_range(range, self.len());
        DeviceViewMut {
            view: self.slice.slice_mut(start..end),
            meta: self.meta.as_ref(),
            off: (start * size_of::<T>()) as u64,
        }
    }

    /// Two disjoint mutable views at `mid`.
    pub fn split_at_mut(&mut self, mid: usize) -> (DeviceViewMut<'_, T>, DeviceViewMut<'_, T>) {
        let meta = self.meta.as_ref();
        let (a, b) = self.slice.split_at_mut(mid);
        let mid_bytes = (mid * size_of::<T>()) as u64;
        (
            DeviceViewMut {
                view: a,
                meta,
                off: 0,
            },
            DeviceViewMut {
                view: b,
                meta,
                off: mid_bytes,
            },
        )
    }
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// `CudaSlice::try_clone`: a new buffer on the same stream, copied device to device.
    #[track_caller]
    pub fn try_clone(&self) -> Result<DeviceBuffer<T>, cudarc::driver::DriverError> {
        self.stream.clone_dtod(self)
    }
}

fn elem_range(range: impl RangeBounds<usize>, len: usize) -> (usize, usize) {
    let start = match range.start_bound() {
        Bound::Included(&n) => n,
        Bound::Excluded(&n) => n + 1,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&n) => n + 1,
        Bound::Excluded(&n) => n,
        Bound::Unbounded => len,
    };
    assert!(
        start <= end && end <= len,
        "range {start}..{end} out of bounds for a view of {len} elements"
    );
    (start, end)
}

/// `&[T]` on the device: cudarc's `CudaView` and its byte range in the allocation.
#[derive(Debug)]
pub struct DeviceView<'a, T> {
    pub(crate) view: CudaView<'a, T>,
    meta: Option<&'a BufMeta>,
    /// Bytes from the start of the allocation.
    off: u64,
}

impl<'a, T> DeviceView<'a, T> {
    pub fn len(&self) -> usize {
        self.view.len()
    }

    pub fn is_empty(&self) -> bool {
        self.view.is_empty()
    }

    /// Elements `range` of this view.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> DeviceView<'a, T> {
        let (start, end) = elem_range(range, self.len());
        DeviceView {
            view: self.view.slice(start..end),
            meta: self.meta,
            off: self.off + (start * size_of::<T>()) as u64,
        }
    }

    fn into_slice(self, range: impl RangeBounds<usize>) -> DeviceView<'a, T> {
        self.slice(range)
    }

    /// The wrapped cudarc view.
    pub fn cudarc(&self) -> &CudaView<'a, T> {
        &self.view
    }
}

/// `&mut [T]` on the device: cudarc's `CudaViewMut` and its byte range in the allocation.
#[derive(Debug)]
pub struct DeviceViewMut<'a, T> {
    pub(crate) view: CudaViewMut<'a, T>,
    meta: Option<&'a BufMeta>,
    off: u64,
}

impl<'a, T> DeviceViewMut<'a, T> {
    pub fn len(&self) -> usize {
        self.view.len()
    }

    pub fn is_empty(&self) -> bool {
        self.view.is_empty()
    }

    /// This view, read-only.
    pub fn as_view(&self) -> DeviceView<'_, T> {
        DeviceView {
            view: self.view.as_view(),
            meta: self.meta,
            off: self.off,
        }
    }

    /// Elements `range`, read-only.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> DeviceView<'_, T> {
        self.as_view().into_slice(range)
    }

    /// Elements `range`, mutable.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> DeviceViewMut<'_, T> {
        let (start, end) = elem_range(range, self.len());
        DeviceViewMut {
            view: self.view.slice_mut(start..end),
            meta: self.meta,
            off: self.off + (start * size_of::<T>()) as u64,
        }
    }

    /// Two disjoint mutable views at `mid`.
    pub fn split_at_mut(&mut self, mid: usize) -> (DeviceViewMut<'_, T>, DeviceViewMut<'_, T>) {
        let (meta, off) = (self.meta, self.off);
        let (a, b) = self.view.split_at_mut(mid);
        (
            DeviceViewMut { view: a, meta, off },
            DeviceViewMut {
                view: b,
                meta,
                off: off + (mid * size_of::<T>()) as u64,
            },
        )
    }

    /// The wrapped cudarc view.
    pub fn cudarc(&self) -> &CudaViewMut<'a, T> {
        &self.view
    }
}

impl<T> Tracked for DeviceBuffer<T> {
    fn buf_ref(&self) -> Option<BufRef> {
        self.meta
            .as_ref()
            .map(|m| BufRef::of(m, 0, self.num_bytes() as u64))
    }
}

impl<T> Tracked for DeviceView<'_, T> {
    fn buf_ref(&self) -> Option<BufRef> {
        let len = (self.len() * size_of::<T>()) as u64;
        self.meta.map(|m| BufRef::of(m, self.off, len))
    }
}

impl<T> Tracked for DeviceViewMut<'_, T> {
    fn buf_ref(&self) -> Option<BufRef> {
        let len = (self.len() * size_of::<T>()) as u64;
        self.meta.map(|m| BufRef::of(m, self.off, len))
    }
}

impl<T> DeviceSrc<T> for DeviceBuffer<T> {
    type Cuda = CudaSlice<T>;
    fn cuda(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<'a, T> DeviceSrc<T> for DeviceView<'a, T> {
    type Cuda = CudaView<'a, T>;
    fn cuda(&self) -> &CudaView<'a, T> {
        &self.view
    }
}

impl<'a, T> DeviceSrc<T> for DeviceViewMut<'a, T> {
    type Cuda = CudaViewMut<'a, T>;
    fn cuda(&self) -> &CudaViewMut<'a, T> {
        &self.view
    }
}

impl<T> DeviceDst<T> for DeviceBuffer<T> {
    type Cuda = CudaSlice<T>;
    fn cuda_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

impl<'a, T> DeviceDst<T> for DeviceViewMut<'a, T> {
    type Cuda = CudaViewMut<'a, T>;
    fn cuda_mut(&mut self) -> &mut CudaViewMut<'a, T> {
        &mut self.view
    }
}
