//! The progress line of a long check: on stderr, only when stderr is a terminal, gone when
//! the check ends. Never on stdout, never in logs.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// A spinner with the count of records checked so far.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// Starts the line for the trace `name` (nothing when stderr is not a terminal).
    pub fn start(name: &str) -> Progress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}: {human_pos} records, {elapsed}")
                    .expect("static template"),
            );
            bar.set_message(format!("checking {name}"));
            bar
        });
        Progress { bar }
    }

    /// `records` have been checked.
    pub fn update(&mut self, records: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(records);
        }
    }

    /// Clears the line.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
