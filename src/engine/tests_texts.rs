//! [`Engine::reads_texts`] is a promise: a record it says the engine does not read the name
//! or location of is applied alike without them. Every trace of the repository (the corpus,
//! the GPU fixtures with their graph captures, the CLI's cases, the examples) is applied twice, once whole and
//! once with those records' texts taken out, and the findings (leaks at the end included),
//! errors and counts must be the same.

use super::*;
use crate::trace::TraceReader;

/// What applying the records found, in order, as text: findings, then the error if one came.
fn applied(records: &[Record], strip: bool) -> (Vec<String>, usize) {
    let mut engine = Engine::new();
    let mut seen = Vec::new();
    let mut stripped = 0;
    for record in records {
        let mut record = record.clone();
        if strip
            && !Engine::reads_texts(record.op.kind())
            && (record.name.is_some() || record.at.is_some())
        {
            record.name = None;
            record.at = None;
            stripped += 1;
        }
        let result = engine.apply(&record, &mut |f| seen.push(format!("{f:?}")));
        if let Err(e) = result {
            seen.push(format!("error: {e:?}"));
            break;
        }
    }
    // Leaks name their allocations: reported at the end.
    engine.finish(&mut |f| seen.push(format!("{f:?}")));
    seen.push(format!("{:?}", engine.stats()));
    (seen, stripped)
}

#[test]
fn records_whose_texts_the_engine_does_not_read_apply_alike_without_them() {
    let paths = crate::trace::repository_traces::repository_traces();
    assert!(paths.len() > 100, "{} traces", paths.len());
    let (mut stripped, mut captured, mut findings) = (0, 0, 0);
    for path in &paths {
        let Ok(reader) = TraceReader::open(&path.to_string_lossy()) else {
            continue;
        };
        // A trace that does not read (the corpus has broken ones) up to its error.
        let records: Vec<Record> = reader.map_while(Result::ok).collect();
        captured += records
            .iter()
            .filter(|r| matches!(r.op, Op::GraphBegin { .. }))
            .count();
        let (whole, _) = applied(&records, false);
        let (bare, n) = applied(&records, true);
        assert_eq!(whole, bare, "{}", path.display());
        stripped += n;
        findings += whole.len() - 1;
    }
    // Not vacuous: texts were taken out, graphs captured, and races found.
    assert!(stripped > 1000, "{stripped} records stripped");
    assert!(
        captured > 0 && findings > 100,
        "{captured} captures, {findings} findings"
    );
}
