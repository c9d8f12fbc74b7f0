//! `stream_destroy` (R20, trace v1 minor 3): what a destroy orders (nothing), what still waits
//! for a destroyed stream's work, the id's reuse, and the slots of ended actors given to new
//! ones without hiding a race. The racy/fixed pairs are in `tests/corpus/r20-*`.

use super::*;
use crate::trace::TraceReader;

/// The records of `body` after a minor-3 header.
fn records(body: &str) -> Vec<Record> {
    let text = format!("{{\"streamsan_trace\":1,\"minor\":3}}\n{body}");
    TraceReader::new(text.as_bytes(), "t.jsonl")
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn findings(body: &str) -> Vec<Finding> {
    Engine::check_all(&records(body)).expect("a valid trace")
}

/// The races of `body` as (current line, previous line, previous stream id).
fn races(body: &str) -> Vec<(u64, u64, Option<StreamId>)> {
    findings(body)
        .iter()
        .filter_map(Finding::as_race)
        .map(|r| {
            let prev = r.previous.stream.as_ref().map(|s| s.id);
            (r.current.line, r.previous.line, prev)
        })
        .collect()
}

fn error(body: &str) -> (u64, String) {
    let e = Engine::check_all(&records(body)).expect_err("an input error");
    (e.line, e.kind.to_string())
}

/// Streams 1 (non-blocking), 2 (non-blocking), 3 (blocking), event 1, buffer 1.
const SETUP: &str = r#"{"op":"stream","id":1,"kind":"created","flags":"non_blocking"}
{"op":"stream","id":2,"kind":"created","flags":"non_blocking"}
{"op":"stream","id":3,"kind":"created","flags":"blocking"}
{"op":"event","id":1}
{"op":"alloc","buf":1,"bytes":64,"space":"device"}
"#;

fn on(stream: u64, access: &str) -> String {
    format!("{{\"op\":\"launch\",\"name\":\"k\",\"stream\":{stream},\"{access}\":[1]}}\n")
}

fn destroy(stream: u64) -> String {
    format!("{{\"op\":\"stream_destroy\",\"id\":{stream}}}\n")
}

/// The destroy returns at once and the work still runs (cudaStreamDestroy: "the function will
/// return immediately"): a read on another stream still races with it, unless the host
/// synchronized with the stream before destroying it.
#[test]
fn a_destroy_orders_nothing() {
    let racy = format!("{SETUP}{}{}{}", on(1, "writes"), destroy(1), on(2, "reads"));
    assert_eq!(
        races(&racy),
        vec![(9, 7, Some(1))],
        "named as the destroyed stream"
    );
    let sync = "{\"op\":\"stream_sync\",\"stream\":1}\n";
    let fixed = format!(
        "{SETUP}{}{sync}{}{}",
        on(1, "writes"),
        destroy(1),
        on(2, "reads")
    );
    assert_eq!(races(&fixed), vec![]);
}

/// cudaDeviceSynchronize "blocks until the device has completed all preceding requested
/// tasks", the destroyed stream's included.
#[test]
fn a_device_sync_waits_for_a_destroyed_streams_work() {
    let sync = "{\"op\":\"device_sync\",\"device\":0}\n";
    let body = format!(
        "{SETUP}{}{}{sync}{}",
        on(1, "writes"),
        destroy(1),
        on(2, "reads")
    );
    assert_eq!(races(&body), vec![]);
}

/// An event recorded before the destroy still stands for the stream's work up to it.
#[test]
fn an_event_recorded_before_the_destroy_still_orders() {
    let body = format!(
        "{SETUP}{}{{\"op\":\"record\",\"event\":1,\"stream\":1}}\n{}{{\"op\":\"wait\",\"event\":1,\"stream\":2}}\n{}",
        on(1, "writes"),
        destroy(1),
        on(2, "reads")
    );
    assert_eq!(races(&body), vec![]);
}

/// The legacy stream's barrier (R6) still covers a destroyed blocking stream's work (decided
/// where the documentation is silent, the way that can only miss a race); a non-blocking
/// stream's work it never covered.
#[test]
fn the_legacy_barrier_covers_a_destroyed_blocking_stream() {
    let blocking = format!("{SETUP}{}{}{}", on(3, "writes"), destroy(3), on(0, "reads"));
    assert_eq!(races(&blocking), vec![]);
    let non_blocking = format!("{SETUP}{}{}{}", on(1, "writes"), destroy(1), on(0, "reads"));
    assert_eq!(races(&non_blocking), vec![(9, 7, Some(1))]);
}

/// The id may be declared again: a new stream, which knows nothing of the old one's work.
#[test]
fn a_redeclared_id_is_a_new_stream() {
    let again = "{\"op\":\"stream\",\"id\":1,\"kind\":\"created\",\"flags\":\"non_blocking\"}\n";
    let body = format!(
        "{SETUP}{}{}{again}{}",
        on(1, "writes"),
        destroy(1),
        on(1, "reads")
    );
    assert_eq!(races(&body), vec![(10, 7, Some(1))]);
    let r = findings(&body);
    let race = r.iter().find_map(Finding::as_race).unwrap();
    let (old, new) = (race.previous.stream.as_ref(), race.current.stream.as_ref());
    assert_ne!(
        old.unwrap().ordinal,
        new.unwrap().ordinal,
        "two declarations, two streams"
    );
}

/// What cudaStreamDestroy rejects, and a use after the destroy, are input errors at their line.
#[test]
fn invalid_destroys_are_input_errors() {
    let cases: &[(String, u64, &str)] = &[
        (format!("{SETUP}{}", destroy(0)), 7, "only a created stream"),
        (
            format!(
                "{SETUP}{{\"op\":\"stream\",\"id\":7,\"kind\":\"per_thread_default\"}}\n{}",
                destroy(7)
            ),
            8,
            "only a created stream",
        ),
        (
            format!("{SETUP}{}", destroy(9)),
            7,
            "stream 9 is not declared",
        ),
        (
            format!("{SETUP}{}{}", destroy(1), destroy(1)),
            8,
            "stream 1 is not declared",
        ),
        (
            format!("{SETUP}{}{}", destroy(1), on(1, "reads")),
            8,
            "stream 1 is not declared",
        ),
        (
            format!(
                "{SETUP}{{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}}\n{}",
                destroy(1)
            ),
            8,
            "the capture of graph 1 it began",
        ),
    ];
    for (body, line, says) in cases {
        let (at, message) = error(body);
        assert_eq!(at, *line, "{message}");
        assert!(message.contains(says), "{message} should say {says:?}");
    }
}

/// A stream made, used, synchronized and destroyed over and over takes the slot of the one
/// before: the actor table, and so every clock, stays as small as the live streams.
#[test]
fn ended_streams_give_their_slots_to_new_ones() {
    let mut body = String::from("{\"op\":\"alloc\",\"buf\":1,\"bytes\":64,\"space\":\"device\"}\n");
    for i in 0..5_000u64 {
        let id = 10 + i;
        body.push_str(&format!(
            "{{\"op\":\"stream\",\"id\":{id},\"kind\":\"created\",\"flags\":\"non_blocking\"}}\n{}{{\"op\":\"stream_sync\",\"stream\":{id}}}\n{}",
            on(id, "writes"),
            destroy(id)
        ));
    }
    let slots = slots_after_race_free(&body);
    assert!(slots <= 4, "{slots} slots for 5,000 streams");
}

/// The actor table's size after checking `body`, which must not race.
fn slots_after_race_free(body: &str) -> usize {
    let mut engine = Engine::new();
    let mut found = Vec::new();
    for r in records(body) {
        engine.apply(&r, &mut |f| found.push(f)).unwrap();
    }
    assert!(found.iter().all(|f| f.as_race().is_none()));
    engine.actors.slots()
}

/// A slot is given away only once *every* host thread knows the ended stream's work: thread
/// 2, which never synchronized, still races with it from a stream made afterwards.
#[test]
fn a_slot_waits_for_every_host_thread() {
    let new = |id: u64, thread: u64| {
        format!(
            "{{\"op\":\"stream\",\"id\":{id},\"kind\":\"created\",\"flags\":\"non_blocking\",\"thread\":{thread}}}\n"
        )
    };
    let read_on = |stream: u64, thread: u64| {
        format!(
            "{{\"op\":\"launch\",\"name\":\"k\",\"stream\":{stream},\"reads\":[1],\"thread\":{thread}}}\n"
        )
    };
    // Thread 2 exists (it made stream 5) before stream 1's write.
    let head = format!("{SETUP}{}", new(5, 2));
    let sync1 = "{\"op\":\"stream_sync\",\"stream\":1}\n";
    let racy = format!(
        "{head}{}{sync1}{}{}{}{}",
        on(1, "writes"),
        destroy(1),
        new(6, 1),
        new(7, 2),
        read_on(7, 2)
    );
    assert_eq!(races(&racy), vec![(13, 8, Some(1))]);
    // Once thread 2 synchronizes the device too, the slot is free and the read is ordered.
    let sync2 = "{\"op\":\"device_sync\",\"device\":0,\"thread\":2}\n";
    let fixed = format!(
        "{head}{}{sync1}{}{sync2}{}{}{}",
        on(1, "writes"),
        destroy(1),
        new(6, 1),
        new(7, 2),
        read_on(7, 2)
    );
    assert_eq!(races(&fixed), vec![]);
}

/// A stream in a reused slot is a stream of its own: its work races as its own, and what
/// others had learned of the slot's earlier stream is not taken as learned of it.
#[test]
fn a_reused_slot_starts_a_new_history() {
    let sync1 = "{\"op\":\"stream_sync\",\"stream\":1}\n";
    let again = "{\"op\":\"stream\",\"id\":8,\"kind\":\"created\",\"flags\":\"non_blocking\"}\n";
    let body = format!(
        "{SETUP}{}{sync1}{}{again}{}{}",
        on(1, "writes"),
        destroy(1),
        on(8, "writes"),
        on(2, "reads")
    );
    let found = findings(&body);
    let race = found.iter().find_map(Finding::as_race).expect("a race");
    assert_eq!(race.previous.stream.as_ref().map(|s| s.id), Some(8));
    assert_eq!(race.previous.line, 11);
    assert_eq!(race.why, Unordered::NeverSynchronized);
}

/// Graphs captured, launched and destroyed over and over: their lanes' slots are reused.
#[test]
fn destroyed_graphs_give_their_lanes_slots_to_new_ones() {
    let mut body = String::from(SETUP);
    for _ in 0..2_000 {
        body.push_str(
            "{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"launch\",\"name\":\"k\",\"stream\":1,\"writes\":[1]}\n\
             {\"op\":\"graph_end\",\"graph\":1,\"stream\":1}\n\
             {\"op\":\"graph_launch\",\"graph\":1,\"stream\":2}\n\
             {\"op\":\"stream_sync\",\"stream\":2}\n\
             {\"op\":\"graph_destroy\",\"graph\":1}\n",
        );
    }
    let slots = slots_after_race_free(&body);
    assert!(slots <= 8, "{slots} slots for 2,000 graphs");
}

/// Decided where the trace is silent (R20, as R16 decides for the pools' dropped history): a
/// host thread first seen after every host thread knew an ended stream's work is taken to know
/// it too (a thread is started by one that was seen, after it synchronized): the new thread's
/// actor takes the ended stream's slot. Without the destroy, the stream lives on and the late
/// thread races with it, as one seen before and never synchronized always does
/// (`a_slot_waits_for_every_host_thread`).
#[test]
fn a_thread_first_seen_after_the_work_is_known_knows_it() {
    let sync1 = "{\"op\":\"stream_sync\",\"stream\":1}\n";
    let late = "{\"op\":\"launch\",\"name\":\"k\",\"stream\":2,\"reads\":[1],\"thread\":3}\n";
    let body = format!("{SETUP}{}{sync1}{}{late}", on(1, "writes"), destroy(1));
    assert_eq!(races(&body), vec![]);
    let body = format!("{SETUP}{}{sync1}{late}", on(1, "writes"));
    assert_eq!(races(&body), vec![(9, 7, Some(1))]);
}

/// CUDA lets a stream that joined a capture (by waiting on a captured event) be destroyed before
/// the capture ends; its nodes stay in the graph and run at each launch. Probed on an H200 (CUDA
/// 13, driver 580): `cudaStreamDestroy` of the joined stream returned `cudaSuccess`, and the
/// graph instantiated, launched and synchronized.
#[test]
fn a_stream_that_joined_a_capture_may_be_destroyed_before_it_ends() {
    let body = format!(
        "{SETUP}{{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}}\n\
         {{\"op\":\"record\",\"event\":1,\"stream\":1}}\n\
         {{\"op\":\"wait\",\"event\":1,\"stream\":2}}\n\
         {}{{\"op\":\"record\",\"event\":1,\"stream\":2}}\n\
         {{\"op\":\"wait\",\"event\":1,\"stream\":1}}\n{}\
         {{\"op\":\"graph_end\",\"graph\":1,\"stream\":1}}\n\
         {{\"op\":\"graph_launch\",\"graph\":1,\"stream\":3}}\n{}",
        on(2, "writes"),
        destroy(2),
        on(3, "reads")
    );
    // The node captured on stream 2 (line 10) ran at the launch (line 15), before the read on
    // the launching stream.
    assert_eq!(races(&body), vec![]);
    // Without the launch's stream order, the node races: read on stream 1 instead.
    let racy = body.replace(
        "{\"op\":\"launch\",\"name\":\"k\",\"stream\":3,\"reads\"",
        "{\"op\":\"launch\",\"name\":\"k\",\"stream\":1,\"reads\"",
    );
    assert_eq!(races(&racy).len(), 1, "{racy}");
}

/// A use after free is reported however the free was ordered, so a free by a destroyed stream
/// whose slot went to another stream is still named as the destroyed stream.
#[test]
fn a_free_by_a_destroyed_stream_is_named_after_its_slot_is_reused() {
    let body = "{\"op\":\"stream\",\"id\":1,\"kind\":\"created\",\"flags\":\"non_blocking\",\"name\":\"freer\"}\n\
         {\"op\":\"alloc\",\"buf\":1,\"bytes\":64,\"space\":\"device\",\"stream\":1}\n\
         {\"op\":\"free\",\"buf\":1,\"stream\":1}\n\
         {\"op\":\"stream_sync\",\"stream\":1}\n\
         {\"op\":\"stream_destroy\",\"id\":1}\n\
         {\"op\":\"stream\",\"id\":5,\"kind\":\"created\",\"flags\":\"non_blocking\",\"name\":\"innocent\"}\n\
         {\"op\":\"launch\",\"name\":\"late\",\"stream\":5,\"reads\":[1]}\n";
    let found = findings(body);
    let race = found
        .iter()
        .find_map(Finding::as_race)
        .expect("a use after free");
    assert_eq!(race.kind, RaceKind::UseAfterFree);
    let previous = race.previous.stream.as_ref().expect("on a stream");
    assert_eq!(previous.name.as_deref(), Some("freer"));
    assert_eq!(
        race.current.stream.as_ref().unwrap().name.as_deref(),
        Some("innocent")
    );
}
