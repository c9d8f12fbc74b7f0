//! [`Stream`]: cudarc's `CudaStream` with its sanitizer id. Synchronization verbs live here;
//! memory operations in `memory.rs`, launches in `launch.rs`.

use std::mem::ManuallyDrop;
use std::panic::Location;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, DriverError, sys};

use super::context::Context;
use super::event::Event;
use super::model;
use super::sanitizer::{Call, Sanitizer, StreamSlot};
use super::step::{Label, Step};
use crate::trace::record::{DeviceId, Op, StreamFlags, StreamId, StreamKind};

/// A stream you can schedule work on; cheap to clone. Made by [`Context::default_stream`],
/// [`Context::per_thread_stream`], [`Context::new_stream`] or [`Stream::fork`].
#[derive(Clone, Debug)]
pub struct Stream {
    pub(crate) inner: Arc<StreamInner>,
}

#[derive(Debug)]
pub(crate) struct StreamInner {
    /// Dropped under the sanitizer lock: dropping an owned cudarc stream changes cudarc's
    /// multi-stream mode, which the next call's records depend on.
    pub(crate) cuda: ManuallyDrop<Arc<CudaStream>>,
    pub(crate) ctx: Context,
    pub(crate) slot: StreamSlot,
    /// A blocking stream made with `cuStreamCreate` outside cudarc, destroyed here.
    raw_owned: bool,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        let _guard = self.ctx.san.as_ref().map(|s| s.lock());
        let raw = self.cuda.cu_stream();
        // SAFETY: dropped once, here.
        unsafe { ManuallyDrop::drop(&mut self.cuda) };
        if self.raw_owned {
            self.ctx.cuda.record_err(self.ctx.cuda.bind_to_thread());
            // SAFETY: made by `cuStreamCreate` in `Stream::create`; every buffer allocated on
            // it holds this `StreamInner`, so nothing uses it any more.
            self.ctx
                .cuda
                .record_err(unsafe { sys::cuStreamDestroy_v2(raw) }.result());
        }
    }
}

impl Stream {
    pub(crate) fn wrap(
        cuda: Arc<CudaStream>,
        ctx: &Context,
        slot: StreamSlot,
        raw_owned: bool,
    ) -> Stream {
        Stream {
            inner: Arc::new(StreamInner {
                cuda: ManuallyDrop::new(cuda),
                ctx: ctx.clone(),
                slot,
                raw_owned,
            }),
        }
    }

    pub(crate) fn san(&self) -> Option<&Arc<Sanitizer>> {
        self.inner.ctx.san.as_ref()
    }

    pub(crate) fn device(&self) -> DeviceId {
        self.inner.ctx.device
    }

    /// This stream's id for the calling thread.
    pub(crate) fn id_in(&self, call: &mut Call<'_>) -> StreamId {
        call.stream(self.inner.slot, self.device())
    }

    /// `is_managing_stream_synchronization()` of this stream's context, read under the lock
    /// just before the cudarc call that reads it too.
    pub(crate) fn managing(&self) -> bool {
        self.inner.ctx.cuda.is_managing_stream_synchronization()
    }

    /// The wrapped cudarc stream. Work enqueued through it directly is not recorded.
    pub fn cudarc(&self) -> &Arc<CudaStream> {
        &self.inner.cuda
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The cudarc context.
    pub fn cuda_context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx.cuda
    }

    pub(crate) fn create(
        ctx: &Context,
        flags: StreamFlags,
        name: Option<&str>,
        at: &'static Location<'static>,
    ) -> Result<Stream, DriverError> {
        let make = || -> Result<(Arc<CudaStream>, bool), DriverError> {
            match flags {
                StreamFlags::NonBlocking => Ok((ctx.cuda.new_stream()?, false)),
                StreamFlags::Blocking => {
                    ctx.cuda.bind_to_thread()?;
                    let mut raw = std::ptr::null_mut();
                    // SAFETY: a plain stream creation in the bound context.
                    unsafe {
                        sys::cuStreamCreate(&mut raw, sys::CUstream_flags::CU_STREAM_DEFAULT as u32)
                    }
                    .result()?;
                    // SAFETY: `raw` belongs to this context and lives until `StreamInner` drops.
                    Ok((unsafe { ctx.cuda.wrap_borrowed_stream(raw) }, true))
                }
            }
        };
        let Some(san) = &ctx.san else {
            let (cuda, raw) = make()?;
            return Ok(Stream::wrap(cuda, ctx, StreamSlot::Fixed(0), raw));
        };
        let mut call = san.begin(Some(at));
        let first_sync = (flags == StreamFlags::NonBlocking
            && !ctx.cuda.is_in_multi_stream_mode()
            && ctx.cuda.is_event_tracking())
        .then_some(ctx.device);
        let (cuda, raw) = make()?;
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
        Ok(Stream::wrap(cuda, ctx, StreamSlot::Fixed(id), raw))
    }

    /// `CudaStream::fork`: a new non-blocking stream that waits for the work enqueued on this
    /// one so far. Unlike `new_stream`, cudarc does not synchronize the context here.
    #[track_caller]
    pub fn fork(&self) -> Result<Stream, DriverError> {
        let Some(san) = self.san() else {
            let cuda = self.inner.cuda.fork()?;
            return Ok(Stream::wrap(
                cuda,
                self.context(),
                StreamSlot::Fixed(0),
                false,
            ));
        };
        let mut call = san.begin(Some(Location::caller()));
        let parent = self.id_in(&mut call);
        let cuda = self.inner.cuda.fork()?;
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
        Ok(Stream::wrap(
            cuda,
            self.context(),
            StreamSlot::Fixed(child),
            false,
        ))
    }

    /// `CudaStream::synchronize`: the host waits for the work enqueued so far.
    #[track_caller]
    pub fn synchronize(&self) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.inner.cuda.synchronize();
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        self.inner.cuda.synchronize()?;
        call.push(Step::op(Op::StreamSync { stream }, None));
        call.finish();
        Ok(())
    }

    /// `cuStreamQuery`: `true` when all work enqueued so far is done (the host is then ordered
    /// after it), `false` when some is still running (orders nothing).
    #[track_caller]
    pub fn query(&self) -> Result<bool, DriverError> {
        let query = || -> Result<bool, DriverError> {
            self.inner.ctx.cuda.bind_to_thread()?;
            // SAFETY: a live stream of this context.
            match unsafe { sys::cuStreamQuery(self.inner.cuda.cu_stream()) } {
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
    pub fn record_event(&self, flags: Option<sys::CUevent_flags>) -> Result<Event, DriverError> {
        let Some(san) = self.san() else {
            return Ok(Event::untracked(self.inner.cuda.record_event(flags)?));
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        let cuda = self.inner.cuda.record_event(flags)?;
        let id = call.new_event_id();
        model::plan_record_event(&mut call.steps, stream, id, Label::None);
        call.finish();
        Ok(Event::tracked(cuda, san, id))
    }

    /// `CudaStream::wait`: work enqueued on this stream from now on waits for the work
    /// `event` captured at its latest record before this call.
    #[track_caller]
    pub fn wait(&self, event: &Event) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.inner.cuda.wait(event.cudarc());
        };
        let mut call = san.begin(Some(Location::caller()));
        let stream = self.id_in(&mut call);
        self.inner.cuda.wait(event.cudarc())?;
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
    pub fn join(&self, other: &Stream) -> Result<(), DriverError> {
        let Some(san) = self.san() else {
            return self.inner.cuda.join(&other.inner.cuda);
        };
        let mut call = san.begin(Some(Location::caller()));
        let waiter = self.id_in(&mut call);
        let owner = other.san().map_or(0, Sanitizer::identity);
        let other_id = call.same_sanitizer([owner]).then(|| other.id_in(&mut call));
        self.inner.cuda.join(&other.inner.cuda)?;
        if let Some(other_id) = other_id {
            let tmp = call.new_event_id();
            model::plan_join(&mut call.steps, waiter, other_id, tmp, "join");
        }
        call.finish();
        Ok(())
    }
}
