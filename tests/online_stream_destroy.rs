//! Destroying a stream on a real GPU (R20 of docs/ordering-model.md): dropping the last handle
//! of a stream made here destroys it and records `stream_destroy`; the destroy returns while
//! the stream's work still runs, so a read on another stream races with that work unless the
//! program synchronized first. Streams made and dropped in a loop are each recorded, and the
//! trace checks clean. Run with `cargo test -- --include-ignored` where a GPU is.

#![cfg(feature = "cuda")]

use std::path::PathBuf;

use serde_json::Value;
use streamsan::cuda::sys::CUgraphInstantiate_flags as InstantiateFlags;
use streamsan::cuda::sys::CUstreamCaptureMode;
use streamsan::engine::{Race, RaceKind};
use streamsan_demos::{Kernels, SPIN_CYCLES, ops};

mod common;

const N: usize = 1 << 20;

/// Where the run's trace goes: `$STREAMSAN_FIXTURE_DIR/streams/<name>.jsonl` when set (to be
/// committed under `tests/fixtures/gpu/streams/`), else a temporary file.
fn trace_path(name: &str) -> PathBuf {
    match std::env::var_os("STREAMSAN_FIXTURE_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir).join("streams");
            std::fs::create_dir_all(&dir).unwrap();
            dir.join(format!("{name}.jsonl"))
        }
        None => std::env::temp_dir().join(format!("streamsan-{name}-{}.jsonl", std::process::id())),
    }
}

/// The trace's records, checked offline first: it must be valid, as written.
fn read_trace(path: &PathBuf) -> Vec<Value> {
    streamsan::check::check_path(path.to_str().unwrap()).expect("a valid trace");
    let text = std::fs::read_to_string(path).unwrap();
    if std::env::var_os("STREAMSAN_FIXTURE_DIR").is_none() {
        let _ = std::fs::remove_file(path);
    }
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `fill` writes x = 2 on a producer stream behind a spin; the producer is dropped (destroyed);
/// the consumer stream copies x back. With `fixed`, the host synchronizes the producer before
/// dropping it. cudarc's event tracking is off: only the program's own synchronization counts.
fn producer_dropped(fixed: bool, name: &str) -> (Vec<f32>, Vec<Race>, Vec<Value>) {
    let path = trace_path(name);
    let ctx = common::traced_context(&path);
    unsafe { ctx.disable_event_tracking() };
    Kernels::get(&ctx).unwrap();
    let consumer = ctx.new_stream_named("consumer").unwrap();
    let producer = ctx.new_stream_named("producer").unwrap();
    common::warm_up(&producer).unwrap();
    common::warm_up(&consumer).unwrap();
    let mut x = consumer.alloc_zeros::<f32>(N).unwrap();
    consumer.synchronize().unwrap();
    ops::spin(&producer, SPIN_CYCLES).unwrap();
    ops::fill(&producer, &mut x, 2.0).unwrap();
    if fixed {
        producer.synchronize().unwrap();
    }
    drop(producer);
    let out = consumer.clone_dtoh(&x).unwrap();
    let races = ctx.sanitizer().unwrap().races();
    ctx.synchronize().unwrap();
    drop((x, consumer));
    drop(ctx);
    (out, races, read_trace(&path))
}

/// The producer's trace id and the line of its `stream_destroy`.
fn destroy_of_producer(trace: &[Value]) -> (u64, usize) {
    let producer = trace
        .iter()
        .find(|r| r["op"] == "stream" && r["name"] == "producer")
        .expect("the producer declared")["id"]
        .as_u64()
        .unwrap();
    let at = trace
        .iter()
        .position(|r| r["op"] == "stream_destroy" && r["id"] == producer)
        .expect("the producer's destroy recorded");
    (producer, at)
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_dropped_streams_work_still_races() {
    let (out, races, trace) = producer_dropped(false, "destroy-racy");
    println!("racy: x read back as {} (meant: 2)", out[0]);
    assert!(
        out.iter().all(|&v| v == 0.0),
        "the copy ran before the fill: {}",
        out[0]
    );
    let (producer, destroyed_at) = destroy_of_producer(&trace);
    let race = races
        .iter()
        .find(|r| r.kind == RaceKind::ReadAfterWrite)
        .unwrap_or_else(|| panic!("no read-after-write race in {races:#?}"));
    let previous = race.previous.stream.as_ref().expect("on a stream");
    assert_eq!(
        previous.id, producer,
        "the write was on the destroyed stream"
    );
    assert_eq!(previous.name.as_deref(), Some("producer"));
    assert!(
        (race.previous.line as usize) < destroyed_at + 1
            && (race.current.line as usize) > destroyed_at + 1,
        "the write before the destroy (line {}), the read after it",
        destroyed_at + 1
    );

    let (out, races, trace) = producer_dropped(true, "destroy-fixed");
    assert!(out.iter().all(|&v| v == 2.0), "fixed: {}", out[0]);
    assert_eq!(races, vec![], "the host waited for the producer");
    destroy_of_producer(&trace);
}

/// A stream per iteration, synchronized and dropped: each is declared and destroyed in the
/// trace, the values are right and nothing races.
#[test]
#[ignore = "needs a CUDA device"]
fn streams_made_and_dropped_in_a_loop() {
    const ROUNDS: usize = 500;
    let path = std::env::temp_dir().join(format!("streamsan-loop-{}.jsonl", std::process::id()));
    let ctx = common::traced_context(&path);
    Kernels::get(&ctx).unwrap();
    let home = ctx.new_stream().unwrap();
    let mut x = home.alloc_zeros::<f32>(1024).unwrap();
    home.synchronize().unwrap();
    for i in 0..ROUNDS {
        let s = ctx.new_stream().unwrap();
        ops::fill(&s, &mut x, i as f32).unwrap();
        s.synchronize().unwrap();
        drop(s);
    }
    let out = home.clone_dtoh(&x).unwrap();
    assert!(out.iter().all(|&v| v == (ROUNDS - 1) as f32), "{}", out[0]);
    assert_eq!(ctx.sanitizer().unwrap().races(), vec![]);
    drop((x, home));
    // The last handle of the sanitizer: the trace is complete once it goes.
    drop(ctx);
    let checked = streamsan::check::check_path(path.to_str().unwrap()).expect("a valid trace");
    assert_eq!(checked.report.races.len(), 0, "offline too");
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let trace: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let destroys = trace.iter().filter(|r| r["op"] == "stream_destroy").count();
    assert!(
        destroys >= ROUNDS,
        "{destroys} destroys for {ROUNDS} streams"
    );
}

/// A stream forked inside a capture, joined back and dropped before the capture ends: CUDA
/// destroys it (`cudaSuccess`, R20) and its node stays in the graph. The trace must check
/// offline (the engine takes the destroy of a stream that joined a capture), the graph's
/// launch must give the child's value, and nothing races.
#[test]
#[ignore = "needs a CUDA device"]
fn a_stream_forked_in_a_capture_may_be_dropped_before_it_ends() {
    let path = std::env::temp_dir().join(format!("streamsan-capfork-{}.jsonl", std::process::id()));
    let ctx = common::traced_context(&path);
    unsafe { ctx.disable_event_tracking() };
    Kernels::get(&ctx).unwrap();
    let s = ctx.new_stream().unwrap();
    common::warm_up(&s).unwrap();
    let mut x = s.alloc_zeros::<f32>(N).unwrap();
    s.synchronize().unwrap();
    s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .unwrap();
    let child = s.fork().unwrap();
    ops::fill(&child, &mut x, 2.0).unwrap();
    s.join(&child).unwrap();
    drop(child);
    let graph = s
        .end_capture(InstantiateFlags(0))
        .unwrap()
        .expect("a graph");
    graph.launch().unwrap();
    let out = s.clone_dtoh(&x).unwrap();
    assert!(out.iter().all(|&v| v == 2.0), "{}", out[0]);
    drop((graph, x, s));
    drop(ctx);
    let checked = streamsan::check::check_path(path.to_str().unwrap())
        .expect("the engine takes the destroy of a stream that joined a capture");
    assert_eq!(checked.report.races.len(), 0);
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let destroy = text
        .find("\"op\":\"stream_destroy\"")
        .expect("the child's destroy");
    let end = text
        .find("\"op\":\"graph_end\"")
        .expect("the capture's end");
    assert!(destroy < end, "destroyed inside the capture");
}
