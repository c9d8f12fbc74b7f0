//! The command line: every subcommand, option and help text, declared once with clap.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

const MAIN_AFTER_HELP: &str = "\
Examples:
  streamsan check trace.jsonl                      check a trace, text report
  streamsan check --format json trace.jsonl        the stable JSON report
  streamsan check --format sarif t/*.jsonl > out.sarif
  streamsan check --perfetto out.json trace.jsonl  also draw it for ui.perfetto.dev
  streamsan check --html report.html trace.jsonl   also draw it as one HTML page
  my-recorder | streamsan check -                  read the trace from standard input
  streamsan stats trace.jsonl                      count records, streams, buffers, races
  streamsan convert trace.jsonl trace.sstb         the same trace, binary: smaller, faster

Every command reads traces in either encoding, JSON Lines or binary (.sstb), recognized by
their first bytes.

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

Input:
  Each FILE is a trace in either encoding, JSON Lines or binary (`streamsan convert`), told
  apart by its first bytes. On a terminal, a progress line on stderr shows how much of the
  file was read and the records per second; it is cleared when the file is done.

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
pub struct Cli {
    /// More diagnostics about streamsan itself on stderr (-v debug, -vv trace); RUST_LOG
    /// overrides it. Never changes stdout.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Check traces (trace format v1, JSON Lines or binary) for unsynchronized accesses.
    #[command(after_help = CHECK_AFTER_HELP)]
    Check {
        /// Trace files to check, in order; `-` reads standard input (once).
        #[arg(required = true, value_name = "FILE")]
        files: Vec<String>,
        #[command(flatten)]
        opts: CheckOptions,
    },
    /// Run an unmodified CUDA program and check it (docs/run.md).
    ///
    /// Its CUDA calls are recorded through NVIDIA's Sanitizer API and its kernels'
    /// global-memory accesses by instrumentation; each process's trace is then checked.
    #[command(after_help = RUN_AFTER_HELP)]
    Run {
        #[command(flatten)]
        opts: CheckOptions,
        /// Record the CUDA API only: copies, sets, allocations, events and syncs are checked,
        /// kernels are not instrumented (their accesses are unknown, so races in which a kernel
        /// takes part are not found). Much faster on kernel-heavy programs.
        #[arg(long)]
        api_only: bool,
        /// Write the report to PATH instead of standard error (the program keeps standard
        /// output to itself).
        #[arg(long, value_name = "PATH")]
        report: Option<PathBuf>,
        /// Record no host call sites: reports name trace lines instead of source lines. The
        /// native stack walk behind each call site is most of what an --api-only run costs.
        #[arg(long)]
        no_call_sites: bool,
        /// Keep the traces (one per process that used CUDA, trace-PID.jsonl) in DIR instead of
        /// a temporary directory, for `streamsan check` later.
        #[arg(long, value_name = "DIR")]
        keep_traces: Option<PathBuf>,
        /// The exit status when a race is found.
        #[arg(long, value_name = "N", default_value_t = 66)]
        error_exitcode: u8,
        /// Stop the program at its first race (each process is checked as it runs); the exit
        /// status is then --error-exitcode's, and the report covers what ran until then.
        #[arg(long)]
        halt_on_error: bool,
        /// Entries of the access log of each launch in flight (16 bytes each, in pinned host
        /// memory; default 1048576, at most 268435456); accesses past it go unchecked and the
        /// run says so.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=268_435_456))]
        log_entries: Option<u64>,
        /// The program and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
        program: Vec<std::ffi::OsString>,
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
    /// Convert a trace between JSON Lines and the binary encoding (.sstb).
    ///
    /// Every record keeps its line number, so reports on the converted trace name the same
    /// lines.
    #[command(after_help = CONVERT_AFTER_HELP)]
    Convert {
        /// The trace to read, in either encoding; `-` reads standard input.
        #[arg(value_name = "IN")]
        input: String,
        /// Where to write the converted trace; `-` writes standard output (then --to is needed).
        #[arg(value_name = "OUT")]
        output: String,
        /// The encoding to write. Default: from OUT's extension (.sstb: binary; .jsonl,
        /// .ndjson, .json: jsonl).
        #[arg(long, value_enum, value_name = "ENCODING")]
        to: Option<TraceEncoding>,
    },
}

const CONVERT_AFTER_HELP: &str = "\
What is kept, both ways: every record with its line number (blank lines become gaps of the
binary encoding, and empty lines again), the header object, and records of ops this streamsan
does not know (a newer minor version's), as their JSON text. Checking the converted trace
reports the same races and warnings at the same lines. What is not kept: whitespace, the order
of keys, fields that a record's op does not use or that this streamsan does not know, blank
lines after the last record. The binary encoding is specified in docs/trace-format.md.
Records are checked for their syntax as they are read, not for what they mean: that is what
`streamsan check` does.

The input's encoding is recognized by its first bytes. OUT is written as OUT.partial and
renamed over OUT once complete, so a failed conversion leaves OUT as it was; a binary trace is
not written to a terminal.

Examples:
  streamsan convert trace.jsonl trace.sstb
  streamsan convert trace.sstb trace.jsonl
  streamsan convert --to jsonl trace.sstb - | grep launch
  my-recorder | streamsan convert --to binary - run.sstb
  streamsan check trace.sstb

Exit codes:
  0  converted
  2  invalid input (the message names the file, the line and what was expected), OUT could
     not be written, or the command line is invalid";

const RUN_AFTER_HELP: &str = "\
How: the CUDA driver loads streamsan's tool library into PROGRAM (CUDA_INJECTION64_PATH) when
it initializes CUDA; the tool subscribes to NVIDIA's Sanitizer API (libsanitizer-public.so,
from the CUDA toolkit's compute-sanitizer directory, or STREAMSAN_SANITIZER_LIB), writes one
trace per process that uses CUDA, and patches every kernel's global loads, stores and atomics.
Each process checks its records as it runs: with the text report on standard error (the
default), every race prints there as soon as it is found, interleaved with PROGRAM's own
stderr, and --halt-on-error stops PROGRAM at the first one. When PROGRAM exits, each trace is
checked again, as `streamsan check` would (same formats, suppressions, baselines,
timelines), for the verdict and the report: on standard error only the summary of each trace
follows the races already printed; with --report FILE or --format json|sarif, the whole
report goes there at the end. PROGRAM's standard output stays its own.

What is not seen: host code reading or writing pinned or managed memory (the API has no
callback for it); accesses to memory the API never reported (e.g. a library's own virtual
memory mappings) are counted and skipped. Nodes of one graph launch are taken one after
another on its stream, so races between two nodes of one graph are not reported. Every
instrumented kernel runs to completion before its launch returns: slower, same verdict; a
kernel that waits for something the host does after the launch (cuStreamWaitValue32, a
persistent kernel) then never ends: use --api-only for such programs. The
report says what the run could not check (`not-checked` warnings). The tool cannot run under
compute-sanitizer (one Sanitizer API tool per process).

Examples:
  streamsan run -- ./app --size 1024
  streamsan run --api-only -- ./app
  streamsan run --html run.html -- ./app
  streamsan run --format json --report races.json -- ./app
  streamsan run --keep-traces traces/ -- python train.py
  streamsan run --halt-on-error -- ./app
  streamsan check traces/trace-1234.jsonl

Exit codes:
  the program's own exit status when no race is found (128+N if signal N ended it)
  66 (or --error-exitcode) at least one race was found
  2  the command line is invalid, the program could not be started, or a trace could not be
     read (the message says which)";

const STATS_AFTER_HELP: &str = "\
The trace is checked in full, so the exit code is the same as `streamsan check`'s.

Examples:
  streamsan stats trace.jsonl
  streamsan stats --format json traces/*.jsonl

Exit codes:
  0  no race found
  1  at least one race found
  2  invalid input or command line";

/// How reports are made: shared by `check` and `run`.
#[derive(Args, Debug)]
pub struct CheckOptions {
    /// Report format.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
    /// Show at most N races per trace; all of them still count in the summary and the exit
    /// code.
    #[arg(long, value_name = "N")]
    pub max_reports: Option<usize>,
    /// Suppressions file (docs/suppressions.md); may be repeated. Races and warnings it
    /// matches are left out of the report, the summary counts and the exit code; unused
    /// suppressions are reported on stderr.
    #[arg(long = "suppressions", value_name = "FILE")]
    pub suppressions: Vec<String>,
    /// A JSON report of an earlier run (`--format json`): the races it lists are known, are
    /// left out of the report and do not fail; any other race still does.
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<String>,
    /// Write this run's races (after suppressions, before --baseline) as a JSON report to
    /// FILE, for later runs' --baseline. The exit code is unchanged.
    #[arg(long, value_name = "FILE")]
    pub write_baseline: Option<String>,
    /// Also write the trace as Chrome trace-event JSON to PATH, for ui.perfetto.dev or
    /// chrome://tracing (one trace only; docs/perfetto.md). The report and the exit code are
    /// unchanged.
    #[arg(long, value_name = "PATH")]
    pub perfetto: Option<PathBuf>,
    /// Also write the trace as one self-contained HTML page to PATH: a lane per stream and
    /// host thread, syncs as arrows, races as red links that open their report (one trace
    /// only; docs/timeline.md). The report and the exit code are unchanged.
    #[arg(long, value_name = "PATH")]
    pub html: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    /// For people.
    Text,
    /// Stable, for tools (docs/report-format.md).
    Json,
    /// SARIF 2.1.0, for code-scanning dashboards.
    Sarif,
}

/// The two encodings of a trace, for `convert --to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceEncoding {
    /// JSON Lines text (.jsonl).
    Jsonl,
    /// The binary encoding (.sstb): smaller, and faster to read.
    Binary,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StatsFormat {
    Text,
    Json,
}
