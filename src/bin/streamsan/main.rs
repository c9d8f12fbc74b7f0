//! The `streamsan` command: a thin shell over the library's offline pipeline
//! ([`streamsan::check`]), its report pieces ([`streamsan::report`]) and its filters
//! ([`streamsan::suppress::Filters`]).
//!
//! What the shell adds, all specified in `docs/cli.md`: argument parsing (`args.rs`), the exit
//! codes, the progress line (`progress.rs`: stderr, terminals only), logging (`-v`,
//! `RUST_LOG`), the naming of standard input, how the reports of several files are put together
//! on stdout (text blocks under a `== FILE` line; JSON Lines; one SARIF log), the export files
//! (`exports.rs`), and `convert` between the trace encodings (`convert.rs`).

// Paths spelled out: the Python extension (crates/streamsan-python) compiles this file as a
// module of its own, for the `streamsan` command a pip install gives.
#[path = "args.rs"]
mod args;
#[path = "convert.rs"]
mod convert;
#[path = "exports.rs"]
mod exports;
#[path = "output_file.rs"]
mod output_file;
#[path = "progress.rs"]
mod progress;
#[path = "run.rs"]
mod run;

use std::io::Write;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use serde::Serialize;
use streamsan::check::{CheckError, Checked, Tap, check_reader, check_reader_with};
use streamsan::engine::{Warning, WarningFact, WarningKind};
use streamsan::report::{
    RenderOptions, Report, closing, render_json, render_json_line, render_sarif_log, render_text,
    sarif_results, warning_line,
};
use streamsan::suppress::{Filters, Tally};
use streamsan::trace::error::io_message;
use streamsan::trace::reader::{STDIN_NAME, TraceReader};

use args::{Cli, Command, ReportFormat, StatsFormat};
use exports::{RunError, run_with_exports};

fn main() -> ExitCode {
    ExitCode::from(run(std::env::args_os()))
}

/// The whole command line: `args` as `std::env::args_os` gives them (the program name
/// first); returns the exit status.
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap's codes: 0 for --help / --version, 2 for usage errors.
            return if e.exit_code() == 0 { 0 } else { 2 };
        }
    };
    init_logging(cli.verbose);
    if let Err(message) = check_combinations(&cli.command) {
        let _ = Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, message)
            .print();
        return 2;
    }
    match cli.command {
        Command::Check { files, opts } => match CheckRun::new(&opts) {
            Ok(run) => run.check(&files),
            Err(code) => code,
        },
        Command::Run {
            opts,
            api_only,
            no_call_sites,
            report,
            keep_traces,
            error_exitcode,
            halt_on_error,
            log_entries,
            program,
        } => {
            let Ok(mut check) = CheckRun::new(&opts) else {
                return 2;
            };
            // Races print on stderr as each process finds them when the text report goes
            // there; the report at the end then only sums up.
            // (Not with --max-reports: the cap applies to the report at the end.)
            let live =
                opts.format == ReportFormat::Text && report.is_none() && opts.max_reports.is_none();
            check.summary_only = live;
            // A temporary directory is gone after the run: no replay line naming it.
            check.replayable = keep_traces.is_some();
            // The program owns standard output: the report goes to stderr, or to --report.
            check.out = report.map_or(ReportOut::Stderr, ReportOut::File);
            let options = run::RunOptions {
                api_only,
                no_call_sites,
                keep_traces,
                error_exitcode,
                halt_on_error,
                live,
                suppressions: opts.suppressions.clone(),
                baseline: opts.baseline.clone(),
                log_entries,
            };
            run::run(&program, &options, &check)
        }
        Command::Stats { files, format } => stats(&files, format),
        Command::Convert { input, output, to } => convert::run(&input, &output, to),
    }
}

fn as_path(s: &str) -> &std::path::Path {
    std::path::Path::new(s)
}

/// What clap cannot say: standard input given twice, an export with several files.
fn check_combinations(command: &Command) -> Result<(), String> {
    let files = match command {
        Command::Check { files, .. } | Command::Stats { files, .. } => files,
        Command::Convert { .. } | Command::Run { .. } => return Ok(()),
    };
    if files.iter().filter(|f| f.as_str() == "-").count() > 1 {
        return Err("standard input (`-`) can be given only once".into());
    }
    if let Command::Check { opts, .. } = command
        && files.len() > 1
        && let Some(flag) = [(&opts.perfetto, "--perfetto"), (&opts.html, "--html")]
            .into_iter()
            .find_map(|(path, flag)| path.as_ref().map(|_| flag))
    {
        return Err(format!("{flag} draws one trace: give exactly one FILE"));
    }
    if let Command::Check { opts, .. } = command
        && let (Some(perfetto), Some(html)) = (&opts.perfetto, &opts.html)
        && output_file::same_destination(perfetto, html)
    {
        return Err("--perfetto and --html name the same file: give each its own".into());
    }
    Ok(())
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "streamsan=debug",
        _ => "streamsan=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    // Colours only for a terminal that wants them (https://no-color.org): a log kept in a
    // file stays plain text.
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        // A second run in one process (the Python extension's `cli`) keeps the first's.
        .try_init()
        .ok();
}

/// How a file argument is named in output: the path as given, or `<stdin>` for `-` (as the
/// reader names it in errors).
fn display_name(path: &str) -> &str {
    if path == "-" { STDIN_NAME } else { path }
}

/// Runs the pipeline on one file, with a progress line when stderr is a terminal; `tap`, when
/// given, sees every record with what the engine resolved about it. Without one the engine
/// resolves nothing: working out each record's streams, buffers and edges for nobody cost
/// `check` about a sixth of its time.
fn run_one(path: &str, tap: Option<&mut Tap<'_>>) -> Result<Checked, CheckError> {
    tracing::debug!(file = display_name(path), "checking");
    let mut reader = TraceReader::open(path)?;
    tracing::debug!(file = display_name(path), encoding = %reader.encoding(), "reading");
    let progress = progress::Progress::start("checking", &mut reader);
    let result = match tap {
        Some(tap) => check_reader_with(reader, tap),
        None => check_reader(reader),
    };
    progress.finish();
    match &result {
        Ok(c) => tracing::debug!(
            file = display_name(path),
            records = c.stats.records,
            races = c.report.summary.races,
            warnings = c.report.summary.warnings,
            "checked"
        ),
        Err(e) => tracing::debug!(file = display_name(path), error = %e, "not checked"),
    }
    result
}

/// Where a [`CheckRun`] writes its reports.
pub(crate) enum ReportOut {
    Stdout,
    Stderr,
    File(std::path::PathBuf),
}

impl ReportOut {
    /// How an error message names it.
    fn name(&self) -> String {
        match self {
            ReportOut::Stdout => "<stdout>".into(),
            ReportOut::Stderr => "<stderr>".into(),
            ReportOut::File(path) => path.display().to_string(),
        }
    }
}

/// Keeps the first error of writing reports that is not a closed pipe: a reader that stopped
/// reading (`| head`) is no failure, but a report lost (a full disk) is, and ends the run with
/// exit code 2 after the verdict is known.
fn keep_write_error(first: &mut Option<std::io::Error>, result: std::io::Result<()>) {
    if let Err(e) = result
        && e.kind() != std::io::ErrorKind::BrokenPipe
        && first.is_none()
    {
        *first = Some(e);
    }
}

/// `streamsan check` with its options.
/// What `run` knows of one trace beyond its records.
#[derive(Debug, Default)]
pub(crate) struct FileNotes {
    /// What the recording could not see: one sentence each.
    pub(crate) not_checked: Vec<String>,
    /// What the process printed as found on this command's own stderr: (records that raced,
    /// records checked); `None`: not printed there, or checking stopped early.
    pub(crate) shown_live: Option<(u64, u64)>,
}

pub(crate) struct CheckRun<'a> {
    /// Where reports go: standard output (`check`), or for `run` standard error or a file.
    pub(crate) out: ReportOut,
    format: ReportFormat,
    max_reports: Option<usize>,
    filters: Option<Filters>,
    write_baseline: Option<String>,
    perfetto: Option<&'a std::path::Path>,
    html: Option<&'a std::path::Path>,
    /// Text reports show only their closing lines where the races printed as found
    /// ([`FileNotes::shown_live`]): `run` with the report on stderr.
    pub(crate) summary_only: bool,
    /// The traces stay after the run: reports may name them in a `reproduce:` line.
    pub(crate) replayable: bool,
}

impl CheckRun<'_> {
    /// The run `opts` ask for; Err(2) when a suppressions or baseline file cannot be read
    /// (said on stderr).
    fn new(opts: &args::CheckOptions) -> Result<CheckRun<'_>, u8> {
        let filters = Filters::load(&opts.suppressions, opts.baseline.as_deref().map(as_path))
            .map_err(|e| {
                eprintln!("error: {e}");
                2
            })?;
        Ok(CheckRun {
            out: ReportOut::Stdout,
            format: opts.format,
            max_reports: opts.max_reports,
            filters,
            write_baseline: opts.write_baseline.clone(),
            perfetto: opts.perfetto.as_deref(),
            html: opts.html.as_deref(),
            summary_only: false,
            replayable: true,
        })
    }

    pub(crate) fn check(&self, files: &[String]) -> u8 {
        self.check_noting(files, &[])
    }

    /// Checks `files`; `notes[i]` (where given) says what the recording of `files[i]` could
    /// not see, as `not-checked` warnings of its report (`run`'s limitations), and whether its
    /// races were printed as found.
    pub(crate) fn check_noting(&self, files: &[String], notes: &[FileNotes]) -> u8 {
        let several = files.len() > 1;
        let mut stdout: Box<dyn Write> = match &self.out {
            ReportOut::Stdout => Box::new(std::io::stdout().lock()),
            ReportOut::Stderr => Box::new(std::io::stderr().lock()),
            ReportOut::File(path) => match std::fs::File::create(path) {
                Ok(f) => Box::new(std::io::BufWriter::new(f)),
                Err(e) => {
                    eprintln!(
                        "error: {}: cannot write the report: {}",
                        path.display(),
                        io_message(&e)
                    );
                    return 2;
                }
            },
        };
        let (mut invalid, mut racy, mut checked_any) = (false, false, false);
        let mut write_error = None;
        let mut sarif = Vec::new();
        let mut export_error = None;
        let mut tally = Tally::default();
        // For --write-baseline: each trace's name and report after suppressions.
        let mut to_baseline = Vec::new();
        for (i, path) in files.iter().enumerate() {
            let result = if self.perfetto.is_none() && self.html.is_none() {
                run_one(path, None).map_err(RunError::Check)
            } else {
                run_with_exports(path, self.perfetto, self.html).map(|(checked, error)| {
                    export_error = error;
                    checked
                })
            };
            let checked = match result {
                Ok(checked) => checked,
                Err(RunError::Check(e)) => {
                    invalid = true;
                    eprintln!("error: {e}");
                    continue;
                }
                Err(RunError::Output(message)) => {
                    eprintln!("error: {message}");
                    return 2;
                }
            };
            checked_any = true;
            let name = display_name(path);
            let mut report = checked.report;
            let note = notes.get(i);
            for what in note.into_iter().flat_map(|n| &n.not_checked) {
                // About the whole run: at the header's line.
                report.warnings.push(Warning {
                    line: 1,
                    fact: WarningFact::NotChecked { what: what.clone() },
                });
                report.summary.warnings += 1;
            }
            let report = self.filter(report, name, &mut tally, &mut to_baseline);
            racy |= report.has_races();
            let opts = RenderOptions {
                // Standard input cannot be replayed from a command line: no `reproduce:` line,
                // and SARIF locates findings without source locations by their message alone.
                source: (path != "-" && self.replayable).then(|| path.clone()),
                max_reports: self.max_reports,
                api: checked.api,
            };
            // Only a summary where every race already printed where this report goes.
            // ... and every record of the trace was checked as it ran (none came after the
            // process's summary), with the same verdict.
            let shown = note
                .and_then(|n| n.shown_live)
                .is_some_and(|(races, records)| {
                    records == report.summary.records && (races > 0) == report.has_races()
                });
            let text = |report: &Report| {
                if !(self.summary_only && shown) {
                    return render_text(report, &opts);
                }
                // The races and warnings printed as found; leaks and what went unchecked are
                // known only at the end.
                let mut out = String::new();
                for w in &report.warnings {
                    if matches!(w.kind(), WarningKind::Leak | WarningKind::NotChecked) {
                        out.push_str(&warning_line(w));
                    }
                }
                if !out.is_empty() {
                    out.push('\n');
                }
                out + &closing(report, opts.source.as_deref())
            };
            let written = match (self.format, several) {
                (ReportFormat::Text, false) => write!(stdout, "{}", text(&report)),
                (ReportFormat::Text, true) => {
                    let sep = if i > 0 { "\n" } else { "" };
                    write!(stdout, "{sep}== {name}\n{}", text(&report))
                }
                (ReportFormat::Json, false) => write!(stdout, "{}", render_json(&report, &opts)),
                (ReportFormat::Json, true) => {
                    writeln!(stdout, "{}", render_json_line(&report, &opts, name))
                }
                (ReportFormat::Sarif, _) => {
                    let trace = several.then_some(name);
                    sarif.extend(sarif_results(&report, &opts, trace));
                    Ok(())
                }
            };
            keep_write_error(&mut write_error, written.and_then(|()| stdout.flush()));
        }
        if self.format == ReportFormat::Sarif && checked_any {
            keep_write_error(
                &mut write_error,
                write!(stdout, "{}", render_sarif_log(sarif)),
            );
        }
        keep_write_error(&mut write_error, stdout.flush());
        if let Some(e) = write_error {
            eprintln!(
                "error: {}: cannot write the report: {}",
                self.out.name(),
                io_message(&e)
            );
            invalid = true;
        }
        if let Some(message) = export_error {
            eprintln!("error: {message}");
            invalid = true;
        }
        if !self.finish(!invalid, &tally, &to_baseline) {
            invalid = true;
        }
        exit_code(invalid, racy)
    }

    /// The report of trace `name` with suppressions, then the baseline, applied; keeps the
    /// report between the two for `--write-baseline`.
    fn filter(
        &self,
        report: Report,
        name: &str,
        tally: &mut Tally,
        to_baseline: &mut Vec<(String, Report)>,
    ) -> Report {
        let Some(filters) = &self.filters else {
            if self.write_baseline.is_some() {
                to_baseline.push((name.to_string(), report.clone()));
            }
            return report;
        };
        let suppressed = filters.suppress(report);
        tally.add(&suppressed);
        if self.write_baseline.is_some() {
            to_baseline.push((name.to_string(), suppressed.report.clone()));
        }
        let baselined = filters.drop_baselined(suppressed.report);
        tally.add(&baselined);
        baselined.report
    }

    /// After every trace was checked: the filters' closing notes on stderr, and the
    /// `--write-baseline` file. False when that file could not be written.
    fn finish(&self, all_checked: bool, tally: &Tally, to_baseline: &[(String, Report)]) -> bool {
        if !all_checked {
            // What went unused may have matched in the traces that could not be checked, and a
            // baseline of part of the input would be misleading.
            if let Some(path) = &self.write_baseline {
                eprintln!("error: {path}: baseline not written: not every trace could be checked");
            }
            return true;
        }
        if let Some(filters) = &self.filters {
            eprint!("{}", filters.closing(tally));
        }
        let Some(path) = &self.write_baseline else {
            return true;
        };
        let opts = RenderOptions::default();
        let text = match to_baseline {
            [(_, report)] => render_json(report, &opts),
            several => several
                .iter()
                .map(|(name, report)| render_json_line(report, &opts, name) + "\n")
                .collect(),
        };
        match std::fs::write(path, text) {
            Ok(()) => true,
            Err(e) => {
                eprintln!(
                    "error: {path}: cannot write the baseline: {}",
                    io_message(&e)
                );
                false
            }
        }
    }
}

/// The counts `streamsan stats --format json` prints, one object per line, in this key order.
#[derive(Serialize)]
struct StatsLine<'a> {
    file: &'a str,
    records: u64,
    streams: u64,
    events: u64,
    buffers: u64,
    /// Caching allocators' blocks, among `buffers` (trace minor 1).
    caching_blocks: u64,
    /// Graphs captured and graph launches (trace minor 1).
    graphs: u64,
    graph_launches: u64,
    syncs: u64,
    /// Distinct (folded) races, as in the report's summary.
    races: u64,
    /// Races before folding.
    race_occurrences: u64,
    warnings: u64,
}

impl StatsLine<'_> {
    fn text(&self) -> String {
        let occurrences = if self.race_occurrences == 1 {
            "occurrence"
        } else {
            "occurrences"
        };
        format!(
            "{}\n  records   {}\n  streams   {}\n  events    {}\n  buffers   {}{}\n  graphs    {} ({} \
             launch{})\n  syncs     {}\n  races     {} ({} {occurrences})\n  warnings  {}",
            self.file,
            self.records,
            self.streams,
            self.events,
            self.buffers,
            if self.caching_blocks > 0 {
                format!(" ({} from caching pools)", self.caching_blocks)
            } else {
                String::new()
            },
            self.graphs,
            self.graph_launches,
            if self.graph_launches == 1 { "" } else { "es" },
            self.syncs,
            self.races,
            self.race_occurrences,
            self.warnings,
        )
    }
}

fn stats(files: &[String], format: StatsFormat) -> u8 {
    let mut stdout = std::io::stdout().lock();
    let (mut invalid, mut racy) = (false, false);
    let mut write_error = None;
    for path in files {
        let Checked { report, stats, .. } = match run_one(path, None) {
            Ok(checked) => checked,
            Err(e) => {
                invalid = true;
                eprintln!("error: {e}");
                continue;
            }
        };
        racy |= report.has_races();
        let line = StatsLine {
            file: display_name(path),
            records: stats.records,
            streams: stats.streams,
            events: stats.events,
            buffers: stats.buffers,
            caching_blocks: stats.caching_blocks,
            graphs: stats.graphs,
            graph_launches: stats.graph_launches,
            syncs: stats.syncs,
            races: report.summary.races,
            race_occurrences: stats.races,
            warnings: report.summary.warnings,
        };
        let text = match format {
            StatsFormat::Text => line.text(),
            StatsFormat::Json => serde_json::to_string(&line).expect("stats serialize"),
        };
        keep_write_error(
            &mut write_error,
            writeln!(stdout, "{text}").and_then(|()| stdout.flush()),
        );
    }
    if let Some(e) = write_error {
        eprintln!(
            "error: <stdout>: cannot write the counts: {}",
            io_message(&e)
        );
        invalid = true;
    }
    exit_code(invalid, racy)
}

/// DESIGN.md: 0 no race, 1 a race, 2 invalid input. Invalid input wins: a run in which some
/// file could not be checked gives no overall verdict.
fn exit_code(invalid: bool, racy: bool) -> u8 {
    if invalid {
        2
    } else if racy {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
