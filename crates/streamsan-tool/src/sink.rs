//! Where the records go: `trace-<pid>.jsonl` in the run's directory, one unbuffered write per
//! record (a crash loses nothing written), and `trace-<pid>.summary.json` at exit with what the
//! run could and could not check. With [`LiveOptions`], each record is also checked by the
//! engine as it is written (`streamsan::live`), so races print while the program runs and
//! `--halt-on-error` can stop it at the first one; the verdict stays the trace's, which
//! `streamsan run` checks again at the end.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use serde_json::{Map, Value, json};
use streamsan::live::{Live, LiveError, LiveFormat};
use streamsan::report::Api;
use streamsan::suppress::Filters;
use streamsan::trace::TraceWriter;
use streamsan::trace::record::{Op, Record};

pub struct Sink {
    writer: TraceWriter<File>,
    live: Option<Live>,
    /// Called after the first record that races, when the run halts on error.
    halt: Option<fn()>,
    /// What checking as the program runs did, readable without the recorder's lock (the
    /// summary is written at `--halt-on-error`'s halt, inside a write).
    live_counts: Arc<LiveCounts>,
}

/// Counts of checking as the program runs.
#[derive(Debug, Default)]
pub struct LiveCounts {
    /// On since the start.
    pub on: AtomicBool,
    /// Records that raced.
    pub races: AtomicU64,
    /// Records checked.
    pub records: AtomicU64,
    /// Stopped early (an input error or a failure of the engine).
    pub stopped: AtomicBool,
}

impl LiveCounts {
    /// (races, records checked, stopped early) when checking as the program runs was on.
    pub fn get(&self) -> Option<(u64, u64, bool)> {
        self.on.load(Relaxed).then(|| {
            (
                self.races.load(Relaxed),
                self.records.load(Relaxed),
                self.stopped.load(Relaxed),
            )
        })
    }
}

/// How records are checked as they are written.
pub struct LiveOptions {
    /// Where race reports are printed as found (the program's stderr; nowhere when the final
    /// report is the only output).
    pub report: streamsan::live::Sink,
    /// The suppressions and baseline of the run.
    pub filters: Option<Filters>,
    /// Called once a record raced (the run's `--halt-on-error`).
    pub halt: Option<fn()>,
}

/// The trace file of this process in `dir`.
pub fn trace_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("trace-{pid}.jsonl"))
}

/// Where a process whose tool could not start says why.
pub fn failed_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("trace-{pid}.failed"))
}

/// The summary file beside a trace.
pub fn summary_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("trace-{pid}.summary.json"))
}

impl Sink {
    pub fn create(dir: &Path, pid: u32, instrumented: bool) -> io::Result<Sink> {
        let mut header = Map::new();
        header.insert("producer".into(), json!("streamsan run"));
        header.insert("pid".into(), json!(pid));
        header.insert("api".into(), json!("cuda"));
        header.insert(
            "kernels".into(),
            json!(if instrumented {
                "instrumented"
            } else {
                "not checked"
            }),
        );
        if let Ok(exe) = std::env::current_exe() {
            header.insert("program".into(), Value::String(exe.display().to_string()));
        }
        let file = File::create(trace_path(dir, pid))?;
        Ok(Sink {
            writer: TraceWriter::new(file, header)?,
            live: None,
            halt: None,
            live_counts: Arc::default(),
        })
    }

    /// Checks every record from now on as it is written.
    pub fn check_live(&mut self, options: LiveOptions) -> io::Result<()> {
        let live = Live::new(
            None,
            Map::new(),
            options.report,
            LiveFormat::Text,
            Api::Cuda,
            options.filters,
        )?;
        self.live = Some(live);
        self.halt = options.halt;
        self.live_counts.on.store(true, Relaxed);
        Ok(())
    }

    /// Writes the record to the trace, then checks it live. Returns whether it raced (a race
    /// no suppression or baseline entry takes out).
    pub fn write(
        &mut self,
        thread: u64,
        at: Option<String>,
        name: Option<String>,
        op: Op,
    ) -> io::Result<bool> {
        let mut record = Record {
            line: 0,
            thread,
            at,
            name,
            op,
        };
        let line = self.writer.next_line();
        self.writer.write(&record)?;
        let Some(live) = &mut self.live else {
            return Ok(false);
        };
        let applied =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| live.apply(&mut record)));
        let why = match applied {
            Ok(Ok(applied)) => {
                self.live_counts.records.fetch_add(1, Relaxed);
                if applied.raced {
                    self.live_counts.races.fetch_add(1, Relaxed);
                    if let Some(halt) = self.halt {
                        eprintln!(
                            "streamsan: halting the program at its first race (--halt-on-error)"
                        );
                        halt();
                    }
                }
                return Ok(applied.raced);
            }
            Ok(Err(LiveError::Finished)) => return Ok(false),
            Ok(Err(LiveError::Input(e))) => e.to_string(),
            Err(_) => "the engine failed on this record".to_string(),
        };
        // The trace has the record; `streamsan run` reports any error when it checks the
        // trace. Checking as the program runs stops here: later lines would not match the
        // trace's. Said on stderr whatever the report's format.
        eprintln!("streamsan: checking as the program runs stopped at trace line {line}: {why}");
        self.live = None;
        self.live_counts.stopped.store(true, Relaxed);
        Ok(false)
    }

    /// What checking as the program runs did, shared.
    pub fn live_counts(&self) -> Arc<LiveCounts> {
        self.live_counts.clone()
    }
}
