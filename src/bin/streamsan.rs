//! The `streamsan` command: a thin shell over the library's offline pipeline
//! ([`streamsan::check`]) and its renderers ([`streamsan::report`]).
//!
//! What the shell adds, all specified in `docs/cli.md`: argument parsing, the exit codes, the
//! progress bar (stderr, terminals only), logging (`-v`, `RUST_LOG`), the naming of standard
//! input, and how the reports of several files are put together on stdout (text blocks under a
//! `== FILE` line; JSON Lines; one SARIF log).

use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use streamsan::check::{CheckError, Checked, check_reader_with};
use streamsan::report::html::HtmlWriter;
use streamsan::report::perfetto::PerfettoWriter;
use streamsan::report::{RenderOptions, Report, render_json, render_sarif, render_text};
use streamsan::suppress::{self, Baseline, FilterError, Suppressions};
use streamsan::trace::Record;
use streamsan::trace::error::io_message;
use streamsan::trace::reader::{STDIN_NAME, TraceReader};

const MAIN_AFTER_HELP: &str = "\
Examples:
  streamsan check trace.jsonl                      check a trace, text report
  streamsan check --format json trace.jsonl        the stable JSON report
  streamsan check --format sarif t/*.jsonl > out.sarif
  streamsan check --perfetto out.json trace.jsonl  also draw it for ui.perfetto.dev
  streamsan check --html report.html trace.jsonl   also draw it as one HTML page
  my-recorder | streamsan check -                  read the trace from standard input
  streamsan stats trace.jsonl                      count records, streams, buffers, races

Exit codes:
  0  no race found (warnings alone do not fail)
  1  at least one race found
  2  invalid input or command line (the message names the file, the line and what was
     expected)

Set RUST_LOG (e.g. RUST_LOG=streamsan=debug) or pass -v for diagnostics about streamsan
itself; they go to stderr and never change stdout. The reference is docs/cli.md.";

const CHECK_AFTER_HELP: &str = "\
Output:
  text   one block per race (what, the two accesses, why nothing orders them, where the
         buffer was allocated, a fix), warnings, a SUMMARY line and the command that
         reproduces the report. With several files, each report follows a `== FILE` line.
  json   one report, pretty-printed (docs/report-format.md). With several files: JSON Lines,
         one compact report per line for each file that could be checked, with a \"file\" key.
  sarif  one SARIF 2.1.0 log. With several files: one run holding the results of all of
         them, each result naming its trace in properties.trace.

Perfetto:
  --perfetto PATH also writes the trace as a timeline (a track per stream and host thread,
  syncs as arrows, races as markers) in Chrome's trace-event JSON, which ui.perfetto.dev and
  chrome://tracing open (docs/perfetto.md). One FILE only, any --format; the report and the
  exit code are unchanged. PATH is replaced only once the trace is checked and drawn; an
  unwritable PATH is an error (exit 2).

HTML:
  --html PATH also writes the trace as one self-contained HTML page (no network access): a
  lane per stream and host thread, syncs as arrows, races as red links; clicking a race shows
  its report (docs/timeline.md). Same rules as --perfetto; both may be given.

A file that cannot be checked gets its error on stderr and no report; the others are still
checked and reported. A trace read from standard input (`-`) is named <stdin>, and its text
report has no `reproduce:` line (the input cannot be replayed from the command line).

Examples:
  streamsan check trace.jsonl
  streamsan check --max-reports 1 trace.jsonl
  streamsan check --perfetto trace.perfetto.json trace.jsonl
  streamsan check --html trace.html trace.jsonl
  streamsan check --suppressions streamsan.supp trace.jsonl
  streamsan check --write-baseline known.json trace.jsonl
  streamsan check --baseline known.json trace.jsonl
  streamsan check --format json trace.jsonl | jq '.summary.races'
  streamsan check --format json a.jsonl b.jsonl | jq -c '[.file, .summary.races]'
  my-recorder | streamsan check -

Exit codes:
  0  every trace was checked and none has a race (warnings alone do not fail)
  1  at least one race was found (and every trace could be checked)
  2  invalid input or command line: the message on stderr names the file, the line (and
     column) and what was expected; no verdict is given for that file";

/// A CUDA stream sanitizer: finds GPU memory accesses that two streams, or a stream and the
/// host, make without anything ordering them.
#[derive(Parser, Debug)]
#[command(name = "streamsan", version, after_help = MAIN_AFTER_HELP)]
struct Cli {
    /// More diagnostics about streamsan itself on stderr (-v debug, -vv trace); RUST_LOG
    /// overrides it. Never changes stdout.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check traces (trace format v1, JSON Lines) for unsynchronized accesses.
    #[command(after_help = CHECK_AFTER_HELP)]
    Check {
        /// Trace files to check, in order; `-` reads standard input (once).
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
        /// Report format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Show at most N races per trace; all of them still count in the summary and the exit
        /// code.
        #[arg(long, value_name = "N")]
        max_reports: Option<usize>,
        /// Suppressions file (docs/suppressions.md); may be repeated. Races and warnings it
        /// matches are left out of the report, the summary counts and the exit code; unused
        /// suppressions are reported on stderr.
        #[arg(long = "suppressions", value_name = "FILE")]
        suppressions: Vec<String>,
        /// A JSON report of an earlier run (`--format json`): the races it lists are known, are
        /// left out of the report and do not fail; any other race still does.
        #[arg(long, value_name = "FILE")]
        baseline: Option<String>,
        /// Write this run's races (after suppressions, before --baseline) as a JSON report to
        /// FILE, for later runs' --baseline. The exit code is unchanged.
        #[arg(long, value_name = "FILE")]
        write_baseline: Option<String>,
        /// Also write the trace as Chrome trace-event JSON to PATH, for ui.perfetto.dev or
        /// chrome://tracing (one FILE only; docs/perfetto.md). The report and the exit code are
        /// unchanged.
        #[arg(long, value_name = "PATH")]
        perfetto: Option<PathBuf>,
        /// Also write the trace as one self-contained HTML page to PATH: a lane per stream and
        /// host thread, syncs as arrows, races as red links that open their report (one FILE
        /// only; docs/timeline.md). The report and the exit code are unchanged.
        #[arg(long, value_name = "PATH")]
        html: Option<PathBuf>,
    },
    /// Count what a trace holds: records, streams, events, buffers, syncs, races, warnings.
    #[command(after_help = STATS_AFTER_HELP)]
    Stats {
        /// Trace files, in order; `-` reads standard input (once).
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
        /// Output format: an aligned table per file, or one JSON object per file (JSON Lines).
        #[arg(long, value_enum, default_value_t = StatsFormat::Text)]
        format: StatsFormat,
    },
}

const STATS_AFTER_HELP: &str = "\
The trace is checked in full, so the exit code is the same as `streamsan check`'s.

Examples:
  streamsan stats trace.jsonl
  streamsan stats --format json traces/*.jsonl

Exit codes:
  0  no race found
  1  at least one race found
  2  invalid input or command line";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    /// For people.
    Text,
    /// Stable, for tools (docs/report-format.md).
    Json,
    /// SARIF 2.1.0, for code-scanning dashboards.
    Sarif,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum StatsFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap's codes: 0 for --help / --version, 2 for usage errors.
            return ExitCode::from(if e.exit_code() == 0 { 0 } else { 2 });
        }
    };
    init_logging(cli.verbose);
    let files = match &cli.command {
        Command::Check { files, .. } | Command::Stats { files, .. } => files,
    };
    if files.iter().filter(|f| f.as_str() == "-").count() > 1 {
        let _ = Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "standard input (`-`) can be given only once",
            )
            .print();
        return ExitCode::from(2);
    }
    if let Command::Check {
        perfetto,
        html,
        files,
        ..
    } = &cli.command
        && files.len() > 1
        && let Some(flag) = [(perfetto, "--perfetto"), (html, "--html")]
            .into_iter()
            .find_map(|(path, flag)| path.as_ref().map(|_| flag))
    {
        let _ = Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{flag} draws one trace: give exactly one FILE"),
            )
            .print();
        return ExitCode::from(2);
    }
    match cli.command {
        Command::Check {
            files,
            format,
            max_reports,
            suppressions,
            baseline,
            write_baseline,
            perfetto,
            html,
        } => {
            let filters = match Filters::load(&suppressions, baseline.as_deref(), write_baseline) {
                Ok(filters) => filters,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            check(
                &files,
                format,
                max_reports,
                filters,
                perfetto.as_deref(),
                html.as_deref(),
            )
        }
        Command::Stats { files, format } => stats(&files, format),
    }
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "streamsan=debug",
        _ => "streamsan=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// How a file argument is named in output: the path as given, or `<stdin>` for `-` (as the
/// reader names it in errors).
fn display_name(path: &str) -> &str {
    if path == "-" { STDIN_NAME } else { path }
}

/// Runs the pipeline on one file, with a progress bar when stderr is a terminal; `tap` sees
/// every record.
fn run_one(path: &str, tap: &mut dyn FnMut(&Record)) -> Result<Checked, CheckError> {
    tracing::debug!(file = display_name(path), "checking");
    let reader = TraceReader::open(path)?;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}: {human_pos} records, {elapsed}")
                .expect("static template"),
        );
        bar.set_message(format!("checking {}", display_name(path)));
        bar
    });
    let result = check_reader_with(
        reader,
        |n| {
            if let Some(bar) = &bar {
                bar.set_position(n);
            }
        },
        tap,
    );
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
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

/// `--suppressions`, `--baseline` and `--write-baseline`, loaded, with what they did so far.
struct Filters {
    /// `None` without `--suppressions` (an empty file still counts as given).
    suppressions: Option<Suppressions>,
    baseline: Option<Baseline>,
    write_baseline: Option<String>,
    /// Per suppression, the findings it matched in all traces so far.
    hits: Vec<u64>,
    /// Per baseline entry, the races it took out in all traces so far.
    baseline_hits: Vec<u64>,
    /// For `--write-baseline`: each trace's name and JSON report before the baseline.
    written: Vec<(String, String)>,
}

impl Filters {
    /// Reads every suppressions file and the baseline before any trace is checked, so a bad
    /// one fails the run (exit 2) before any verdict.
    fn load(
        suppressions: &[String],
        baseline: Option<&str>,
        write_baseline: Option<String>,
    ) -> Result<Filters, FilterError> {
        let mut all = Suppressions::new();
        for path in suppressions {
            all.extend(Suppressions::load(path)?);
        }
        let baseline = baseline.map(Baseline::load).transpose()?;
        Ok(Filters {
            hits: vec![0; all.len()],
            suppressions: (!suppressions.is_empty()).then_some(all),
            baseline_hits: vec![0; baseline.as_ref().map_or(0, Baseline::len)],
            baseline,
            write_baseline,
            written: Vec::new(),
        })
    }

    /// The report of the trace `name` with suppressions, then the baseline, applied. Without
    /// either, the report is left as it is (its JSON has no filter counts).
    fn apply(&mut self, report: Report, name: &str) -> Report {
        let report = match &self.suppressions {
            Some(suppressions) => {
                let suppressed = suppress::apply(report, suppressions, None);
                for (total, hits) in self.hits.iter_mut().zip(&suppressed.hits) {
                    *total += hits;
                }
                suppressed.report
            }
            None => report,
        };
        if self.write_baseline.is_some() {
            let json = render_json(&report, &RenderOptions::default());
            self.written.push((name.to_string(), json));
        }
        let Some(baseline) = &self.baseline else {
            return report;
        };
        let baselined = suppress::apply(report, &Suppressions::new(), Some(baseline));
        for (total, hits) in self.baseline_hits.iter_mut().zip(&baselined.baseline_hits) {
            *total += hits;
        }
        baselined.report
    }

    /// After every trace was checked: unused suppressions and stale baseline entries on
    /// stderr, and the `--write-baseline` file. False when that file could not be written.
    fn finish(&self, all_checked: bool) -> bool {
        if !all_checked {
            // What went unused may have matched in the traces that could not be checked, and a
            // baseline of part of the input would be misleading.
            if let Some(path) = &self.write_baseline {
                eprintln!("error: {path}: baseline not written: not every trace could be checked");
            }
            return true;
        }
        let unused = self.suppressions.as_ref().map(|s| s.unused(&self.hits));
        for unused in unused.unwrap_or_default() {
            eprintln!(
                "warning: {}: unused suppression `{}`: it matched no race or warning",
                unused.location(),
                unused.text
            );
        }
        if let Some(baseline) = &self.baseline {
            let stale = self.baseline_hits.iter().filter(|&&h| h == 0).count();
            if stale > 0 {
                eprintln!(
                    "note: {}: {stale} of the {} baselined races no longer occur; \
                     --write-baseline writes a baseline of the races that do",
                    baseline.file(),
                    baseline.len()
                );
            }
        }
        let Some(path) = &self.write_baseline else {
            return true;
        };
        let text = match self.written.as_slice() {
            [(_, json)] => json.clone(),
            several => several
                .iter()
                .map(|(name, json)| json_line(json, name) + "\n")
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

/// Why `check` could not go on with a file.
enum RunError {
    /// The trace could not be checked (and `--perfetto` / `--html` wrote nothing).
    Check(CheckError),
    /// The `--perfetto` file could not be created.
    Output(String),
}

/// Writes `path` through a temporary `PATH.partial` renamed over it once complete, so a failed
/// write leaves whatever `path` held before.
fn write_atomically(
    path: &Path,
    what: &str,
    write: impl FnOnce(BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<(), String> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let written = std::fs::File::create(&partial)
        .and_then(|file| write(BufWriter::new(file)))
        .and_then(|()| std::fs::rename(&partial, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written.map_err(|e| output_error(path, what, e))
}

/// `out.json: cannot write the Perfetto trace: permission denied`.
fn output_error(path: &Path, what: &str, e: std::io::Error) -> String {
    format!(
        "{}: cannot write the {what}: {}",
        path.display(),
        io_message(&e)
    )
}

/// [`run_one`], streaming the trace into `perfetto` as trace-event JSON and/or drawing it into
/// the HTML page `html`. Each file is written next to its path as `PATH.partial` and renamed
/// once complete, so an invalid trace or a failed write leaves whatever the path held before.
/// A write error is returned beside the check's result, whose report is still printed.
fn run_with_exports(
    path: &str,
    perfetto: Option<&Path>,
    html: Option<&Path>,
) -> Result<(Checked, Option<String>), RunError> {
    const PERFETTO: &str = "Perfetto trace";
    let mut perfetto_writer = None;
    let mut partial = PathBuf::new();
    if let Some(out) = perfetto {
        let mut p = out.as_os_str().to_owned();
        p.push(".partial");
        partial = PathBuf::from(p);
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
    let result = run_one(path, &mut |r| {
        if let Some(w) = &mut perfetto_writer {
            w.record(r);
        }
        if let Some(w) = &mut html_writer {
            w.record(r);
        }
    });
    match result {
        Ok(checked) => {
            let mut error = None;
            if let (Some(writer), Some(out)) = (perfetto_writer, perfetto) {
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
        Err(e) => {
            drop(perfetto_writer);
            if perfetto.is_some() {
                let _ = std::fs::remove_file(&partial);
            }
            Err(RunError::Check(e))
        }
    }
}

fn check(
    files: &[String],
    format: Format,
    max_reports: Option<usize>,
    mut filters: Filters,
    perfetto: Option<&Path>,
    html: Option<&Path>,
) -> ExitCode {
    let several = files.len() > 1;
    let mut stdout = std::io::stdout().lock();
    let mut invalid = false;
    let mut racy = false;
    let mut printed = false;
    let mut sarif_logs = Vec::new();
    let mut export_error = None;
    for path in files {
        let result = if perfetto.is_none() && html.is_none() {
            run_one(path, &mut |_| {}).map_err(RunError::Check)
        } else {
            run_with_exports(path, perfetto, html).map(|(checked, error)| {
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
                return ExitCode::from(2);
            }
        };
        let report = filters.apply(checked.report, display_name(path));
        racy |= report.has_races();
        let opts = RenderOptions {
            // Standard input cannot be replayed from a command line: no `reproduce:` line, and
            // SARIF locates findings without source locations by their message alone.
            source: (path != "-").then(|| path.clone()),
            max_reports,
        };
        let name = display_name(path);
        // Write errors (a closed pipe) are ignored: the exit code still tells the verdict.
        match format {
            Format::Text => {
                let text = render_text(&report, &opts);
                if several {
                    let sep = if printed { "\n" } else { "" };
                    let _ = write!(stdout, "{sep}== {name}\n{text}");
                } else {
                    let _ = write!(stdout, "{text}");
                }
            }
            Format::Json => {
                let json = render_json(&report, &opts);
                if several {
                    let _ = writeln!(stdout, "{}", json_line(&json, name));
                } else {
                    let _ = write!(stdout, "{json}");
                }
            }
            Format::Sarif => {
                let sarif = render_sarif(&report, &opts);
                if several {
                    sarif_logs.push((name.to_string(), sarif));
                } else {
                    let _ = write!(stdout, "{sarif}");
                }
            }
        }
        printed = true;
        let _ = stdout.flush();
    }
    if !sarif_logs.is_empty() {
        let _ = writeln!(stdout, "{}", merge_sarif(&sarif_logs));
    }
    let _ = stdout.flush();
    if let Some(message) = export_error {
        eprintln!("error: {message}");
        invalid = true;
    }
    if !filters.finish(!invalid) {
        invalid = true;
    }
    exit_code(invalid, racy)
}

/// One line of the JSON Lines output for several files: the report `pretty` (as
/// `render_json` prints it, keys in their documented order) made compact, with `"file"` first.
fn json_line(pretty: &str, file: &str) -> String {
    let compact = compact_json(pretty);
    let file = serde_json::to_string(file).expect("a string serializes");
    match compact.strip_prefix('{') {
        Some(rest) if rest != "}" => format!("{{\"file\":{file},{rest}"),
        _ => format!("{{\"file\":{file}}}"),
    }
}

/// `json` without the whitespace between tokens. Keeps the key order, which a round trip
/// through `serde_json::Value` would sort.
fn compact_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

/// One SARIF log for several traces: the first log's run, with the results of every log in
/// file order, each tagged with `properties.trace`. The tool and its rule list are the same in
/// every log (`ruleIndex` is stable), so the results can share one run, which is what
/// code-scanning uploads expect (one run per tool).
fn merge_sarif(logs: &[(String, String)]) -> String {
    let mut merged: Option<serde_json::Value> = None;
    let mut results = Vec::new();
    for (name, text) in logs {
        let mut log: serde_json::Value =
            serde_json::from_str(text).expect("render_sarif prints valid JSON");
        let run = &mut log["runs"][0];
        if let Some(rs) = run.get_mut("results").and_then(|r| r.as_array_mut()) {
            for mut result in rs.drain(..) {
                if let Some(obj) = result.as_object_mut() {
                    let props = obj
                        .entry("properties")
                        .or_insert_with(|| serde_json::json!({}));
                    if let Some(props) = props.as_object_mut() {
                        props.insert("trace".into(), name.clone().into());
                    }
                }
                results.push(result);
            }
        }
        merged.get_or_insert(log);
    }
    let mut merged = merged.expect("at least one log");
    merged["runs"][0]["results"] = serde_json::Value::Array(results);
    serde_json::to_string_pretty(&merged).expect("a JSON value serializes")
}

/// The counts `streamsan stats --format json` prints, one object per line, in this key order.
#[derive(Serialize)]
struct StatsLine<'a> {
    file: &'a str,
    records: u64,
    streams: u64,
    events: u64,
    buffers: u64,
    syncs: u64,
    /// Distinct (folded) races, as in the report's summary.
    races: u64,
    /// Races before folding.
    race_occurrences: u64,
    warnings: u64,
}

fn stats(files: &[String], format: StatsFormat) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let mut invalid = false;
    let mut racy = false;
    for path in files {
        let Checked { report, stats } = match run_one(path, &mut |_| {}) {
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
            syncs: stats.syncs,
            races: report.summary.races,
            race_occurrences: stats.races,
            warnings: report.summary.warnings,
        };
        let _ = match format {
            StatsFormat::Text => writeln!(
                stdout,
                "{}\n  records   {}\n  streams   {}\n  events    {}\n  buffers   {}\n  syncs     {}\n  races     {} ({} {})\n  warnings  {}",
                line.file,
                line.records,
                line.streams,
                line.events,
                line.buffers,
                line.syncs,
                line.races,
                line.race_occurrences,
                if line.race_occurrences == 1 {
                    "occurrence"
                } else {
                    "occurrences"
                },
                line.warnings,
            ),
            StatsFormat::Json => writeln!(
                stdout,
                "{}",
                serde_json::to_string(&line).expect("stats serialize")
            ),
        };
        let _ = stdout.flush();
    }
    exit_code(invalid, racy)
}

/// DESIGN.md: 0 no race, 1 a race, 2 invalid input. Invalid input wins: a run in which some
/// file could not be checked gives no overall verdict.
fn exit_code(invalid: bool, racy: bool) -> ExitCode {
    ExitCode::from(if invalid {
        2
    } else if racy {
        1
    } else {
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_json_keeps_strings_and_order() {
        let pretty = "{\n  \"b\": \"a \\\" {x: 1}\\\\\",\n  \"a\": [1, 2]\n}\n";
        assert_eq!(
            compact_json(pretty),
            "{\"b\":\"a \\\" {x: 1}\\\\\",\"a\":[1,2]}"
        );
        assert_eq!(
            json_line("{\n  \"version\": 1\n}\n", "a b.jsonl"),
            "{\"file\":\"a b.jsonl\",\"version\":1}"
        );
        assert_eq!(json_line("{}", "x"), "{\"file\":\"x\"}");
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
