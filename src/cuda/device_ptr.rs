//! cudarc's traits over device memory — [`DeviceSlice`], [`DevicePtr`], [`DevicePtrMut`] and the
//! [`SyncOnDrop`] guard — for this layer's [`CudaSlice`], [`CudaView`] and [`CudaViewMut`], and
//! [`BufRef`], what the sanitizer knows of the bytes one of them covers.
//!
//! Generic code written against cudarc's traits (`fn f<S: DevicePtr<f32>>(s: &S)`) compiles
//! against these. `device_ptr` / `device_ptr_mut` hand out the raw pointer with the waits and the
//! record cudarc's event tracking makes around it, and those are recorded; what the program then
//! does with the raw pointer is not (the sanitizer cannot see it).

use std::panic::Location;
use std::sync::Arc;

use cudarc::driver::sys;

use super::model::{self, PinnedEvent, SliceEvents};
use super::sanitizer::{Sanitizer, StreamSlot};
use super::slice::CudaSlice;
use super::step::Step;
use super::stream::CudaStream;
use super::view::{CudaView, CudaViewMut};
use crate::trace::record::{self, BufId, DeviceId};

/// The bytes of one allocation an access covers, as the sanitizer needs them. Not part of the
/// API.
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

    /// `len` bytes from `off` of this reference's allocation.
    pub(crate) fn sub(mut self, off: u64, len: u64) -> BufRef {
        self.off += off;
        self.len = len;
        self
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

/// Memory the sanitizer tracks: [`CudaSlice`], [`CudaView`], [`CudaViewMut`] and
/// [`super::PinnedHostSlice`]. A launch or host function declares memory it reaches outside its
/// arguments with it ([`super::LaunchArgs::reads`], [`super::HostFuncBuilder::writes`]).
pub trait Tracked {
    /// `None` when the memory belongs to an unsanitized context.
    #[doc(hidden)]
    fn buf_ref(&self) -> Option<BufRef>;
}

/// cudarc's `DeviceSlice`: the length and stream of [`CudaSlice`], [`CudaView`],
/// [`CudaViewMut`].
pub trait DeviceSlice<T>: Tracked {
    fn len(&self) -> usize;
    fn num_bytes(&self) -> usize {
        self.len() * std::mem::size_of::<T>()
    }
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The stream the memory was allocated on.
    fn stream(&self) -> &Arc<CudaStream>;
}

/// cudarc's `DevicePtr`: device memory an operation reads.
pub trait DevicePtr<T>: DeviceSlice<T> {
    /// The raw pointer, for an operation that reads the memory on `stream`. As in cudarc,
    /// `stream` first waits for the memory's last recorded write (when cudarc manages
    /// synchronization), and the guard records the read when dropped: drop it after the read
    /// is enqueued. Both are recorded; the operation made with the pointer is not.
    fn device_ptr<'a>(&'a self, stream: &'a CudaStream) -> (sys::CUdeviceptr, SyncOnDrop<'a>);

    /// The cudarc memory inside.
    #[doc(hidden)]
    type Cuda: cudarc::driver::DevicePtr<T>;
    #[doc(hidden)]
    fn cuda(&self) -> &Self::Cuda;
}

/// cudarc's `DevicePtrMut`: device memory an operation writes.
pub trait DevicePtrMut<T>: DeviceSlice<T> {
    /// The raw pointer, for an operation that writes the memory on `stream`: waits for the
    /// last recorded read and write, and the guard records the write (as cudarc; both
    /// recorded, the operation not).
    fn device_ptr_mut<'a>(
        &'a mut self,
        stream: &'a CudaStream,
    ) -> (sys::CUdeviceptr, SyncOnDrop<'a>);

    #[doc(hidden)]
    type CudaMut: cudarc::driver::DevicePtrMut<T>;
    #[doc(hidden)]
    fn cuda_mut(&mut self) -> &mut Self::CudaMut;
}

/// cudarc's `SyncOnDrop`: returned with a raw pointer; when dropped, records the access's event
/// (if cudarc is managing synchronization then), and the sanitizer records that record.
/// Unlike cudarc's, it is opaque (no variants to match).
#[derive(Debug)]
#[must_use]
pub struct SyncOnDrop<'a> {
    cuda: Option<cudarc::driver::SyncOnDrop<'a>>,
    pending: Option<PendingRecord<'a>>,
}

/// The record a [`SyncOnDrop`] makes in the trace when it drops: cudarc's record of an event,
/// made only if cudarc is managing synchronization then (core.rs:1199-1207).
#[derive(Debug)]
struct PendingRecord<'a> {
    san: &'a Sanitizer,
    stream: &'a CudaStream,
    record: Step,
}

impl Drop for SyncOnDrop<'_> {
    fn drop(&mut self) {
        let Some(p) = self.pending.take() else {
            drop(self.cuda.take());
            return;
        };
        let mut call = p.san.begin(None);
        let managing = p.stream.managing();
        drop(self.cuda.take());
        if managing {
            call.push(p.record);
        }
        call.finish();
    }
}

impl<'a> SyncOnDrop<'a> {
    pub(crate) fn untracked(cuda: cudarc::driver::SyncOnDrop<'a>) -> Self {
        SyncOnDrop {
            cuda: Some(cuda),
            pending: None,
        }
    }

    /// cudarc's guard, and `record` (a [`Step::TrackedRecord`]) to make when it drops.
    pub(crate) fn recording(
        cuda: cudarc::driver::SyncOnDrop<'a>,
        san: &'a Sanitizer,
        stream: &'a CudaStream,
        record: Step,
    ) -> Self {
        SyncOnDrop {
            cuda: Some(cuda),
            pending: Some(PendingRecord {
                san,
                stream,
                record,
            }),
        }
    }
}

/// `device_ptr` / `device_ptr_mut` of any of the three: cudarc's call, and when `stream` is
/// sanitized and owns the memory, cudarc's waits now and its record when the guard drops.
#[track_caller]
pub(crate) fn take_ptr<'a>(
    buf: Option<BufRef>,
    stream: &'a CudaStream,
    write: bool,
    cuda: impl FnOnce(
        &'a cudarc::driver::CudaStream,
    ) -> (sys::CUdeviceptr, cudarc::driver::SyncOnDrop<'a>),
) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
    let owned = stream.san().zip(buf).filter(|(san, b)| san.owns(b.owner));
    let Some((san, buf)) = owned else {
        let (ptr, guard) = cuda(stream.cudarc());
        return (ptr, SyncOnDrop::untracked(guard));
    };
    let mut call = san.begin(Some(Location::caller()));
    let id = stream.id_in(&mut call);
    // cudarc checks the memory's context for the waits; one sanitizer means one device here
    // or a shared one, where the streams' contexts decide alike.
    let managing = stream.managing();
    let (ptr, guard) = cuda(stream.cudarc());
    if write {
        model::wait_before_write(&mut call.steps, id, buf.events, managing);
    } else {
        model::wait_before_read(&mut call.steps, id, buf.events, managing);
    }
    call.finish();
    let guard = match buf.events {
        Some(ev) => SyncOnDrop::recording(guard, san, stream, ev.record_step(write, id)),
        None => SyncOnDrop::untracked(guard),
    };
    (ptr, guard)
}

macro_rules! device_ptr_impls {
    ($ty:ty, $inner:ty, [$($life:lifetime),*]) => {
        impl<$($life,)* T> DeviceSlice<T> for $ty {
            fn len(&self) -> usize {
                self.len()
            }
            fn stream(&self) -> &Arc<CudaStream> {
                self.stream_ref()
            }
        }

        impl<$($life,)* T> DevicePtr<T> for $ty {
            #[track_caller]
            fn device_ptr<'a>(
                &'a self,
                stream: &'a CudaStream,
            ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
                let cuda = self.cuda_ref();
                take_ptr(self.buf_ref(), stream, false, move |s| {
                    cudarc::driver::DevicePtr::device_ptr(cuda, s)
                })
            }

            type Cuda = $inner;
            fn cuda(&self) -> &Self::Cuda {
                self.cuda_ref()
            }
        }
    };
}

device_ptr_impls!(CudaSlice<T>, cudarc::driver::CudaSlice<T>, []);
device_ptr_impls!(CudaView<'v, T>, cudarc::driver::CudaView<'v, T>, ['v]);
device_ptr_impls!(CudaViewMut<'v, T>, cudarc::driver::CudaViewMut<'v, T>, ['v]);

macro_rules! device_ptr_mut_impls {
    ($ty:ty, $inner:ty, [$($life:lifetime),*]) => {
        impl<$($life,)* T> DevicePtrMut<T> for $ty {
            #[track_caller]
            fn device_ptr_mut<'a>(
                &'a mut self,
                stream: &'a CudaStream,
            ) -> (sys::CUdeviceptr, SyncOnDrop<'a>) {
                let buf = self.buf_ref();
                let cuda = self.cuda_mut_ref();
                take_ptr(buf, stream, true, move |s| {
                    cudarc::driver::DevicePtrMut::device_ptr_mut(cuda, s)
                })
            }

            type CudaMut = $inner;
            fn cuda_mut(&mut self) -> &mut Self::CudaMut {
                self.cuda_mut_ref()
            }
        }
    };
}

device_ptr_mut_impls!(CudaSlice<T>, cudarc::driver::CudaSlice<T>, []);
device_ptr_mut_impls!(CudaViewMut<'v, T>, cudarc::driver::CudaViewMut<'v, T>, ['v]);
