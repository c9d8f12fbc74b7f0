//! Where the records go: `trace-<pid>.jsonl` in the run's directory, one unbuffered write per
//! record (a crash loses nothing written), and `trace-<pid>.summary.json` at exit with what the
//! run could and could not check. With [`LiveOptions`], each record is also checked by the
//! engine as it is written (`streamsan::live`), so races print while the program runs and
//! `--halt-on-error` can stop it at the first one; the verdict stays the trace's, which
//! `streamsan run` checks again at the end.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

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
        match live.apply(&mut record) {
            Ok(applied) => {
                if applied.raced
                    && let Some(halt) = self.halt
                {
                    live.say(
                        "streamsan: halting the program at its first race (--halt-on-error)\n",
                    );
                    halt();
                }
                Ok(applied.raced)
            }
            Err(LiveError::Input(e)) => {
                // The trace has the record; `streamsan run` reports the error when it checks
                // the trace. Checking as the program runs stops here: later lines would not
                // match the trace's.
                live.say(&format!(
                    "streamsan: checking as the program runs stopped at trace line {line}: {e}\n"
                ));
                self.live = None;
                Ok(false)
            }
            Err(LiveError::Finished) => Ok(false),
        }
    }
}
