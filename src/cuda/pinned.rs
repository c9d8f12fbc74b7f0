//! [`PinnedHostSlice`]: page-locked host memory (cudarc's). The host touches it through
//! `as_slice` / `as_mut_slice` / `as_ptr` / `as_mut_ptr`, which record host accesses, so reading
//! it after an async device-to-host copy without a sync is reported.

use crate::trace::record::Pool;
use std::mem::ManuallyDrop;
use std::panic::Location;
use std::sync::Arc;

use cudarc::driver::{DeviceRepr, DriverError, ValidAsZeroBits};

use super::context::CudaContext;
use super::device_ptr::{BufRef, Tracked};
use super::model::{self, PinnedEvent};
use super::sanitizer::{Call, Sanitizer};
use super::slice::release;
use super::step::Step;
use crate::trace::record::{Access, BufId, MemSpace, Op};

#[derive(Debug)]
struct PinnedMeta {
    san: Arc<Sanitizer>,
    event: PinnedEvent,
    bytes: u64,
}

/// Page-locked host memory, allocated by [`CudaContext::alloc_pinned`].
#[derive(Debug)]
pub struct PinnedHostSlice<T> {
    cuda: ManuallyDrop<cudarc::driver::PinnedHostSlice<T>>,
    ctx: Arc<CudaContext>,
    meta: Option<PinnedMeta>,
    free_at: Option<&'static Location<'static>>,
}

impl<T> Drop for PinnedHostSlice<T> {
    fn drop(&mut self) {
        let meta = self.meta.as_ref();
        let plan = |call: &mut Call<'_>| {
            let event = meta.expect("sanitized").event;
            model::plan_pinned_drop(&mut call.steps, event, None);
        };
        // SAFETY: dropped once, here.
        unsafe { release(&mut self.cuda, meta.map(|m| &*m.san), self.free_at, plan) };
    }
}

impl<T> PinnedHostSlice<T> {
    /// # Safety
    /// The memory is uninitialized (as cudarc's `alloc_pinned`).
    pub(crate) unsafe fn alloc(
        ctx: &Arc<CudaContext>,
        len: usize,
        flags: u32,
        name: Option<&str>,
        at: &'static Location<'static>,
    ) -> Result<PinnedHostSlice<T>, DriverError>
    where
        T: DeviceRepr,
    {
        let Some(san) = &ctx.san else {
            let cuda = unsafe { ctx.cuda.alloc_pinned_with_flags::<T>(len, flags) }?;
            return Ok(PinnedHostSlice {
                cuda: ManuallyDrop::new(cuda),
                ctx: ctx.clone(),
                meta: None,
                free_at: None,
            });
        };
        let mut call = san.begin(Some(at));
        let cuda = unsafe { ctx.cuda.alloc_pinned_with_flags::<T>(len, flags) }?;
        let buf = call.new_buf_id();
        let event = PinnedEvent {
            buf,
            event: call.new_event_id(),
        };
        let bytes = cuda.num_bytes() as u64;
        call.push(Step::op(
            Op::Alloc {
                buf,
                bytes,
                device: ctx.device,
                space: MemSpace::Pinned,
                stream: None,
                addr: None,
                pool: Pool::Driver,
            },
            name.map(str::to_string),
        ));
        call.push(Step::labeled(Op::Event { id: event.event }, event.name()));
        call.finish();
        Ok(PinnedHostSlice {
            cuda: ManuallyDrop::new(cuda),
            ctx: ctx.clone(),
            meta: Some(PinnedMeta {
                san: san.clone(),
                event,
                bytes,
            }),
            free_at: None,
        })
    }

    pub fn len(&self) -> usize {
        self.cuda.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cuda.is_empty()
    }

    pub fn num_bytes(&self) -> usize {
        self.cuda.num_bytes()
    }

    /// Frees it now, like dropping it, with this call's source location in reports.
    #[track_caller]
    pub fn free(mut self) {
        self.free_at = Some(Location::caller());
    }

    /// The context it was allocated in.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The id in the trace, when sanitized. Not in cudarc.
    pub fn id(&self) -> Option<BufId> {
        self.meta.as_ref().map(|m| m.event.buf)
    }

    /// The wrapped cudarc slice. Host accesses through it are not recorded.
    pub fn cudarc(&self) -> &cudarc::driver::PinnedHostSlice<T> {
        &self.cuda
    }

    pub(crate) fn cuda_mut_ref(&mut self) -> &mut cudarc::driver::PinnedHostSlice<T> {
        &mut self.cuda
    }

    /// Records one host access (after cudarc's event sync) around `get`.
    fn host_access<R>(
        meta: &Option<PinnedMeta>,
        write: bool,
        at: &'static Location<'static>,
        get: impl FnOnce() -> Result<R, DriverError>,
    ) -> Result<R, DriverError> {
        let Some(meta) = meta else {
            return get();
        };
        let mut call = meta.san.begin(Some(at));
        let out = get()?;
        let whole = vec![Access::whole(meta.event.buf)];
        let op = if write {
            Op::HostAccess {
                reads: vec![],
                writes: whole,
            }
        } else {
            Op::HostAccess {
                reads: whole,
                writes: vec![],
            }
        };
        model::plan_pinned_host_access(&mut call.steps, meta.event, Step::op(op, None));
        call.finish();
        Ok(out)
    }
}

impl<T: ValidAsZeroBits> PinnedHostSlice<T> {
    /// `PinnedHostSlice::as_slice`: cudarc synchronizes the buffer's event (recorded after the
    /// last copy only while cudarc manages multi-stream synchronization), then the host reads.
    /// Recorded as one host read of the whole buffer at this call.
    #[track_caller]
    pub fn as_slice(&self) -> Result<&[T], DriverError> {
        let cuda = &*self.cuda;
        Self::host_access(&self.meta, false, Location::caller(), || cuda.as_slice())
    }

    /// `PinnedHostSlice::as_mut_slice`: as [`PinnedHostSlice::as_slice`], for a host write.
    #[track_caller]
    pub fn as_mut_slice(&mut self) -> Result<&mut [T], DriverError> {
        let cuda = &mut *self.cuda;
        Self::host_access(&self.meta, true, Location::caller(), || cuda.as_mut_slice())
    }

    /// `PinnedHostSlice::as_ptr`: as [`PinnedHostSlice::as_slice`] (a host read).
    #[track_caller]
    pub fn as_ptr(&self) -> Result<*const T, DriverError> {
        let cuda = &*self.cuda;
        Self::host_access(&self.meta, false, Location::caller(), || cuda.as_ptr())
    }

    /// `PinnedHostSlice::as_mut_ptr`: as [`PinnedHostSlice::as_mut_slice`] (a host write).
    #[track_caller]
    pub fn as_mut_ptr(&mut self) -> Result<*mut T, DriverError> {
        let cuda = &mut *self.cuda;
        Self::host_access(&self.meta, true, Location::caller(), || cuda.as_mut_ptr())
    }
}

impl<T> Tracked for PinnedHostSlice<T> {
    fn buf_ref(&self) -> Option<BufRef> {
        self.meta.as_ref().map(|m| BufRef {
            owner: m.san.identity(),
            id: m.event.buf,
            off: 0,
            len: m.bytes,
            bytes: m.bytes,
            events: None,
            pinned: Some(m.event),
            alloc_stream: None,
        })
    }
}
