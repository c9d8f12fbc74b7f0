//! [`CudaEvent`]: cudarc's event with its sanitizer id; destroying it is recorded, so the id
//! could be declared again.

use std::panic::Location;
use std::sync::Arc;

use cudarc::driver::{DriverError, sys};

use super::context::CudaContext;
use super::sanitizer::Sanitizer;
use super::step::Step;
use super::stream::CudaStream;
use crate::trace::record::{EventId, Op};

/// A synchronization point in a stream. Made by [`CudaContext::new_event`] or
/// [`CudaStream::record_event`]; used by [`CudaStream::wait`] and [`CudaEvent::synchronize`].
#[derive(Debug)]
pub struct CudaEvent {
    cuda: cudarc::driver::CudaEvent,
    ctx: Arc<CudaContext>,
    meta: Option<(Arc<Sanitizer>, EventId)>,
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        if let Some((san, id)) = &self.meta {
            let mut call = san.begin(None);
            call.push(Step::op(Op::EventDestroy { id: *id }, None));
            call.finish();
        }
    }
}

impl CudaEvent {
    pub(crate) fn untracked(cuda: cudarc::driver::CudaEvent, ctx: &Arc<CudaContext>) -> CudaEvent {
        CudaEvent {
            cuda,
            ctx: ctx.clone(),
            meta: None,
        }
    }

    pub(crate) fn tracked(
        cuda: cudarc::driver::CudaEvent,
        ctx: &Arc<CudaContext>,
        san: &Arc<Sanitizer>,
        id: EventId,
    ) -> CudaEvent {
        CudaEvent {
            cuda,
            ctx: ctx.clone(),
            meta: Some((san.clone(), id)),
        }
    }

    pub(crate) fn create(
        ctx: &Arc<CudaContext>,
        flags: Option<sys::CUevent_flags>,
        at: &'static Location<'static>,
    ) -> Result<CudaEvent, DriverError> {
        let Some(san) = &ctx.san else {
            return Ok(CudaEvent::untracked(ctx.cuda.new_event(flags)?, ctx));
        };
        let mut call = san.begin(Some(at));
        let cuda = ctx.cuda.new_event(flags)?;
        let id = call.new_event_id();
        call.push(Step::op(Op::Event { id }, None));
        call.finish();
        Ok(CudaEvent::tracked(cuda, ctx, san, id))
    }

    /// The wrapped cudarc event.
    pub fn cudarc(&self) -> &cudarc::driver::CudaEvent {
        &self.cuda
    }

    /// The raw CUDA event; records and waits made with it directly are not recorded.
    pub fn cu_event(&self) -> sys::CUevent {
        self.cuda.cu_event()
    }

    /// The context it belongs to.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The id in the trace, when sanitized. Not in cudarc.
    pub fn id(&self) -> Option<EventId> {
        self.meta.as_ref().map(|m| m.1)
    }

    /// The identity of the owning sanitizer (0: none).
    pub(crate) fn owner(&self) -> usize {
        self.meta.as_ref().map_or(0, |m| m.0.identity())
    }

    /// `CudaEvent::record`: captures the work enqueued on `stream` so far. Earlier waits on this
    /// event are not affected.
    #[track_caller]
    pub fn record(&self, stream: &CudaStream) -> Result<(), DriverError> {
        let Some((san, id)) = &self.meta else {
            return self.cuda.record(stream.cudarc());
        };
        let mut call = san.begin(Some(Location::caller()));
        let owner = stream.san().map_or(0, Sanitizer::identity);
        let stream_id = call
            .same_sanitizer([owner])
            .then(|| stream.id_in(&mut call));
        self.cuda.record(stream.cudarc())?;
        if let Some(stream) = stream_id {
            call.push(Step::op(Op::Record { event: *id, stream }, None));
        }
        call.finish();
        Ok(())
    }

    /// `CudaEvent::synchronize`: the host waits for the captured work.
    #[track_caller]
    pub fn synchronize(&self) -> Result<(), DriverError> {
        let Some((san, id)) = &self.meta else {
            return self.cuda.synchronize();
        };
        let mut call = san.begin(Some(Location::caller()));
        self.cuda.synchronize()?;
        call.push(Step::op(Op::EventSync { event: *id }, None));
        call.finish();
        Ok(())
    }

    /// `CudaEvent::try_is_complete` (`cuEventQuery`): `true` when the captured work is done
    /// (the host is then ordered after it).
    #[track_caller]
    pub fn try_is_complete(&self) -> Result<bool, DriverError> {
        let Some((san, id)) = &self.meta else {
            return self.cuda.try_is_complete();
        };
        let mut call = san.begin(Some(Location::caller()));
        let done = self.cuda.try_is_complete()?;
        call.push(Step::op(Op::EventQuery { event: *id, done }, None));
        call.finish();
        Ok(done)
    }

    /// `CudaEvent::is_complete`: [`CudaEvent::try_is_complete`] with errors read as "not done"
    /// (as cudarc's: an error is not completion).
    #[track_caller]
    pub fn is_complete(&self) -> bool {
        self.try_is_complete().unwrap_or(false)
    }

    /// `CudaEvent::elapsed_ms`, which synchronizes both events first (recorded as two event
    /// syncs).
    #[track_caller]
    pub fn elapsed_ms(&self, end: &CudaEvent) -> Result<f32, DriverError> {
        let Some((san, id)) = &self.meta else {
            return self.cuda.elapsed_ms(&end.cuda);
        };
        let mut call = san.begin(Some(Location::caller()));
        let ms = self.cuda.elapsed_ms(&end.cuda)?;
        call.push(Step::op(Op::EventSync { event: *id }, None));
        if call.same_sanitizer([end.owner()]) {
            let end_id = end.id().expect("a sanitized event has an id");
            call.push(Step::op(Op::EventSync { event: end_id }, None));
        }
        call.finish();
        Ok(ms)
    }
}
