//! `streamsan run -- PROGRAM`: runs an unmodified CUDA program with the tool library
//! (crates/streamsan-tool) injected, then checks the trace each CUDA process wrote, as `check`
//! does, and says what the run could not see.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{CheckRun, FileNotes};

pub struct RunOptions {
    pub api_only: bool,
    pub no_call_sites: bool,
    pub keep_traces: Option<PathBuf>,
    pub error_exitcode: u8,
    /// Stop the program at its first race.
    pub halt_on_error: bool,
    /// Each process prints its races on stderr as it finds them.
    pub live: bool,
    /// For the races printed as found (the final report applies them as `check` does).
    pub suppressions: Vec<String>,
    pub baseline: Option<String>,
    pub log_entries: Option<u64>,
}

/// The tool library's file name.
const TOOL_LIB: &str = "libstreamsan_tool.so";

/// Where the tool library is: `$STREAMSAN_TOOL_LIB`, else beside this executable (where
/// `cargo build` puts both), else in `../lib` of it (an installed layout).
fn find_tool() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("STREAMSAN_TOOL_LIB") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("STREAMSAN_TOOL_LIB={}: no such file", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [dir.join(TOOL_LIB), dir.join("../lib").join(TOOL_LIB)];
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        format!(
            "the tool library {TOOL_LIB} is not beside {} (build it with `cargo build --release -p streamsan-tool`, or set STREAMSAN_TOOL_LIB)",
            exe.display()
        )
    })
}

/// A directory for this run's traces, removed afterwards unless kept.
struct TraceDir {
    path: PathBuf,
    keep: bool,
}

impl TraceDir {
    fn new(keep: Option<&Path>) -> Result<TraceDir, String> {
        let (path, keep) = match keep {
            Some(p) => (p.to_path_buf(), true),
            None => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos());
                let name = format!("streamsan-run-{}-{nanos}", std::process::id());
                (std::env::temp_dir().join(name), false)
            }
        };
        std::fs::create_dir_all(&path)
            .map_err(|e| format!("{}: cannot create the trace directory: {e}", path.display()))?;
        // Absolute: the program may change its working directory.
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        Ok(TraceDir { path, keep })
    }

    /// The files named `trace-PID.SUFFIX` in the directory, by process id.
    fn files(&self, suffix: &str) -> Vec<PathBuf> {
        let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(&self.path)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let pid = name
                    .strip_prefix("trace-")?
                    .strip_suffix(suffix)?
                    .parse()
                    .ok()?;
                Some((pid, e.path()))
            })
            .collect();
        found.sort();
        found.into_iter().map(|(_, p)| p).collect()
    }

    /// What this run left: the traces, and the reasons of processes whose tool did not start;
    /// files that were there before the run (a kept directory used again) are left out.
    fn written_since(&self, before: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
        let new = |files: Vec<PathBuf>| -> Vec<PathBuf> {
            files.into_iter().filter(|f| !before.contains(f)).collect()
        };
        (new(self.files(".jsonl")), new(self.files(".failed")))
    }

    /// Every file of the directory now.
    fn snapshot(&self) -> Vec<PathBuf> {
        let mut all = self.files(".jsonl");
        all.extend(self.files(".failed"));
        all
    }
}

impl Drop for TraceDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

pub fn run(program: &[OsString], options: &RunOptions, check: &CheckRun) -> u8 {
    match try_run(program, options, check) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("error: {message}");
            2
        }
    }
}

fn try_run(program: &[OsString], options: &RunOptions, check: &CheckRun) -> Result<u8, String> {
    let tool = find_tool()?;
    // Absolute: the program may change its working directory, and the driver opens it with
    // dlopen, which looks a bare name up in LD_LIBRARY_PATH, not in the working directory.
    let tool = std::fs::canonicalize(&tool).unwrap_or(tool);
    if let Some(other) = std::env::var_os("CUDA_INJECTION64_PATH") {
        return Err(format!(
            "CUDA_INJECTION64_PATH is already set ({}): another CUDA tool would be replaced; unset it",
            other.to_string_lossy()
        ));
    }
    let dir = TraceDir::new(options.keep_traces.as_deref())?;
    let before = dir.snapshot();
    let (name, args) = program.split_first().ok_or("no PROGRAM given")?;
    let mut command = Command::new(name);
    command
        .args(args)
        .env("CUDA_INJECTION64_PATH", &tool)
        .env("STREAMSAN_RUN_DIR", &dir.path)
        .env(
            "STREAMSAN_RUN_KERNELS",
            if options.api_only { "0" } else { "1" },
        );
    if options.no_call_sites {
        command.env("STREAMSAN_RUN_SITES", "0");
    }
    if let Some(n) = options.log_entries {
        command.env("STREAMSAN_RUN_LOG_ENTRIES", n.to_string());
    }
    if options.live {
        command.env("STREAMSAN_RUN_LIVE", "1");
    }
    if options.halt_on_error {
        command.env("STREAMSAN_RUN_HALT", options.error_exitcode.to_string());
    }
    if options.live || options.halt_on_error {
        // Absolute, one per line: the program may change its working directory.
        let absolute = |p: &str| std::fs::canonicalize(p).unwrap_or_else(|_| PathBuf::from(p));
        let files: Vec<String> = options
            .suppressions
            .iter()
            .map(|p| absolute(p).display().to_string())
            .collect();
        if !files.is_empty() {
            command.env("STREAMSAN_RUN_SUPPRESSIONS", files.join("\n"));
        }
        if let Some(b) = &options.baseline {
            command.env("STREAMSAN_RUN_BASELINE", absolute(b));
        }
    }
    let status = {
        // Ctrl-C reaches the program (same process group); streamsan stays to report what
        // the program did until then, and to clean up.
        let _ignore = IgnoreInterrupts::new();
        command
            .status()
            .map_err(|e| format!("cannot run {}: {e}", name.to_string_lossy()))?
    };
    let program_code = exit_status_code(&status);
    let (traces, failed) = dir.written_since(&before);
    if !failed.is_empty() {
        for f in &failed {
            let reason = std::fs::read_to_string(f).unwrap_or_default();
            eprintln!(
                "error: {}: the CUDA tool did not start: {}",
                f.display(),
                reason.trim()
            );
        }
        return Err(format!(
            "{} process(es) of {} ran unchecked: no verdict",
            failed.len(),
            name.to_string_lossy()
        ));
    }
    if traces.is_empty() {
        eprintln!(
            "streamsan run: {} made no CUDA call that the tool saw: nothing to check",
            name.to_string_lossy()
        );
        return Ok(program_code);
    }
    let files: Vec<String> = traces.iter().map(|p| p.display().to_string()).collect();
    if files.len() > 1 && (check.perfetto.is_some() || check.html.is_some()) {
        return Err(format!(
            "--html and --perfetto draw one trace, and {} processes used CUDA; rerun with --keep-traces DIR and `streamsan check --html` one of them",
            files.len()
        ));
    }
    let stderr = streamsan::live::stderr_identity();
    let notes: Vec<FileNotes> = traces
        .iter()
        .map(|t| {
            let summary = read_summary(t);
            FileNotes {
                not_checked: limitations(&summary, options.api_only),
                shown_live: shown_live(&summary, stderr),
            }
        })
        .collect();
    let verdict = check.check_noting(&files, &notes);
    if dir.keep {
        eprintln!("streamsan run: traces kept in {}", dir.path.display());
    } else if verdict == 1 {
        eprintln!(
            "streamsan run: to replay this run offline, rerun with --keep-traces DIR and `streamsan check DIR/trace-PID.jsonl`"
        );
    }
    Ok(match verdict {
        0 => program_code,
        1 => options.error_exitcode,
        _ => 2,
    })
}

/// Ignores SIGINT and SIGTERM in streamsan while it lives (the program still gets them), and
/// restores the previous handlers.
struct IgnoreInterrupts {
    #[cfg(unix)]
    previous: [usize; 2],
}

#[cfg(unix)]
unsafe extern "C" {
    fn signal(signum: i32, handler: usize) -> usize;
}

#[cfg(unix)]
const SIGNALS: [i32; 2] = [2, 15]; // SIGINT, SIGTERM
#[cfg(unix)]
const SIG_IGN: usize = 1;

impl IgnoreInterrupts {
    fn new() -> IgnoreInterrupts {
        #[cfg(unix)]
        {
            // SAFETY: `signal` with SIG_IGN installs no Rust code as a handler.
            let previous = SIGNALS.map(|s| unsafe { signal(s, SIG_IGN) });
            IgnoreInterrupts { previous }
        }
        #[cfg(not(unix))]
        IgnoreInterrupts {}
    }
}

impl Drop for IgnoreInterrupts {
    fn drop(&mut self) {
        #[cfg(unix)]
        for (s, h) in SIGNALS.iter().zip(self.previous) {
            // SAFETY: restores the handler `signal` returned.
            unsafe { signal(*s, h) };
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal that ended the program.
fn exit_status_code(status: &std::process::ExitStatus) -> u8 {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return (128 + signal).min(255) as u8;
        }
    }
    status.code().map_or(1, |c| c as u8)
}

/// The summary a process's tool wrote at exit beside its trace (null when it left none).
fn read_summary(trace: &Path) -> serde_json::Value {
    std::fs::read_to_string(trace.with_extension("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// What a process printed as found (records that raced, records checked), when it went to
/// `stderr` (this command's) and checking did not stop early: then, if it covered the whole
/// trace, its report at the end need only sum up.
fn shown_live(summary: &serde_json::Value, stderr: Option<(u64, u64)>) -> Option<(u64, u64)> {
    let live = summary.get("live")?;
    let theirs: Option<(u64, u64)> = serde_json::from_value(live.get("stderr")?.clone()).ok()?;
    let stopped = live.get("stopped").and_then(serde_json::Value::as_bool) != Some(false);
    if stopped || theirs.is_none() || theirs != stderr {
        return None;
    }
    let n = |key: &str| live.get(key).and_then(serde_json::Value::as_u64);
    Some((n("races")?, n("records")?))
}

/// What one process's run could not check, from the summary its tool wrote at exit: one
/// sentence each, for the report's `not-checked` warnings.
fn limitations(summary: &serde_json::Value, api_only: bool) -> Vec<String> {
    let n = |key: &str| {
        summary
            .get(key)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    };
    let mut lines = Vec::new();
    // Only where the program had such memory (or left no summary to say).
    const HOST: &str = "host code reading or writing pinned or managed memory is not seen (the Sanitizer API reports no host accesses)";
    match (summary.is_null(), n("host_visible_allocations")) {
        (true, _) => lines.push(HOST.to_string()),
        (false, 0) => {}
        (false, 1) => lines.push(format!("{HOST}; the program made 1 such allocation")),
        (false, k) => lines.push(format!("{HOST}; the program made {k} such allocations")),
    }
    if api_only {
        lines.push(format!(
            "kernels were not checked (--api-only): {} launches recorded without their accesses",
            n("launches")
        ));
    } else if n("launches_not_instrumented") > 0 {
        lines.push(format!(
            "{} of {} kernel launches could not be instrumented and were recorded without accesses",
            n("launches_not_instrumented"),
            n("launches")
        ));
    }
    if n("log_entries_dropped") > 0 {
        lines.push(format!(
            "{} launches logged more accesses than their log holds: {} entries went unchecked (raise --log-entries)",
            n("launches_with_dropped_entries"),
            n("log_entries_dropped")
        ));
    }
    if n("unattributed_bytes") > 0 || n("copies_unattributed") > 0 {
        lines.push(format!(
            "{} bytes that kernels accessed, and {} copies or sets, were in memory the API never reported as allocated: not checked",
            n("unattributed_bytes"),
            n("copies_unattributed")
        ));
    }
    if n("rows_unchecked") > 0 {
        lines.push(format!(
            "{} rows of 2D/3D copies past the first 4096 were not checked",
            n("rows_unchecked")
        ));
    }
    if n("graph_launches") > 0 {
        lines.push(format!(
            "{} graph launches: their nodes were taken one after another, so races between nodes of one graph are not reported",
            n("graph_launches")
        ));
    }
    if summary.is_null() {
        lines.push(
            "the process left no summary (it did not exit normally): the counts above are unknown"
                .into(),
        );
    }
    for e in summary
        .get("errors")
        .and_then(|e| e.as_array())
        .into_iter()
        .flatten()
    {
        lines.push(format!("tool error: {}", e.as_str().unwrap_or_default()));
    }
    lines
}
