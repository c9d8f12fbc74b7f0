//! cudarc's stream memory methods, wrapped: allocation (stream-ordered when the device has
//! memory pools), `memset_zeros`, and copies in every direction, all asynchronous on the stream.
//! The records come from `records.rs`.

use std::panic::Location;

use std::sync::Arc;

use cudarc::driver::{DeviceRepr, DriverError, ValidAsZeroBits, sys};

use super::device_ptr::{DevicePtr, DevicePtrMut, DeviceSlice};
use super::host_slice::HostSlice;
use super::records::{self, CallStream, HostMemory};
use super::sanitizer::Call;
use super::slice::{BufMeta, CudaSlice};
use super::stream::CudaStream;

pub(crate) fn bytes_of<T>(len: usize) -> u64 {
    (len * size_of::<T>()) as u64
}

impl CudaStream {
    /// Where this stream's calls run, for the caller of `call`.
    pub(crate) fn on(&self, call: &mut Call<'_>) -> CallStream {
        CallStream {
            stream: self.id_in(call),
            device: self.device(),
            managing: self.managing(),
        }
    }

    /// A new slice of `bytes` on this stream made by `make` (cudarc's call), recorded as an
    /// allocation when sanitizing: stream-ordered and with cudarc's events as `flags` says,
    /// given the context just before the call.
    fn new_slice<T>(
        self: &Arc<Self>,
        bytes: u64,
        name: Option<&str>,
        at: &'static Location<'static>,
        flags: impl FnOnce(&cudarc::driver::CudaContext) -> NewSlice,
        make: impl FnOnce(
            &Arc<cudarc::driver::CudaStream>,
        ) -> Result<cudarc::driver::CudaSlice<T>, DriverError>,
    ) -> Result<CudaSlice<T>, DriverError> {
        let Some(san) = self.san() else {
            return Ok(CudaSlice::new(make(self.cudarc())?, None, self.clone()));
        };
        let mut call = san.begin(Some(at));
        let on = self.on(&mut call);
        let NewSlice {
            stream_ordered,
            events,
        } = flags(self.context().cudarc());
        let slice = make(self.cudarc())?;
        let (id, events) =
            records::record_alloc(&mut call, on, bytes, stream_ordered, events, name);
        call.finish();
        let meta = BufMeta {
            san: san.clone(),
            id,
            bytes,
            events,
            alloc_stream: self.slot,
            device: self.device(),
        };
        Ok(CudaSlice::new(slice, Some(meta), self.clone()))
    }

    fn alloc_at<T: DeviceRepr>(
        self: &Arc<Self>,
        len: usize,
        name: Option<&str>,
        at: &'static Location<'static>,
    ) -> Result<CudaSlice<T>, DriverError> {
        let flags = |ctx: &cudarc::driver::CudaContext| NewSlice {
            stream_ordered: ctx.has_async_alloc(),
            events: ctx.is_event_tracking(),
        };
        // SAFETY: the caller's obligation (uninitialized memory), as in cudarc.
        let make = |s: &Arc<cudarc::driver::CudaStream>| unsafe { s.alloc::<T>(len) };
        self.new_slice(bytes_of::<T>(len), name, at, flags, make)
    }

    /// `CudaStream::alloc`: `len` elements, stream-ordered (`cuMemAllocAsync` on this stream)
    /// when the device supports memory pools.
    ///
    /// # Safety
    /// The memory is uninitialized.
    #[track_caller]
    pub unsafe fn alloc<T: DeviceRepr>(
        self: &Arc<Self>,
        len: usize,
    ) -> Result<CudaSlice<T>, DriverError> {
        self.alloc_at(len, None, Location::caller())
    }

    /// [`CudaStream::alloc`] with a name for reports.
    ///
    /// # Safety
    /// The memory is uninitialized.
    #[track_caller]
    pub unsafe fn alloc_named<T: DeviceRepr>(
        self: &Arc<Self>,
        name: &str,
        len: usize,
    ) -> Result<CudaSlice<T>, DriverError> {
        self.alloc_at(len, Some(name), Location::caller())
    }

    /// `CudaStream::alloc_zeros`: an allocation, then a memset on this stream.
    #[track_caller]
    pub fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        self: &Arc<Self>,
        len: usize,
    ) -> Result<CudaSlice<T>, DriverError> {
        let mut buf = self.alloc_at(len, None, Location::caller())?;
        self.memset_zeros(&mut buf)?;
        Ok(buf)
    }

    /// [`CudaStream::alloc_zeros`] with a name for reports.
    #[track_caller]
    pub fn alloc_zeros_named<T: DeviceRepr + ValidAsZeroBits>(
        self: &Arc<Self>,
        name: &str,
        len: usize,
    ) -> Result<CudaSlice<T>, DriverError> {
        let mut buf = self.alloc_at(len, Some(name), Location::caller())?;
        self.memset_zeros(&mut buf)?;
        Ok(buf)
    }

    /// `CudaStream::memset_zeros` (`cuMemsetD8Async` on this stream).
    #[track_caller]
    pub fn memset_zeros<T: DeviceRepr + ValidAsZeroBits, Dst: DevicePtrMut<T>>(
        self: &Arc<Self>,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cudarc().memset_zeros(dst.cuda_mut());
        };
        let mut call = san.begin(Some(Location::caller()));
        let on = self.on(&mut call);
        let d = dst.buf_ref();
        self.cudarc().memset_zeros(dst.cuda_mut())?;
        records::record_memset(&mut call, on, d, false, "memset_zeros");
        call.finish();
        Ok(())
    }

    fn htod<T: DeviceRepr, Src: HostSlice<T> + ?Sized, Dst: DevicePtrMut<T>>(
        self: &Arc<Self>,
        src: &Src,
        dst: &mut Dst,
        label: &str,
        at: &'static Location<'static>,
    ) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cudarc().memcpy_htod(src.cuda(), dst.cuda_mut());
        };
        let mut call = san.begin(Some(at));
        let on = self.on(&mut call);
        let d = dst.buf_ref();
        let bytes = bytes_of::<T>(HostSlice::len(src));
        self.cudarc().memcpy_htod(src.cuda(), dst.cuda_mut())?;
        records::record_htod(&mut call, on, src.pinned(), d, bytes, false, label);
        call.finish();
        Ok(())
    }

    /// `CudaStream::memcpy_htod` (`cuMemcpyHtoDAsync` on this stream).
    #[track_caller]
    pub fn memcpy_htod<T: DeviceRepr, Src: HostSlice<T> + ?Sized, Dst: DevicePtrMut<T>>(
        self: &Arc<Self>,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        self.htod(src, dst, "memcpy_htod", Location::caller())
    }

    /// `CudaStream::clone_htod`: an allocation on this stream, then [`CudaStream::memcpy_htod`].
    #[track_caller]
    pub fn clone_htod<T: DeviceRepr, Src: HostSlice<T> + ?Sized>(
        self: &Arc<Self>,
        src: &Src,
    ) -> Result<CudaSlice<T>, DriverError> {
        let at = Location::caller();
        let mut dst = self.alloc_at(HostSlice::len(src), None, at)?;
        self.htod(src, &mut dst, "clone_htod", at)?;
        Ok(dst)
    }

    /// [`CudaStream::clone_htod`] with a name for reports.
    #[track_caller]
    pub fn clone_htod_named<T: DeviceRepr, Src: HostSlice<T> + ?Sized>(
        self: &Arc<Self>,
        name: &str,
        src: &Src,
    ) -> Result<CudaSlice<T>, DriverError> {
        let at = Location::caller();
        let mut dst = self.alloc_at(HostSlice::len(src), Some(name), at)?;
        self.htod(src, &mut dst, "clone_htod", at)?;
        Ok(dst)
    }

    /// `CudaStream::memcpy_dtoh` (`cuMemcpyDtoHAsync` on this stream). cudarc copies
    /// `dst.len()` elements.
    #[track_caller]
    pub fn memcpy_dtoh<T: DeviceRepr, Src: DevicePtr<T>, Dst: HostSlice<T> + ?Sized>(
        self: &Arc<Self>,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cudarc().memcpy_dtoh(src.cuda(), dst.cuda_mut());
        };
        let mut call = san.begin(Some(Location::caller()));
        let on = self.on(&mut call);
        let bytes = bytes_of::<T>(HostSlice::len(dst));
        self.cudarc().memcpy_dtoh(src.cuda(), dst.cuda_mut())?;
        let (s, host) = (src.buf_ref(), dst.pinned());
        records::record_dtoh(&mut call, on, s, host, bytes, false, "memcpy_dtoh");
        call.finish();
        Ok(())
    }

    /// `CudaStream::clone_dtoh`: a new `Vec`, filled by a device-to-host copy.
    #[track_caller]
    pub fn clone_dtoh<T: DeviceRepr, Src: DevicePtr<T>>(
        self: &Arc<Self>,
        src: &Src,
    ) -> Result<Vec<T>, DriverError> {
        let Some(san) = self.san() else {
            return self.cudarc().clone_dtoh(src.cuda());
        };
        let mut call = san.begin(Some(Location::caller()));
        let on = self.on(&mut call);
        let out = self.cudarc().clone_dtoh(src.cuda())?;
        let bytes = bytes_of::<T>(out.len());
        records::record_dtoh(
            &mut call,
            on,
            src.buf_ref(),
            HostMemory::Pageable,
            bytes,
            false,
            "clone_dtoh",
        );
        call.finish();
        Ok(out)
    }

    /// `CudaStream::memcpy_dtod` (`cuMemcpyDtoDAsync`, or `cuMemcpyPeerAsync` when `src`
    /// belongs to another context).
    #[track_caller]
    pub fn memcpy_dtod<T, Src: DevicePtr<T>, Dst: DevicePtrMut<T>>(
        self: &Arc<Self>,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        self.dtod(src, dst, "memcpy_dtod", Location::caller())
    }

    /// `CudaStream::clone_dtod`: an allocation on this stream, then [`CudaStream::memcpy_dtod`].
    #[track_caller]
    pub fn clone_dtod<T: DeviceRepr, Src: DevicePtr<T>>(
        self: &Arc<Self>,
        src: &Src,
    ) -> Result<CudaSlice<T>, DriverError> {
        let at = Location::caller();
        let mut dst = self.alloc_at(DeviceSlice::len(src), None, at)?;
        self.dtod(src, &mut dst, "clone_dtod", at)?;
        Ok(dst)
    }

    fn dtod<T, Src: DevicePtr<T>, Dst: DevicePtrMut<T>>(
        self: &Arc<Self>,
        src: &Src,
        dst: &mut Dst,
        label: &str,
        at: &'static Location<'static>,
    ) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cudarc().memcpy_dtod(src.cuda(), dst.cuda_mut());
        };
        let mut call = san.begin(Some(at));
        let on = self.on(&mut call);
        let src_ctx = src.stream().context();
        let peer = src_ctx != self.context();
        let src_managing = src_ctx.is_managing_stream_synchronization();
        let (s, d) = (src.buf_ref(), dst.buf_ref());
        let bytes = DeviceSlice::num_bytes(src) as u64;
        self.cudarc().memcpy_dtod(src.cuda(), dst.cuda_mut())?;
        if peer {
            records::record_dtod_peer(&mut call, on, s, d, bytes, src_managing, label);
        } else {
            records::record_dtod(&mut call, on, s, d, bytes, false, label);
        }
        call.finish();
        Ok(())
    }

    /// `CudaStream::null`: an empty slice (no events, as cudarc's). Recorded as an allocation
    /// of 0 bytes.
    #[track_caller]
    pub fn null<T>(self: &Arc<Self>) -> Result<CudaSlice<T>, DriverError> {
        let flags = |ctx: &cudarc::driver::CudaContext| NewSlice {
            stream_ordered: ctx.has_async_alloc(),
            events: false,
        };
        self.new_slice(0, None, Location::caller(), flags, |s| s.null::<T>())
    }

    /// `CudaStream::memcpy_stod`, cudarc's deprecated name of [`CudaStream::clone_htod`].
    #[deprecated = "Use clone_htod"]
    #[track_caller]
    pub fn memcpy_stod<T: DeviceRepr, Src: HostSlice<T> + ?Sized>(
        self: &Arc<Self>,
        src: &Src,
    ) -> Result<CudaSlice<T>, DriverError> {
        self.clone_htod(src)
    }

    /// `CudaStream::memcpy_dtov`, cudarc's deprecated name of [`CudaStream::clone_dtoh`].
    #[deprecated = "Use clone_dtoh"]
    #[track_caller]
    pub fn memcpy_dtov<T: DeviceRepr, Src: DevicePtr<T>>(
        self: &Arc<Self>,
        src: &Src,
    ) -> Result<Vec<T>, DriverError> {
        self.clone_dtoh(src)
    }

    /// `CudaStream::upgrade_device_ptr`: a slice over memory allocated elsewhere (say, by
    /// [`CudaSlice::leak`]), with events when tracking is on. Sanitized, it is a new buffer of
    /// the trace, allocated by the host at this call; its earlier history is not known.
    ///
    /// # Safety
    /// As cudarc's: `cu_device_ptr` must be a live allocation of `len` elements of `T`.
    #[track_caller]
    pub unsafe fn upgrade_device_ptr<T>(
        self: &Arc<Self>,
        cu_device_ptr: sys::CUdeviceptr,
        len: usize,
    ) -> CudaSlice<T> {
        let flags = |ctx: &cudarc::driver::CudaContext| NewSlice {
            stream_ordered: false,
            events: ctx.is_event_tracking(),
        };
        // SAFETY: the caller's obligation.
        let make = |s: &Arc<cudarc::driver::CudaStream>| {
            Ok(unsafe { s.upgrade_device_ptr::<T>(cu_device_ptr, len) })
        };
        self.new_slice(bytes_of::<T>(len), None, Location::caller(), flags, make)
            .expect("upgrading a pointer cannot fail")
    }
}

/// How a new slice is allocated, as the sanitizer records it.
struct NewSlice {
    /// `cuMemAllocAsync` on the stream (else a host-side allocation).
    stream_ordered: bool,
    /// cudarc made its read and write events.
    events: bool,
}
