//! Engine tests of trace v1 minor 1 written as trace text: the stream-capture rules that make a
//! trace invalid (CUDA fails such programs), caching-pool input errors, and the bound on the
//! history of freed bytes. The racy/fixed pairs of R16-R18 are in `tests/corpus/`.

use super::*;
use crate::trace::TraceReader;

/// The records of `body` (one JSON object per line, after a minor-1 header).
pub(super) fn records(body: &str) -> Vec<Record> {
    let text = format!("{{\"streamsan_trace\":1,\"minor\":1}}\n{body}");
    TraceReader::new(text.as_bytes(), "t.jsonl")
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The input error `body` gives: its line and message.
pub(super) fn error(body: &str) -> (u64, String) {
    let e = Engine::check_all(&records(body)).expect_err("an input error");
    (e.line, e.kind.to_string())
}

pub(super) const STREAMS: &str = r#"{"op":"stream","id":1,"kind":"created","flags":"non_blocking"}
{"op":"stream","id":2,"kind":"created","flags":"non_blocking"}
{"op":"event","id":1}
{"op":"event","id":2}
{"op":"alloc","buf":1,"bytes":64,"space":"device"}
"#;

/// Each broken stream-capture rule is an error at its line, naming the rule.
#[test]
fn broken_capture_rules_are_input_errors() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"op":"graph_begin","graph":1,"stream":0}"#,
            "legacy default stream",
        ),
        (
            "{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"graph_begin\",\"graph\":2,\"stream\":1}",
            "already being captured",
        ),
        (
            "{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"stream_sync\",\"stream\":1}",
            "capturing stream",
        ),
        (
            "{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"record\",\"event\":1,\"stream\":1}\n\
             {\"op\":\"event_sync\",\"event\":1}",
            "captured event",
        ),
        (
            "{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"device_sync\"}",
            "the device is synchronized",
        ),
        (
            "{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"record\",\"event\":1,\"stream\":1}\n\
             {\"op\":\"wait\",\"stream\":2,\"event\":1}\n\
             {\"op\":\"launch\",\"name\":\"k\",\"stream\":2,\"writes\":[1]}\n\
             {\"op\":\"graph_end\",\"graph\":1,\"stream\":1}",
            "was not joined back",
        ),
        (
            "{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"graph_end\",\"graph\":1,\"stream\":2}",
            "must end there",
        ),
        (
            "{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"graph_launch\",\"graph\":1,\"stream\":2}",
            "before its capture ended",
        ),
        (
            "{\"op\":\"record\",\"event\":1,\"stream\":2}\n\
             {\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"wait\",\"stream\":1,\"event\":1}",
            "not recorded in that capture",
        ),
        (
            r#"{"op":"graph_launch","graph":9,"stream":1}"#,
            "graph 9 is not captured",
        ),
        (
            "{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"graph_end\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"graph_begin\",\"graph\":1,\"stream\":2}",
            "captured again",
        ),
    ];
    for (body, needle) in cases {
        let body = format!("{STREAMS}{body}\n");
        let last = body.lines().count() as u64 + 1;
        let (line, message) = error(&body);
        assert_eq!(line, last, "{body}\n{message}");
        assert!(
            message.contains(needle),
            "{body}\nexpected {needle:?} in: {message}"
        );
    }
}

/// The legacy stream may not be used while a blocking stream captures; a non-blocking one does
/// not stop it.
#[test]
fn legacy_stream_use_during_a_blocking_capture_is_an_error() {
    let blocking = r#"{"op":"stream","id":3,"kind":"created","flags":"blocking"}
{"op":"graph_begin","graph":1,"stream":3}
{"op":"launch","name":"k","stream":0,"writes":[1]}
"#;
    let (line, message) = error(&format!("{STREAMS}{blocking}"));
    assert_eq!(line, 9);
    assert!(
        message.contains("legacy default stream is used"),
        "{message}"
    );
    let non_blocking = r#"{"op":"graph_begin","graph":1,"stream":1}
{"op":"launch","name":"k","stream":0,"writes":[1]}
{"op":"graph_end","graph":1,"stream":1}
"#;
    Engine::check_all(&records(&format!("{STREAMS}{non_blocking}"))).unwrap();
}

/// A valid capture that forks and joins ends without error, and both streams leave capture.
#[test]
fn a_joined_fork_ends_and_both_streams_run_again() {
    let body = r#"{"op":"graph_begin","graph":1,"stream":1}
{"op":"record","event":1,"stream":1}
{"op":"wait","stream":2,"event":1}
{"op":"launch","name":"k","stream":2,"writes":[1]}
{"op":"record","event":2,"stream":2}
{"op":"wait","stream":1,"event":2}
{"op":"graph_end","graph":1,"stream":1}
{"op":"stream_sync","stream":2}
{"op":"launch","name":"after","stream":2,"writes":[1]}
"#;
    let findings = Engine::check_all(&records(&format!("{STREAMS}{body}"))).unwrap();
    assert!(
        findings.iter().all(|f| f.as_race().is_none()),
        "captured work ran nothing: {findings:?}"
    );
}

/// A wait in a capture on an event never recorded orders nothing and captures no node, but it
/// is a call on its stream, which the timeline exporters draw on that stream's track (a
/// fuzzing find: they panicked on it).
#[test]
fn a_wait_on_a_never_recorded_event_in_a_capture_resolves_its_stream() {
    let body = r#"{"op":"graph_begin","graph":1,"stream":1}
{"op":"wait","stream":1,"event":2}
{"op":"graph_end","graph":1,"stream":1}
"#;
    let mut engine = Engine::new();
    engine.observe(true);
    let mut warnings = 0;
    for r in records(&format!("{STREAMS}{body}")) {
        engine
            .apply(&r, &mut |f| warnings += usize::from(f.as_race().is_none()))
            .unwrap();
        if matches!(r.op, Op::Wait { .. }) {
            let resolved = engine.resolved().unwrap();
            assert_eq!(resolved.stream.as_ref().map(|s| s.id), Some(1));
            assert_eq!(resolved.graph, Some(1));
        }
    }
    assert_eq!(warnings, 1, "the unrecorded event is warned about");
}

#[test]
fn freeing_an_empty_block_at_a_live_blocks_address_leaves_the_live_one() {
    // A block of no bytes takes no bytes; its free must not end the block that has them.
    let body = r#"{"op":"alloc","buf":5,"bytes":64,"space":"device","pool":"caching","addr":4096}
{"op":"alloc","buf":6,"bytes":0,"space":"device","pool":"caching","addr":4096}
{"op":"free","buf":6}
{"op":"alloc","buf":7,"bytes":64,"space":"device","pool":"caching","addr":4096}
"#;
    let (line, message) = error(&format!("{STREAMS}{body}"));
    assert_eq!(line, 10);
    assert!(message.contains("overlaps the live block 5"), "{message}");
}

#[test]
fn caching_blocks_cannot_overlap_live_ones() {
    let body = r#"{"op":"alloc","buf":5,"bytes":64,"space":"device","pool":"caching","addr":4096}
{"op":"alloc","buf":6,"bytes":64,"space":"device","pool":"caching","addr":4128}
"#;
    let (line, message) = error(&format!("{STREAMS}{body}"));
    assert_eq!(line, 8);
    assert!(message.contains("overlaps the live block 5"), "{message}");
    // Another device's bytes are other bytes; adjacent blocks do not overlap.
    let ok = r#"{"op":"alloc","buf":5,"bytes":64,"space":"device","pool":"caching","addr":4096}
{"op":"alloc","buf":6,"bytes":64,"space":"device","pool":"caching","addr":4096,"device":1}
{"op":"alloc","buf":7,"bytes":64,"space":"device","pool":"caching","addr":4160}
"#;
    Engine::check_all(&records(&format!("{STREAMS}{ok}"))).unwrap();
}

/// A caching free is no free-while-in-use; a later use of the id is a use after free.
#[test]
fn caching_free_is_not_checked_but_ends_the_id() {
    let body = r#"{"op":"alloc","buf":5,"bytes":64,"space":"device","pool":"caching","addr":4096,"stream":1}
{"op":"launch","name":"k","stream":2,"writes":[5]}
{"op":"free","buf":5}
{"op":"launch","name":"late","stream":1,"reads":[5]}
"#;
    let findings = Engine::check_all(&records(&format!("{STREAMS}{body}"))).unwrap();
    let races: Vec<_> = findings.iter().filter_map(Finding::as_race).collect();
    assert_eq!(races.len(), 1, "{races:?}");
    assert_eq!(races[0].kind, RaceKind::UseAfterFree);
    assert_eq!((races[0].current.line, races[0].previous.line), (10, 9));
    let warnings: Vec<_> = findings.iter().filter_map(Finding::as_warning).collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.kind() == WarningKind::CachingFreeInUse && w.line == 9),
        "{warnings:?}"
    );
}

/// Runs `n` caching blocks, each at a fresh address (a pool growing without reuse), written
/// on the pool's stream and freed by the host, with a stream sync before each free when
/// `synced`. Returns the engine.
fn cycle_blocks(n: u64, synced: bool) -> Engine {
    let mut engine = Engine::new();
    for r in &records(STREAMS) {
        engine.apply(r, &mut |_| {}).unwrap();
    }
    let mut line = 100;
    let mut apply = |engine: &mut Engine, op: Op| {
        line += 1;
        let record = Record {
            line,
            thread: 0,
            at: None,
            name: Some("k".into()),
            op,
        };
        engine.apply(&record, &mut |_| {}).unwrap();
    };
    for i in 0..n {
        let buf = 100 + i;
        let alloc = Op::Alloc {
            buf,
            bytes: 64,
            device: 0,
            space: crate::trace::MemSpace::Device,
            stream: Some(1),
            addr: Some((1 << 20) | (i * 64)),
            pool: crate::trace::Pool::Caching,
        };
        apply(&mut engine, alloc);
        let write = Op::Launch {
            stream: 1,
            reads: vec![],
            writes: vec![crate::trace::Access::whole(buf)],
            atomics: Vec::new(),
        };
        apply(&mut engine, write);
        if synced {
            apply(&mut engine, Op::StreamSync { stream: 1 });
        }
        apply(&mut engine, Op::Free { buf, stream: None });
    }
    engine
}

/// Memory stays bounded by live state: freed history the host threads know is dropped at the
/// periodic sweeps, and so are the retired blocks nothing names any more; history a later
/// access could still race with is kept.
#[test]
fn freed_history_stays_bounded() {
    let n = 3 * pool::SWEEP_EVERY;
    let synced = cycle_blocks(n, true);
    assert!(
        synced.history_pieces() <= pool::SWEEP_EVERY as usize,
        "synchronized history is dropped at each sweep: {} pieces kept",
        synced.history_pieces()
    );
    assert!(synced.retired.len() <= pool::SWEEP_EVERY as usize);
    let unsynced = cycle_blocks(n, false);
    assert_eq!(
        unsynced.history_pieces(),
        n as usize,
        "writes the host never waited for can still race with a block on those bytes"
    );
}

/// R16 with R19: a reused block's bytes keep an earlier block's atomic updates until every
/// host thread knows them, however many frees later sweep the pools' history.
#[test]
fn atomics_on_freed_blocks_survive_the_history_sweep() {
    for (list, churn) in [
        ("atomics", 0),
        ("atomics", 2 * pool::SWEEP_EVERY),
        ("reads", 2 * pool::SWEEP_EVERY),
    ] {
        let mut text = String::from("{\"streamsan_trace\":1,\"minor\":2}\n");
        text.push_str(&format!(
            "{{\"op\":\"stream\",\"id\":1,\"kind\":\"created\",\"flags\":\"non_blocking\"}}\n\
             {{\"op\":\"stream\",\"id\":2,\"kind\":\"created\",\"flags\":\"non_blocking\"}}\n\
             {{\"op\":\"event\",\"id\":1}}\n\
             {{\"op\":\"alloc\",\"buf\":1,\"bytes\":256,\"space\":\"device\",\"pool\":\"caching\",\"addr\":4096,\"stream\":1}}\n\
             {{\"op\":\"launch\",\"name\":\"fill\",\"stream\":1,\"writes\":[1]}}\n\
             {{\"op\":\"record\",\"event\":1,\"stream\":1}}\n\
             {{\"op\":\"wait\",\"stream\":2,\"event\":1}}\n\
             {{\"op\":\"launch\",\"name\":\"hist\",\"stream\":2,\"{list}\":[1]}}\n\
             {{\"op\":\"stream_sync\",\"stream\":1}}\n\
             {{\"op\":\"free\",\"buf\":1}}\n"
        ));
        for i in 0..churn {
            text.push_str(&format!(
                "{{\"op\":\"alloc\",\"buf\":{b},\"bytes\":256,\"space\":\"device\",\"pool\":\"caching\",\"addr\":1048576,\"stream\":1}}\n\
                 {{\"op\":\"free\",\"buf\":{b}}}\n",
                b = 100 + i
            ));
        }
        text.push_str(
            "{\"op\":\"alloc\",\"buf\":2,\"bytes\":256,\"space\":\"device\",\"pool\":\"caching\",\"addr\":4096,\"stream\":1}\n\
             {\"op\":\"launch\",\"name\":\"fill2\",\"stream\":1,\"writes\":[2]}\n",
        );
        let reader = crate::trace::TraceReader::new(text.as_bytes(), "t.jsonl").unwrap();
        let checked = crate::check::check_reader(reader).unwrap();
        assert_eq!(
            checked.report.summary.races, 1,
            "{list} after {churn} frees: s2's use is unordered with s1's new write"
        );
    }
}

/// The findings of `body` checked by an engine that keeps the tombstones of only the last
/// `kept` frees.
pub(super) fn check_keeping(kept: usize, body: &str) -> Vec<Finding> {
    let mut engine = Engine::new();
    engine.keep_freed(kept);
    let mut findings = Vec::new();
    for r in &records(&format!("{STREAMS}{body}")) {
        engine.apply(r, &mut |f| findings.push(f)).expect("valid");
    }
    findings
}

/// Memory stays bounded when ids are never reused: past the kept frees, the oldest tombstone
/// goes; a later access to its id is a warning (not an input error, not a race) while the
/// record's other accesses are checked as usual, an access to a kept one is still a use after
/// free, and an id allocated again is an ordinary buffer.
#[test]
fn the_oldest_tombstones_go_and_their_ids_are_remembered() {
    let mut body = String::new();
    for b in 10..20 {
        body += &format!(
            "{{\"op\":\"alloc\",\"buf\":{b},\"bytes\":64,\"space\":\"device\"}}\n\
             {{\"op\":\"free\",\"buf\":{b}}}\n"
        );
    }
    // Line 26 is the last free (buffer 19); the uses follow.
    body += "{\"op\":\"launch\",\"name\":\"old\",\"stream\":1,\"reads\":[1,12],\"writes\":[18]}\n\
             {\"op\":\"launch\",\"name\":\"late\",\"stream\":1,\"reads\":[18]}\n\
             {\"op\":\"alloc\",\"buf\":12,\"bytes\":64,\"space\":\"device\"}\n\
             {\"op\":\"launch\",\"name\":\"again\",\"stream\":2,\"writes\":[12]}\n";
    let findings = check_keeping(3, &body);
    let warnings: Vec<_> = findings.iter().filter_map(Finding::as_warning).collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].line, 27);
    assert_eq!(
        warnings[0].fact,
        WarningFact::ForgottenBuffer { id: 12, kept: 3 }
    );
    // Buffer 18 is among the kept: both records' uses of it are races, the first one in the
    // record that also named the forgotten 12.
    let races: Vec<_> = findings.iter().filter_map(Finding::as_race).collect();
    let got: Vec<_> = races
        .iter()
        .map(|r| (r.kind, r.current.line, r.buffer.id))
        .collect();
    assert_eq!(
        got,
        vec![
            (RaceKind::UseAfterFree, 27, 18),
            (RaceKind::UseAfterFree, 28, 18)
        ]
    );
    // Keeping them all, the same trace reports every use after free.
    let all = check_keeping(FREED_KEPT, &body);
    let kinds: Vec<_> = all
        .iter()
        .filter_map(Finding::as_race)
        .map(|r| r.kind)
        .collect();
    assert_eq!(kinds, vec![RaceKind::UseAfterFree; 3], "{all:?}");
}

/// An access to a forgotten buffer is left out alone: the rest of its record still orders and
/// is checked. Each trace gives the same races with every tombstone kept (the use after free
/// aside) as with none.
#[test]
fn a_forgotten_buffer_leaves_the_rest_of_its_record_checked() {
    // 1. A blocking copy from pageable memory (host buffer 4, forgotten) still synchronizes
    //    the host with stream 1, so stream 2's later write is ordered after line 9's.
    // 2. An async copy from a forgotten buffer still writes live buffer 2: the read on stream 2
    //    races with it.
    // 3. A node that reads a forgotten buffer still writes live buffer 2 at each launch: the
    //    read on stream 2 races with it.
    type Races = Vec<(RaceKind, u64, u64)>;
    let cases: [(&str, Races); 3] = [
        (
            "{\"op\":\"alloc\",\"buf\":3,\"bytes\":16,\"space\":\"device\"}\n\
             {\"op\":\"alloc\",\"buf\":2,\"bytes\":16,\"space\":\"device\"}\n\
             {\"op\":\"alloc\",\"buf\":4,\"bytes\":16,\"space\":\"host\"}\n\
             {\"op\":\"free\",\"buf\":4}\n\
             {\"op\":\"launch\",\"name\":\"k\",\"stream\":1,\"writes\":[3]}\n\
             {\"op\":\"memcpy\",\"stream\":1,\"src\":4,\"dst\":2,\"blocking\":true}\n\
             {\"op\":\"launch\",\"name\":\"k2\",\"stream\":2,\"writes\":[3]}\n",
            vec![],
        ),
        (
            "{\"op\":\"alloc\",\"buf\":2,\"bytes\":16,\"space\":\"device\"}\n\
             {\"op\":\"alloc\",\"buf\":4,\"bytes\":16,\"space\":\"device\"}\n\
             {\"op\":\"free\",\"buf\":4}\n\
             {\"op\":\"memcpy\",\"stream\":1,\"src\":4,\"dst\":2,\"blocking\":false}\n\
             {\"op\":\"launch\",\"name\":\"k2\",\"stream\":2,\"reads\":[2]}\n",
            vec![(RaceKind::ReadAfterWrite, 11, 2)],
        ),
        (
            "{\"op\":\"alloc\",\"buf\":2,\"bytes\":16,\"space\":\"device\"}\n\
             {\"op\":\"alloc\",\"buf\":4,\"bytes\":16,\"space\":\"device\"}\n\
             {\"op\":\"free\",\"buf\":4}\n\
             {\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"launch\",\"name\":\"node\",\"stream\":1,\"reads\":[4],\"writes\":[2]}\n\
             {\"op\":\"graph_end\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"graph_launch\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"launch\",\"name\":\"k2\",\"stream\":2,\"reads\":[2]}\n",
            vec![(RaceKind::ReadAfterWrite, 14, 2)],
        ),
    ];
    for (body, expected) in cases {
        let races = |keep: usize| -> Races {
            check_keeping(keep, body)
                .iter()
                .filter_map(Finding::as_race)
                .filter(|r| r.kind != RaceKind::UseAfterFree)
                .map(|r| (r.kind, r.current.line, r.buffer.id))
                .collect()
        };
        assert_eq!(races(0), expected, "forgetting every tombstone:\n{body}");
        assert_eq!(races(FREED_KEPT), expected, "keeping them:\n{body}");
        let warned = check_keeping(0, body)
            .iter()
            .filter_map(Finding::as_warning)
            .any(|w| w.fact == WarningFact::ForgottenBuffer { id: 4, kept: 0 });
        assert!(warned, "the access to buffer 4 is warned about:\n{body}");
    }
}

/// A forgotten buffer freed again, or given to record_stream, is an input error naming it,
/// as a kept one is.
#[test]
fn a_forgotten_buffer_freed_again_is_an_input_error() {
    for (call, expected) in [
        ("{\"op\":\"free\",\"buf\":4}", "freed again"),
        (
            "{\"op\":\"record_stream\",\"buf\":4,\"stream\":1}",
            "given to record_stream",
        ),
    ] {
        let body = format!(
            "{{\"op\":\"alloc\",\"buf\":4,\"bytes\":16,\"space\":\"device\"}}\n\
             {{\"op\":\"free\",\"buf\":4}}\n{call}\n"
        );
        let mut engine = Engine::new();
        engine.keep_freed(0);
        let error = records(&format!("{STREAMS}{body}"))
            .iter()
            .find_map(|r| engine.apply(r, &mut |_| {}).err())
            .expect("an input error");
        let message = error.kind.to_string();
        assert_eq!(error.line, 9);
        assert!(
            message.contains(&format!("buffer 4 is {expected}")),
            "{message}"
        );
    }
}

/// A node of a live graph still names the buffer it was captured with: letting the tombstone
/// go keeps that allocation among the retired, and the launch reports the use after free.
#[test]
fn a_graph_node_still_finds_a_buffer_whose_tombstone_went() {
    let body = "{\"op\":\"alloc\",\"buf\":7,\"bytes\":64,\"space\":\"device\"}\n\
                {\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
                {\"op\":\"launch\",\"name\":\"node\",\"stream\":1,\"reads\":[7]}\n\
                {\"op\":\"graph_end\",\"graph\":1,\"stream\":1}\n\
                {\"op\":\"free\",\"buf\":7}\n\
                {\"op\":\"alloc\",\"buf\":8,\"bytes\":64,\"space\":\"device\"}\n\
                {\"op\":\"free\",\"buf\":8}\n\
                {\"op\":\"graph_launch\",\"graph\":1,\"stream\":2}\n";
    let findings = check_keeping(1, body);
    let races: Vec<_> = findings.iter().filter_map(Finding::as_race).collect();
    assert_eq!(races.len(), 1, "{findings:?}");
    assert_eq!(
        (races[0].kind, races[0].buffer.id),
        (RaceKind::UseAfterFree, 7)
    );
}

/// A legacy default stream is blocking on every device, stream 0 included; declaring stream 0
/// counts it as declared, used or not.
#[test]
fn a_legacy_stream_is_blocking_and_stream_0_counts_once_declared() {
    for device in [0, 1] {
        let id = if device == 0 { 0 } else { 5 };
        let (line, message) = error(&format!(
            "{{\"op\":\"stream\",\"id\":{id},\"device\":{device},\"kind\":\"legacy_default\",\"flags\":\"non_blocking\"}}\n"
        ));
        assert_eq!(line, 2);
        assert!(message.contains("cannot be non_blocking"), "{message}");
    }
    let mut engine = Engine::new();
    for r in &records("{\"op\":\"stream\",\"id\":0,\"kind\":\"legacy_default\"}\n") {
        engine.apply(r, &mut |_| {}).expect("valid");
    }
    assert_eq!(engine.stats().streams, 1);
}
