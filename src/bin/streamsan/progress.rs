//! The progress line of a long check or conversion: on stderr, only when stderr is a terminal,
//! gone when the file is done. Never on stdout, never in logs.
//!
//! A thread of its own redraws it a few times a second from the reader's [`ReadProgress`]
//! (bytes and records so far), so how often it moves does not depend on how fast records go
//! through the pipeline. It shows the percent of the file read when its size is known (a file,
//! not standard input) or else the records read, and the records per second, so a user can tell
//! whether to wait:
//!
//! ```text
//! / checking run.jsonl [====>     ]  42% of 1.21 GB, 512k records/s, ~9s left
//! / checking <stdin>: 3,100,000 records, 512k records/s, 6s
//! ```

use std::io::{BufRead, IsTerminal};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use streamsan::trace::{ReadProgress, TraceReader};

/// How often the line is redrawn.
const TICK: Duration = Duration::from_millis(200);

/// The progress line of one file.
pub struct Progress {
    live: Option<Live>,
}

/// A line being drawn, and the thread that draws it.
struct Live {
    bar: ProgressBar,
    stop: Arc<AtomicBool>,
    ticker: JoinHandle<()>,
}

impl Progress {
    /// Starts the line `VERB NAME ...` for `reader`'s file; nothing when stderr is not a
    /// terminal.
    pub fn start<R: BufRead>(verb: &str, reader: &mut TraceReader<R>) -> Progress {
        if !std::io::stderr().is_terminal() {
            return Progress { live: None };
        }
        Progress::start_on(verb, reader, ProgressDrawTarget::stderr())
    }

    fn start_on<R: BufRead>(
        verb: &str,
        reader: &mut TraceReader<R>,
        target: ProgressDrawTarget,
    ) -> Progress {
        // The whole line is the message, so one tick is one draw; `wide_msg` cuts it at the
        // terminal's width.
        let bar = ProgressBar::with_draw_target(None, target);
        bar.set_style(ProgressStyle::with_template("{wide_msg}").expect("static template"));
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let what = format!("{verb} {}", short_name(reader.file()));
            let (bar, stop) = (bar.clone(), stop.clone());
            let (read, total) = (reader.progress(), reader.input_len());
            std::thread::spawn(move || tick(&bar, &stop, &what, &read, total))
        };
        Progress {
            live: Some(Live { bar, stop, ticker }),
        }
    }

    /// Clears the line.
    pub fn finish(self) {
        if let Some(live) = self.live {
            live.stop.store(true, Ordering::Relaxed);
            live.ticker.thread().unpark();
            let _ = live.ticker.join();
            live.bar.finish_and_clear();
        }
    }
}

/// Redraws the line `what` every [`TICK`] until `stop`.
fn tick(bar: &ProgressBar, stop: &AtomicBool, what: &str, read: &ReadProgress, total: Option<u64>) {
    const SPINNER: [char; 4] = ['|', '/', '-', '\\'];
    let start = Instant::now();
    for n in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = Snapshot {
            bytes: read.bytes(),
            total,
            records: read.records(),
            elapsed: start.elapsed(),
        };
        bar.set_message(format!(
            "{} {what} {}",
            SPINNER[n % SPINNER.len()],
            now.status()
        ));
        std::thread::park_timeout(TICK);
    }
}

/// The file's name without its directories, so that the line fits a terminal.
fn short_name(file: &str) -> &str {
    std::path::Path::new(file)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(file)
}

/// How far a reader has got, at one moment.
struct Snapshot {
    bytes: u64,
    /// The file's size, where known.
    total: Option<u64>,
    records: u64,
    elapsed: Duration,
}

impl Snapshot {
    /// `[====>     ]  42% of 1.21 GB, 512k records/s, ~9s left`; without the size:
    /// `3,100,000 records, 512k records/s, 6s`. Short enough for 80 columns with a short name.
    fn status(&self) -> String {
        let rate = rate(self.records, self.elapsed);
        match self.total {
            Some(total) => {
                let percent = match total {
                    0 => 100,
                    _ => (u128::from(self.bytes.min(total)) * 100 / u128::from(total)) as u64,
                };
                let mut line = format!(
                    "[{}] {percent:>3}% of {}, {rate}",
                    bar(percent),
                    size(total)
                );
                if let Some(left) = self.time_left(total) {
                    line.push_str(&format!(", ~{} left", duration(left)));
                }
                line
            }
            None => format!(
                "{} record{}, {rate}, {}",
                thousands(self.records),
                if self.records == 1 { "" } else { "s" },
                duration(self.elapsed)
            ),
        }
    }

    /// The time left at the rate so far, once there is a rate to go by.
    fn time_left(&self, total: u64) -> Option<Duration> {
        if self.bytes == 0 || self.elapsed < Duration::from_secs(1) || self.bytes >= total {
            return None;
        }
        let per_byte = self.elapsed.as_secs_f64() / self.bytes as f64;
        Some(Duration::from_secs_f64(
            per_byte * (total - self.bytes) as f64,
        ))
    }
}

/// `====>     `: ten columns.
fn bar(percent: u64) -> String {
    const WIDTH: usize = 10;
    let done = (percent.min(100) as usize * WIDTH) / 100;
    let mut bar = "=".repeat(done);
    if done < WIDTH {
        bar.push('>');
        bar.push_str(&" ".repeat(WIDTH - done - 1));
    }
    bar
}

/// `3,100,000`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1.25M records/s`, `512k records/s`, `12 records/s`.
fn rate(records: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    if secs < 0.05 {
        return "- records/s".into();
    }
    let r = records as f64 / secs;
    if r >= 1e6 {
        format!("{:.2}M records/s", r / 1e6)
    } else if r >= 1e4 {
        format!("{:.0}k records/s", r / 1e3)
    } else {
        format!("{r:.0} records/s")
    }
}

/// `1.21 GB`, `24.5 MB`, `812 B` (decimal units, as file managers show sizes).
fn size(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

/// `7s`, `2m05s`, `1h02m` (rounded up: a second left is not `0s`).
fn duration(d: Duration) -> String {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(bytes: u64, total: Option<u64>, records: u64, secs: f64) -> String {
        Snapshot {
            bytes,
            total,
            records,
            elapsed: Duration::from_secs_f64(secs),
        }
        .status()
    }

    #[test]
    fn a_file_shows_percent_rate_and_time_left() {
        assert_eq!(
            snapshot(420_000_000, Some(1_000_000_000), 3_100_000, 6.0),
            "[====>     ]  42% of 1.00 GB, 517k records/s, ~9s left"
        );
        assert_eq!(
            snapshot(0, Some(24_500_000), 0, 0.0),
            "[>         ]   0% of 24.5 MB, - records/s"
        );
        assert_eq!(
            snapshot(812, Some(812), 1, 0.5),
            "[==========] 100% of 812 B, 2 records/s"
        );
        assert_eq!(
            snapshot(1_000_000, Some(3_000_000), 2_500_000, 2.0),
            "[===>      ]  33% of 3.0 MB, 1.25M records/s, ~4s left"
        );
    }

    #[test]
    fn standard_input_shows_records_rate_and_time() {
        assert_eq!(
            snapshot(1 << 30, None, 12_345, 125.0),
            "12,345 records, 99 records/s, 2m05s"
        );
        assert_eq!(snapshot(0, None, 0, 0.25), "0 records, 0 records/s, 1s");
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
        assert_eq!(size(1_210_000_000), "1.21 GB");
        assert_eq!(size(1_500), "1.5 kB");
        assert_eq!(duration(Duration::from_secs(3725)), "1h02m");
        assert_eq!(short_name("traces/run.jsonl"), "run.jsonl");
        assert_eq!(short_name("<stdin>"), "<stdin>");
    }

    #[test]
    fn the_ticker_stops_when_finished() {
        let text = "{\"streamsan_trace\":1}\n{\"op\":\"device_sync\"}\n";
        let mut reader = TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
        let progress = Progress::start_on("checking", &mut reader, ProgressDrawTarget::hidden());
        assert!(progress.live.is_some());
        assert_eq!(reader.count(), 1);
        let t = Instant::now();
        progress.finish();
        assert!(t.elapsed() < TICK, "finish waits for no tick");
    }
}
