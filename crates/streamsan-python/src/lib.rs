//! `streamsan._native`: the engine as a Python extension for the PyTorch front end
//! (`python/streamsan/torch`). One [`Session`] wraps one [`streamsan::live::Live`]: each method
//! makes one record of trace format v1 (minor 1) from plain integers and strings, and the
//! session numbers, checks, writes and reports it. The Python side decides what a PyTorch call
//! means; nothing here knows PyTorch. The interface is `python/streamsan/_native.pyi`.

use std::fs::File;
use std::io::BufWriter;

use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PySystemExit, PyValueError};
use pyo3::prelude::*;
use serde_json::{Map, Value};

use streamsan::engine::InputErrorKind;
use streamsan::live::{Live, LiveError, LiveFormat, Sink};
use streamsan::report::{Api, render_json, render_text};
use streamsan::suppress::Filters;
use streamsan::trace::record::{
    Access, ByteRange, MemSpace, Op, Pool, Record, StreamFlags, StreamKind,
};

create_exception!(
    _native,
    LiveBlockOverlap,
    PyValueError,
    "A caching block was declared over a block that is still live; `args[1]` is that block's buffer id."
);

create_exception!(
    _native,
    Halt,
    PySystemExit,
    "A race was found with halt_on_error set: the report was printed and the trace closed."
);

mod c_entry;
mod checker;
mod fork;
mod parts;

use checker::{Checker, Refused, refusal_text};

/// The `streamsan` command line (src/bin/streamsan), compiled into the extension so that a
/// pip install has the `streamsan` command (`python/streamsan/__main__.py`): one CLI, the same
/// source as the binary's.
#[path = "../../../src/bin/streamsan/main.rs"]
#[allow(dead_code)]
mod cli;

/// Runs the `streamsan` command line with `argv` (the program name first) and returns its
/// exit status. The GIL is released while it runs.
#[pyfunction(name = "cli")]
fn run_cli(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| cli::run(argv))
}

/// An access as Python passes it: `(buf, off, len, arg)`; `len < 0` is the whole buffer.
type PyAccess = (u64, u64, i64, Option<String>);

fn access((buf, off, len, arg): PyAccess) -> Access {
    Access {
        buf,
        range: u64::try_from(len).ok().map(|len| ByteRange { off, len }),
        arg,
    }
}

fn accesses(list: Vec<PyAccess>) -> Vec<Access> {
    list.into_iter().map(access).collect()
}

fn bad(what: &str, value: &str, expected: &str) -> PyErr {
    PyValueError::new_err(format!("{what}: expected {expected}, found {value:?}"))
}

fn stream_kind(s: &str) -> PyResult<StreamKind> {
    match s {
        "legacy_default" => Ok(StreamKind::LegacyDefault),
        "per_thread_default" => Ok(StreamKind::PerThreadDefault),
        "created" => Ok(StreamKind::Created),
        _ => Err(bad(
            "kind",
            s,
            "\"legacy_default\", \"per_thread_default\" or \"created\"",
        )),
    }
}

fn stream_flags(s: &str) -> PyResult<StreamFlags> {
    match s {
        "blocking" => Ok(StreamFlags::Blocking),
        "non_blocking" => Ok(StreamFlags::NonBlocking),
        _ => Err(bad("flags", s, "\"blocking\" or \"non_blocking\"")),
    }
}

fn mem_space(s: &str) -> PyResult<MemSpace> {
    match s {
        "device" => Ok(MemSpace::Device),
        "pinned" => Ok(MemSpace::Pinned),
        "managed" => Ok(MemSpace::Managed),
        "host" => Ok(MemSpace::Host),
        _ => Err(bad(
            "space",
            s,
            "\"device\", \"pinned\", \"managed\" or \"host\"",
        )),
    }
}

fn pool(s: &str) -> PyResult<Pool> {
    match s {
        "driver" => Ok(Pool::Driver),
        "caching" => Ok(Pool::Caching),
        _ => Err(bad("pool", s, "\"driver\" or \"caching\"")),
    }
}

/// A checking session. See `_native.pyi`.
#[pyclass(module = "streamsan._native")]
struct Session {
    /// The engine, behind locks (pyo3 needs the class `Sync`; Python calls hold the GIL), and
    /// its checker thread when it has one.
    checker: std::sync::Arc<Checker>,
    halt_on_error: bool,
    exitcode: i32,
}

impl Session {
    /// The parts of checked records, for the C entry's new records.
    fn parts(&self) -> std::sync::MutexGuard<'_, parts::Parts> {
        self.checker.core.parts()
    }

    /// The session's engine with every queued record applied.
    fn checked(&self) -> std::sync::MutexGuard<'_, checker::Checked> {
        self.checker.core.checked()
    }

    /// Makes the record and hands it to the session; raises `ValueError` for a record the
    /// engine rejects and [`Halt`] after a race with `halt_on_error`.
    fn take(&self, op: Op, name: Option<String>, thread: u64, at: Option<String>) -> PyResult<()> {
        let rec = Record {
            line: 0,
            thread,
            at,
            name,
            op,
        };
        match self.checker.take(rec) {
            Ok(applied) => {
                if applied.raced && self.halt_on_error {
                    let live = &mut self.checked().live;
                    live.finish();
                    let code = self.exitcode;
                    live.say(&format!(
                        "streamsan: halt_on_error: exiting with status {code}\n"
                    ));
                    return Err(Halt::new_err(code));
                }
                Ok(())
            }
            Err(refused) => {
                let Refused { error, op } = *refused;
                let message = refusal_text(&error, &op);
                Err(match error {
                    LiveError::Input(e) => match e.kind {
                        InputErrorKind::CachingOverlap { other, .. } => {
                            LiveBlockOverlap::new_err((message, other))
                        }
                        _ => PyValueError::new_err(message),
                    },
                    LiveError::Finished => PyValueError::new_err(message),
                })
            }
        }
    }
}

#[pymethods]
impl Session {
    #[new]
    #[pyo3(signature = (trace=None, report=None, format="text", halt_on_error=false, exitcode=66,
                        suppressions=Vec::new(), baseline=None, api="torch",
                        producer="streamsan.torch", checker_thread=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        trace: Option<String>,
        report: Option<String>,
        format: &str,
        halt_on_error: bool,
        exitcode: i32,
        suppressions: Vec<String>,
        baseline: Option<String>,
        api: &str,
        producer: &str,
        checker_thread: bool,
    ) -> PyResult<Session> {
        let format = match format {
            "text" => LiveFormat::Text,
            "json" => LiveFormat::Json,
            _ => return Err(bad("format", format, "\"text\" or \"json\"")),
        };
        let api = match api {
            "torch" => Api::Torch,
            "cuda" => Api::Cuda,
            _ => return Err(bad("api", api, "\"torch\" or \"cuda\"")),
        };
        let suppressions: Vec<std::path::PathBuf> =
            suppressions.into_iter().map(Into::into).collect();
        let filters = Filters::load(&suppressions, baseline.as_deref().map(std::path::Path::new))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        let open = |path: &str, what: &str| {
            File::create(path).map_err(|e| {
                PyOSError::new_err(format!("streamsan: cannot create the {what} {path}: {e}"))
            })
        };
        let trace = match trace {
            Some(path) => {
                // Flushed after every record: a crash loses nothing already checked.
                let out: Sink = Box::new(BufWriter::new(open(&path, "trace file")?));
                Some((out, path))
            }
            None => None,
        };
        let report: Sink = match report {
            Some(path) => Box::new(open(&path, "report file")?),
            None => Box::new(std::io::stderr()),
        };
        let mut header = Map::new();
        header.insert("producer".into(), Value::from(producer));
        // A trace is written as records are checked, and must hold every one up to a crash;
        // a race must stop the very call that made it.
        let threaded = checker_thread && trace.is_none() && !halt_on_error;
        let live = Live::new(trace, header, report, format, api, filters)
            .map_err(|e| PyOSError::new_err(format!("streamsan: writing the trace: {e}")))?;
        let checker = Checker::new(live, threaded);
        Ok(Session {
            checker,
            halt_on_error,
            exitcode,
        })
    }

    #[pyo3(signature = (id, device=0, kind="created", flags="non_blocking", name=None, thread=0, at=None))]
    #[allow(clippy::too_many_arguments)]
    fn stream(
        &self,
        id: u64,
        device: u32,
        kind: &str,
        flags: &str,
        name: Option<String>,
        thread: u64,
        at: Option<String>,
    ) -> PyResult<()> {
        let op = Op::Stream {
            id,
            device,
            kind: stream_kind(kind)?,
            flags: stream_flags(flags)?,
        };
        self.take(op, name, thread, at)
    }

    #[pyo3(signature = (id, thread=0, at=None))]
    fn event(&self, id: u64, thread: u64, at: Option<String>) -> PyResult<()> {
        self.take(Op::Event { id }, None, thread, at)
    }

    #[pyo3(signature = (id, thread=0, at=None))]
    fn event_destroy(&self, id: u64, thread: u64, at: Option<String>) -> PyResult<()> {
        self.take(Op::EventDestroy { id }, None, thread, at)
    }

    #[pyo3(signature = (buf, bytes, device=0, space="device", stream=None, addr=None, pool="driver", name=None, thread=0, at=None))]
    #[allow(clippy::too_many_arguments)]
    fn alloc(
        &self,
        buf: u64,
        bytes: u64,
        device: u32,
        space: &str,
        stream: Option<u64>,
        addr: Option<u64>,
        pool: &str,
        name: Option<String>,
        thread: u64,
        at: Option<String>,
    ) -> PyResult<()> {
        let op = Op::Alloc {
            buf,
            bytes,
            device,
            space: mem_space(space)?,
            stream,
            addr,
            pool: self::pool(pool)?,
        };
        self.take(op, name, thread, at)
    }

    #[pyo3(signature = (buf, stream=None, thread=0, at=None))]
    fn free(&self, buf: u64, stream: Option<u64>, thread: u64, at: Option<String>) -> PyResult<()> {
        self.take(Op::Free { buf, stream }, None, thread, at)
    }

    #[pyo3(signature = (buf, stream, thread=0, at=None))]
    fn record_stream(
        &self,
        buf: u64,
        stream: u64,
        thread: u64,
        at: Option<String>,
    ) -> PyResult<()> {
        self.take(Op::RecordStream { buf, stream }, None, thread, at)
    }

    #[pyo3(signature = (stream, name, reads, writes, thread=0, at=None))]
    fn launch(
        &self,
        stream: u64,
        name: String,
        reads: Vec<PyAccess>,
        writes: Vec<PyAccess>,
        thread: u64,
        at: Option<String>,
    ) -> PyResult<()> {
        let op = Op::Launch {
            stream,
            reads: accesses(reads),
            writes: accesses(writes),
            atomics: Vec::new(),
        };
        self.take(op, Some(name), thread, at)
    }

    #[pyo3(signature = (stream, src, dst, blocking=false, name=None, thread=0, at=None))]
    #[allow(clippy::too_many_arguments)]
    fn memcpy(
        &self,
        stream: u64,
        src: PyAccess,
        dst: PyAccess,
        blocking: bool,
        name: Option<String>,
        thread: u64,
        at: Option<String>,
    ) -> PyResult<()> {
        let op = Op::Memcpy {
            stream,
            src: access(src),
            dst: access(dst),
            blocking,
        };
        self.take(op, name, thread, at)
    }

    #[pyo3(signature = (stream, dst, blocking=false, name=None, thread=0, at=None))]
    fn memset(
        &self,
        stream: u64,
        dst: PyAccess,
        blocking: bool,
        name: Option<String>,
        thread: u64,
        at: Option<String>,
    ) -> PyResult<()> {
        let op = Op::Memset {
            stream,
            dst: access(dst),
            blocking,
        };
        self.take(op, name, thread, at)
    }

    #[pyo3(signature = (reads, writes, name=None, thread=0, at=None))]
    fn host_access(
        &self,
        reads: Vec<PyAccess>,
        writes: Vec<PyAccess>,
        name: Option<String>,
        thread: u64,
        at: Option<String>,
    ) -> PyResult<()> {
        let op = Op::HostAccess {
            reads: accesses(reads),
            writes: accesses(writes),
        };
        self.take(op, name, thread, at)
    }

    #[pyo3(signature = (event, stream, thread=0, at=None))]
    fn record(&self, event: u64, stream: u64, thread: u64, at: Option<String>) -> PyResult<()> {
        self.take(Op::Record { event, stream }, None, thread, at)
    }

    #[pyo3(signature = (stream, event, thread=0, at=None))]
    fn wait(&self, stream: u64, event: u64, thread: u64, at: Option<String>) -> PyResult<()> {
        self.take(Op::Wait { stream, event }, None, thread, at)
    }

    #[pyo3(signature = (event, thread=0, at=None))]
    fn event_sync(&self, event: u64, thread: u64, at: Option<String>) -> PyResult<()> {
        self.take(Op::EventSync { event }, None, thread, at)
    }

    #[pyo3(signature = (event, done, thread=0, at=None))]
    fn event_query(&self, event: u64, done: bool, thread: u64, at: Option<String>) -> PyResult<()> {
        self.take(Op::EventQuery { event, done }, None, thread, at)
    }

    #[pyo3(signature = (stream, thread=0, at=None))]
    fn stream_sync(&self, stream: u64, thread: u64, at: Option<String>) -> PyResult<()> {
        self.take(Op::StreamSync { stream }, None, thread, at)
    }

    #[pyo3(signature = (stream, done, thread=0, at=None))]
    fn stream_query(
        &self,
        stream: u64,
        done: bool,
        thread: u64,
        at: Option<String>,
    ) -> PyResult<()> {
        self.take(Op::StreamQuery { stream, done }, None, thread, at)
    }

    #[pyo3(signature = (device=0, thread=0, at=None))]
    fn device_sync(&self, device: u32, thread: u64, at: Option<String>) -> PyResult<()> {
        self.take(Op::DeviceSync { device }, None, thread, at)
    }

    #[pyo3(signature = (graph, stream, thread=0, at=None))]
    fn graph_begin(
        &self,
        graph: u64,
        stream: u64,
        thread: u64,
        at: Option<String>,
    ) -> PyResult<()> {
        self.take(Op::GraphBegin { graph, stream }, None, thread, at)
    }

    #[pyo3(signature = (graph, stream, thread=0, at=None))]
    fn graph_end(&self, graph: u64, stream: u64, thread: u64, at: Option<String>) -> PyResult<()> {
        self.take(Op::GraphEnd { graph, stream }, None, thread, at)
    }

    #[pyo3(signature = (graph, stream, thread=0, at=None))]
    fn graph_launch(
        &self,
        graph: u64,
        stream: u64,
        thread: u64,
        at: Option<String>,
    ) -> PyResult<()> {
        self.take(Op::GraphLaunch { graph, stream }, None, thread, at)
    }

    #[pyo3(signature = (graph, thread=0, at=None))]
    fn graph_destroy(&self, graph: u64, thread: u64, at: Option<String>) -> PyResult<()> {
        self.take(Op::GraphDestroy { graph }, None, thread, at)
    }

    /// Folded races so far, after suppressions and baseline.
    fn races(&self) -> u64 {
        self.checked().live.report().summary.races
    }

    /// Race occurrences so far (repeats counted), after suppressions and baseline.
    fn occurrences(&self) -> u64 {
        self.checked()
            .live
            .report()
            .races
            .iter()
            .map(|r| r.occurrences)
            .sum()
    }

    fn warnings(&self) -> u64 {
        self.checked().live.report().summary.warnings
    }

    fn records(&self) -> u64 {
        self.checked().live.records()
    }

    /// The whole report so far as `streamsan check` prints it.
    fn report_text(&self) -> String {
        let live = &self.checked().live;
        render_text(&live.report(), &live.render_options())
    }

    /// The report so far as JSON (docs/report-format.md).
    fn report_json(&self) -> String {
        let live = &self.checked().live;
        render_json(&live.report(), &live.render_options())
    }

    /// Ends the session (see `_native.pyi`); returns the number of folded races.
    fn finish(&self) -> u64 {
        self.checker.finish()
    }

    /// Records refused on the checker thread since the last call: `(count, messages)`, the
    /// first messages only (see `_native.pyi`).
    fn late_errors(&self) -> (u64, Vec<String>) {
        self.checker.core.late_errors()
    }

    /// Whether records are checked on a thread of the session's own now.
    #[getter]
    fn checker_thread(&self) -> bool {
        self.checker.threaded()
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Session>()?;
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    m.add("Halt", m.py().get_type::<Halt>())?;
    m.add("LiveBlockOverlap", m.py().get_type::<LiveBlockOverlap>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("_c_api", c_entry::capsule(m.py())?)?;
    Ok(())
}
