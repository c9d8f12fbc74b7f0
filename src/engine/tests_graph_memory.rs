//! Graph memory nodes (`graph_memory.rs`): the mechanics around the racy/fixed pairs of
//! `tests/corpus/r17-graph-allocation-lifetime` and `r17-allocation-node-order`.

use super::tests_minor1::{STREAMS, check_keeping, error, records};
use super::*;

/// A capture on stream 1 that allocates buffer 9, writes it, and (with `free`) frees it.
fn graph(free: bool) -> String {
    let mut g = String::from(
        "{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}\n\
         {\"op\":\"alloc\",\"buf\":9,\"bytes\":64,\"space\":\"device\",\"stream\":1}\n\
         {\"op\":\"launch\",\"name\":\"fill\",\"stream\":1,\"writes\":[9]}\n",
    );
    if free {
        g.push_str("{\"op\":\"free\",\"buf\":9,\"stream\":1}\n");
    }
    g + "{\"op\":\"graph_end\",\"graph\":1,\"stream\":1}\n"
}

const LAUNCH: &str = "{\"op\":\"graph_launch\",\"graph\":1,\"stream\":1}\n";
const READ: &str = "{\"op\":\"launch\",\"name\":\"read\",\"stream\":1,\"reads\":[9]}\n";
const FREE: &str = "{\"op\":\"free\",\"buf\":9,\"stream\":1}\n";
const SYNC: &str = "{\"op\":\"stream_sync\",\"stream\":1}\n";

fn findings(body: &str) -> Vec<Finding> {
    Engine::check_all(&records(&format!("{STREAMS}{body}"))).expect("a valid trace")
}

fn races(findings: &[Finding]) -> Vec<RaceKind> {
    findings
        .iter()
        .filter_map(Finding::as_race)
        .map(|r| r.kind)
        .collect()
}

/// Whether buffer 9 is among the leaked (buffer 1 of `STREAMS` always is).
fn leaks_9(findings: &[Finding]) -> bool {
    findings.iter().any(|f| {
        matches!(f, Finding::Warning(Warning { fact: WarningFact::Leak { first, .. }, .. })
            if first.iter().any(|b| b.id == 9))
    })
}

/// A free node must free a graph allocation, once in its graph; freed by the program and then
/// by a launch's free node, it is freed twice. Each is an input error naming why.
#[test]
fn a_free_node_frees_a_graph_allocation_once() {
    let (line, message) = error(&format!(
        "{STREAMS}{{\"op\":\"graph_begin\",\"graph\":1,\"stream\":1}}\n{{\"op\":\"free\",\"buf\":1,\"stream\":1}}\n"
    ));
    assert_eq!(line, 8);
    assert!(message.contains("graph allocation"), "{message}");

    let twice = graph(true).replace(
        "{\"op\":\"graph_end\"",
        "{\"op\":\"free\",\"buf\":9,\"stream\":1}\n{\"op\":\"graph_end\"",
    );
    let (line, message) = error(&format!("{STREAMS}{twice}"));
    assert_eq!(line, 11, "the second free node");
    assert!(message.contains("second free node"), "{message}");

    // Graph 2 frees graph 1's allocation (graph 1 does not); freed by the program after graph
    // 1 ran, it is freed again when graph 2's free node runs.
    let g2 = "{\"op\":\"graph_begin\",\"graph\":2,\"stream\":1}\n\
              {\"op\":\"free\",\"buf\":9,\"stream\":1}\n\
              {\"op\":\"graph_end\",\"graph\":2,\"stream\":1}\n";
    let (line, message) = error(&format!(
        "{STREAMS}{}{g2}{LAUNCH}{SYNC}{{\"op\":\"free\",\"buf\":9}}\n\
         {{\"op\":\"graph_launch\",\"graph\":2,\"stream\":1}}\n",
        graph(false)
    ));
    assert_eq!(line, 17, "graph 2's launch");
    assert!(message.contains("freed twice"), "{message}");
    // Without the program's free, graph 2 frees it and a later use is a use after free.
    let body = format!(
        "{}{g2}{LAUNCH}{{\"op\":\"graph_launch\",\"graph\":2,\"stream\":1}}\n{READ}{SYNC}",
        graph(false)
    );
    assert_eq!(races(&findings(&body)), [RaceKind::UseAfterFree]);
}

/// An allocation its graph does not free lives on after the launch, is freed by the program,
/// and is allocated again by the next launch: no race, no leak, and a use between the free and
/// the next launch is a use after free.
#[test]
fn an_allocation_the_program_frees_is_allocated_again_by_the_next_launch() {
    let body = format!(
        "{}{LAUNCH}{READ}{FREE}{LAUNCH}{READ}{FREE}{SYNC}",
        graph(false)
    );
    let found = findings(&body);
    assert!(races(&found).is_empty(), "{found:?}");
    assert!(!leaks_9(&found));

    let body = format!("{}{LAUNCH}{FREE}{READ}{SYNC}", graph(false));
    assert_eq!(races(&findings(&body)), [RaceKind::UseAfterFree]);
}

/// A graph allocation whose graph never ran was never allocated: no leak. Once launched and
/// never freed, it leaks like any allocation.
#[test]
fn a_graph_allocation_leaks_only_once_allocated() {
    assert!(!leaks_9(&findings(&graph(false))));
    assert!(leaks_9(&findings(&format!(
        "{}{LAUNCH}{SYNC}",
        graph(false)
    ))));
    assert!(!leaks_9(&findings(&format!(
        "{}{LAUNCH}{SYNC}",
        graph(true)
    ))));
}

/// With the tombstone of the allocation freed by the graph let go (`keep_freed`) between two
/// launches, the next launch allocates it again instead of reporting its nodes' accesses as
/// uses after free.
#[test]
fn an_allocation_whose_tombstone_went_is_allocated_again() {
    let others = "{\"op\":\"alloc\",\"buf\":20,\"bytes\":64,\"space\":\"device\"}\n\
                  {\"op\":\"free\",\"buf\":20}\n\
                  {\"op\":\"alloc\",\"buf\":21,\"bytes\":64,\"space\":\"device\"}\n\
                  {\"op\":\"free\",\"buf\":21}\n";
    let body = format!("{}{LAUNCH}{SYNC}{others}{LAUNCH}{SYNC}", graph(true));
    let found = check_keeping(1, &body);
    assert!(races(&found).is_empty(), "{found:?}");
}

/// Whether an allocation is live matters when a free node runs, not when it is captured:
/// graph 2 frees graph 1's allocation at each launch, and graph 3, captured while that
/// allocation is freed, frees it after graph 1 allocated it again.
#[test]
fn a_free_node_may_be_captured_while_its_allocation_is_freed() {
    let free_in = |g: u64| {
        format!(
            "{{\"op\":\"graph_begin\",\"graph\":{g},\"stream\":1}}\n\
             {{\"op\":\"free\",\"buf\":9,\"stream\":1}}\n\
             {{\"op\":\"graph_end\",\"graph\":{g},\"stream\":1}}\n"
        )
    };
    let launch = |g: u64| format!("{{\"op\":\"graph_launch\",\"graph\":{g},\"stream\":1}}\n");
    let body = format!(
        "{}{}{}{}{}{}{}{SYNC}",
        graph(false),
        free_in(2),
        launch(1),
        launch(2),
        free_in(3),
        launch(1),
        launch(3),
    );
    let found = findings(&body);
    assert!(races(&found).is_empty(), "{found:?}");
    assert!(!leaks_9(&found));
}

/// Each launch frees the allocation again under the same ordinal: the tombstones kept
/// (`keep_freed`) tell the frees apart, and the last launch's free still makes a later use a
/// use after free, however many launches came before.
#[test]
fn a_use_after_the_last_of_many_launches_is_a_use_after_free() {
    let body = format!("{}{}{READ}{SYNC}", graph(true), LAUNCH.repeat(8));
    let found = check_keeping(2, &body);
    assert_eq!(races(&found), [RaceKind::UseAfterFree], "{found:?}");
}

/// A graph destroyed before any launch never allocated its allocation: the id is free again,
/// and nothing leaks.
#[test]
fn a_graph_destroyed_before_its_first_launch_leaves_nothing() {
    let body = format!(
        "{}{{\"op\":\"graph_destroy\",\"graph\":1}}\n\
         {{\"op\":\"alloc\",\"buf\":9,\"bytes\":64,\"space\":\"device\"}}\n{{\"op\":\"free\",\"buf\":9}}\n",
        graph(true)
    );
    let found = findings(&body);
    assert!(races(&found).is_empty(), "{found:?}");
    assert!(!leaks_9(&found));
}

/// What CUDA refuses is an input error at its line: the id of a graph allocation allocated
/// anew while its graph exists, the program freeing an allocation its graph frees, two graphs
/// freeing one allocation, and a free node running before any launch allocated its buffer.
#[test]
fn what_cuda_refuses_of_graph_allocations_is_an_input_error() {
    let alloc_9 = "{\"op\":\"alloc\",\"buf\":9,\"bytes\":64,\"space\":\"device\"}\n";
    let launch_2 = "{\"op\":\"graph_launch\",\"graph\":2,\"stream\":1}\n";
    let graph_2_frees = "{\"op\":\"graph_begin\",\"graph\":2,\"stream\":2}\n\
                         {\"op\":\"free\",\"buf\":9,\"stream\":2}\n\
                         {\"op\":\"graph_end\",\"graph\":2,\"stream\":2}\n";
    let cases: [(String, u64, &str); 4] = [
        (
            format!("{}{LAUNCH}{SYNC}{alloc_9}", graph(true)),
            14,
            "destroy the graph first",
        ),
        (
            format!("{}{{\"op\":\"free\",\"buf\":9}}\n", graph(true)),
            12,
            "graph 1 frees it",
        ),
        (
            // Graph 2 frees graph 1's allocation, then graph 1 frees it as well.
            graph(true).replace(
                "{\"op\":\"free\",\"buf\":9,\"stream\":1}\n",
                &format!("{graph_2_frees}{FREE}"),
            ),
            13,
            "second free node",
        ),
        (
            format!("{}{graph_2_frees}{launch_2}", graph(false)),
            14,
            "before any launch of graph 1",
        ),
    ];
    for (body, line, says) in cases {
        let (at, message) = error(&format!("{STREAMS}{body}"));
        assert_eq!(at, line, "{message}\n{body}");
        assert!(message.contains(says), "{message}");
    }
}

/// A relaunch while the previous launch's allocation is not freed (a graph instantiated to free
/// it on relaunch: CUDA fails the launch otherwise) frees it first on the launching stream: a
/// use on another stream not ordered before that relaunch is freed while in use.
#[test]
fn a_relaunch_frees_what_the_previous_launch_left_allocated() {
    let body = format!("{}{LAUNCH}{LAUNCH}{SYNC}{FREE}{SYNC}", graph(false));
    let found = findings(&body);
    assert!(races(&found).is_empty(), "{found:?}");
    assert!(!leaks_9(&found));

    let read_on_2 = "{\"op\":\"launch\",\"name\":\"read\",\"stream\":2,\"reads\":[9]}\n";
    let body = format!(
        "{}{LAUNCH}{SYNC}{read_on_2}{LAUNCH}{SYNC}{FREE}{SYNC}",
        graph(false)
    );
    assert_eq!(races(&findings(&body)), [RaceKind::FreeWhileInUse]);
}

/// The free before a relaunch is part of the relaunch, which CUDA orders after the previous
/// launch: relaunched on another stream, it races with nothing that launch did.
#[test]
fn a_relaunch_on_another_stream_frees_after_the_previous_launch() {
    let launch_on_2 = "{\"op\":\"graph_launch\",\"graph\":1,\"stream\":2}\n";
    let sync_2 = "{\"op\":\"stream_sync\",\"stream\":2}\n";
    let body = format!(
        "{}{LAUNCH}{launch_on_2}{sync_2}{{\"op\":\"free\",\"buf\":9}}\n",
        graph(false)
    );
    let found = findings(&body);
    assert!(races(&found).is_empty(), "{found:?}");
}

/// A graph destroyed before its first launch while another graph frees its allocation: that
/// free node frees an allocation no launch made, an input error at its launch.
#[test]
fn a_free_node_of_an_allocation_whose_graph_never_ran_is_an_input_error() {
    let graph_2_frees = "{\"op\":\"graph_begin\",\"graph\":2,\"stream\":1}\n\
                         {\"op\":\"free\",\"buf\":9,\"stream\":1}\n\
                         {\"op\":\"graph_end\",\"graph\":2,\"stream\":1}\n";
    let body = format!(
        "{STREAMS}{}{graph_2_frees}{{\"op\":\"graph_destroy\",\"graph\":1}}\n\
         {{\"op\":\"graph_launch\",\"graph\":2,\"stream\":2}}\n",
        graph(false)
    );
    let (line, message) = error(&body);
    assert_eq!(line, 15, "{message}");
    assert!(
        message.contains("before any launch of graph 1"),
        "{message}"
    );
}
