//! The offline pipeline shared by the CLI, the tests and the benchmarks: stream a trace through
//! the reader, the engine and the report collector, with memory bounded by live state.

use crate::engine::{Engine, Finding, InputError, Stats, Warning, WarningKind};
use crate::report::{Collector, Report};
use crate::trace::TraceError;
use crate::trace::reader::TraceReader;

/// Why a trace could not be checked. Both kinds name the file and the line.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The trace is not valid trace format v1 (syntax, types, header, I/O).
    #[error("{0}")]
    Trace(#[from] TraceError),
    /// The records parse but cannot describe a program (undeclared id, out of bounds, ...).
    #[error("{file}:{}: {}", .error.line, .error.kind)]
    Input { file: String, error: InputError },
}

/// A checked trace: the folded report and the engine's counts.
#[derive(Debug)]
pub struct Checked {
    pub report: Report,
    pub stats: Stats,
}

/// Checks the trace at `path` (`-` for stdin).
pub fn check_path(path: &str) -> Result<Checked, CheckError> {
    check_reader(TraceReader::open(path)?, |_| {})
}

/// Checks every record of `reader`; `progress` is called with the number of records read so
/// far, every 65,536 records.
pub fn check_reader<R: std::io::BufRead>(
    reader: TraceReader<R>,
    progress: impl FnMut(u64),
) -> Result<Checked, CheckError> {
    check_reader_with(reader, progress, |_| {})
}

/// [`check_reader`], also showing every record to `tap` after the engine applied it (exporters
/// that draw the trace use this, so the file is read once).
pub fn check_reader_with<R: std::io::BufRead>(
    mut reader: TraceReader<R>,
    mut progress: impl FnMut(u64),
    mut tap: impl FnMut(&crate::trace::Record),
) -> Result<Checked, CheckError> {
    let mut engine = Engine::new();
    let mut collector = Collector::new();
    let file = reader.file().to_string();
    let mut n = 0u64;
    for record in &mut reader {
        let record = record?;
        engine
            .apply(&record, &mut |f| collector.add(f))
            .map_err(|error| CheckError::Input {
                file: file.clone(),
                error,
            })?;
        tap(&record);
        n += 1;
        if n.is_multiple_of(65_536) {
            progress(n);
        }
    }
    for (line, op) in reader.skipped() {
        collector.add(Finding::Warning(Warning {
            kind: WarningKind::Skipped,
            line: *line,
            message: format!(
                "unknown op \"{op}\" skipped: the header declares a newer minor version of the format"
            ),
        }));
    }
    engine.finish(&mut |f| collector.add(f));
    let stats = engine.stats().clone();
    Ok(Checked {
        report: collector.finish(&stats),
        stats,
    })
}
