//! The `streamsan` command: a thin shell over the library's offline pipeline.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use streamsan::check::{CheckError, Checked, check_reader};
use streamsan::report::{RenderOptions, render_json, render_sarif, render_text};
use streamsan::trace::reader::TraceReader;

const EXIT_CODES: &str = "\
EXIT CODES:
    0  no race found (warnings alone do not fail)
    1  at least one race found
    2  invalid input or command line: the message names the file, the line and what was expected";

/// A CUDA stream sanitizer: finds GPU memory accesses that two streams, or a stream and the
/// host, make without anything ordering them.
#[derive(Parser, Debug)]
#[command(name = "streamsan", version, after_help = EXIT_CODES)]
struct Cli {
    /// More diagnostics about streamsan itself on stderr (-v debug, -vv trace); RUST_LOG works too.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check traces (trace format v1, JSON Lines) for unsynchronized accesses.
    #[command(after_help = EXIT_CODES)]
    Check {
        /// Trace files to check; `-` reads standard input.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
        /// Report format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
        /// Show at most N races per trace (all are still counted in the summary and exit code).
        #[arg(long, value_name = "N")]
        max_reports: Option<usize>,
    },
    /// Count what a trace holds: records, streams, events, buffers, syncs, races.
    #[command(after_help = EXIT_CODES)]
    Stats {
        /// Trace files; `-` reads standard input.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = StatsFormat::Text)]
        format: StatsFormat,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Text,
    Json,
    Sarif,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum StatsFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // clap exits 0 for --help / --version and 2 for usage errors, as documented.
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    init_logging(cli.verbose);
    match cli.command {
        Command::Check {
            files,
            format,
            max_reports,
        } => check(&files, format, max_reports),
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

/// Runs the pipeline on one file, with a progress bar when stderr is a terminal.
fn run_one(path: &str) -> Result<Checked, CheckError> {
    let reader = TraceReader::open(path)?;
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} {pos} records ({per_sec})")
                .expect("static template"),
        );
        bar.set_message(format!("checking {path}"));
        Some(bar)
    } else {
        None
    };
    tracing::debug!(path, "checking");
    let result = check_reader(reader, |n| {
        if let Some(bar) = &bar {
            bar.set_position(n);
        }
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    result
}

fn check(files: &[String], format: Format, max_reports: Option<usize>) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let mut invalid = false;
    let mut racy = false;
    for (i, path) in files.iter().enumerate() {
        match run_one(path) {
            Ok(checked) => {
                racy |= !checked.report.races.is_empty();
                let opts = RenderOptions {
                    source: Some(path.clone()),
                    max_reports,
                };
                let rendered = match format {
                    Format::Text => render_text(&checked.report, &opts),
                    Format::Json => render_json(&checked.report, &opts),
                    Format::Sarif => render_sarif(&checked.report, &opts),
                };
                if i > 0 && matches!(format, Format::Text) {
                    let _ = writeln!(stdout);
                }
                if files.len() > 1 && matches!(format, Format::Text) {
                    let _ = writeln!(stdout, "== {path}");
                }
                let _ = write!(stdout, "{rendered}");
                if !rendered.ends_with('\n') {
                    let _ = writeln!(stdout);
                }
            }
            Err(e) => {
                invalid = true;
                eprintln!("error: {e}");
            }
        }
    }
    exit_code(invalid, racy)
}

fn stats(files: &[String], format: StatsFormat) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    let mut invalid = false;
    let mut racy = false;
    for path in files {
        match run_one(path) {
            Ok(Checked { report, stats }) => {
                let races = report.races.len();
                racy |= races > 0;
                match format {
                    StatsFormat::Text => {
                        let _ = writeln!(
                            stdout,
                            "{path}\n  records   {}\n  streams   {}\n  events    {}\n  buffers   {}\n  syncs     {}\n  races     {races} ({} occurrences)\n  warnings  {}",
                            stats.records,
                            stats.streams,
                            stats.events,
                            stats.buffers,
                            stats.syncs,
                            stats.races,
                            report.summary.warnings,
                        );
                    }
                    StatsFormat::Json => {
                        let v = serde_json::json!({
                            "file": path,
                            "records": stats.records,
                            "streams": stats.streams,
                            "events": stats.events,
                            "buffers": stats.buffers,
                            "syncs": stats.syncs,
                            "races": races,
                            "race_occurrences": stats.races,
                            "warnings": report.summary.warnings,
                        });
                        let _ = writeln!(stdout, "{v}");
                    }
                }
            }
            Err(e) => {
                invalid = true;
                eprintln!("error: {e}");
            }
        }
    }
    exit_code(invalid, racy)
}

/// DESIGN.md: 0 no race, 1 a race, 2 invalid input (which wins: no partial "clean" verdict).
fn exit_code(invalid: bool, racy: bool) -> ExitCode {
    ExitCode::from(if invalid {
        2
    } else if racy {
        1
    } else {
        0
    })
}
