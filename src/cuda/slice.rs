//! [`CudaSlice`]: cudarc's `Vec<T>` on the device, with what the sanitizer knows of it. Dropping
//! it frees it on its allocation stream (after cudarc's waits), and that is recorded.

use std::mem::ManuallyDrop;
use std::ops::RangeBounds;
use std::panic::Location;
use std::sync::Arc;

use cudarc::driver::{DeviceRepr, DriverError, sys};

use super::context::CudaContext;
use super::device_ptr::{BufRef, Tracked};
use super::model::{self, FreeKind, SliceEvents};
use super::sanitizer::{Call, Sanitizer, StreamSlot};
use super::stream::CudaStream;
use super::view::{CudaView, CudaViewMut, elems, to_range};
use crate::trace::record::{BufId, DeviceId};

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

impl BufMeta {
    /// The whole allocation.
    pub(crate) fn whole(&self) -> BufRef {
        BufRef {
            owner: self.san.identity(),
            id: self.id,
            off: 0,
            len: self.bytes,
            bytes: self.bytes,
            events: self.events,
            pinned: None,
            alloc_stream: Some((self.alloc_stream, self.device)),
        }
    }
}

/// `Vec<T>` on the device: cudarc's `CudaSlice`, allocated on a stream and freed on drop on
/// that stream (see [`CudaSlice::free`]).
#[derive(Debug)]
pub struct CudaSlice<T> {
    pub(crate) cuda: ManuallyDrop<cudarc::driver::CudaSlice<T>>,
    pub(crate) meta: Option<BufMeta>,
    /// The allocation stream, kept alive as cudarc keeps its own.
    stream: Arc<CudaStream>,
    free_at: Option<&'static Location<'static>>,
}

/// Drops `cuda`, a cudarc object whose drop does work of its own (waits, a free), under the
/// lock of `san` when sanitized, after `plan` has said what that work is (as the state before
/// the drop decides it); the steps are recorded once it is done.
///
/// # Safety
/// Called once, from the `Drop` of the object that holds `cuda`.
pub(crate) unsafe fn release<X>(
    cuda: &mut ManuallyDrop<X>,
    san: Option<&Sanitizer>,
    at: Option<&'static Location<'static>>,
    plan: impl FnOnce(&mut Call<'_>),
) {
    let call = san.map(|san| {
        let mut call = san.begin(at);
        plan(&mut call);
        call
    });
    // SAFETY: the caller's obligation.
    unsafe { ManuallyDrop::drop(cuda) };
    if let Some(call) = call {
        call.finish();
    }
}

impl<T> Drop for CudaSlice<T> {
    fn drop(&mut self) {
        let meta = self.meta.as_ref();
        let ctx = self.stream.context().cudarc();
        let plan = |call: &mut Call<'_>| {
            let meta = meta.expect("sanitized");
            let alloc_stream = call.stream(meta.alloc_stream, meta.device);
            let kind = if ctx.has_async_alloc() {
                FreeKind::Async
            } else {
                FreeKind::SyncThenFree
            };
            let managing = ctx.is_managing_stream_synchronization();
            model::plan_slice_drop(
                &mut call.steps,
                meta.id,
                alloc_stream,
                meta.events,
                managing,
                kind,
                None,
            );
        };
        // SAFETY: dropped once, here.
        unsafe { release(&mut self.cuda, meta.map(|m| &*m.san), self.free_at, plan) };
    }
}

impl<T> CudaSlice<T> {
    pub(crate) fn new(
        cuda: cudarc::driver::CudaSlice<T>,
        meta: Option<BufMeta>,
        stream: Arc<CudaStream>,
    ) -> Self {
        CudaSlice {
            cuda: ManuallyDrop::new(cuda),
            meta,
            stream,
            free_at: None,
        }
    }

    /// Frees it now, like dropping it, with this call's source location in the trace and in
    /// reports (a drop has none). Not in cudarc.
    #[track_caller]
    pub fn free(mut self) {
        self.free_at = Some(Location::caller());
    }

    /// Elements of `T`.
    pub fn len(&self) -> usize {
        self.cuda.len()
    }

    pub fn num_bytes(&self) -> usize {
        self.cuda.num_bytes()
    }

    pub fn is_empty(&self) -> bool {
        self.cuda.is_empty()
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.cuda.ordinal()
    }

    /// The context of its stream.
    pub fn context(&self) -> &Arc<CudaContext> {
        self.stream.context()
    }

    /// The stream it was allocated on, and will be freed on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub(crate) fn stream_ref(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The buffer's id in the trace (`b{id}` in reports), when sanitized. Not in cudarc.
    pub fn id(&self) -> Option<BufId> {
        self.meta.as_ref().map(|m| m.id)
    }

    /// The wrapped cudarc slice. Work done through it directly is not recorded.
    pub fn cudarc(&self) -> &cudarc::driver::CudaSlice<T> {
        &self.cuda
    }

    pub(crate) fn cuda_ref(&self) -> &cudarc::driver::CudaSlice<T> {
        &self.cuda
    }

    pub(crate) fn cuda_mut_ref(&mut self) -> &mut cudarc::driver::CudaSlice<T> {
        &mut self.cuda
    }

    /// The whole buffer as a view.
    pub fn as_view(&self) -> CudaView<'_, T> {
        CudaView {
            cuda: self.cuda.as_view(),
            buf: self.buf_ref(),
            stream: &self.stream,
        }
    }

    /// The whole buffer as a mutable view.
    pub fn as_view_mut(&mut self) -> CudaViewMut<'_, T> {
        CudaViewMut {
            buf: self.buf_ref(),
            cuda: self.cuda.as_view_mut(),
            stream: &self.stream,
        }
    }

    /// Elements `bounds` as a view; panics when out of bounds.
    pub fn slice(&self, bounds: impl RangeBounds<usize>) -> CudaView<'_, T> {
        self.as_view().slice(bounds)
    }

    /// Elements `bounds` as a view, or `None` when out of bounds.
    pub fn try_slice(&self, bounds: impl RangeBounds<usize>) -> Option<CudaView<'_, T>> {
        self.as_view().try_slice(bounds)
    }

    /// Elements `bounds` as a mutable view; panics when out of bounds.
    pub fn slice_mut(&mut self, bounds: impl RangeBounds<usize>) -> CudaViewMut<'_, T> {
        self.try_slice_mut(bounds).expect("slice_mut out of bounds")
    }

    /// Elements `bounds` as a mutable view, or `None`.
    pub fn try_slice_mut(&mut self, bounds: impl RangeBounds<usize>) -> Option<CudaViewMut<'_, T>> {
        let (start, end) = to_range(bounds, self.len())?;
        Some(CudaViewMut {
            buf: elems::<T>(self.buf_ref(), start, end - start),
            cuda: self.cuda.try_slice_mut(start..end)?,
            stream: &self.stream,
        })
    }

    /// The bytes as `len` elements of `S`.
    ///
    /// # Safety
    /// As cudarc's: the bytes may not be valid values of `S`.
    pub unsafe fn transmute<S>(&self, len: usize) -> Option<CudaView<'_, S>> {
        unsafe { self.as_view().transmute(len) }
    }

    /// The bytes as `len` elements of `S`, mutable.
    ///
    /// # Safety
    /// As cudarc's: the bytes may not be valid values of `S`.
    pub unsafe fn transmute_mut<S>(&mut self, len: usize) -> Option<CudaViewMut<'_, S>> {
        let buf = elems::<S>(self.buf_ref(), 0, len);
        Some(CudaViewMut {
            cuda: unsafe { self.cuda.transmute_mut::<S>(len) }?,
            buf,
            stream: &self.stream,
        })
    }

    /// Two views at `mid`; panics when out of bounds.
    pub fn split_at(&self, mid: usize) -> (CudaView<'_, T>, CudaView<'_, T>) {
        self.as_view().split_at(mid)
    }

    /// Two views at `mid`, or `None`.
    pub fn try_split_at(&self, mid: usize) -> Option<(CudaView<'_, T>, CudaView<'_, T>)> {
        self.as_view().try_split_at(mid)
    }

    /// Two disjoint mutable views at `mid`; panics when out of bounds.
    pub fn split_at_mut(&mut self, mid: usize) -> (CudaViewMut<'_, T>, CudaViewMut<'_, T>) {
        self.try_split_at_mut(mid)
            .expect("split_at_mut out of bounds")
    }

    /// Two disjoint mutable views at `mid`, or `None`.
    pub fn try_split_at_mut(
        &mut self,
        mid: usize,
    ) -> Option<(CudaViewMut<'_, T>, CudaViewMut<'_, T>)> {
        let (len, buf) = (self.len(), self.buf_ref());
        let (a, b) = self.cuda.try_split_at_mut(mid)?;
        Some((
            CudaViewMut {
                cuda: a,
                buf: elems::<T>(buf, 0, mid),
                stream: &self.stream,
            },
            CudaViewMut {
                cuda: b,
                buf: elems::<T>(buf, mid, len - mid),
                stream: &self.stream,
            },
        ))
    }

    /// `CudaSlice::leak`: cudarc's waits on the allocation stream, and the memory is no longer
    /// freed by anyone but the caller. The waits are recorded; the buffer stays allocated in the
    /// trace (what the raw pointer is used for is not tracked).
    #[track_caller]
    pub fn leak(mut self) -> sys::CUdeviceptr {
        let at = Location::caller();
        let meta = self.meta.take();
        // SAFETY: each field is moved out once and `self` is forgotten, so its `Drop` never
        // runs (it would drop `cuda` again).
        let (cuda, stream) = unsafe {
            (
                ManuallyDrop::take(&mut self.cuda),
                std::ptr::read(&self.stream),
            )
        };
        std::mem::forget(self);
        let Some(meta) = meta else {
            return cuda.leak();
        };
        let mut call = meta.san.begin(Some(at));
        let alloc_stream = call.stream(meta.alloc_stream, meta.device);
        let managing = stream.managing();
        let ptr = cuda.leak();
        model::plan_leak(&mut call.steps, alloc_stream, meta.events, managing);
        call.finish();
        ptr
    }
}

impl<T: DeviceRepr> CudaSlice<T> {
    /// `CudaSlice::try_clone`: a new buffer on the same stream, copied device to device.
    #[track_caller]
    pub fn try_clone(&self) -> Result<Self, DriverError> {
        self.stream.clone_dtod(self)
    }
}

impl<T: DeviceRepr> Clone for CudaSlice<T> {
    /// As cudarc's: panics when the copy fails.
    #[track_caller]
    fn clone(&self) -> Self {
        self.try_clone().unwrap()
    }
}

impl<T: Clone + Default + DeviceRepr> TryFrom<CudaSlice<T>> for Vec<T> {
    type Error = DriverError;

    /// `clone_dtoh` on the slice's stream, as cudarc's.
    #[track_caller]
    fn try_from(value: CudaSlice<T>) -> Result<Self, Self::Error> {
        value.stream.clone_dtoh(&value)
    }
}

impl<T> Tracked for CudaSlice<T> {
    fn buf_ref(&self) -> Option<BufRef> {
        self.meta.as_ref().map(BufMeta::whole)
    }
}
