//! `streamsan check --perfetto`: the trace drawn as Chrome trace-event JSON
//! (`streamsan::report::perfetto`, specified in `docs/perfetto.md`).
//!
//! Every trace of `tests/corpus/`, `tests/fixtures/gpu/`, `tests/cli/valid/` and
//! `examples/traces/` is exported and the output checked against the trace-event format as the
//! viewers read it ([`check_structure`]): every flow has both ends, in order, each inside a
//! complete event of its track (where Perfetto binds it); every `tid` is named; complete events
//! have a `dur` and follow issue order on their track; every race of the JSON report has its
//! instant event on the current access's track at its line, and a `race` flow from the previous
//! access. Small hand-written traces then pin which synchronization edges are drawn, and the CLI
//! tests run the built binary.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::Value;
use streamsan::check::check_reader_with;
use streamsan::report::perfetto::{PID, PerfettoWriter};
use streamsan::report::{RenderOptions, render_json};
use streamsan::trace::reader::TraceReader;
use streamsan::trace::writer::TraceWriter;
use streamsan_demos::synth::{SynthConfig, records};

/// The drawn trace and the JSON report of the same check.
struct Exported {
    trace: Value,
    report: Value,
    /// The stream of each `graph_launch` record, by line: a graph node's side of a race is
    /// drawn at its launch.
    launches: std::collections::HashMap<u64, u64>,
}

fn export<R: BufRead + Send>(reader: TraceReader<R>, title: &str) -> Exported {
    let mut writer = PerfettoWriter::new(Vec::new(), title).expect("writing to a Vec");
    let mut launches = std::collections::HashMap::new();
    let checked = check_reader_with(reader, &mut |r, resolved| {
        if let streamsan::trace::Op::GraphLaunch { stream, .. } = r.op {
            launches.insert(r.line, stream);
        }
        writer.record(r, resolved)
    })
    .expect("the trace is valid");
    let bytes = writer.finish(&checked.report).expect("writing to a Vec");
    let trace = serde_json::from_slice(&bytes).expect("the output is one JSON document");
    let report = serde_json::from_str(&render_json(&checked.report, &RenderOptions::default()))
        .expect("the JSON report is JSON");
    Exported {
        trace,
        report,
        launches,
    }
}

fn export_str(trace: &str) -> Exported {
    export(
        TraceReader::new(trace.as_bytes(), "t.jsonl").expect("a header"),
        "t.jsonl",
    )
}

fn export_file(path: &Path) -> Exported {
    let name = path.to_str().expect("UTF-8 paths");
    export(TraceReader::open(name).expect("the trace opens"), name)
}

/// Who a track belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Actor {
    Host(u64),
    Stream(u64),
}

/// A flow as drawn: its name, and the (actor, trace line) of both ends.
type Flow = (String, (Actor, u64), (Actor, u64));

/// What [`check_structure`] found, for the tests that look further.
#[derive(Debug)]
struct Drawn {
    flows: Vec<Flow>,
    /// `thread_name` by actor.
    names: BTreeMap<Actor, String>,
    /// Actors in `thread_sort_index` order.
    order: Vec<Actor>,
}

fn f64_of(ev: &Value, key: &str) -> f64 {
    ev[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is a number in {ev}"))
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("an unsigned integer: {v}"))
}

/// The trace line of a flow end or instant (drawn at `line + 0.5`).
fn line_of_mid(ts: f64) -> u64 {
    assert_eq!(ts.fract(), 0.5, "flow ends and instants sit at line + 0.5");
    ts.floor() as u64
}

/// The actor of one side of a race in the JSON report.
fn site_actor(site: &Value) -> Actor {
    match site["stream"].as_u64() {
        Some(stream) => Actor::Stream(stream),
        None => Actor::Host(u64_of(&site["thread"])),
    }
}

/// Where one side of a JSON race is drawn: its own track and line, or for a graph node the
/// stream and line of the launch that ran it.
fn site_position(site: &Value, ex: &Exported) -> (Actor, u64) {
    match site["graph_launch"].as_u64() {
        Some(launch) => (Actor::Stream(ex.launches[&launch]), launch),
        None => (site_actor(site), u64_of(&site["line"])),
    }
}

/// Checks `ex.trace` against the trace-event format and against `ex.report`; panics naming
/// `file` on the first violation.
fn check_structure(file: &str, ex: &Exported) -> Drawn {
    let trace = &ex.trace;
    assert_eq!(trace["displayTimeUnit"], "ns", "{file}");
    let events = trace["traceEvents"]
        .as_array()
        .unwrap_or_else(|| panic!("{file}: traceEvents is an array"));

    // Metadata: one process name, one name and one sort index per track.
    let mut thread_names: BTreeMap<u64, String> = BTreeMap::new();
    let mut sort_index: BTreeMap<u64, i64> = BTreeMap::new();
    let mut process_names = 0;
    for ev in events {
        assert_eq!(ev["pid"], PID, "{file}: one pid: {ev}");
        assert!(ev["name"].is_string(), "{file}: a name: {ev}");
        assert!(ev["ph"].is_string(), "{file}: a phase: {ev}");
        if ev["ph"] != "M" {
            continue;
        }
        match ev["name"].as_str().unwrap() {
            "process_name" => process_names += 1,
            "thread_name" => {
                let name = ev["args"]["name"].as_str().expect("args.name").to_string();
                let old = thread_names.insert(u64_of(&ev["tid"]), name);
                assert!(old.is_none(), "{file}: a track named twice: {ev}");
            }
            "thread_sort_index" => {
                let index = ev["args"]["sort_index"].as_i64().expect("args.sort_index");
                let old = sort_index.insert(u64_of(&ev["tid"]), index);
                assert!(old.is_none(), "{file}: a track sorted twice: {ev}");
            }
            other => panic!("{file}: unexpected metadata event {other}"),
        }
    }
    assert_eq!(process_names, 1, "{file}: one process_name");
    assert_eq!(
        thread_names.keys().collect::<Vec<_>>(),
        sort_index.keys().collect::<Vec<_>>(),
        "{file}: every named track has a sort index and vice versa"
    );
    let distinct: BTreeSet<i64> = sort_index.values().copied().collect();
    assert_eq!(
        distinct.len(),
        sort_index.len(),
        "{file}: distinct sort indexes"
    );

    // Every tid an event uses is named.
    for ev in events {
        if let Some(tid) = ev.get("tid") {
            assert!(
                thread_names.contains_key(&u64_of(tid)),
                "{file}: tid without thread_name: {ev}"
            );
        }
    }

    // Complete events: a dur, issue order on their track, one actor per track.
    let mut slices: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    let mut tid_actor: BTreeMap<u64, Actor> = BTreeMap::new();
    let mut actor_tid: BTreeMap<Actor, u64> = BTreeMap::new();
    for ev in events.iter().filter(|e| e["ph"] == "X") {
        let tid = u64_of(&ev["tid"]);
        let ts = f64_of(ev, "ts");
        let dur = f64_of(ev, "dur");
        assert!(dur > 0.0, "{file}: X events have a positive dur: {ev}");
        assert_eq!(
            ts,
            u64_of(&ev["args"]["line"]) as f64,
            "{file}: ts is the line: {ev}"
        );
        let track = slices.entry(tid).or_default();
        if let Some(&(prev_ts, prev_end)) = track.last() {
            assert!(
                prev_ts < ts && prev_end <= ts,
                "{file}: complete events on tid {tid} are in issue order without overlap: {ev}"
            );
        }
        track.push((ts, ts + dur));
        let actor = match ev["cat"].as_str() {
            Some("stream") => Actor::Stream(u64_of(&ev["args"]["stream"])),
            Some("host") => Actor::Host(u64_of(&ev["args"]["thread"])),
            _ => panic!("{file}: X events are `stream` or `host`: {ev}"),
        };
        assert_eq!(
            *tid_actor.entry(tid).or_insert(actor),
            actor,
            "{file}: one actor per track: {ev}"
        );
        assert_eq!(
            *actor_tid.entry(actor).or_insert(tid),
            tid,
            "{file}: one track per actor: {ev}"
        );
    }
    for (tid, actor) in &tid_actor {
        let name = &thread_names[tid];
        match actor {
            Actor::Host(t) => assert_eq!(name, &format!("host thread {t}"), "{file}"),
            Actor::Stream(_) => {
                let sym = name.split(' ').next().unwrap();
                assert!(
                    sym.len() > 1
                        && sym.starts_with('s')
                        && sym[1..].chars().all(|c| c.is_ascii_digit()),
                    "{file}: stream tracks are named by their report symbol: {name}"
                );
            }
        }
    }
    let inside = |tid: u64, ts: f64| {
        slices
            .get(&tid)
            .is_some_and(|s| s.iter().any(|&(start, end)| start < ts && ts < end))
    };

    // Flows: exactly one start and one end per id, same category and name, the end not before
    // the start, both inside a complete event of their track, the end binding to it.
    let mut starts: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    let mut ends: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    for ev in events {
        match ev["ph"].as_str().unwrap() {
            "s" => starts.entry(u64_of(&ev["id"])).or_default().push(ev),
            "f" => ends.entry(u64_of(&ev["id"])).or_default().push(ev),
            "X" | "M" | "i" => {}
            other => panic!("{file}: unexpected phase {other}"),
        }
    }
    assert_eq!(
        starts.keys().collect::<Vec<_>>(),
        ends.keys().collect::<Vec<_>>(),
        "{file}: every flow start has an end and vice versa"
    );
    let mut flows = Vec::new();
    for (id, s) in &starts {
        let f = &ends[id];
        assert_eq!(
            (s.len(), f.len()),
            (1, 1),
            "{file}: flow {id} has one s, one f"
        );
        let (s, f) = (s[0], f[0]);
        assert_eq!(s["cat"], f["cat"], "{file}: flow {id} category");
        assert_eq!(s["name"], f["name"], "{file}: flow {id} name");
        assert_eq!(
            f["bp"], "e",
            "{file}: flow {id} binds to the enclosing slice"
        );
        let (s_ts, f_ts) = (f64_of(s, "ts"), f64_of(f, "ts"));
        assert!(f_ts >= s_ts, "{file}: flow {id} ends before it starts");
        let (s_tid, f_tid) = (u64_of(&s["tid"]), u64_of(&f["tid"]));
        assert!(
            inside(s_tid, s_ts),
            "{file}: flow {id} starts outside a slice"
        );
        assert!(
            inside(f_tid, f_ts),
            "{file}: flow {id} ends outside a slice"
        );
        flows.push((
            s["name"].as_str().unwrap().to_string(),
            (tid_actor[&s_tid], line_of_mid(s_ts)),
            (tid_actor[&f_tid], line_of_mid(f_ts)),
        ));
    }

    // Races: the report's, each on the current access's track at its line, with a race flow.
    type RaceKey = (u64, u64, String, u64);
    let mut instants: Vec<RaceKey> = Vec::new();
    let mut warnings = 0;
    for ev in events.iter().filter(|e| e["ph"] == "i") {
        match ev["cat"].as_str() {
            Some("race") => {
                assert_eq!(ev["s"], "t", "{file}: races are thread-scoped: {ev}");
                let tid = u64_of(&ev["tid"]);
                let ts = f64_of(ev, "ts");
                assert!(inside(tid, ts), "{file}: race outside its operation: {ev}");
                let args = &ev["args"];
                let kind = args["kind"].as_str().unwrap().to_string();
                let buffer = args["buffer"].as_str().unwrap();
                assert_eq!(ev["name"], format!("RACE {kind} on {buffer}"), "{file}");
                for key in ["why", "fix", "current", "previous"] {
                    assert!(
                        args[key].as_str().is_some_and(|s| !s.is_empty()),
                        "{file}: race args hold `{key}`: {ev}"
                    );
                }
                let line = u64_of(&args["line"]);
                assert_eq!(line_of_mid(ts), line, "{file}: race at its line: {ev}");
                instants.push((line, u64_of(&args["previous_line"]), kind, tid));
            }
            Some("warning") => {
                assert_eq!(ev["s"], "p", "{file}: warnings are process-scoped: {ev}");
                warnings += 1;
            }
            _ => panic!("{file}: unexpected instant event: {ev}"),
        }
    }
    let races = ex.report["races"].as_array().expect("report races");
    let mut expected: Vec<RaceKey> = Vec::new();
    for race in races {
        let (cur, prev) = (&race["current"], &race["previous"]);
        let ((cur_actor, cur_line), (prev_actor, prev_line)) =
            (site_position(cur, ex), site_position(prev, ex));
        let tid = *actor_tid
            .get(&cur_actor)
            .unwrap_or_else(|| panic!("{file}: no track for {cur_actor:?}"));
        let kind = race["kind"].as_str().unwrap().to_string();
        expected.push((cur_line, prev_line, kind, tid));
        let flow = (
            "race".to_string(),
            (prev_actor, prev_line),
            (cur_actor, cur_line),
        );
        assert!(flows.contains(&flow), "{file}: no race flow {flow:?}");
    }
    instants.sort();
    expected.sort();
    assert_eq!(
        instants, expected,
        "{file}: one race instant per report race"
    );
    assert_eq!(
        warnings,
        ex.report["warnings"].as_array().unwrap().len(),
        "{file}: one instant per warning"
    );
    let race_flows = flows.iter().filter(|f| f.0 == "race").count();
    assert_eq!(race_flows, races.len(), "{file}: one race flow per race");

    let names = tid_actor
        .iter()
        .map(|(tid, actor)| (*actor, thread_names[tid].clone()))
        .collect();
    let mut by_index: Vec<(i64, Actor)> = tid_actor
        .iter()
        .map(|(tid, actor)| (sort_index[tid], *actor))
        .collect();
    by_index.sort();
    Drawn {
        flows,
        names,
        order: by_index.into_iter().map(|(_, a)| a).collect(),
    }
}

fn traces_in(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    paths.sort();
    paths
}

#[test]
fn every_committed_trace_exports_well_formed() {
    let mut checked = 0;
    let mut races = 0;
    for dir in [
        "tests/corpus",
        "tests/fixtures/gpu",
        "tests/cli/valid",
        "examples/traces",
    ] {
        let paths = traces_in(dir);
        assert!(!paths.is_empty(), "{dir} holds traces");
        for path in paths {
            let ex = export_file(&path);
            check_structure(&path.display().to_string(), &ex);
            races += ex.report["races"].as_array().unwrap().len();
            checked += 1;
        }
    }
    assert!(checked > 100, "{checked} traces");
    assert!(races > 50, "{races} races drawn");
}

/// The flows other than races, as (name, from line, to line).
fn sync_flows(drawn: &Drawn) -> BTreeSet<(String, u64, u64)> {
    drawn
        .flows
        .iter()
        .filter(|f| f.0 != "race")
        .map(|(name, from, to)| (name.clone(), from.1, to.1))
        .collect()
}

fn set(flows: &[(&str, u64, u64)]) -> BTreeSet<(String, u64, u64)> {
    flows
        .iter()
        .map(|(n, a, b)| (n.to_string(), *a, *b))
        .collect()
}

#[test]
fn waits_syncs_queries_and_legacy_barriers_are_drawn_from_the_right_operations() {
    let trace = r#"{"streamsan_trace": 1}
{"op": "stream", "id": 1, "kind": "created", "flags": "blocking", "name": "a"}
{"op": "stream", "id": 2, "kind": "created", "flags": "non_blocking", "name": "b"}
{"op": "event", "id": 1}
{"op": "alloc", "buf": 1, "bytes": 64, "device": 0, "space": "device", "name": "x"}
{"op": "launch", "name": "k1", "stream": 1, "writes": [1]}
{"op": "record", "event": 1, "stream": 1}
{"op": "wait", "stream": 2, "event": 1}
{"op": "launch", "name": "k2", "stream": 2, "reads": [1]}
{"op": "event_sync", "event": 1}
{"op": "stream_query", "stream": 2, "done": false}
{"op": "stream_query", "stream": 2, "done": true}
{"op": "launch", "name": "k3", "stream": 0, "reads": [1]}
{"op": "launch", "name": "k4", "stream": 1, "writes": [1]}
{"op": "launch", "name": "k5", "stream": 1, "writes": [1]}
{"op": "stream_sync", "stream": 0}
{"op": "launch", "name": "k6", "stream": 2, "writes": [1]}
{"op": "device_sync", "device": 0}
{"op": "free", "buf": 1}
"#;
    let ex = export_str(trace);
    assert_eq!(ex.report["summary"]["races"], 0, "{}", ex.report);
    let drawn = check_structure("flows", &ex);
    assert_eq!(
        sync_flows(&drawn),
        set(&[
            // The wait and the event sync come from the record (line 7).
            ("wait", 7, 8),
            ("event_sync", 7, 10),
            // Only the query that returned done, from the stream's last operation.
            ("stream_query", 9, 12),
            // k3 on the legacy stream waits for blocking stream a (last op: the record), not
            // for non-blocking b; a's next operation waits for k3, its one after that does not
            // again.
            ("legacy barrier", 7, 13),
            ("legacy barrier", 13, 14),
            // Synchronizing the legacy stream covers the blocking streams' work.
            ("stream_sync", 13, 16),
            ("stream_sync", 15, 16),
            // A device sync draws only what the host thread did not already sync with.
            ("device_sync", 17, 18),
        ])
    );
    assert_eq!(
        drawn.order,
        [
            Actor::Host(0),
            Actor::Stream(0),
            Actor::Stream(1),
            Actor::Stream(2)
        ]
    );
    assert_eq!(drawn.names[&Actor::Stream(0)], "s0 (legacy default)");
    assert_eq!(
        drawn.names[&Actor::Stream(1)],
        "s1 \"a\" (created, blocking)"
    );
    assert_eq!(
        drawn.names[&Actor::Stream(2)],
        "s2 \"b\" (created, non-blocking)"
    );
}

#[test]
fn events_draw_from_their_latest_record_before_the_call() {
    let trace = r#"{"streamsan_trace": 1}
{"op": "stream", "id": 1, "kind": "created", "flags": "non_blocking"}
{"op": "event", "id": 1}
{"op": "wait", "stream": 1, "event": 1}
{"op": "launch", "name": "k1", "stream": 0}
{"op": "record", "event": 1, "stream": 0}
{"op": "launch", "name": "k2", "stream": 0}
{"op": "record", "event": 1, "stream": 0}
{"op": "wait", "stream": 1, "event": 1}
{"op": "record", "event": 1, "stream": 1}
{"op": "event_query", "event": 1, "done": false}
{"op": "event_query", "event": 1, "done": true}
{"op": "event_destroy", "id": 1}
{"op": "event", "id": 1}
{"op": "wait", "stream": 1, "event": 1}
{"op": "event_sync", "event": 1}
"#;
    let ex = export_str(trace);
    let drawn = check_structure("events", &ex);
    // Unrecorded waits and syncs (lines 4, 15, 16) draw nothing; a query that was not done
    // draws nothing; a re-declared event forgets the old records.
    assert_eq!(
        sync_flows(&drawn),
        set(&[("wait", 8, 9), ("event_query", 10, 12)])
    );
    assert_eq!(ex.report["warnings"].as_array().unwrap().len(), 3);
}

#[test]
fn legacy_barriers_stay_within_their_device() {
    let trace = r#"{"streamsan_trace": 1}
{"op": "stream", "id": 10, "device": 1, "kind": "legacy_default", "flags": "blocking"}
{"op": "stream", "id": 11, "device": 1, "kind": "created", "flags": "blocking"}
{"op": "stream", "id": 1, "device": 0, "kind": "created", "flags": "blocking"}
{"op": "launch", "name": "k1", "stream": 11}
{"op": "launch", "name": "k2", "stream": 1}
{"op": "launch", "name": "k3", "stream": 10}
{"op": "launch", "name": "k4", "stream": 0}
{"op": "launch", "name": "k5", "stream": 11}
{"op": "launch", "name": "k6", "stream": 1}
{"op": "device_sync", "device": 1}
"#;
    let drawn = check_structure("devices", &export_str(trace));
    assert_eq!(
        sync_flows(&drawn),
        set(&[
            ("legacy barrier", 5, 7),
            ("legacy barrier", 6, 8),
            ("legacy barrier", 7, 9),
            ("legacy barrier", 8, 10),
            ("device_sync", 7, 11),
            ("device_sync", 9, 11),
        ])
    );
    assert_eq!(
        drawn.names[&Actor::Stream(10)],
        "s1 (legacy default, device 1)"
    );
}

#[test]
fn a_race_is_an_instant_on_the_current_track_with_the_reports_why_and_fix() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/traces/sum_before_randn.jsonl");
    let ex = export_file(&path);
    check_structure("sum_before_randn", &ex);
    let events = ex.trace["traceEvents"].as_array().unwrap();
    let race: Vec<&Value> = events
        .iter()
        .filter(|e| e["cat"] == "race" && e["ph"] == "i")
        .collect();
    assert_eq!(race.len(), 1);
    let race = race[0];
    assert_eq!(race["name"], "RACE read-after-write on b1 \"x\"");
    assert_eq!(race["ts"], 7.5);
    let report_race = &ex.report["races"][0];
    assert_eq!(race["args"]["why"], report_race["why"]);
    assert_eq!(race["args"]["fix"], report_race["fix"]);
    assert_eq!(race["args"]["range"], serde_json::json!([0, 4096]));
    // On s1's track, where `sum` runs.
    let sum = events.iter().find(|e| e["name"] == "sum").unwrap();
    assert_eq!(race["tid"], sum["tid"]);
    assert_eq!(sum["args"]["reads"][0], "b1 \"x\" [0, 4096) (arg \"x\")");
}

#[test]
fn a_synchronous_copy_is_drawn_on_its_stream_and_its_host_thread() {
    // A synchronous pageable host-to-device copy reads its source on the host (rule R8): the
    // race on that read sits on the host thread's track, inside the copy's host-side slice.
    let trace = r#"{"streamsan_trace": 1}
{"op": "stream", "id": 1, "kind": "created", "flags": "non_blocking"}
{"op": "alloc", "buf": 1, "bytes": 64, "device": 0, "space": "host", "name": "h"}
{"op": "alloc", "buf": 2, "bytes": 64, "device": 0, "space": "device", "name": "d"}
{"op": "alloc", "buf": 3, "bytes": 64, "device": 0, "space": "device", "name": "e"}
{"op": "memcpy", "stream": 1, "src": 2, "dst": 1, "blocking": false}
{"op": "memcpy", "stream": 0, "src": 1, "dst": 3, "blocking": true}
"#;
    let ex = export_str(trace);
    let drawn = check_structure("h2d", &ex);
    assert_eq!(ex.report["races"][0]["current"]["stream"], Value::Null);
    let race: Vec<&Flow> = drawn.flows.iter().filter(|f| f.0 == "race").collect();
    assert_eq!(
        race,
        [&(
            "race".to_string(),
            (Actor::Stream(1), 6),
            (Actor::Host(0), 7)
        )]
    );
    let events = ex.trace["traceEvents"].as_array().unwrap();
    let copy_at_7: BTreeSet<&str> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["ts"] == 7.0)
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        copy_at_7,
        BTreeSet::from(["memcpy", "memcpy (synchronous call)"])
    );
}

#[test]
fn a_100k_record_trace_streams_through() {
    let mut writer = TraceWriter::new(Vec::new(), serde_json::Map::new()).unwrap();
    for record in records(SynthConfig::default()).take(100_000) {
        writer.write(&record).unwrap();
    }
    let trace = writer.into_inner();
    let ex = export(
        TraceReader::new(trace.as_slice(), "synth.jsonl").unwrap(),
        "synth.jsonl",
    );
    assert_eq!(ex.report["summary"]["records"], 100_000);
    let drawn = check_structure("synth", &ex);
    assert!(drawn.flows.len() > 1000, "{} flows", drawn.flows.len());
    let xs = ex.trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    assert!(xs >= 100_000, "every record is drawn: {xs}");
}

/// A writer that fails once `room` bytes are used up.
#[derive(Debug)]
struct Full {
    room: usize,
}

impl std::io::Write for Full {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.room {
            return Err(std::io::Error::other("disk full"));
        }
        self.room -= buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_write_error_is_kept_and_returned_by_finish() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(RACY);
    let reader = TraceReader::open(path.to_str().unwrap()).unwrap();
    let mut writer = PerfettoWriter::new(Full { room: 600 }, "t").expect("the header fits");
    // The check itself goes on: the tap cannot fail it.
    let checked = check_reader_with(reader, &mut |r, resolved| writer.record(r, resolved)).unwrap();
    assert_eq!(checked.report.summary.races, 1);
    let err = writer.finish(&checked.report).unwrap_err();
    assert_eq!(err.to_string(), "disk full");
}

// ----- the command ---------------------------------------------------------------------------

const RACY: &str = "examples/traces/sum_before_randn.jsonl";
const FIXED: &str = "examples/traces/sum_before_randn_fixed.jsonl";

fn streamsan() -> Command {
    let mut cmd = Command::cargo_bin("streamsan").expect("the streamsan binary is built");
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("RUST_LOG");
    cmd
}

/// A fresh output path under cargo's scratch directory for integration tests.
fn out_path(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("perfetto");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn output(args: &[&str]) -> (i32, String, String) {
    let out = streamsan().args(args).output().expect("streamsan runs");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn cli_writes_the_file_and_changes_neither_report_nor_exit_code() {
    for format in ["text", "json", "sarif"] {
        for (trace, code) in [(RACY, 1), (FIXED, 0)] {
            let path = out_path(&format!("{format}-{code}.json"));
            let out = path.to_str().unwrap();
            let plain = output(&["check", "--format", format, trace]);
            let drawn = output(&["check", "--format", format, "--perfetto", out, trace]);
            assert_eq!(plain.0, code, "{format} {trace}");
            assert_eq!(
                drawn, plain,
                "{format} {trace}: same stdout, stderr, exit code"
            );
            let text = std::fs::read_to_string(&path).expect("the file is written");
            let value: Value = serde_json::from_str(&text).expect("JSON");
            let races = value["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["cat"] == "race" && e["ph"] == "i")
                .count();
            assert_eq!(races, code as usize, "{format} {trace}");
        }
    }
}

#[test]
fn cli_reads_standard_input() {
    let path = out_path("stdin.json");
    let out = streamsan()
        .args(["check", "--perfetto", path.to_str().unwrap(), "-"])
        .write_stdin(std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(RACY)).unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let value: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let process = value["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "process_name")
        .unwrap();
    assert_eq!(process["args"]["name"], "streamsan: <stdin>");
}

#[test]
fn cli_refuses_several_files() {
    let path = out_path("several.json");
    let (code, stdout, stderr) =
        output(&["check", "--perfetto", path.to_str().unwrap(), RACY, FIXED]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("--perfetto draws one trace"), "{stderr}");
    assert!(!path.exists());
}

#[test]
fn cli_writes_nothing_for_an_invalid_trace() {
    let path = out_path("invalid.json");
    std::fs::write(&path, "a drawing from an earlier run").unwrap();
    let (code, stdout, stderr) = output(&[
        "check",
        "--perfetto",
        path.to_str().unwrap(),
        "tests/cli/malformed/undeclared_stream.jsonl",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.starts_with("error: tests/cli/malformed/undeclared_stream.jsonl:"),
        "{stderr}"
    );
    // The earlier file is left as it was, and no partial file is left behind.
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "a drawing from an earlier run"
    );
    let partial = path.with_file_name("invalid.json.partial");
    assert!(!partial.exists());
}

#[test]
fn cli_reports_an_unwritable_path() {
    let path = out_path("no/such/dir/out.json");
    let out = path.to_str().unwrap();
    let (code, stdout, stderr) = output(&["check", "--perfetto", out, RACY]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty(), "{stdout}");
    assert_eq!(
        stderr.lines().next().unwrap(),
        format!(
            "error: {out}: cannot write the Perfetto trace: no such file or directory (os error 2)"
        )
    );
}
