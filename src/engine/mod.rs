//! The happens-before engine. (Module header written with the implementation.)

pub mod error;
pub mod finding;

pub use error::{InputError, InputErrorKind};
pub use finding::{
    AccessKind, BufferInfo, Finding, LastSync, Race, RaceKind, Site, StreamInfo, Warning,
    WarningKind,
};

use crate::trace::record::Record;

/// Counts over everything the engine has seen, for `streamsan stats` and report summaries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records applied.
    pub records: u64,
    /// Streams declared (the implicit legacy stream of device 0 counts once used).
    pub streams: u64,
    /// Events declared.
    pub events: u64,
    /// Buffers allocated (a reused id counts again).
    pub buffers: u64,
    /// Synchronization calls: records, waits, stream/event/device syncs, queries.
    pub syncs: u64,
    /// Race findings emitted (before any folding).
    pub races: u64,
    /// Warnings emitted.
    pub warnings: u64,
}

/// One pure state machine: feed it records in trace order, it emits findings. No I/O, no CUDA.
#[derive(Debug, Default)]
pub struct Engine {
    stats: Stats,
}

impl Engine {
    /// A fresh engine: only the legacy default stream of device 0 exists.
    pub fn new() -> Engine {
        Engine::default()
    }

    /// Applies one record; races and warnings go to `out` as they are found.
    pub fn apply(
        &mut self,
        record: &Record,
        out: &mut dyn FnMut(Finding),
    ) -> Result<(), InputError> {
        let _ = (record, out);
        todo!("engine")
    }

    /// Ends the trace: emits end-of-trace warnings (leaked buffers).
    pub fn finish(&mut self, out: &mut dyn FnMut(Finding)) {
        let _ = out;
        todo!("engine")
    }

    /// Counts so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Convenience for tests: applies every record, then [`Engine::finish`], and returns all
    /// findings, or the first input error.
    pub fn check_all<'a>(
        records: impl IntoIterator<Item = &'a Record>,
    ) -> Result<Vec<Finding>, InputError> {
        let mut engine = Engine::new();
        let mut findings = Vec::new();
        for record in records {
            engine.apply(record, &mut |f| findings.push(f))?;
        }
        engine.finish(&mut |f| findings.push(f));
        Ok(findings)
    }
}
