//! cudarc's stream memory methods, wrapped: allocation (stream-ordered when the device has
//! memory pools), `memset_zeros`, and copies in every direction, all asynchronous on the stream.
//! The records come from `records.rs`.

use std::panic::Location;

use cudarc::driver::{DeviceRepr, DeviceSlice, DriverError, HostSlice, ValidAsZeroBits};

use super::buffer::{BufMeta, DeviceBuffer, DeviceDst, DeviceSrc};
use super::host_mem::HostMem;
use super::records::{self, CallStream, HostMemory};
use super::sanitizer::Call;
use super::stream::Stream;

pub(crate) fn bytes_of<T>(len: usize) -> u64 {
    (len * size_of::<T>()) as u64
}

impl Stream {
    /// Where this stream's calls run, for the caller of `call`.
    pub(crate) fn on(&self, call: &mut Call<'_>) -> CallStream {
        CallStream {
            stream: self.id_in(call),
            device: self.device(),
            managing: self.managing(),
        }
    }

    fn alloc_at<T: DeviceRepr>(
        &self,
        len: usize,
        name: Option<&str>,
        at: &'static Location<'static>,
    ) -> Result<DeviceBuffer<T>, DriverError> {
        let Some(san) = self.san() else {
            // SAFETY: the caller's obligation (uninitialized memory), as in cudarc.
            let slice = unsafe { self.cudarc().alloc::<T>(len) }?;
            return Ok(DeviceBuffer::new(slice, None, self.clone()));
        };
        let mut call = san.begin(Some(at));
        let on = self.on(&mut call);
        let ctx = self.cuda_context();
        let (tracking, stream_ordered) = (ctx.is_event_tracking(), ctx.has_async_alloc());
        // SAFETY: as above.
        let slice = unsafe { self.cudarc().alloc::<T>(len) }?;
        let bytes = bytes_of::<T>(len);
        let (id, events) =
            records::record_alloc(&mut call, on, bytes, stream_ordered, tracking, name);
        call.finish();
        let meta = BufMeta {
            san: san.clone(),
            id,
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
        let on = self.on(&mut call);
        let d = dst.buf_ref();
        self.cudarc().memset_zeros(dst.cuda_mut())?;
        records::record_memset(&mut call, on, d, false, "memset_zeros");
        call.finish();
        Ok(())
    }

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
        let on = self.on(&mut call);
        let d = dst.buf_ref();
        let bytes = bytes_of::<T>(HostSlice::len(src.cuda()));
        self.cudarc().memcpy_htod(src.cuda(), dst.cuda_mut())?;
        records::record_htod(&mut call, on, src.pinned(), d, bytes, false, label);
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

    /// `CudaStream::memcpy_dtoh` (`cuMemcpyDtoHAsync` on this stream). cudarc copies
    /// `dst.len()` elements.
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
        let on = self.on(&mut call);
        let bytes = bytes_of::<T>(HostSlice::len(dst.cuda()));
        self.cudarc().memcpy_dtoh(src.cuda(), dst.cuda_mut())?;
        let (s, host) = (src.buf_ref(), dst.pinned());
        records::record_dtoh(&mut call, on, s, host, bytes, false, "memcpy_dtoh");
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
        let on = self.on(&mut call);
        let src_ctx = src.cuda().stream().context().clone();
        let peer = src_ctx != *self.cuda_context();
        let src_managing = src_ctx.is_managing_stream_synchronization();
        let (s, d) = (src.buf_ref(), dst.buf_ref());
        let bytes = src.cuda().num_bytes() as u64;
        self.cudarc().memcpy_dtod(src.cuda(), dst.cuda_mut())?;
        if peer {
            records::record_dtod_peer(&mut call, on, s, d, bytes, src_managing, label);
        } else {
            records::record_dtod(&mut call, on, s, d, bytes, false, label);
        }
        call.finish();
        Ok(())
    }
}
