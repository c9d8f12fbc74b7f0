//! Where the records go: `trace-<pid>.jsonl` in the run's directory, one unbuffered write per
//! record (a crash loses nothing written), and `trace-<pid>.summary.json` at exit with what the
//! run could and could not check.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};
use streamsan::trace::TraceWriter;
use streamsan::trace::record::{Op, Record};

pub struct Sink {
    writer: TraceWriter<File>,
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
        })
    }

    pub fn write(
        &mut self,
        thread: u64,
        at: Option<String>,
        name: Option<String>,
        op: Op,
    ) -> io::Result<()> {
        self.writer.write(&Record {
            line: 0,
            thread,
            at,
            name,
            op,
        })
    }
}
