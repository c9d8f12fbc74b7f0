//! `--perfetto` and `--html`: drawing the checked trace into files beside the report. Each
//! file is written as `PATH.partial` and renamed over `PATH` once complete, so an invalid trace
//! or a failed write leaves whatever `PATH` held before.

use std::io::BufWriter;
use std::path::{Path, PathBuf};

use streamsan::check::{CheckError, Checked};
use streamsan::engine::Resolved;
use streamsan::report::html::HtmlWriter;
use streamsan::report::perfetto::PerfettoWriter;
use streamsan::trace::Record;
use streamsan::trace::error::io_message;

use super::{display_name, run_one};

/// Why `check` could not go on with a file.
pub enum RunError {
    /// The trace could not be checked (and the exports wrote nothing).
    Check(CheckError),
    /// An export file could not be created.
    Output(String),
}

/// `out.json: cannot write the Perfetto trace: permission denied`.
fn output_error(path: &Path, what: &str, e: std::io::Error) -> String {
    format!(
        "{}: cannot write the {what}: {}",
        path.display(),
        io_message(&e)
    )
}

/// `PATH.partial`.
pub fn partial_path(path: &Path) -> PathBuf {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    PathBuf::from(partial)
}

/// Writes `path` through its `.partial` file, renamed over it once complete.
fn write_atomically(
    path: &Path,
    what: &str,
    write: impl FnOnce(BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<(), String> {
    let partial = partial_path(path);
    let written = std::fs::File::create(&partial)
        .and_then(|file| write(BufWriter::new(file)))
        .and_then(|()| std::fs::rename(&partial, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written.map_err(|e| output_error(path, what, e))
}

/// Checks the trace at `path`, streaming it into the Perfetto file and/or the HTML page as it
/// goes (the file is read once). A write error is returned beside the check's result, whose
/// report is still printed.
pub fn run_with_exports(
    path: &str,
    perfetto: Option<&Path>,
    html: Option<&Path>,
) -> Result<(Checked, Option<String>), RunError> {
    const PERFETTO: &str = "Perfetto trace";
    // The Perfetto file streams as the trace is read, so it is created first.
    let mut perfetto_writer = None;
    if let Some(out) = perfetto {
        let partial = partial_path(out);
        let file = std::fs::File::create(&partial)
            .map_err(|e| RunError::Output(output_error(out, PERFETTO, e)))?;
        match PerfettoWriter::new(BufWriter::new(file), display_name(path)) {
            Ok(writer) => perfetto_writer = Some(writer),
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                return Err(RunError::Output(output_error(out, PERFETTO, e)));
            }
        }
    }
    let mut html_writer = html.map(|_| HtmlWriter::new(display_name(path)));
    let mut draw = |record: &Record, resolved: &Resolved| {
        if let Some(w) = &mut perfetto_writer {
            w.record(record, resolved);
        }
        if let Some(w) = &mut html_writer {
            w.record(record, resolved);
        }
    };
    let result = run_one(path, Some(&mut draw));
    let checked = match result {
        Ok(checked) => checked,
        Err(e) => {
            drop(perfetto_writer);
            if let Some(out) = perfetto {
                let _ = std::fs::remove_file(partial_path(out));
            }
            return Err(RunError::Check(e));
        }
    };
    if let Some(w) = &mut html_writer {
        w.set_api(checked.api);
    }
    if let Some(w) = &mut perfetto_writer {
        w.set_api(checked.api);
    }
    let mut error = None;
    if let (Some(writer), Some(out)) = (perfetto_writer, perfetto) {
        let partial = partial_path(out);
        let written = writer
            .finish(&checked.report)
            .map(drop)
            .and_then(|()| std::fs::rename(&partial, out));
        if written.is_err() {
            let _ = std::fs::remove_file(&partial);
        }
        error = written.map_err(|e| output_error(out, PERFETTO, e)).err();
    }
    if let (Some(writer), Some(out)) = (html_writer, html) {
        let written = write_atomically(out, "HTML page", |file| {
            writer.finish(file, &checked.report).map(drop)
        });
        error = error.or(written.err());
    }
    Ok((checked, error))
}
