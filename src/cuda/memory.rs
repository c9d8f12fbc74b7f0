//! Allocation, copies and memsets: cudarc's stream methods (asynchronous, stream-ordered), and
//! the synchronous driver variants on [`Context`], which run on the legacy default stream.
//!
//! Pageable host memory (`&[T]`, `Vec<T>`, arrays) is not tracked beyond the call: each copy
//! gives it a transient `host` buffer (`alloc`, the copy, `free`), and records the copy as
//! `blocking`, because cudarc's safe API hands the slice back (or returns a `Vec`) when the call
//! returns, which is only sound if the driver has finished with pageable memory by then; see
//! "Pageable host memory" in `docs/online.md`.

use std::panic::Location;

use cudarc::driver::{
    DevicePtr, DevicePtrMut, DeviceRepr, DeviceSlice, DriverError, HostSlice, ValidAsZeroBits,
    result,
};

use super::buffer::{BufMeta, BufRef, DeviceBuffer, DeviceDst, DeviceSrc, Tracked};
use super::context::Context;
use super::model::{self, HostEnd, PeerCopy, SliceEvents, Step};
use super::pinned::PinnedBuffer;
use super::sanitizer::{Call, Sanitizer};
use super::stream::Stream;
use crate::trace::record::{Access, MemSpace, Op, StreamId};

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
    fn pinned(&self) -> Option<Option<BufRef>>;
}

impl<T> HostMem<T> for [T] {
    type Cuda = [T];
    fn cuda(&self) -> &[T] {
        self
    }
    fn cuda_mut(&mut self) -> &mut [T] {
        self
    }
    fn pinned(&self) -> Option<Option<BufRef>> {
        None
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
    fn pinned(&self) -> Option<Option<BufRef>> {
        None
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
    fn pinned(&self) -> Option<Option<BufRef>> {
        None
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
    fn pinned(&self) -> Option<Option<BufRef>> {
        Some(self.buf_ref())
    }
}

/// The host side of a copy, resolved for one call.
struct HostSide {
    end: HostEnd,
    access: Access,
    /// The transient buffer of pageable memory, freed after the copy.
    transient: Option<u64>,
}

impl HostSide {
    /// Declares the transient buffer of pageable memory, or refers to the pinned buffer.
    /// `None` when the pinned buffer belongs to another sanitizer.
    fn resolve(
        call: &mut Call<'_>,
        pinned: Option<Option<BufRef>>,
        bytes: u64,
        device: u32,
    ) -> Option<HostSide> {
        match pinned {
            None => {
                let buf = call.new_buf_id();
                call.push(Step::op(
                    Op::Alloc {
                        buf,
                        bytes,
                        device,
                        space: MemSpace::Host,
                        stream: None,
                        addr: None,
                    },
                    Some("pageable host memory".into()),
                ));
                Some(HostSide {
                    end: HostEnd::Pageable,
                    access: Access::whole(buf),
                    transient: Some(buf),
                })
            }
            Some(b) => {
                let b = b.filter(|b| call.same_sanitizer(&[b.owner]))?;
                Some(HostSide {
                    end: HostEnd::Pinned(b.pinned.expect("a pinned buffer")),
                    access: b.with_len(bytes).access(None),
                    transient: None,
                })
            }
        }
    }

    /// Pageable copies are recorded as blocking (see the module docs).
    fn blocking(&self) -> bool {
        self.transient.is_some()
    }

    fn finish(&self, call: &mut Call<'_>) {
        if let Some(buf) = self.transient {
            call.push(Step::op(Op::Free { buf, stream: None }, None));
        }
    }
}

/// A device side of a call resolved for one call; `None` when foreign.
fn device_side(call: &mut Call<'_>, b: Option<BufRef>) -> Option<BufRef> {
    let owner = b.map_or(0, |b| b.owner);
    if call.same_sanitizer(&[owner]) {
        b
    } else {
        None
    }
}

fn bytes_of<T>(len: usize) -> u64 {
    (len * size_of::<T>()) as u64
}

impl Stream {
    #[track_caller]
    fn alloc_at<T: DeviceRepr>(
        &self,
        len: usize,
        name: Option<&str>,
        at: &'static Location<'static>,
    ) -> Result<DeviceBuffer<T>, DriverError> {
        let Some(san) = self.san() else {
            let slice = unsafe { self.cudarc().alloc::<T>(len) }?;
            return Ok(DeviceBuffer::new(slice, None, self.clone()));
        };
        let mut call = san.begin(Some(at));
        let stream = self.id_in(&mut call);
        let ctx = self.cuda_context();
        let tracking = ctx.is_event_tracking();
        let stream_ordered = ctx.has_async_alloc();
        // SAFETY: the caller's obligation (uninitialized memory), as in cudarc.
        let slice = unsafe { self.cudarc().alloc::<T>(len) }?;
        let buf = call.new_buf_id();
        let events = tracking.then(|| SliceEvents {
            buf,
            read: call.new_event_id(),
            write: call.new_event_id(),
        });
        let bytes = bytes_of::<T>(len);
        let alloc = Op::Alloc {
            buf,
            bytes,
            device: self.device(),
            space: MemSpace::Device,
            stream: stream_ordered.then_some(stream),
            addr: None,
        };
        model::plan_alloc(&mut call.steps, alloc, name.map(str::to_string), events);
        call.finish();
        let meta = BufMeta {
            san: san.clone(),
            id: buf,
            bytes,
            events,
            alloc_stream: self.inner.slot,
            device: self.device(),
        };
        Ok(DeviceBuffer::new(slice, Some(meta), self.clone()))
    }

    /// `CudaStream::alloc`: `len` elements, stream-ordered (`cuMemAllocAsync` on this stream)
    /// when the device supports memory pools.
    ///
    /// # Safety
    /// The memory is uninitialized.
    #[track_caller]
    pub unsafe fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>, DriverError> {
        self.alloc_at(len, None, Location::caller())
    }

    /// [`Stream::alloc`] with a name for reports.
    ///
    /// # Safety
    /// The memory is uninitialized.
    #[track_caller]
    pub unsafe fn alloc_named<T: DeviceRepr>(
        &self,
        name: &str,
        len: usize,
    ) -> Result<DeviceBuffer<T>, DriverError> {
        self.alloc_at(len, Some(name), Location::caller())
    }

    /// `CudaStream::alloc_zeros`: an allocation, then a memset on this stream.
    #[track_caller]
    pub fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<DeviceBuffer<T>, DriverError> {
        let mut buf = self.alloc_at(len, None, Location::caller())?;
        self.memset_zeros(&mut buf)?;
        Ok(buf)
    }

    /// [`Stream::alloc_zeros`] with a name for reports.
    #[track_caller]
    pub fn alloc_zeros_named<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        name: &str,
        len: usize,
    ) -> Result<DeviceBuffer<T>, DriverError> {
        let mut buf = self.alloc_at(len, Some(name), Location::caller())?;
        self.memset_zeros(&mut buf)?;
        Ok(buf)
    }

    /// `CudaStream::memset_zeros` (`cuMemsetD8Async` on this stream).
    #[track_caller]
    pub fn memset_zeros<T: DeviceRepr + ValidAsZeroBits, Dst: DeviceDst<T>>(
        &self,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cudarc().memset_zeros(dst.cuda_mut());
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        let managing = self.managing();
        let d = dst.buf_ref();
        self.cudarc().memset_zeros(dst.cuda_mut())?;
        if let Some(d) = device_side(&mut call, d) {
            let memset = Step::op(
                Op::Memset {
                    stream,
                    dst: d.access(None),
                    blocking: false,
                },
                Some("memset_zeros".into()),
            );
            model::plan_memset(&mut call.steps, stream, d.events, managing, memset);
        }
        call.finish();
        Ok(())
    }

    #[track_caller]
    fn htod<T: DeviceRepr, Src: HostMem<T> + ?Sized, Dst: DeviceDst<T>>(
        &self,
        src: &Src,
        dst: &mut Dst,
        label: &str,
        at: &'static Location<'static>,
    ) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cudarc().memcpy_htod(src.cuda(), dst.cuda_mut());
        };
        let mut call = san.begin(Some(at));
        let stream = self.id_in(&mut call);
        let managing = self.managing();
        let d = dst.buf_ref();
        let bytes = bytes_of::<T>(HostSlice::len(src.cuda()));
        self.cudarc().memcpy_htod(src.cuda(), dst.cuda_mut())?;
        let device = self.device();
        if let Some(d) = device_side(&mut call, d) {
            if let Some(host) = HostSide::resolve(&mut call, src.pinned(), bytes, device) {
                let copy = Step::op(
                    Op::Memcpy {
                        stream,
                        src: host.access.clone(),
                        dst: d.with_len(bytes).access(None),
                        blocking: host.blocking(),
                    },
                    Some(label.into()),
                );
                model::plan_htod(&mut call.steps, stream, host.end, d.events, managing, copy);
                host.finish(&mut call);
            }
        }
        call.finish();
        Ok(())
    }

    /// `CudaStream::memcpy_htod` (`cuMemcpyHtoDAsync` on this stream).
    #[track_caller]
    pub fn memcpy_htod<T: DeviceRepr, Src: HostMem<T> + ?Sized, Dst: DeviceDst<T>>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        self.htod(src, dst, "memcpy_htod", Location::caller())
    }

    /// `CudaStream::clone_htod`: an allocation on this stream, then [`Stream::memcpy_htod`].
    #[track_caller]
    pub fn clone_htod<T: DeviceRepr, Src: HostMem<T> + ?Sized>(
        &self,
        src: &Src,
    ) -> Result<DeviceBuffer<T>, DriverError> {
        let at = Location::caller();
        let mut dst = self.alloc_at(HostSlice::len(src.cuda()), None, at)?;
        self.htod(src, &mut dst, "clone_htod", at)?;
        Ok(dst)
    }

    /// [`Stream::clone_htod`] with a name for reports.
    #[track_caller]
    pub fn clone_htod_named<T: DeviceRepr, Src: HostMem<T> + ?Sized>(
        &self,
        name: &str,
        src: &Src,
    ) -> Result<DeviceBuffer<T>, DriverError> {
        let at = Location::caller();
        let mut dst = self.alloc_at(HostSlice::len(src.cuda()), Some(name), at)?;
        self.htod(src, &mut dst, "clone_htod", at)?;
        Ok(dst)
    }

    /// Records a device-to-host copy of `dst_len` elements (cudarc copies `dst.len()`
    /// elements, not `src.len()`: result.rs `memcpy_dtoh_async`).
    fn record_dtoh<T>(
        &self,
        call: &mut Call<'_>,
        (stream, managing): (StreamId, bool),
        s: Option<BufRef>,
        pinned: Option<Option<BufRef>>,
        dst_len: usize,
        label: &str,
    ) {
        let bytes = bytes_of::<T>(dst_len);
        let Some(s) = device_side(call, s) else {
            return;
        };
        let Some(host) = HostSide::resolve(call, pinned, bytes, self.device()) else {
            return;
        };
        let copy = Step::op(
            Op::Memcpy {
                stream,
                src: s.with_len(bytes).access(None),
                dst: host.access.clone(),
                blocking: host.blocking(),
            },
            Some(label.into()),
        );
        model::plan_dtoh(&mut call.steps, stream, s.events, host.end, managing, copy);
        host.finish(call);
    }

    /// `CudaStream::memcpy_dtoh` (`cuMemcpyDtoHAsync` on this stream).
    #[track_caller]
    pub fn memcpy_dtoh<T: DeviceRepr, Src: DeviceSrc<T>, Dst: HostMem<T> + ?Sized>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cudarc().memcpy_dtoh(src.cuda(), dst.cuda_mut());
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        let managing = self.managing();
        let dst_len = HostSlice::len(dst.cuda());
        self.cudarc().memcpy_dtoh(src.cuda(), dst.cuda_mut())?;
        self.record_dtoh::<T>(
            &mut call,
            (stream, managing),
            src.buf_ref(),
            dst.pinned(),
            dst_len,
            "memcpy_dtoh",
        );
        call.finish();
        Ok(())
    }

    /// `CudaStream::clone_dtoh`: a new `Vec`, filled by a device-to-host copy.
    #[track_caller]
    pub fn clone_dtoh<T: DeviceRepr, Src: DeviceSrc<T>>(
        &self,
        src: &Src,
    ) -> Result<Vec<T>, DriverError> {
        let Some(san) = self.san() else {
            return self.cudarc().clone_dtoh(src.cuda());
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        let managing = self.managing();
        let out = self.cudarc().clone_dtoh(src.cuda())?;
        self.record_dtoh::<T>(
            &mut call,
            (stream, managing),
            src.buf_ref(),
            None,
            out.len(),
            "clone_dtoh",
        );
        call.finish();
        Ok(out)
    }

    /// `CudaStream::memcpy_dtod` (`cuMemcpyDtoDAsync`, or `cuMemcpyPeerAsync` when `src`
    /// belongs to another context).
    #[track_caller]
    pub fn memcpy_dtod<T, Src: DeviceSrc<T>, Dst: DeviceDst<T>>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        self.dtod(src, dst, "memcpy_dtod", Location::caller())
    }

    /// `CudaStream::clone_dtod`: an allocation on this stream, then [`Stream::memcpy_dtod`].
    #[track_caller]
    pub fn clone_dtod<T: DeviceRepr, Src: DeviceSrc<T>>(
        &self,
        src: &Src,
    ) -> Result<DeviceBuffer<T>, DriverError> {
        let at = Location::caller();
        let mut dst = self.alloc_at(src.cuda().len(), None, at)?;
        self.dtod(src, &mut dst, "clone_dtod", at)?;
        Ok(dst)
    }

    fn dtod<T, Src: DeviceSrc<T>, Dst: DeviceDst<T>>(
        &self,
        src: &Src,
        dst: &mut Dst,
        label: &str,
        at: &'static Location<'static>,
    ) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cudarc().memcpy_dtod(src.cuda(), dst.cuda_mut());
        };
        let mut call = san.begin(Some(at));
        let stream = self.id_in(&mut call);
        let managing = self.managing();
        let src_ctx = src.cuda().stream().context().clone();
        let peer = src_ctx != *self.cuda_context();
        let src_managing = src_ctx.is_managing_stream_synchronization();
        let (s, d) = (src.buf_ref(), dst.buf_ref());
        let bytes = src.cuda().num_bytes() as u64;
        self.cudarc().memcpy_dtod(src.cuda(), dst.cuda_mut())?;
        let owners = [s.map_or(0, |b| b.owner), d.map_or(0, |b| b.owner)];
        if let (true, Some(s), Some(d)) = (call.same_sanitizer(&owners), s, d) {
            let copy = Step::op(
                Op::Memcpy {
                    stream,
                    src: s.access(None),
                    dst: d.with_len(bytes).access(None),
                    blocking: false,
                },
                Some(label.into()),
            );
            if peer {
                let (slot, device) = s.alloc_stream.expect("device memory");
                let p = PeerCopy {
                    stream,
                    src_stream: call.stream(slot, device),
                    src: s.events,
                    dst: d.events,
                    src_managing,
                    dst_managing: managing,
                    tmp: call.new_event_id(),
                };
                model::plan_dtod_peer(&mut call.steps, p, copy);
            } else {
                model::plan_dtod(&mut call.steps, stream, s.events, d.events, managing, copy);
            }
        }
        call.finish();
        Ok(())
    }
}

/// The synchronous driver copies (`cuMemcpyHtoD`, `cuMemcpyDtoH`, `cuMemcpyDtoD`,
/// `cuMemsetD8`): they run on the legacy default stream and are recorded with
/// `blocking: true`, so the engine applies the documented host ordering per direction. cudarc
/// has no safe API for them; the device pointer is taken through cudarc's `DevicePtr` on the
/// legacy stream, so cudarc's event tracking treats them like work on `default_stream()`.
impl Context {
    /// The legacy stream's id for this call.
    fn legacy_for(&self, call: &mut Call<'_>) -> StreamId {
        call.legacy_stream(self.device)
    }

    fn san_call(&self, at: &'static Location<'static>) -> Option<(&Sanitizer, Call<'_>)> {
        self.san.as_deref().map(|s| (s, s.begin(Some(at))))
    }

    /// `cuMemcpyHtoD`: a synchronous host-to-device copy.
    #[track_caller]
    pub fn memcpy_htod_sync<T: DeviceRepr, Src: HostMem<T> + ?Sized, Dst: DeviceDst<T>>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let legacy = self.cuda.default_stream();
        let mut call = self.san_call(Location::caller());
        let (managing, d) = (
            self.cuda.is_managing_stream_synchronization(),
            dst.buf_ref(),
        );
        let count = HostSlice::len(src.cuda());
        {
            self.cuda.bind_to_thread()?;
            // SAFETY: the slice is only used for this copy on `legacy`.
            let (host, _record_src) = unsafe { src.cuda().stream_synced_slice(&legacy) };
            let (ptr, _record_dst) = dst.cuda_mut().device_ptr_mut(&legacy);
            // SAFETY: `ptr` has room for `count` elements (cudarc's `memcpy_htod` contract).
            unsafe { result::memcpy_htod_sync(ptr, &host[..count]) }?;
        }
        if let Some((_, call)) = &mut call {
            let stream = self.legacy_for(call);
            let bytes = bytes_of::<T>(count);
            if let Some(d) = device_side(call, d) {
                if let Some(host) = HostSide::resolve(call, src.pinned(), bytes, self.device) {
                    let copy = Step::op(
                        Op::Memcpy {
                            stream,
                            src: host.access.clone(),
                            dst: d.with_len(bytes).access(None),
                            blocking: true,
                        },
                        Some("memcpy_htod_sync".into()),
                    );
                    model::plan_htod(&mut call.steps, stream, host.end, d.events, managing, copy);
                    host.finish(call);
                }
            }
        }
        if let Some((_, call)) = call {
            call.finish();
        }
        Ok(())
    }

    /// `cuMemcpyDtoH`: a synchronous device-to-host copy of `dst.len()` elements.
    #[track_caller]
    pub fn memcpy_dtoh_sync<T: DeviceRepr, Src: DeviceSrc<T>, Dst: HostMem<T> + ?Sized>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let legacy = self.cuda.default_stream();
        let mut call = self.san_call(Location::caller());
        let (managing, s, pinned) = (
            self.cuda.is_managing_stream_synchronization(),
            src.buf_ref(),
            dst.pinned(),
        );
        let count = HostSlice::len(dst.cuda());
        {
            self.cuda.bind_to_thread()?;
            let (ptr, _record_src) = src.cuda().device_ptr(&legacy);
            // SAFETY: the slice is only used for this copy on `legacy`.
            let (host, _record_dst) = unsafe { dst.cuda_mut().stream_synced_mut_slice(&legacy) };
            // SAFETY: as cudarc's `memcpy_dtoh`.
            unsafe { result::memcpy_dtoh_sync(&mut host[..count], ptr) }?;
        }
        if let Some((_, call)) = &mut call {
            let stream = self.legacy_for(call);
            let bytes = bytes_of::<T>(count);
            if let Some(s) = device_side(call, s) {
                if let Some(host) = HostSide::resolve(call, pinned, bytes, self.device) {
                    let copy = Step::op(
                        Op::Memcpy {
                            stream,
                            src: s.with_len(bytes).access(None),
                            dst: host.access.clone(),
                            blocking: true,
                        },
                        Some("memcpy_dtoh_sync".into()),
                    );
                    model::plan_dtoh(&mut call.steps, stream, s.events, host.end, managing, copy);
                    host.finish(call);
                }
            }
        }
        if let Some((_, call)) = call {
            call.finish();
        }
        Ok(())
    }

    /// `cuMemcpyDtoD`: a synchronous device-to-device copy (asynchronous to the host, per the
    /// API synchronization page, which the engine applies).
    #[track_caller]
    pub fn memcpy_dtod_sync<T, Src: DeviceSrc<T>, Dst: DeviceDst<T>>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let legacy = self.cuda.default_stream();
        let mut call = self.san_call(Location::caller());
        let managing = self.cuda.is_managing_stream_synchronization();
        let (s, d) = (src.buf_ref(), dst.buf_ref());
        let bytes = src.cuda().num_bytes();
        {
            self.cuda.bind_to_thread()?;
            let (sp, _record_src) = src.cuda().device_ptr(&legacy);
            let (dp, _record_dst) = dst.cuda_mut().device_ptr_mut(&legacy);
            // SAFETY: as cudarc's `memcpy_dtod`.
            unsafe { result::memcpy_dtod_sync(dp, sp, bytes) }?;
        }
        if let Some((_, call)) = &mut call {
            let stream = self.legacy_for(call);
            let owners = [s.map_or(0, |b| b.owner), d.map_or(0, |b| b.owner)];
            if let (true, Some(s), Some(d)) = (call.same_sanitizer(&owners), s, d) {
                let copy = Step::op(
                    Op::Memcpy {
                        stream,
                        src: s.access(None),
                        dst: d.with_len(bytes as u64).access(None),
                        blocking: true,
                    },
                    Some("memcpy_dtod_sync".into()),
                );
                model::plan_dtod(&mut call.steps, stream, s.events, d.events, managing, copy);
            }
        }
        if let Some((_, call)) = call {
            call.finish();
        }
        Ok(())
    }

    /// `cuMemsetD8`: a synchronous memset (asynchronous to the host for device memory).
    #[track_caller]
    pub fn memset_zeros_sync<T: DeviceRepr + ValidAsZeroBits, Dst: DeviceDst<T>>(
        &self,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let legacy = self.cuda.default_stream();
        let mut call = self.san_call(Location::caller());
        let managing = self.cuda.is_managing_stream_synchronization();
        let d = dst.buf_ref();
        let bytes = dst.cuda_mut().num_bytes();
        {
            self.cuda.bind_to_thread()?;
            let (dp, _record_dst) = dst.cuda_mut().device_ptr_mut(&legacy);
            // SAFETY: `bytes` is the view's size.
            unsafe { result::memset_d8_sync(dp, 0, bytes) }?;
        }
        if let Some((_, call)) = &mut call {
            let stream = self.legacy_for(call);
            if let Some(d) = device_side(call, d) {
                let memset = Step::op(
                    Op::Memset {
                        stream,
                        dst: d.access(None),
                        blocking: true,
                    },
                    Some("memset_zeros_sync".into()),
                );
                model::plan_memset(&mut call.steps, stream, d.events, managing, memset);
            }
        }
        if let Some((_, call)) = call {
            call.finish();
        }
        Ok(())
    }
}
