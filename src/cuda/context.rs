//! [`CudaContext`]: cudarc's context with an optional sanitizer. `CudaContext::new` reads the
//! environment (`STREAMSAN=1` turns sanitizing on); [`CudaContext::builder`] sets it in code.

use std::panic::Location;
use std::sync::Arc;

use cudarc::driver::{DeviceRepr, DriverError, sys};

use super::builder::ContextBuilder;
use super::event::CudaEvent;
use super::module::CudaModule;
use super::pinned::PinnedHostSlice;
use super::sanitizer::{Sanitizer, StreamSlot};
use super::step::Step;
use super::stream::{CudaStream, Owner};
use crate::trace::record::{DeviceId, Op, StreamFlags};

/// A CUDA context, sanitized or not, shared as `Arc<CudaContext>` like cudarc's.
///
/// Made by [`CudaContext::new`] (the environment decides) or [`CudaContext::builder`].
#[derive(Debug)]
pub struct CudaContext {
    pub(crate) cuda: Arc<cudarc::driver::CudaContext>,
    pub(crate) san: Option<Arc<Sanitizer>>,
    pub(crate) device: DeviceId,
}

impl PartialEq for CudaContext {
    /// As cudarc's: the same CUDA context.
    fn eq(&self, other: &Self) -> bool {
        self.cuda == other.cuda
    }
}
impl Eq for CudaContext {}

impl CudaContext {
    /// `CudaContext::new(ordinal)`: the primary context of the device, sanitized when
    /// `STREAMSAN=1` (options from `STREAMSAN_OPTIONS`).
    ///
    /// A malformed `STREAMSAN` / `STREAMSAN_OPTIONS`, or an output file that cannot be made, is
    /// a configuration error, not a driver error: it is printed and the process exits with
    /// status 2, as other sanitizers do. [`CudaContext::builder`] returns it instead.
    pub fn new(ordinal: usize) -> Result<Arc<CudaContext>, DriverError> {
        match ContextBuilder::default().build(ordinal) {
            Ok(ctx) => Ok(ctx),
            Err(super::Error::Driver(e)) => Err(e),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2);
            }
        }
    }

    /// A builder: sanitizing and its options set in code, over the environment. Not in cudarc.
    pub fn builder() -> ContextBuilder {
        ContextBuilder::default()
    }

    /// `CudaContext::device_count`.
    pub fn device_count() -> Result<i32, DriverError> {
        cudarc::driver::CudaContext::device_count()
    }

    /// The wrapped cudarc context. Work done through it directly is not recorded.
    pub fn cudarc(&self) -> &Arc<cudarc::driver::CudaContext> {
        &self.cuda
    }

    /// The sanitizer, when enabled. Not in cudarc.
    pub fn sanitizer(&self) -> Option<&Arc<Sanitizer>> {
        self.san.as_ref()
    }

    /// The legacy default stream (the NULL stream). It synchronizes with every blocking stream
    /// of the context; cudarc's own streams are non-blocking.
    #[track_caller]
    pub fn default_stream(self: &Arc<Self>) -> Arc<CudaStream> {
        let cuda = self.cuda.default_stream();
        let slot = match &self.san {
            None => StreamSlot::Fixed(0),
            Some(san) => {
                let mut call = san.begin(Some(Location::caller()));
                let id = call.legacy_stream(self.device);
                call.finish();
                StreamSlot::Fixed(id)
            }
        };
        CudaStream::wrap(cuda, self, slot, Owner::Elsewhere)
    }

    /// The per-thread stream handle (`CU_STREAM_PER_THREAD`): each host thread that uses it
    /// reaches its own per-thread default stream, a blocking stream. cudarc does not count it as
    /// a stream: it does not turn on multi-stream mode.
    pub fn per_thread_stream(self: &Arc<Self>) -> Arc<CudaStream> {
        CudaStream::wrap(
            self.cuda.per_thread_stream(),
            self,
            StreamSlot::PerThread,
            Owner::Elsewhere,
        )
    }

    /// A new **non-blocking** stream (that is what cudarc makes). The first one switches cudarc
    /// to multi-stream mode and, with event tracking on, synchronizes the whole context first.
    #[track_caller]
    pub fn new_stream(self: &Arc<Self>) -> Result<Arc<CudaStream>, DriverError> {
        CudaStream::create(
            self,
            StreamFlags::NonBlocking,
            None,
            None,
            Location::caller(),
        )
    }

    /// [`CudaContext::new_stream`] with a priority.
    #[track_caller]
    pub fn new_stream_with_priority(
        self: &Arc<Self>,
        priority: i32,
    ) -> Result<Arc<CudaStream>, DriverError> {
        let at = Location::caller();
        CudaStream::create(self, StreamFlags::NonBlocking, Some(priority), None, at)
    }

    /// [`CudaContext::new_stream`] with a name for reports. Not in cudarc.
    #[track_caller]
    pub fn new_stream_named(self: &Arc<Self>, name: &str) -> Result<Arc<CudaStream>, DriverError> {
        let at = Location::caller();
        CudaStream::create(self, StreamFlags::NonBlocking, None, Some(name), at)
    }

    /// A new stream with the given flags. Not in cudarc, which cannot make blocking streams:
    /// `Blocking` (`CU_STREAM_DEFAULT`, synchronizes with the legacy default stream) is made
    /// with `cuStreamCreate`, and cudarc does not count it (no multi-stream mode).
    #[track_caller]
    pub fn new_stream_with_flags(
        self: &Arc<Self>,
        flags: StreamFlags,
    ) -> Result<Arc<CudaStream>, DriverError> {
        CudaStream::create(self, flags, None, None, Location::caller())
    }

    /// `CudaContext::wrap_borrowed_stream`: a stream owned by another library, declared to the
    /// sanitizer as a created stream of unknown flags (taken as non-blocking: only this
    /// program's events order it). Work the other library enqueues on it is not recorded.
    ///
    /// # Safety
    /// As cudarc's: `cu_stream` must be a live stream of this context, kept alive by its owner
    /// while the returned stream is used.
    #[track_caller]
    pub unsafe fn wrap_borrowed_stream(
        self: &Arc<Self>,
        cu_stream: sys::CUstream,
    ) -> Arc<CudaStream> {
        // SAFETY: the caller's obligation.
        let cuda = unsafe { self.cuda.wrap_borrowed_stream(cu_stream) };
        let Some(san) = &self.san else {
            return CudaStream::wrap(cuda, self, StreamSlot::Fixed(0), Owner::Elsewhere);
        };
        let mut call = san.begin(Some(Location::caller()));
        let id = call.new_stream_id();
        call.push(Step::op(
            Op::Stream {
                id,
                device: self.device,
                kind: crate::trace::record::StreamKind::Created,
                flags: StreamFlags::NonBlocking,
            },
            Some("borrowed stream".into()),
        ));
        call.finish();
        CudaStream::wrap(cuda, self, StreamSlot::Fixed(id), Owner::Elsewhere)
    }

    /// `CudaContext::new_event`: an event with no work recorded (timing disabled unless
    /// `flags` say otherwise).
    #[track_caller]
    pub fn new_event(
        self: &Arc<Self>,
        flags: Option<sys::CUevent_flags>,
    ) -> Result<CudaEvent, DriverError> {
        CudaEvent::create(self, flags, Location::caller())
    }

    /// `CudaContext::synchronize` (`cuCtxSynchronize`): the host waits for all work of the
    /// device.
    #[track_caller]
    pub fn synchronize(&self) -> Result<(), DriverError> {
        let Some(san) = &self.san else {
            return self.cuda.synchronize();
        };
        let mut call = san.begin(Some(Location::caller()));
        self.cuda.synchronize()?;
        call.push(Step::op(
            Op::DeviceSync {
                device: self.device,
            },
            None,
        ));
        call.finish();
        Ok(())
    }

    /// `CudaContext::alloc_pinned`: page-locked host memory (write-combined, as cudarc
    /// allocates it).
    ///
    /// # Safety
    /// The memory is uninitialized.
    #[track_caller]
    pub unsafe fn alloc_pinned<T: DeviceRepr>(
        self: &Arc<Self>,
        len: usize,
    ) -> Result<PinnedHostSlice<T>, DriverError> {
        let flags = sys::CU_MEMHOSTALLOC_WRITECOMBINED;
        unsafe { PinnedHostSlice::alloc(self, len, flags, None, Location::caller()) }
    }

    /// `CudaContext::alloc_pinned_with_flags`.
    ///
    /// # Safety
    /// The memory is uninitialized.
    #[track_caller]
    pub unsafe fn alloc_pinned_with_flags<T: DeviceRepr>(
        self: &Arc<Self>,
        len: usize,
        flags: u32,
    ) -> Result<PinnedHostSlice<T>, DriverError> {
        unsafe { PinnedHostSlice::alloc(self, len, flags, None, Location::caller()) }
    }

    /// [`CudaContext::alloc_pinned`] with a name for reports. Not in cudarc.
    ///
    /// # Safety
    /// The memory is uninitialized.
    #[track_caller]
    pub unsafe fn alloc_pinned_named<T: DeviceRepr>(
        self: &Arc<Self>,
        name: &str,
        len: usize,
    ) -> Result<PinnedHostSlice<T>, DriverError> {
        let flags = sys::CU_MEMHOSTALLOC_WRITECOMBINED;
        unsafe { PinnedHostSlice::alloc(self, len, flags, Some(name), Location::caller()) }
    }

    /// `CudaContext::load_module`: the module's kernels keep their names for reports.
    pub fn load_module(
        self: &Arc<Self>,
        ptx: cudarc::nvrtc::Ptx,
    ) -> Result<Arc<CudaModule>, DriverError> {
        Ok(CudaModule::new(self.cuda.load_module(ptx)?, self))
    }

    /// `CudaContext::enable_event_tracking`: buffers allocated from now on get events.
    ///
    /// # Safety
    /// As cudarc's: buffers allocated while tracking was off stay untracked.
    pub unsafe fn enable_event_tracking(&self) {
        unsafe { self.cuda.enable_event_tracking() }
    }

    /// `CudaContext::disable_event_tracking`: buffers allocated from now on get no events, and
    /// the program orders its streams itself (the sanitizer checks that it does).
    ///
    /// # Safety
    /// As cudarc's: the program must synchronize its streams itself.
    pub unsafe fn disable_event_tracking(&self) {
        unsafe { self.cuda.disable_event_tracking() }
    }
}

/// cudarc's methods that neither enqueue work nor synchronize: passed through unrecorded.
macro_rules! pass_through {
    ($($(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;)*) => {
        impl CudaContext {
            $(
                $(#[$doc])*
                pub fn $name(&self $(, $arg: $ty)*) -> $ret {
                    self.cuda.$name($($arg),*)
                }
            )*
        }
    };
}

pass_through! {
    /// `CudaContext::is_primary`.
    fn is_primary(&self) -> bool;
    /// Whether allocations are stream-ordered (`cuMemAllocAsync` / `cuMemFreeAsync`).
    fn has_async_alloc(&self) -> bool;
    /// The device ordinal.
    fn ordinal(&self) -> usize;
    /// `CudaContext::name`: the device's name.
    fn name(&self) -> Result<String, DriverError>;
    /// `CudaContext::uuid`.
    fn uuid(&self) -> Result<sys::CUuuid, DriverError>;
    /// `CudaContext::compute_capability`.
    fn compute_capability(&self) -> Result<(i32, i32), DriverError>;
    /// `CudaContext::total_mem`.
    fn total_mem(&self) -> Result<usize, DriverError>;
    /// `CudaContext::mem_get_info`: (free, total) bytes.
    fn mem_get_info(&self) -> Result<(usize, usize), DriverError>;
    /// `CudaContext::cu_device`.
    fn cu_device(&self) -> sys::CUdevice;
    /// `CudaContext::cu_ctx`: the raw context; work enqueued through it is not recorded.
    fn cu_ctx(&self) -> sys::CUcontext;
    /// `CudaContext::bind_to_thread`.
    fn bind_to_thread(&self) -> Result<(), DriverError>;
    /// `CudaContext::attribute`.
    fn attribute(&self, attrib: sys::CUdevice_attribute) -> Result<i32, DriverError>;
    /// `CudaContext::set_blocking_synchronize`: how the host waits (spinning or sleeping),
    /// not whether.
    fn set_blocking_synchronize(&self) -> Result<(), DriverError>;
    /// `CudaContext::set_flags`.
    fn set_flags(&self, flags: sys::CUctx_flags) -> Result<(), DriverError>;
    /// `CudaContext::get_limit`.
    fn get_limit(&self, limit: sys::CUlimit) -> Result<usize, DriverError>;
    /// `CudaContext::set_limit`.
    fn set_limit(&self, limit: sys::CUlimit, value: usize) -> Result<(), DriverError>;
    /// `CudaContext::get_cache_config`.
    fn get_cache_config(&self) -> Result<sys::CUfunc_cache, DriverError>;
    /// `CudaContext::set_cache_config`.
    fn set_cache_config(&self, config: sys::CUfunc_cache) -> Result<(), DriverError>;
    /// Whether a stream made by `new_stream` / `fork` is alive.
    fn is_in_multi_stream_mode(&self) -> bool;
    /// Whether cudarc's automatic event tracking is on (the default).
    fn is_event_tracking(&self) -> bool;
    /// Whether cudarc is inserting waits and records right now: tracking on and multi-stream.
    fn is_managing_stream_synchronization(&self) -> bool;
    /// `CudaContext::check_err`: the error a drop stored, if any.
    fn check_err(&self) -> Result<(), DriverError>;
}

impl CudaContext {
    /// `CudaContext::record_err`: stores an error for the next call to return.
    pub fn record_err<T>(&self, result: Result<T, DriverError>) {
        self.cuda.record_err(result)
    }
}
