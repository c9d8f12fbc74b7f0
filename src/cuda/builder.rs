//! [`ContextBuilder`]: whether a context is sanitized and with which options, set in code over
//! the `STREAMSAN` / `STREAMSAN_OPTIONS` environment. Not in cudarc.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::context::CudaContext;
use super::error::Error;
use super::options::{self, Options, ReportFormat, ReportTo};
use super::sanitizer::Sanitizer;
use crate::trace::record::DeviceId;

/// The sanitizer of every context whose sanitizing and options come from the environment
/// alone (`CudaContext::new` under `STREAMSAN=1`): one per process, so that a program's
/// contexts (several devices, or threads that each make their own) are checked together and
/// write one trace, as one sanitizer would see the process. It ends, printing its summary and
/// closing the trace, when the process exits (an `atexit` hook) — or later, when the last of
/// its contexts, streams and buffers that outlive `main` goes.
static PROCESS_SANITIZER: Mutex<Option<Arc<Sanitizer>>> = Mutex::new(None);

unsafe extern "C" {
    /// The C library's `atexit` (Rust's standard library has no exit hook).
    pub(super) fn atexit(hook: extern "C" fn()) -> std::ffi::c_int;
}

/// Ends the process's sanitizer at exit, if nothing else holds it (see
/// [`PROCESS_SANITIZER`]). A halt (`halt_on_error`) exits while a call holds it: nothing
/// more is printed then.
extern "C" fn end_process_sanitizer() {
    if let Ok(mut slot) = PROCESS_SANITIZER.try_lock() {
        drop(slot.take());
    }
}

/// The process's sanitizer, made with `options` on first use.
fn process_sanitizer(options: Options) -> Result<Arc<Sanitizer>, Error> {
    let mut slot = PROCESS_SANITIZER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(san) = &*slot {
        return Ok(san.clone());
    }
    let san = Sanitizer::new(options)?;
    // SAFETY: registers a plain function, which only takes the sanitizer out of its slot.
    unsafe { atexit(end_process_sanitizer) };
    *slot = Some(san.clone());
    Ok(san)
}

/// Builds a [`CudaContext`]: `CudaContext::builder().sanitize(true).halt_on_error(true)
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
        let from_env_alone = !self.ignore_env && self.sets_no_option();
        let (on, options) = self.resolve(env);
        if !on {
            return Ok(None);
        }
        if from_env_alone {
            return process_sanitizer(options).map(Some);
        }
        Ok(Some(Sanitizer::new(options)?))
    }

    /// True when the builder sets nothing but, perhaps, `sanitize(true)`: its contexts take
    /// the environment's options, and share the process's sanitizer.
    fn sets_no_option(&self) -> bool {
        self.sanitize != Some(false)
            && self.halt_on_error.is_none()
            && self.exitcode.is_none()
            && self.trace.is_none()
            && self.format.is_none()
            && self.report.is_none()
            && self.check.is_none()
            && self.suppressions.is_empty()
            && self.baseline.is_none()
    }

    /// `CudaContext::new(ordinal)`, sanitized or not as this builder says.
    pub fn build(self, ordinal: usize) -> Result<Arc<CudaContext>, Error> {
        let san = self.make_sanitizer()?;
        let cuda = cudarc::driver::CudaContext::new(ordinal)?;
        Ok(Arc::new(CudaContext {
            device: ordinal as DeviceId,
            cuda,
            san,
        }))
    }

    /// Wraps an existing cudarc context. Work already enqueued through it is unknown to the
    /// sanitizer; wrap it before use.
    pub fn wrap(self, cuda: Arc<cudarc::driver::CudaContext>) -> Result<Arc<CudaContext>, Error> {
        let san = self.make_sanitizer()?;
        Ok(Arc::new(CudaContext {
            device: cuda.ordinal() as DeviceId,
            cuda,
            san,
        }))
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
        let err = CudaContext::builder()
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
        let err = CudaContext::builder()
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
    fn contexts_from_the_environment_alone_share_the_process_sanitizer() {
        assert!(ContextBuilder::default().sets_no_option());
        assert!(ContextBuilder::default().sanitize(true).sets_no_option());
        assert!(!ContextBuilder::default().sanitize(false).sets_no_option());
        assert!(
            !ContextBuilder::default()
                .trace_path("t.jsonl")
                .sets_no_option()
        );
        assert!(
            !ContextBuilder::default()
                .halt_on_error(true)
                .sets_no_option()
        );
        let options = || Options {
            report: ReportTo::Path(std::env::temp_dir().join("streamsan-process-san.txt")),
            ..Options::default()
        };
        let a = process_sanitizer(options()).unwrap();
        let b = process_sanitizer(options()).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "one sanitizer per process");
    }

    #[test]
    fn off_means_no_sanitizer() {
        let b = CudaContext::builder().ignore_env();
        assert!(b.make_sanitizer().unwrap().is_none());
        let b = CudaContext::builder()
            .ignore_env()
            .sanitize(true)
            .check(false);
        assert!(b.make_sanitizer().unwrap().is_some());
    }
}
