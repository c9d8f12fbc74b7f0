//! [`Context`]: cudarc's `CudaContext` with an optional sanitizer, and the builder that decides
//! whether there is one (the `STREAMSAN` environment, or code).

use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, DeviceRepr, DriverError, sys};

use super::error::Error;
use super::event::Event;
use super::options::{self, Options, ReportFormat, ReportTo};
use super::pinned::PinnedBuffer;
use super::sanitizer::{Sanitizer, StreamSlot};
use super::stream::Stream;
use crate::trace::record::{DeviceId, StreamFlags};

/// A CUDA context, sanitized or not. Cheap to clone (it is two `Arc`s).
///
/// Made by [`Context::new`] (the environment decides) or [`Context::builder`].
#[derive(Clone, Debug)]
pub struct Context {
    pub(crate) cuda: Arc<CudaContext>,
    pub(crate) san: Option<Arc<Sanitizer>>,
    pub(crate) device: DeviceId,
}

impl Context {
    /// `CudaContext::new(ordinal)`, sanitized when `STREAMSAN=1` (options from
    /// `STREAMSAN_OPTIONS`).
    pub fn new(ordinal: usize) -> Result<Context, Error> {
        Context::builder().build(ordinal)
    }

    /// A builder: sanitizing and its options set in code, over the environment.
    pub fn builder() -> ContextBuilder {
        ContextBuilder::default()
    }

    /// The wrapped cudarc context. Work done through it directly is not recorded.
    pub fn cudarc(&self) -> &Arc<CudaContext> {
        &self.cuda
    }

    /// The sanitizer, when enabled.
    pub fn sanitizer(&self) -> Option<&Arc<Sanitizer>> {
        self.san.as_ref()
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.cuda.ordinal()
    }

    /// The legacy default stream (cudarc's `default_stream`, the NULL stream). It synchronizes
    /// with every blocking stream of the context; cudarc's own streams are non-blocking.
    #[track_caller]
    pub fn default_stream(&self) -> Stream {
        let cuda = self.cuda.default_stream();
        let slot = match &self.san {
            None => StreamSlot::Fixed(0),
            Some(san) => {
                let mut call = san.begin(Some(std::panic::Location::caller()));
                let id = call.legacy_stream(self.device);
                call.finish();
                StreamSlot::Fixed(id)
            }
        };
        Stream::wrap(cuda, self, slot, false)
    }

    /// cudarc's per-thread stream handle (`CU_STREAM_PER_THREAD`): each host thread that uses
    /// it gets its own per-thread default stream, a blocking stream.
    pub fn per_thread_stream(&self) -> Stream {
        Stream::wrap(
            self.cuda.per_thread_stream(),
            self,
            StreamSlot::PerThread,
            false,
        )
    }

    /// `CudaContext::new_stream`: a new **non-blocking** stream (that is what cudarc makes).
    /// The first one switches cudarc to multi-stream mode and, with event tracking on,
    /// synchronizes the whole context first.
    #[track_caller]
    pub fn new_stream(&self) -> Result<Stream, DriverError> {
        self.new_stream_with(StreamFlags::NonBlocking, None)
    }

    /// [`Context::new_stream`] with a name for reports.
    #[track_caller]
    pub fn new_stream_named(&self, name: &str) -> Result<Stream, DriverError> {
        self.new_stream_with(StreamFlags::NonBlocking, Some(name))
    }

    /// A new stream with the given flags. `NonBlocking` is [`Context::new_stream`]. `Blocking`
    /// (`CU_STREAM_DEFAULT`, synchronizes with the legacy default stream) is made with
    /// `cuStreamCreate` outside cudarc, which therefore does not count it as a stream: it
    /// does not switch cudarc to multi-stream mode.
    #[track_caller]
    pub fn new_stream_with_flags(&self, flags: StreamFlags) -> Result<Stream, DriverError> {
        self.new_stream_with(flags, None)
    }

    #[track_caller]
    fn new_stream_with(
        &self,
        flags: StreamFlags,
        name: Option<&str>,
    ) -> Result<Stream, DriverError> {
        Stream::create(self, flags, name, std::panic::Location::caller())
    }

    /// `CudaContext::new_event`: an event with no work recorded (timing disabled unless
    /// `flags` say otherwise).
    #[track_caller]
    pub fn new_event(&self, flags: Option<sys::CUevent_flags>) -> Result<Event, DriverError> {
        Event::create(self, flags, std::panic::Location::caller())
    }

    /// `CudaContext::synchronize` (`cuCtxSynchronize`): the host waits for all work of the
    /// device.
    #[track_caller]
    pub fn synchronize(&self) -> Result<(), DriverError> {
        let Some(san) = &self.san else {
            return self.cuda.synchronize();
        };
        let mut call = san.begin(Some(std::panic::Location::caller()));
        self.cuda.synchronize()?;
        call.push(super::step::Step::op(
            crate::trace::record::Op::DeviceSync {
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
        &self,
        len: usize,
    ) -> Result<PinnedBuffer<T>, DriverError> {
        unsafe { PinnedBuffer::alloc(self, len, None, std::panic::Location::caller()) }
    }

    /// [`Context::alloc_pinned`] with a name for reports.
    ///
    /// # Safety
    /// The memory is uninitialized.
    #[track_caller]
    pub unsafe fn alloc_pinned_named<T: DeviceRepr>(
        &self,
        name: &str,
        len: usize,
    ) -> Result<PinnedBuffer<T>, DriverError> {
        unsafe { PinnedBuffer::alloc(self, len, Some(name), std::panic::Location::caller()) }
    }

    /// `CudaContext::load_module`.
    pub fn load_module(
        &self,
        ptx: cudarc::nvrtc::Ptx,
    ) -> Result<super::launch::Module, DriverError> {
        Ok(super::launch::Module {
            cuda: self.cuda.load_module(ptx)?,
        })
    }

    /// Whether cudarc's automatic event tracking is on (the default).
    pub fn is_event_tracking(&self) -> bool {
        self.cuda.is_event_tracking()
    }

    /// Whether a stream made by `new_stream` / `fork` is alive.
    pub fn is_in_multi_stream_mode(&self) -> bool {
        self.cuda.is_in_multi_stream_mode()
    }

    /// Whether cudarc is inserting waits and records right now: tracking on and multi-stream.
    pub fn is_managing_stream_synchronization(&self) -> bool {
        self.cuda.is_managing_stream_synchronization()
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

    /// Whether allocations are stream-ordered (`cuMemAllocAsync` / `cuMemFreeAsync`).
    pub fn has_async_alloc(&self) -> bool {
        self.cuda.has_async_alloc()
    }
}

/// Builds a [`Context`]: `Context::builder().sanitize(true).halt_on_error(true)
/// .trace_path("run.jsonl").build(0)`. Whatever is not set comes from `STREAMSAN` /
/// `STREAMSAN_OPTIONS` (unless [`ContextBuilder::ignore_env`]).
#[derive(Clone, Debug, Default)]
pub struct ContextBuilder {
    sanitize: Option<bool>,
    halt_on_error: Option<bool>,
    exitcode: Option<i32>,
    trace: Option<PathBuf>,
    format: Option<ReportFormat>,
    report: Option<ReportTo>,
    check: Option<bool>,
    suppressions: Vec<PathBuf>,
    baseline: Option<PathBuf>,
    shared: Option<Arc<Sanitizer>>,
    ignore_env: bool,
}

impl ContextBuilder {
    /// Sanitize or not, whatever `STREAMSAN` says.
    pub fn sanitize(mut self, on: bool) -> Self {
        self.sanitize = Some(on);
        self
    }

    /// Exit with status 66 (or [`ContextBuilder::exitcode`]) at the first race.
    pub fn halt_on_error(mut self, on: bool) -> Self {
        self.halt_on_error = Some(on);
        self
    }

    /// The exit status of `halt_on_error`.
    pub fn exitcode(mut self, code: i32) -> Self {
        self.exitcode = Some(code);
        self
    }

    /// Also write a trace to this file.
    pub fn trace_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.trace = Some(path.into());
        self
    }

    /// The report format.
    pub fn format(mut self, format: ReportFormat) -> Self {
        self.format = Some(format);
        self
    }

    /// Write reports to this file instead of stderr.
    pub fn report_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.report = Some(ReportTo::Path(path.into()));
        self
    }

    /// Check online (default) or only record the trace.
    pub fn check(mut self, on: bool) -> Self {
        self.check = Some(on);
        self
    }

    /// Read suppressions from this file (`docs/suppressions.md`); call again for more files.
    /// They add to those of `STREAMSAN_OPTIONS=suppressions=...`. Races and warnings they match
    /// are not printed, do not halt, and are counted in the summary; suppressions that matched
    /// nothing are listed when the sanitizer ends. A malformed file fails [`ContextBuilder::build`].
    pub fn suppressions(mut self, path: impl Into<PathBuf>) -> Self {
        self.suppressions.push(path.into());
        self
    }

    /// Races in this baseline (a JSON report, `streamsan check --format json`) are known: not
    /// printed, no halt, counted in the summary. Replaces `STREAMSAN_OPTIONS=baseline=...`.
    pub fn baseline(mut self, path: impl Into<PathBuf>) -> Self {
        self.baseline = Some(path.into());
        self
    }

    /// Use this sanitizer (shared with another context, e.g. for multi-GPU programs, so that
    /// copies and waits between the devices are checked together). Implies sanitizing; the
    /// other options are the shared sanitizer's.
    pub fn sanitizer(mut self, san: Arc<Sanitizer>) -> Self {
        self.shared = Some(san);
        self
    }

    /// Do not read `STREAMSAN` / `STREAMSAN_OPTIONS`.
    pub fn ignore_env(mut self) -> Self {
        self.ignore_env = true;
        self
    }

    /// The options this builder gives over `env` (the parsed environment).
    fn resolve(&self, env: (Option<bool>, Options)) -> (bool, Options) {
        let (env_on, mut o) = env;
        let on = self.sanitize.or(env_on).unwrap_or(false);
        if let Some(v) = self.halt_on_error {
            o.halt_on_error = v;
        }
        if let Some(v) = self.exitcode {
            o.exitcode = v;
        }
        if let Some(v) = &self.trace {
            o.trace = Some(v.clone());
        }
        if let Some(v) = self.format {
            o.format = v;
        }
        if let Some(v) = &self.report {
            o.report = v.clone();
        }
        if let Some(v) = self.check {
            o.check = v;
        }
        o.suppressions.extend(self.suppressions.iter().cloned());
        if let Some(v) = &self.baseline {
            o.baseline = Some(v.clone());
        }
        (on, o)
    }

    /// The sanitizer this builder would use, if any, without CUDA.
    fn make_sanitizer(&self) -> Result<Option<Arc<Sanitizer>>, Error> {
        if let Some(shared) = &self.shared {
            return Ok(Some(shared.clone()));
        }
        let env = if self.ignore_env {
            (None, Options::default())
        } else {
            // The options are only read (and only rejected) when sanitizing.
            let enable = std::env::var(options::ENV_ENABLE).ok();
            let env_on = options::parse_enable(enable.as_deref())?;
            if !self.sanitize.or(env_on).unwrap_or(false) {
                return Ok(None);
            }
            options::from_env()?
        };
        let (on, options) = self.resolve(env);
        Ok(if on {
            Some(Sanitizer::new(options)?)
        } else {
            None
        })
    }

    /// `CudaContext::new(ordinal)`, wrapped.
    pub fn build(self, ordinal: usize) -> Result<Context, Error> {
        let san = self.make_sanitizer()?;
        let cuda = CudaContext::new(ordinal)?;
        Ok(Context {
            device: ordinal as DeviceId,
            cuda,
            san,
        })
    }

    /// Wraps an existing cudarc context. Work already enqueued through it is unknown to the
    /// sanitizer; wrap it before use.
    pub fn wrap(self, cuda: Arc<CudaContext>) -> Result<Context, Error> {
        let san = self.make_sanitizer()?;
        Ok(Context {
            device: cuda.ordinal() as DeviceId,
            cuda,
            san,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_overrides_the_environment() {
        let env = (
            Some(true),
            Options {
                halt_on_error: true,
                trace: Some("env.jsonl".into()),
                ..Options::default()
            },
        );
        let (on, o) = ContextBuilder::default()
            .sanitize(false)
            .trace_path("code.jsonl")
            .format(ReportFormat::Json)
            .resolve(env.clone());
        assert!(!on);
        assert!(o.halt_on_error);
        assert_eq!(o.trace, Some("code.jsonl".into()));
        assert_eq!(o.format, ReportFormat::Json);
        let (on, o) = ContextBuilder::default()
            .halt_on_error(false)
            .check(false)
            .resolve(env);
        assert!(on);
        assert!(!o.halt_on_error && !o.check);
        let (on, _) = ContextBuilder::default().resolve((None, Options::default()));
        assert!(!on, "off unless asked for");
    }

    #[test]
    fn suppressions_add_up_and_the_baseline_overrides() {
        let env = (
            Some(true),
            Options {
                suppressions: vec!["env.supp".into()],
                baseline: Some("env.json".into()),
                ..Options::default()
            },
        );
        let (_, o) = ContextBuilder::default()
            .suppressions("a.supp")
            .suppressions("b.supp")
            .baseline("code.json")
            .resolve(env);
        let names: Vec<PathBuf> = ["env.supp", "a.supp", "b.supp"].map(PathBuf::from).into();
        assert_eq!(o.suppressions, names);
        assert_eq!(o.baseline, Some("code.json".into()));
    }

    #[test]
    fn a_bad_suppressions_file_fails_the_build_naming_file_and_line() {
        let path = std::env::temp_dir().join(format!("streamsan-ctx-{}.supp", std::process::id()));
        std::fs::write(&path, "race:kernel=sum\nrace:kernal=sum\n").unwrap();
        let err = Context::builder()
            .ignore_env()
            .sanitize(true)
            .report_path(std::env::temp_dir().join("streamsan-ctx-report.txt"))
            .suppressions(&path)
            .make_sanitizer()
            .unwrap_err();
        let _ = std::fs::remove_file(&path);
        assert!(matches!(err, Error::Filter(_)), "{err:?}");
        let text = err.to_string();
        let expected = format!("streamsan: {}:2:6: unknown key `kernal`", path.display());
        assert!(text.starts_with(&expected), "{text}");
        let err = Context::builder()
            .ignore_env()
            .sanitize(true)
            .baseline("/nonexistent/known.json")
            .make_sanitizer()
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("streamsan: /nonexistent/known.json: cannot read"),
            "{err}"
        );
    }

    #[test]
    fn off_means_no_sanitizer() {
        let b = Context::builder().ignore_env();
        assert!(b.make_sanitizer().unwrap().is_none());
        let b = Context::builder().ignore_env().sanitize(true).check(false);
        assert!(b.make_sanitizer().unwrap().is_some());
    }
}
