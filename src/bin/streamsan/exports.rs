//! `--perfetto` and `--html`: drawing the checked trace into files beside the report. Both
//! files are opened before the trace is read (an unwritable path checks nothing) and written
//! whole or not at all (`output_file.rs`).

use std::io::BufWriter;
use std::path::Path;

use streamsan::check::{CheckError, Checked};
use streamsan::engine::Resolved;
use streamsan::report::html::HtmlWriter;
use streamsan::report::perfetto::PerfettoWriter;
use streamsan::trace::Record;
use streamsan::trace::error::io_message;

use super::output_file;
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

/// Checks the trace at `path`, streaming it into the Perfetto file and/or the HTML page as it
/// goes (the file is read once). A write error is returned beside the check's result, whose
/// report is still printed.
pub fn run_with_exports(
    path: &str,
    perfetto: Option<&Path>,
    html: Option<&Path>,
) -> Result<(Checked, Option<String>), RunError> {
    const PERFETTO: &str = "Perfetto trace";
    const HTML: &str = "HTML page";
    let open = |out: &Path, what: &str| {
        output_file::create(out).map_err(|e| RunError::Output(output_error(out, what, e)))
    };
    // The Perfetto file streams as the trace is read; the page is written at the end. Both are
    // opened first.
    let mut perfetto_writer = None;
    if let Some(out) = perfetto {
        let (file, pending) = open(out, PERFETTO)?;
        match PerfettoWriter::new(BufWriter::new(file), display_name(path)) {
            Ok(writer) => perfetto_writer = Some((writer, pending)),
            Err(e) => {
                pending.abandon();
                return Err(RunError::Output(output_error(out, PERFETTO, e)));
            }
        }
    }
    let mut html_writer = None;
    if let Some(out) = html {
        match open(out, HTML) {
            Ok((file, pending)) => {
                html_writer = Some((HtmlWriter::new(display_name(path)), file, pending));
            }
            Err(e) => {
                if let Some((_, pending)) = perfetto_writer {
                    pending.abandon();
                }
                return Err(e);
            }
        }
    }
    let mut draw = |record: &Record, resolved: &Resolved| {
        if let Some((w, _)) = &mut perfetto_writer {
            w.record(record, resolved);
        }
        if let Some((w, _, _)) = &mut html_writer {
            w.record(record, resolved);
        }
    };
    let result = run_one(path, Some(&mut draw));
    let checked = match result {
        Ok(checked) => checked,
        Err(e) => {
            if let Some((writer, pending)) = perfetto_writer {
                drop(writer);
                pending.abandon();
            }
            if let Some((_, file, pending)) = html_writer {
                drop(file);
                pending.abandon();
            }
            return Err(RunError::Check(e));
        }
    };
    let mut error = None;
    if let (Some((mut writer, pending)), Some(out)) = (perfetto_writer, perfetto) {
        writer.set_api(checked.api);
        let written = writer.finish(&checked.report).map(drop);
        error = pending
            .finish(written, |e| e)
            .map_err(|e| output_error(out, PERFETTO, e))
            .err();
    }
    if let (Some((mut writer, file, pending)), Some(out)) = (html_writer, html) {
        writer.set_api(checked.api);
        let written = writer
            .finish(BufWriter::new(file), &checked.report)
            .map(drop);
        let written = pending
            .finish(written, |e| e)
            .map_err(|e| output_error(out, HTML, e));
        error = error.or(written.err());
    }
    Ok((checked, error))
}
