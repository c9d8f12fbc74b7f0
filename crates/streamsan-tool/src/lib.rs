//! The tool library of `streamsan run`: CUDA loads it into an unmodified program
//! (`CUDA_INJECTION64_PATH`, read by the driver when the program initializes CUDA, which then
//! calls [`InitializeInjection`]), and it records the program's CUDA calls through NVIDIA's
//! Sanitizer API as trace v1, which `streamsan run` checks with the same engine as every other
//! face.
//!
//! Environment (set by `streamsan run`): `STREAMSAN_RUN_DIR` (where traces go; one per
//! process), `STREAMSAN_RUN_KERNELS=0` (record the API only: kernels' accesses are not
//! checked), `STREAMSAN_RUN_LOG_ENTRIES` (device log size per launch), `STREAMSAN_RUN_SITES=0`
//! (no host call sites), `STREAMSAN_RUN_LIVE=1` (print races on stderr as they are found),
//! `STREAMSAN_RUN_HALT=CODE` (end the program with exit status CODE at its first race),
//! `STREAMSAN_RUN_SUPPRESSIONS` (suppression files, one per line) and `STREAMSAN_RUN_BASELINE`
//! (for the races printed as found), and
//! `STREAMSAN_SANITIZER_LIB` (the path of `libsanitizer-public.so`, if not in the toolkit).

// The `Handle`s passed around are opaque values the Sanitizer API gave the tool in a
// callback (contexts, modules, streams, launches), handed back to that API unchanged: the tool
// never dereferences them, which is what this lint guards against.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod device;
pub mod fold;
pub mod ids;
pub mod recorder;
#[cfg(test)]
mod replay_tests;
pub mod sink;
pub mod site;
pub mod sys;

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::Ordering::Relaxed;

use recorder::{IN_TOOL, Recorder};
use streamsan::suppress::Filters;

static TOOL: OnceLock<Option<Recorder>> = OnceLock::new();
static API: OnceLock<sys::Api> = OnceLock::new();
static DIR: OnceLock<PathBuf> = OnceLock::new();
/// The exit status of `--halt-on-error`.
static HALT_CODE: OnceLock<c_int> = OnceLock::new();
/// Where the races printed as found went (the program's stderr when the tool started).
static STDERR: OnceLock<Option<(u64, u64)>> = OnceLock::new();

unsafe extern "C" {
    fn atexit(f: extern "C" fn()) -> c_int;
    fn _exit(code: c_int) -> !;
}

/// Called by the CUDA driver when it loads this library through `CUDA_INJECTION64_PATH`
/// (inside the program's first CUDA call, before any of its work): subscribes to the
/// Sanitizer API. Returns 1 (success) even when the tool could not start, so the program
/// runs; the reason is printed and left in `trace-PID.failed` for `streamsan run`.
#[unsafe(no_mangle)]
pub extern "C" fn InitializeInjection() -> c_int {
    let _ = std::panic::catch_unwind(|| TOOL.get_or_init(start));
    1
}

/// Starts the recorder; when it cannot, says why on stderr and in `trace-PID.failed` (which
/// `streamsan run` turns into exit status 2: a process that was not checked is no clean
/// verdict), and leaves no trace behind.
fn start() -> Option<Recorder> {
    let dir = PathBuf::from(std::env::var_os("STREAMSAN_RUN_DIR").unwrap_or_else(|| ".".into()));
    match try_start(&dir) {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!("streamsan: the CUDA tool did not start: {e}");
            let pid = std::process::id();
            let _ = std::fs::remove_file(sink::trace_path(&dir, pid));
            let _ = std::fs::write(sink::failed_path(&dir, pid), format!("{e}\n"));
            None
        }
    }
}

fn try_start(dir: &std::path::Path) -> Result<Recorder, String> {
    let dir = dir.to_path_buf();
    let instrument = std::env::var("STREAMSAN_RUN_KERNELS").map_or(true, |v| v != "0");
    let entries = std::env::var("STREAMSAN_RUN_LOG_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(device::DEFAULT_LOG_ENTRIES)
        .clamp(1, device::MAX_LOG_ENTRIES);
    let api = API.get_or_init_fallible(sys::Api::load)?;
    let pid = std::process::id();
    let mut sink = sink::Sink::create(&dir, pid, instrument)
        .map_err(|e| format!("{}: {e}", sink::trace_path(&dir, pid).display()))?;
    if let Some(options) = live_options() {
        sink.check_live(options)
            .map_err(|e| format!("checking as the program runs: {e}"))?;
    }
    let _ = DIR.set(dir);
    let device = instrument.then(|| device::DeviceCapture::new(api, entries));
    let no_sites = std::env::var("STREAMSAN_RUN_SITES").is_ok_and(|v| v == "0");
    let recorder = Recorder::new(api, device, sink, site::Sites::new(no_sites));
    let mut subscriber: sys::Handle = std::ptr::null_mut();
    let r = unsafe { (api.subscribe)(&mut subscriber, on_callback, std::ptr::null_mut()) };
    if r != sys::SUCCESS {
        return Err(format!(
            "sanitizerSubscribe: {} (another Sanitizer API tool, such as compute-sanitizer, may be attached)",
            api.describe(r)
        ));
    }
    recorder.enable(subscriber)?;
    unsafe { atexit(write_summary) };
    Ok(recorder)
}

/// Checking as the program runs, when `streamsan run` asks for it: races printed as found
/// (`STREAMSAN_RUN_LIVE=1`), or only the halt at the first race (`STREAMSAN_RUN_HALT`).
fn live_options() -> Option<sink::LiveOptions> {
    let print = std::env::var("STREAMSAN_RUN_LIVE").is_ok_and(|v| v == "1");
    let halt = std::env::var("STREAMSAN_RUN_HALT")
        .ok()
        .and_then(|v| v.parse::<c_int>().ok());
    if !print && halt.is_none() {
        return None;
    }
    let suppressions: Vec<String> = std::env::var("STREAMSAN_RUN_SUPPRESSIONS")
        .map(|v| v.lines().map(str::to_string).collect())
        .unwrap_or_default();
    let baseline = std::env::var_os("STREAMSAN_RUN_BASELINE").map(PathBuf::from);
    // `streamsan run` read these files before it started the program; should one have gone
    // since, the races print unfiltered and the final report still applies them.
    let filters = Filters::load(&suppressions, baseline.as_deref()).unwrap_or_else(|e| {
        eprintln!("streamsan: {e}; races found as the program runs print unfiltered");
        None
    });
    let report: streamsan::live::Sink = if print {
        // Races print through a copy of the program's stderr as it is now: where `streamsan
        // run`'s own stderr is, unless the program was started with it redirected.
        match streamsan::live::stderr_copy() {
            Some(copy) => {
                let _ = STDERR.set(streamsan::live::file_identity(&copy));
                Box::new(copy)
            }
            None => Box::new(std::io::stderr()),
        }
    } else {
        Box::new(std::io::sink())
    };
    Some(sink::LiveOptions {
        report,
        filters,
        halt: halt.map(|code| {
            let _ = HALT_CODE.set(code);
            halt_now as fn()
        }),
    })
}

/// `--halt-on-error`: writes the summary, then ends the process at once. Not `exit`: this runs
/// inside a CUDA callback, where the atexit teardown of the CUDA runtime could wait for the
/// very call in progress.
fn halt_now() {
    write_summary();
    let code = HALT_CODE.get().copied().unwrap_or(66);
    // SAFETY: `_exit` ends the process; the trace was written record by record, unbuffered.
    unsafe { _exit(code) }
}

/// `OnceLock::get_or_try_init` is unstable: the same for a fallible initializer.
trait GetOrInitFallible<T> {
    fn get_or_init_fallible(&self, f: impl FnOnce() -> Result<T, String>) -> Result<&T, String>;
}

impl<T> GetOrInitFallible<T> for OnceLock<T> {
    fn get_or_init_fallible(&self, f: impl FnOnce() -> Result<T, String>) -> Result<&T, String> {
        if let Some(v) = self.get() {
            return Ok(v);
        }
        let v = f()?;
        Ok(self.get_or_init(|| v))
    }
}

unsafe extern "C" fn on_callback(_: *mut c_void, domain: u32, cbid: u32, data: *const c_void) {
    if IN_TOOL.with(|t| t.get()) || data.is_null() {
        return;
    }
    let Some(Some(recorder)) = TOOL.get() else {
        return;
    };
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        recorder.on_callback(domain, cbid, data)
    }))
    .is_err()
    {
        recorder.counts.tool_errors.fetch_add(1, Relaxed);
    }
}

/// At exit: what the run could and could not check, for `streamsan run` to print.
extern "C" fn write_summary() {
    let _ = std::panic::catch_unwind(|| {
        let (Some(Some(r)), Some(dir)) = (TOOL.get(), DIR.get()) else {
            return;
        };
        let c = &r.counts;
        let errors = r.errors.lock().map(|e| e.clone()).unwrap_or_default();
        let summary = serde_json::json!({
            "kernels": if r.instrumented() { "instrumented" } else { "not checked" },
            "launches": c.launches.load(Relaxed),
            "launches_instrumented": c.launches_instrumented.load(Relaxed),
            "launches_not_instrumented": c.launches_not_instrumented.load(Relaxed),
            "launches_with_dropped_entries": c.launches_with_dropped_entries.load(Relaxed),
            "log_entries_dropped": c.log_entries_dropped.load(Relaxed),
            "unattributed_bytes": c.unattributed_bytes.load(Relaxed),
            "copies_unattributed": c.copies_unattributed.load(Relaxed),
            "rows_unchecked": c.rows_unchecked.load(Relaxed),
            "graph_launches": c.graph_launches.load(Relaxed),
            "graph_kernel_nodes": c.graph_kernel_nodes.load(Relaxed),
            "tool_errors": c.tool_errors.load(Relaxed),
            "host_visible_allocations": c.host_visible_allocations.load(Relaxed),
            "errors": errors,
            // Races printed as found, and where: `streamsan run` prints only summaries when
            // they reached its own stderr.
            "live": r.live_counts().map(|(races, records, stopped)| serde_json::json!({
                "races": races,
                "records": records,
                "stopped": stopped,
                "stderr": STDERR.get().copied().flatten(),
            })),
        });
        let _ = std::fs::write(
            sink::summary_path(dir, std::process::id()),
            summary.to_string(),
        );
    });
}
