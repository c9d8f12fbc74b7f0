//! CUDA graphs online, on a real GPU: `begin_capture` / `end_capture` / `CudaGraph::launch`
//! recorded as trace v1 minor 1's graph records and checked by the engine (ordering model
//! R17, R18). Each racy program shows wrong numbers (a spin kernel ahead of the producer makes
//! it show every time) and is reported; its fixed twin is right and clean. Run with
//! `cargo test -- --include-ignored` where a GPU is.
//!
//! Expectations, from NVIDIA's documentation: nodes captured on two streams are ordered only
//! by the captured event waits between them ("Cross-stream Dependencies and Events", CUDA
//! Programming Guide, stream capture); a graph launch is ordered after earlier work on its
//! stream, and later work on *that* stream after it (`cudaGraphLaunch`), nothing else.

#![cfg(feature = "cuda")]

use std::sync::Arc;

use streamsan::cuda::sys::CUgraphInstantiate_flags as InstantiateFlags;
use streamsan::cuda::sys::CUstreamCaptureMode;
use streamsan::cuda::testing::Run;
use streamsan::cuda::{CudaContext, CudaSlice, DriverError};
use streamsan::engine::{RaceKind, WarningFact};
use streamsan::trace::OpKind;
use streamsan_demos::{Error, Kernels, SPIN_CYCLES, ops};

mod common;

const N: usize = 1 << 20;
const MODE: CUstreamCaptureMode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;

/// [`common::checked`], the trace kept as `graphs/<name>` under `STREAMSAN_FIXTURE_DIR`.
fn checked(
    name: &str,
    f: impl FnOnce(&Arc<CudaContext>) -> Result<Vec<f32>, Error>,
) -> (Vec<f32>, Run) {
    common::checked(Some(&format!("graphs/{name}")), f)
}

/// A graph forking `s` into `s2`: branch A (on `s`) spins, then fills `x` with 1; branch B
/// (on `s2`) fills `x` with 2 and is meant to come second. Fixed: B waits on an event recorded
/// after A's fill inside the capture.
fn forked_graph(fixed: bool) -> (Vec<f32>, Run) {
    let name = if fixed { "fork-fixed" } else { "fork-racy" };
    checked(name, |ctx| {
        // cudarc's own tracking off, as graph programs run it (its waits on events recorded
        // outside the capture would invalidate the capture).
        unsafe { ctx.disable_event_tracking() };
        let s = ctx.new_stream()?;
        let s2 = ctx.new_stream()?;
        common::warm_up(&s)?;
        let mut x: CudaSlice<f32> = s.alloc_zeros(N)?;
        s.synchronize()?;
        s.begin_capture(MODE)?;
        s2.wait(&s.record_event(None)?)?; // fork
        ops::spin(&s, SPIN_CYCLES)?;
        ops::fill(&s, &mut x, 1.0)?; // branch A
        if fixed {
            s2.wait(&s.record_event(None)?)?;
        }
        ops::fill(&s2, &mut x, 2.0)?; // branch B
        s.wait(&s2.record_event(None)?)?; // join
        let graph = s.end_capture(InstantiateFlags(0))?.expect("a graph");
        graph.launch()?;
        Ok(s.clone_dtoh(&x)?)
    })
}

#[test]
#[ignore = "needs a CUDA device"]
fn graph_branches_without_an_edge_race_and_give_wrong_numbers() {
    let (x, run) = forked_graph(false);
    println!("forked graph, no edge: x[0] = {} (meant: 2)", x[0]);
    assert!(
        x.iter().all(|&v| v == 1.0),
        "branch B ran before branch A finished: {}",
        x[0]
    );
    let races = run.races();
    let race = races
        .iter()
        .find(|r| r.kind == RaceKind::WriteAfterWrite)
        .unwrap_or_else(|| panic!("{}", run.report()));
    // Both sides are nodes of the same launch.
    assert!(
        race.current.graph.is_some() && race.previous.graph.is_some(),
        "{race:#?}"
    );
    assert!(race.graph_launch().is_some());
    assert!(run.report().contains("graph"), "{}", run.report());
}

#[test]
#[ignore = "needs a CUDA device"]
fn graph_branches_with_a_captured_edge_are_right_and_clean() {
    let (x, run) = forked_graph(true);
    println!("forked graph, with edge: x[0] = {}", x[0]);
    assert!(x.iter().all(|&v| v == 2.0), "{}", x[0]);
    run.assert_no_races();
}

/// A graph on `s` spins, then fills `x` with 1; `s3` reads `x` after the launch. Fixed: `s3`
/// joins `s` after the launch.
fn graph_output(fixed: bool) -> (Vec<f32>, Run) {
    let name = if fixed { "output-fixed" } else { "output-racy" };
    checked(name, |ctx| {
        unsafe { ctx.disable_event_tracking() };
        let s = ctx.new_stream()?;
        let s3 = ctx.new_stream()?;
        common::warm_up(&s)?;
        let mut x: CudaSlice<f32> = s.alloc_zeros(N)?;
        s.synchronize()?;
        s.begin_capture(MODE)?;
        ops::spin(&s, SPIN_CYCLES)?;
        ops::fill(&s, &mut x, 1.0)?; // the graph's output
        let graph = s.end_capture(InstantiateFlags(0))?.expect("a graph");
        graph.launch()?;
        if fixed {
            s3.join(&s)?;
        }
        let out = s3.clone_dtoh(&x)?; // read on another stream
        s.synchronize()?;
        Ok(out)
    })
}

/// The run reports a copy reading what a graph node wrote, unordered.
fn assert_a_copy_read_a_graph_nodes_write_unordered(run: &Run) {
    let races = run.races();
    let race = races
        .iter()
        .find(|r| r.kind == RaceKind::ReadAfterWrite)
        .unwrap_or_else(|| panic!("{}", run.report()));
    assert_eq!(race.current.op, OpKind::Memcpy);
    assert!(
        race.previous.graph.is_some(),
        "the write is a graph node: {race:#?}"
    );
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_graph_output_read_on_another_stream_without_a_wait_races() {
    let (x, run) = graph_output(false);
    println!(
        "graph output read without a wait: x[0] = {} (meant: 1)",
        x[0]
    );
    assert!(
        x.iter().all(|&v| v == 0.0),
        "the read ran before the graph: {}",
        x[0]
    );
    assert_a_copy_read_a_graph_nodes_write_unordered(&run);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_graph_output_read_after_a_join_is_right_and_clean() {
    let (x, run) = graph_output(true);
    assert!(x.iter().all(|&v| v == 1.0), "{}", x[0]);
    run.assert_no_races();
}

/// cudarc's event tracking inside a capture, as CUDA takes it (seen on an H100, driver 580):
/// the tracked write's record is captured, and after the capture cudarc's wait on it fails
/// (`CUDA_ERROR_INVALID_VALUE`, stored and returned by the next call), so a read on another
/// stream runs unordered: wrong numbers, reported, and an `unrecorded-event` warning.
#[test]
#[ignore = "needs a CUDA device"]
fn tracking_s_wait_after_a_capture_orders_nothing() {
    let mut late_error = None;
    let (x, run) = checked("tracked-capture-racy", |ctx| {
        Kernels::get(ctx)?;
        let main = ctx.default_stream();
        // Allocated before any created stream: x has cudarc's events, never recorded.
        let mut x = main.alloc_zeros::<f32>(N)?;
        let s = ctx.new_stream()?;
        let s2 = ctx.new_stream()?;
        common::warm_up(&s)?;
        s.begin_capture(MODE)?;
        ops::spin(&s, SPIN_CYCLES)?;
        ops::fill(&s, &mut x, 1.0)?; // captured write, its event recorded in the capture
        let graph = s.end_capture(InstantiateFlags(0))?.expect("a graph");
        graph.launch()?;
        let out = s2.clone_dtoh(&x)?; // cudarc's wait on x's write event fails
        late_error = s2.synchronize().err();
        ctx.synchronize().ok();
        Ok(out)
    });
    println!(
        "read after a tracked capture: x[0] = {} (meant: 1), next call: {late_error:?}",
        x[0]
    );
    assert!(x.iter().all(|&v| v == 0.0), "{}", x[0]);
    assert!(
        matches!(late_error, Some(DriverError(e)) if e == streamsan::cuda::sys::CUresult::CUDA_ERROR_INVALID_VALUE),
        "{late_error:?}"
    );
    assert!(
        run.warnings()
            .iter()
            .any(|w| matches!(w.fact, WarningFact::UnrecordedEvent { .. })),
        "{}",
        run.report()
    );
    assert!(
        run.races()
            .iter()
            .any(|r| r.kind == RaceKind::ReadAfterWrite),
        "{}",
        run.report()
    );
}

/// With tracking on, a capture touching a buffer used before it fails in CUDA (cudarc waits on
/// an event recorded outside the capture: `CUDA_ERROR_STREAM_CAPTURE_ISOLATION`). The failed
/// calls record nothing, the capture's end is recorded, and checking goes on.
#[test]
#[ignore = "needs a CUDA device"]
fn a_capture_cuda_invalidates_leaves_checking_going() {
    let (x, run) = checked("invalidated-capture-racy", |ctx| {
        let s = ctx.new_stream()?;
        let s2 = ctx.new_stream()?;
        common::warm_up(&s)?;
        let mut x = s.alloc_zeros::<f32>(N)?; // records x's write event
        s.synchronize()?;
        s.begin_capture(MODE)?;
        let in_capture = ops::fill(&s, &mut x, 1.0);
        let end = s.end_capture(InstantiateFlags(0));
        println!(
            "fill in the capture: {in_capture:?}; end: {:?}",
            end.as_ref().err()
        );
        assert!(in_capture.is_err() && end.is_err());
        // Still checked: an unordered write on s2 after a write on s.
        unsafe { ctx.disable_event_tracking() };
        let mut y = s.alloc_zeros::<f32>(N)?;
        ops::spin(&s, SPIN_CYCLES)?;
        ops::fill(&s, &mut y, 1.0)?;
        ops::fill(&s2, &mut y, 2.0)?; // unordered
        ctx.synchronize()?;
        Ok(s.clone_dtoh(&x)?)
    });
    assert!(x.iter().all(|&v| v == 0.0));
    assert!(
        run.races()
            .iter()
            .any(|r| r.kind == RaceKind::WriteAfterWrite),
        "{}",
        run.report()
    );
}

/// A scratch buffer allocated, filled, copied out and freed inside a capture (cudarc's
/// `alloc_zeros` and the slice's drop on the capturing stream: an allocation node and a free
/// node), the graph launched twice. "Graph allocations are considered recreated every time a
/// graph runs" (CUDA Programming Guide, "Graph Memory Nodes"): each launch allocates, uses and
/// frees the scratch in order, so the program is right and clean.
#[test]
#[ignore = "needs a CUDA device"]
fn a_scratch_buffer_allocated_and_freed_in_a_graph_is_right_and_clean() {
    let (out, run) = checked("scratch-freed-fixed", |ctx| {
        unsafe { ctx.disable_event_tracking() };
        let s = ctx.new_stream()?;
        common::warm_up(&s)?;
        let mut out: CudaSlice<f32> = s.alloc_zeros(N)?;
        s.synchronize()?;
        s.begin_capture(MODE)?;
        let mut scratch: CudaSlice<f32> = s.alloc_zeros(N)?; // allocation node
        ops::spin(&s, SPIN_CYCLES)?;
        ops::fill(&s, &mut scratch, 1.0)?;
        s.memcpy_dtod(&scratch, &mut out)?;
        drop(scratch); // free node
        let graph = s.end_capture(InstantiateFlags(0))?.expect("a graph");
        graph.launch()?;
        graph.launch()?;
        Ok(s.clone_dtoh(&out)?)
    });
    println!(
        "scratch freed in its graph, two launches: out[0] = {}",
        out[0]
    );
    assert!(out.iter().all(|&v| v == 1.0), "{}", out[0]);
    run.assert_no_races();
}

/// A scratch buffer allocated in a capture and not freed there outlives the launch: "it can be
/// accessed ... by stream operations ordered after the graph's execution but before the
/// allocation is freed" (`cuGraphAddMemAllocNode`). `s3` reads it after the launch; fixed: `s3`
/// joins `s` first. The program frees it after a synchronization.
fn scratch_kept(fixed: bool) -> (Vec<f32>, Run) {
    let name = if fixed {
        "scratch-kept-fixed"
    } else {
        "scratch-kept-racy"
    };
    checked(name, |ctx| {
        unsafe { ctx.disable_event_tracking() };
        let s = ctx.new_stream()?;
        let s3 = ctx.new_stream()?;
        common::warm_up(&s)?;
        s.begin_capture(MODE)?;
        let mut scratch: CudaSlice<f32> = s.alloc_zeros(N)?; // allocation node
        ops::spin(&s, SPIN_CYCLES)?;
        ops::fill(&s, &mut scratch, 1.0)?;
        let graph = s.end_capture(InstantiateFlags(0))?.expect("a graph");
        graph.launch()?;
        if fixed {
            s3.join(&s)?;
        }
        let out = s3.clone_dtoh(&scratch)?; // read on another stream
        ctx.synchronize()?;
        drop(scratch); // freed by the program, after the launch
        s.synchronize()?;
        Ok(out)
    })
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_graph_allocation_read_on_another_stream_without_a_wait_races() {
    let (x, run) = scratch_kept(false);
    println!(
        "graph allocation read without a wait: x[0] = {} (meant: 1)",
        x[0]
    );
    assert!(x.iter().all(|&v| v != 1.0), "the read ran after the graph");
    assert_a_copy_read_a_graph_nodes_write_unordered(&run);
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_graph_allocation_read_after_a_join_is_right_and_clean() {
    let (x, run) = scratch_kept(true);
    assert!(x.iter().all(|&v| v == 1.0), "{}", x[0]);
    run.assert_no_races();
}
