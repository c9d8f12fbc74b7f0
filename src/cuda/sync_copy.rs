//! The synchronous driver copies and memset (`cuMemcpyHtoD`, `cuMemcpyDtoH`, `cuMemcpyDtoD`,
//! `cuMemsetD8`), which cudarc's safe API lacks. They run on the legacy default stream and are
//! recorded with `blocking: true`; the engine applies the documented host ordering of each
//! direction (ordering model R8, R9). The device pointers are taken through cudarc's
//! `DevicePtr` / `DevicePtrMut` on the legacy stream, so cudarc's event tracking treats them
//! as work on `default_stream()`.

use std::panic::Location;

use std::sync::Arc;

use cudarc::driver::{
    DevicePtr as _, DevicePtrMut as _, DeviceRepr, DriverError, HostSlice as _, ValidAsZeroBits,
    result,
};

use super::context::CudaContext;
use super::device_ptr::{DevicePtr, DevicePtrMut, DeviceSlice};
use super::host_slice::HostSlice;
use super::memory::bytes_of;
use super::records::{self, CallStream};
use super::sanitizer::Call;

impl CudaContext {
    /// The lock (when sanitizing), the legacy stream, and where the call runs.
    fn begin_sync(
        &self,
        at: &'static Location<'static>,
    ) -> (
        Option<(Call<'_>, CallStream)>,
        Arc<cudarc::driver::CudaStream>,
    ) {
        let legacy = self.cuda.default_stream();
        let call = self.san.as_deref().map(|san| {
            let mut call = san.begin(Some(at));
            let on = CallStream {
                stream: call.legacy_stream(self.device),
                device: self.device,
                managing: self.cuda.is_managing_stream_synchronization(),
            };
            (call, on)
        });
        (call, legacy)
    }

    /// `cuMemcpyHtoD`: a synchronous host-to-device copy of `src.len()` elements.
    #[track_caller]
    pub fn memcpy_htod_sync<T: DeviceRepr, Src: HostSlice<T> + ?Sized, Dst: DevicePtrMut<T>>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let (call, legacy) = self.begin_sync(Location::caller());
        let d = dst.buf_ref();
        let count = HostSlice::len(src);
        assert!(DeviceSlice::len(dst) >= count, "destination too small");
        {
            self.cuda.bind_to_thread()?;
            // SAFETY: the slice is used for this copy on `legacy` only.
            let (host, _record_src) = unsafe { src.cuda().stream_synced_slice(&legacy) };
            let (ptr, _record_dst) = dst.cuda_mut().device_ptr_mut(&legacy);
            // SAFETY: `dst` has room for `count` elements (asserted).
            unsafe { result::memcpy_htod_sync(ptr, &host[..count]) }?;
        }
        if let Some((mut call, on)) = call {
            let bytes = bytes_of::<T>(count);
            records::record_htod(
                &mut call,
                on,
                src.pinned(),
                d,
                bytes,
                true,
                "memcpy_htod_sync",
            );
            call.finish();
        }
        Ok(())
    }

    /// `cuMemcpyDtoH`: a synchronous device-to-host copy of `dst.len()` elements.
    #[track_caller]
    pub fn memcpy_dtoh_sync<T: DeviceRepr, Src: DevicePtr<T>, Dst: HostSlice<T> + ?Sized>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let (call, legacy) = self.begin_sync(Location::caller());
        let (s, pinned) = (src.buf_ref(), dst.pinned());
        let count = HostSlice::len(dst);
        assert!(DeviceSlice::len(src) >= count, "source too small");
        {
            self.cuda.bind_to_thread()?;
            let (ptr, _record_src) = src.cuda().device_ptr(&legacy);
            // SAFETY: the slice is used for this copy on `legacy` only.
            let (host, _record_dst) = unsafe { dst.cuda_mut().stream_synced_mut_slice(&legacy) };
            // SAFETY: `src` has `count` elements (asserted).
            unsafe { result::memcpy_dtoh_sync(&mut host[..count], ptr) }?;
        }
        if let Some((mut call, on)) = call {
            let bytes = bytes_of::<T>(count);
            records::record_dtoh(&mut call, on, s, pinned, bytes, true, "memcpy_dtoh_sync");
            call.finish();
        }
        Ok(())
    }

    /// `cuMemcpyDtoD`: a synchronous device-to-device copy (asynchronous to the host all the
    /// same, per the API synchronization page).
    #[track_caller]
    pub fn memcpy_dtod_sync<T, Src: DevicePtr<T>, Dst: DevicePtrMut<T>>(
        &self,
        src: &Src,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let (call, legacy) = self.begin_sync(Location::caller());
        let (s, d) = (src.buf_ref(), dst.buf_ref());
        let bytes = DeviceSlice::num_bytes(src);
        assert!(
            DeviceSlice::len(dst) >= DeviceSlice::len(src),
            "destination too small"
        );
        {
            self.cuda.bind_to_thread()?;
            let (sp, _record_src) = src.cuda().device_ptr(&legacy);
            let (dp, _record_dst) = dst.cuda_mut().device_ptr_mut(&legacy);
            // SAFETY: both have `bytes` bytes (asserted).
            unsafe { result::memcpy_dtod_sync(dp, sp, bytes) }?;
        }
        if let Some((mut call, on)) = call {
            records::record_dtod(&mut call, on, s, d, bytes as u64, true, "memcpy_dtod_sync");
            call.finish();
        }
        Ok(())
    }

    /// `cuMemsetD8`: a synchronous memset (asynchronous to the host for device memory).
    #[track_caller]
    pub fn memset_zeros_sync<T: DeviceRepr + ValidAsZeroBits, Dst: DevicePtrMut<T>>(
        &self,
        dst: &mut Dst,
    ) -> Result<(), DriverError> {
        let (call, legacy) = self.begin_sync(Location::caller());
        let d = dst.buf_ref();
        {
            self.cuda.bind_to_thread()?;
            let bytes = DeviceSlice::num_bytes(dst);
            let (dp, _record_dst) = dst.cuda_mut().device_ptr_mut(&legacy);
            // SAFETY: `bytes` is the destination's size.
            unsafe { result::memset_d8_sync(dp, 0, bytes) }?;
        }
        if let Some((mut call, on)) = call {
            records::record_memset(&mut call, on, d, true, "memset_zeros_sync");
            call.finish();
        }
        Ok(())
    }
}
