//! The offline pipeline shared by the CLI, the tests and the benchmarks: stream a trace through
//! the reader, the engine and the report collector, with memory bounded by live state (plus a
//! tombstone for each of the last [`crate::engine::FREED_KEPT`] freed buffer ids, and at most
//! [`crate::report::MAX_STORED_RACES`] stored races).

use crate::engine::{
    Engine, Finding, InputError, RecordHint, RecordHints, Resolved, Stats, Warning, WarningFact,
    prefetch,
};
use crate::report::{Api, Collector, Report};
use crate::trace::reader::TraceReader;
use crate::trace::{Record, TraceError};

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
    /// Whose calls the fix hints should name, as the trace's header says.
    pub api: Api,
}

/// Checks the trace at `path` (`-` for stdin).
pub fn check_path(path: &str) -> Result<Checked, CheckError> {
    check_reader(TraceReader::open(path)?)
}

/// Checks every record of `reader`. How far it got can be watched through the reader's
/// [`TraceReader::progress`] (the CLI's progress line does), from any thread.
pub fn check_reader<R: std::io::BufRead + Send>(
    reader: TraceReader<R>,
) -> Result<Checked, CheckError> {
    run(reader, None)
}

/// [`check_reader`], also showing every record, with what the engine resolved about it
/// ([`Resolved`]), to `tap` after the engine applied it: exporters that draw the trace use
/// this, so the file is read once and what they draw is what the engine decided.
pub fn check_reader_with<R: std::io::BufRead + Send>(
    reader: TraceReader<R>,
    tap: &mut Tap<'_>,
) -> Result<Checked, CheckError> {
    run(reader, Some(tap))
}

/// What sees every record, with what the engine resolved about it.
pub type Tap<'a> = dyn FnMut(&Record, &Resolved) + 'a;

/// Records handed from the parsing thread to the engine at a time: large enough that the
/// channel costs nothing per record, small enough that both threads start at once. With
/// [`QUEUED`], chosen on 2 M records of the benchmark workload, where 4,096 records and one
/// batch queued gained 7% (JSON Lines) and 8% (binary) over 1,024 and four queued
/// (docs/performance.md, fourteenth round).
const BATCH: usize = 4096;
/// Full batches that may wait for the engine while the parser fills the next.
const QUEUED: usize = 1;

/// Records read by the parsing thread for the engine. A batch goes back and forth between the
/// two, and its records are read into in place ([`TraceReader::read_into`]), so they keep
/// their strings and access lists from one use to the next: in steady state reading allocates
/// nothing, and no record is moved.
#[derive(Default)]
struct Batch {
    /// The records; the first `len` are this batch's.
    records: Vec<Record>,
    /// Each record's hint, made on the parsing thread so that the engine's need not look the
    /// record's name up ([`RecordHints`]).
    hints: Vec<Option<RecordHint>>,
    len: usize,
    /// The error that ended the reading, after the records.
    error: Option<TraceError>,
}

fn run<R: std::io::BufRead + Send>(
    reader: TraceReader<R>,
    mut tap: Option<&mut Tap<'_>>,
) -> Result<Checked, CheckError> {
    let mut engine = Engine::new();
    engine.observe(tap.is_some());
    let mut collector = Collector::new();
    let file = reader.file().to_string();
    let api = Api::of_header(reader.header());
    // Parsing runs on its own thread, a batch ahead of the engine; empty batches come back to
    // be refilled, so steady state allocates no batch vectors.
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<Batch>(QUEUED);
    let (empty_tx, empty_rx) = std::sync::mpsc::channel::<Batch>();
    // Set when the engine stops early: the parser then stops at its next record instead of
    // reading on to the end of its batch (a slow producer on stdin would hold the error back).
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (reader, outcome) = std::thread::scope(|scope| {
        let stop = &stop;
        let parser = scope.spawn(move || parse_ahead(reader, &full_tx, &empty_rx, stop));
        let outcome = (|| {
            for mut batch in full_rx.iter() {
                let records = &batch.records[..batch.len];
                for (i, (record, &hint)) in records.iter().zip(&batch.hints).enumerate() {
                    if let Some(ahead) = records.get(i + prefetch::RECORD_PARTS_AHEAD) {
                        prefetch::record_parts(ahead);
                    }
                    engine.prefetch(records, i, |r| Some(&r.op));
                    engine
                        .apply_hinted(record, hint, &mut |f| collector.add(f))
                        .map_err(|error| CheckError::Input {
                            file: file.clone(),
                            error,
                        })?;
                    if let (Some(tap), Some(resolved)) = (&mut tap, engine.resolved()) {
                        tap(record, resolved);
                    }
                }
                if let Some(error) = batch.error.take() {
                    return Err(error.into());
                }
                // The batch goes back whole, to be read into again on the parsing thread, which
                // allocated its records' parts: freeing on the thread that allocates keeps the
                // allocator's fast per-thread path (a free on the other thread cost both
                // threads about a quarter of their time). The parser may have finished: then
                // nobody takes the batch back.
                let _ = empty_tx.send(batch);
            }
            Ok::<(), CheckError>(())
        })();
        // On an early error the parser stops at its next record (or its next send, once the
        // receiver is gone).
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        drop(full_rx);
        let reader = parser.join().expect("the parsing thread does not panic");
        (reader, outcome)
    });
    outcome?;
    if let Some(&(line, _)) = reader.skipped().first() {
        // One warning for all of them: the verdict does not cover what was skipped.
        collector.add(Finding::Warning(Warning {
            line,
            fact: WarningFact::Skipped {
                ops: reader.skipped_ops().to_vec(),
                count: reader.skipped_count(),
            },
        }));
    }
    engine.finish(&mut |f| collector.add(f));
    let stats = engine.stats().clone();
    Ok(Checked {
        report: collector.finish(&stats),
        stats,
        api,
    })
}

/// The parsing thread: reads records into batches until the trace ends, an error ends it
/// (sent as the batch's error), or the engine stops (`stop`, or no longer listening).
/// Returns the reader, whose counts of skipped records the report needs.
fn parse_ahead<R: std::io::BufRead>(
    mut reader: TraceReader<R>,
    full: &std::sync::mpsc::SyncSender<Batch>,
    empty: &std::sync::mpsc::Receiver<Batch>,
    stop: &std::sync::atomic::AtomicBool,
) -> TraceReader<R> {
    let mut hints = RecordHints::default();
    loop {
        let mut batch = empty.try_recv().unwrap_or_default();
        batch.len = 0;
        let mut ended = false;
        while batch.len < BATCH {
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                return reader;
            }
            if batch.len == batch.records.len() {
                batch.records.push(Record::default());
                batch.hints.push(None);
            }
            // The parts of the record to be read into a few records from now, which the
            // engine's thread read last: reading into a record reuses them.
            if let Some(ahead) = batch.records.get(batch.len + prefetch::RECORD_PARTS_AHEAD) {
                prefetch::record_parts(ahead);
            }
            let record = &mut batch.records[batch.len];
            match reader.read_into(record) {
                Some(Ok(())) => {
                    batch.hints[batch.len] = hints.hint(record);
                    batch.len += 1;
                }
                Some(Err(error)) => {
                    batch.error = Some(error);
                    ended = true;
                    break;
                }
                None => {
                    ended = true;
                    break;
                }
            }
        }
        let nothing = batch.len == 0 && batch.error.is_none();
        if nothing || full.send(batch).is_err() || ended {
            return reader;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::writer::TraceWriter;

    /// `check` prefetches buffer states ahead of the engine (`Engine::prefetch`); its report
    /// on a trace past the prefetch's threshold is the one the engine makes alone.
    #[test]
    fn the_pipeline_reports_what_the_engine_alone_finds() {
        let records = crate::engine::tests_prefetch::trace();
        let mut writer = TraceWriter::new(Vec::new(), Default::default()).expect("a header");
        for r in &records {
            writer.write(r).expect("written");
        }
        let bytes = writer.into_inner();
        let reader = TraceReader::new(std::io::Cursor::new(bytes), "t.jsonl").expect("a trace");
        let checked = check_reader(reader).expect("a valid trace");

        let mut engine = Engine::new();
        let mut collector = Collector::new();
        for r in &records {
            engine
                .apply(r, &mut |f| collector.add(f))
                .expect("a valid trace");
        }
        engine.finish(&mut |f| collector.add(f));
        let alone = collector.finish(engine.stats());
        assert!(alone.summary.races > 100, "the trace races");
        assert_eq!(checked.report, alone);
    }

    /// What checking `bytes` must give, worked out without the pipeline: the reader's records
    /// one by one into the engine, up to the first error of either.
    fn one_by_one(bytes: &[u8]) -> Result<(Report, Stats), String> {
        let mut reader = TraceReader::new(bytes, "t.jsonl").map_err(|e| e.to_string())?;
        let (mut engine, mut collector) = (Engine::new(), Collector::new());
        for record in reader.by_ref() {
            let record = record.map_err(|e| e.to_string())?;
            engine
                .apply(&record, &mut |f| collector.add(f))
                .map_err(|error| {
                    CheckError::Input {
                        file: "t.jsonl".into(),
                        error,
                    }
                    .to_string()
                })?;
        }
        engine.finish(&mut |f| collector.add(f));
        let stats = engine.stats().clone();
        Ok((collector.finish(&stats), stats))
    }

    /// Traces that end, or fail in the reader or in the engine, just before, at and just after
    /// the end of a batch: `check` gives what reading and applying one record at a time gives.
    #[test]
    fn batch_edges_change_nothing() {
        let launch = |stream: u64| {
            let line = format!(
                r#"{{"op":"launch","name":"k","stream":{stream},"reads":[1],"writes":[2]}}"#
            );
            line + "\n"
        };
        let head = concat!(
            "{\"streamsan_trace\": 1}\n",
            r#"{"op":"stream","id":1,"kind":"created","flags":"non_blocking"}"#,
            "\n",
            r#"{"op":"alloc","buf":1,"bytes":4,"space":"device"}"#,
            "\n",
            r#"{"op":"alloc","buf":2,"bytes":4,"space":"device"}"#,
            "\n",
        );
        for n in [
            BATCH - 4,
            BATCH - 3,
            BATCH - 2,
            2 * BATCH - 3,
            2 * BATCH - 2,
        ] {
            for ending in ["", "{\"op\":\"launch\"}\n", "not json\n", &launch(9)] {
                // Alternating streams: the launches race, so the report has findings.
                let body: String = (0..n).map(|i| launch(i as u64 % 2)).collect();
                let text = format!("{head}{body}{ending}");
                let reader = TraceReader::new(text.as_bytes(), "t.jsonl").expect("a header");
                let got = check_reader(reader)
                    .map(|c| (c.report, c.stats))
                    .map_err(|e| e.to_string());
                let want = one_by_one(text.as_bytes());
                assert_eq!(got, want, "{n} launches, then {ending:?}");
                match (&want, ending) {
                    (Ok((report, _)), "") => assert!(report.summary.races > 0),
                    (Ok(_), _) => panic!("{ending:?} is an error"),
                    (Err(_), _) => {}
                }
            }
        }
    }
}
