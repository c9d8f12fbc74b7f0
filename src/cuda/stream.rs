//! [`CudaStream`]: cudarc's stream with its sanitizer id. Synchronization verbs live here;
//! memory operations in `memory.rs`, launches in `launch.rs`, capture in `graph.rs`.

use std::mem::ManuallyDrop;
use std::panic::Location;
use std::sync::Arc;

use cudarc::driver::{DriverError, sys};

use super::context::CudaContext;
use super::event::CudaEvent;
use super::model;
use super::sanitizer::{Call, Sanitizer, StreamSlot};
use super::step::{Label, Step};
use crate::trace::record::{DeviceId, Op, StreamFlags, StreamId, StreamKind};

/// A stream to schedule work on, shared as `Arc<CudaStream>` like cudarc's. Made by
/// [`CudaContext::default_stream`], [`CudaContext::per_thread_stream`],
/// [`CudaContext::new_stream`] or [`CudaStream::fork`].
#[derive(Debug)]
pub struct CudaStream {
    /// Dropped under the sanitizer lock: dropping an owned cudarc stream changes cudarc's
    /// multi-stream mode, which the next call's records depend on.
    cuda: ManuallyDrop<Arc<cudarc::driver::CudaStream>>,
    ctx: Arc<CudaContext>,
    pub(crate) slot: StreamSlot,
    owner: Owner,
}

/// Who destroys the CUDA stream, and so whether dropping the wrapper destroys it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The default and per-thread streams, and a stream borrowed from another library: never
    /// destroyed here.
    Elsewhere,
    /// Made by cudarc for [`CudaStream::create`] or [`CudaStream::fork`]: cudarc destroys it
    /// when its last reference goes (this wrapper's, unless `cudarc()` was cloned).
    Cudarc,
    /// A blocking stream made with `cuStreamCreate` outside cudarc, destroyed here.
    Here,
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        let san = self.ctx.san.clone();
        // Is the CUDA stream destroyed now? cudarc destroys its own when the last reference
        // goes; a raw one is destroyed below. Every slice allocated on the stream holds this
        // wrapper, so nothing of this program uses the stream any more.
        let destroyed = match self.owner {
            Owner::Elsewhere => false,
            Owner::Cudarc => Arc::strong_count(&self.cuda) == 1,
            Owner::Here => true,
        };
        // The lock is held across the drop either way: dropping an owned cudarc stream changes
        // cudarc's multi-stream mode, which the next call's records depend on.
        let (call, _guard) = match (&san, self.slot) {
            (Some(san), StreamSlot::Fixed(id)) if destroyed => (Some((san.begin(None), id)), None),
            (san, _) => (None, san.as_ref().map(|s| s.lock())),
        };
        let raw = self.cuda.cu_stream();
        // SAFETY: dropped once, here.
        unsafe { ManuallyDrop::drop(&mut self.cuda) };
        if self.owner == Owner::Here {
            let cuda = &self.ctx.cuda;
            cuda.record_err(cuda.bind_to_thread());
            // SAFETY: made by `cuStreamCreate` in `CudaStream::create`; every slice allocated on
            // it holds this stream, so nothing uses it any more.
            cuda.record_err(unsafe { sys::cuStreamDestroy_v2(raw) }.result());
        }
        if let Some((mut call, id)) = call {
            // cudaStreamDestroy: the id ends; the stream's work still runs (R20).
            call.push(Step::op(Op::StreamDestroy { id }, None));
            call.finish();
        }
    }
}

impl PartialEq for CudaStream {
    /// As cudarc's: the same CUDA stream of the same context.
    fn eq(&self, other: &Self) -> bool {
        self.cuda.cu_stream() == other.cuda.cu_stream() && self.ctx == other.ctx
    }
}
impl Eq for CudaStream {}

impl CudaStream {
    pub(crate) fn wrap(
        cuda: Arc<cudarc::driver::CudaStream>,
        ctx: &Arc<CudaContext>,
        slot: StreamSlot,
        owner: Owner,
    ) -> Arc<CudaStream> {
        Arc::new(CudaStream {
            cuda: ManuallyDrop::new(cuda),
            ctx: ctx.clone(),
            slot,
            owner,
        })
    }

    pub(crate) fn san(&self) -> Option<&Arc<Sanitizer>> {
        self.ctx.san.as_ref()
    }

    pub(crate) fn device(&self) -> DeviceId {
        self.ctx.device
    }

    /// This stream's id for the calling thread.
    pub(crate) fn id_in(&self, call: &mut Call<'_>) -> StreamId {
        call.stream(self.slot, self.device())
    }

    /// `is_managing_stream_synchronization()` of this stream's context, read under the lock
    /// just before the cudarc call that reads it too.
    pub(crate) fn managing(&self) -> bool {
        self.ctx.cuda.is_managing_stream_synchronization()
    }

    /// The wrapped cudarc stream. Work enqueued through it directly is not recorded.
    pub fn cudarc(&self) -> &Arc<cudarc::driver::CudaStream> {
        &self.cuda
    }

    /// The context the stream belongs to.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The raw CUDA stream; work enqueued on it directly is not recorded.
    pub fn cu_stream(&self) -> sys::CUstream {
        self.cuda.cu_stream()
    }

    pub(crate) fn create(
        ctx: &Arc<CudaContext>,
        flags: StreamFlags,
        priority: Option<i32>,
        name: Option<&str>,
        at: &'static Location<'static>,
    ) -> Result<Arc<CudaStream>, DriverError> {
        let make = || -> Result<(Arc<cudarc::driver::CudaStream>, Owner), DriverError> {
            match (flags, priority) {
                (StreamFlags::NonBlocking, None) => Ok((ctx.cuda.new_stream()?, Owner::Cudarc)),
                (StreamFlags::NonBlocking, Some(p)) => {
                    Ok((ctx.cuda.new_stream_with_priority(p)?, Owner::Cudarc))
                }
                (StreamFlags::Blocking, _) => {
                    ctx.cuda.bind_to_thread()?;
                    let mut raw = std::ptr::null_mut();
                    // SAFETY: a plain stream creation in the bound context.
                    unsafe {
                        sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_DEFAULT as u32)
                    }
                    .result()?;
                    // SAFETY: `raw` belongs to this context and lives until the stream drops.
                    Ok((unsafe { ctx.cuda.wrap_borrowed_stream(raw) }, Owner::Here))
                }
            }
        };
        let Some(san) = &ctx.san else {
            let (cuda, owner) = make()?;
            return Ok(CudaStream::wrap(cuda, ctx, StreamSlot::Fixed(0), owner));
        };
        let mut call = san.begin(Some(at));
        let first_sync = (flags == StreamFlags::NonBlocking
            && !ctx.cuda.is_in_multi_stream_mode()
            && ctx.cuda.is_event_tracking())
        .then_some(ctx.device);
        let (cuda, owner) = make()?;
        let id = call.new_stream_id();
        let declare = Step::op(
            Op::Stream {
                id,
                device: ctx.device,
                kind: StreamKind::Created,
                flags,
            },
            name.map(str::to_string),
        );
        model::plan_new_stream(&mut call.steps, first_sync, declare);
        call.finish();
        Ok(CudaStream::wrap(cuda, ctx, StreamSlot::Fixed(id), owner))
    }

    /// `CudaStream::fork`: a new non-blocking stream that waits for the work enqueued on this
    /// one so far. Unlike `new_stream`, cudarc does not synchronize the context here.
    #[track_caller]
    pub fn fork(&self) -> Result<Arc<CudaStream>, DriverError> {
        let Some(san) = self.san() else {
            let cuda = self.cuda.fork()?;
            return Ok(CudaStream::wrap(
                cuda,
                &self.ctx,
                StreamSlot::Fixed(0),
                Owner::Cudarc,
            ));
        };
        let mut call = san.begin(Some(Location::caller()));
        let parent = self.id_in(&mut call);
        let cuda = self.cuda.fork()?;
        let child = call.new_stream_id();
        let tmp = call.new_event_id();
        let declare = Step::op(
            Op::Stream {
                id: child,
                device: self.device(),
                kind: StreamKind::Created,
                flags: StreamFlags::NonBlocking,
            },
            None,
        );
        model::plan_fork(&mut call.steps, parent, child, declare, tmp);
        call.finish();
        Ok(CudaStream::wrap(
            cuda,
            &self.ctx,
            StreamSlot::Fixed(child),
            Owner::Cudarc,
        ))
    }

    /// `CudaStream::synchronize`: the host waits for the work enqueued so far.
    #[track_caller]
    pub fn synchronize(&self) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cuda.synchronize();
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        self.cuda.synchronize()?;
        call.push(Step::op(Op::StreamSync { stream }, None));
        call.finish();
        Ok(())
    }

    /// `cuStreamQuery`: `true` when all work enqueued so far is done (the host is then ordered
    /// after it), `false` when some is still running (orders nothing). Not in cudarc.
    #[track_caller]
    pub fn query(&self) -> Result<bool, DriverError> {
        let query = || -> Result<bool, DriverError> {
            self.ctx.cuda.bind_to_thread()?;
            // SAFETY: a live stream of this context.
            match unsafe { sys::cuStreamQuery(self.cuda.cu_stream()) } {
                sys::CUresult::CUDA_SUCCESS => Ok(true),
                sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
                e => Err(DriverError(e)),
            }
        };
        let Some(san) = self.san() else {
            return query();
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        let done = query()?;
        call.push(Step::op(Op::StreamQuery { stream, done }, None));
        call.finish();
        Ok(done)
    }

    /// `CudaStream::record_event`: a new event capturing the work enqueued so far.
    #[track_caller]
    pub fn record_event(
        &self,
        flags: Option<sys::CUevent_flags>,
    ) -> Result<CudaEvent, DriverError> {
        let Some(san) = self.san() else {
            let cuda = self.cuda.record_event(flags)?;
            return Ok(CudaEvent::untracked(cuda, &self.ctx));
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        let cuda = self.cuda.record_event(flags)?;
        let id = call.new_event_id();
        model::plan_record_event(&mut call.steps, stream, id, Label::None);
        call.finish();
        Ok(CudaEvent::tracked(cuda, &self.ctx, san, id))
    }

    /// `CudaStream::wait`: work enqueued on this stream from now on waits for the work
    /// `event` captured at its latest record before this call.
    #[track_caller]
    pub fn wait(&self, event: &CudaEvent) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cuda.wait(event.cudarc());
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        self.cuda.wait(event.cudarc())?;
        if call.same_sanitizer([event.owner()]) {
            let ev = event.id().expect("a sanitized event has an id");
            call.push(Step::op(Op::Wait { stream, event: ev }, None));
        }
        call.finish();
        Ok(())
    }

    /// `CudaStream::join`: this stream waits for the work enqueued on `other` so far (through
    /// a temporary event, as cudarc does).
    #[track_caller]
    pub fn join(&self, other: &CudaStream) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.cuda.join(&other.cuda);
        };
        let mut call = san.begin(Some(Location::caller()));
        let waiter = self.id_in(&mut call);
        let owner = other.san().map_or(0, Sanitizer::identity);
        let other_id = call.same_sanitizer([owner]).then(|| other.id_in(&mut call));
        self.cuda.join(&other.cuda)?;
        if let Some(other_id) = other_id {
            let tmp = call.new_event_id();
            model::plan_join(&mut call.steps, waiter, other_id, tmp, "join");
        }
        call.finish();
        Ok(())
    }
}
