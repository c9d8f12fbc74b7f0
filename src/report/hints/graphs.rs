//! The "why" and the fix of a race with a graph node on one side (trace v1 minor 1). A node's
//! `line` is where it was captured; it ran at its graph's launch (`GraphSite::launch`), so the
//! ordering to add is around the launch, or, between two nodes of one launch, an edge captured
//! into the graph (CUDA Programming Guide, "Stream Capture", "Cross-stream Dependencies and
//! Events").

use super::super::names::{access_noun, actor, stream_sym};
use crate::engine::finding::{GraphSite, Race, RaceKind, Site, Unordered};

/// Why nothing orders the two sides, when a side is a graph node.
pub(super) fn why(race: &Race) -> Option<String> {
    let (cur, prev, (cl, pl), (cn, pn)) = sides(race)?;
    match (&cur.graph, &prev.graph) {
        (Some(cg), Some(pg)) if cg.graph == pg.graph && cg.launch == pg.launch => Some(format!(
            "nothing captured in graph g{} orders the node captured at line {pl} on {} before the \
             node captured at line {cl} on {}: no event was recorded after the one and waited on \
             before the other during the capture, and a graph's nodes are ordered only by what was \
             captured (both ran in the launch at line {}).",
            cg.ordinal,
            stream_of(prev),
            stream_of(cur),
            cg.launch
        )),
        (Some(cg), Some(pg)) => Some(format!(
            "graph g{}'s launch at line {} on {} is not ordered after graph g{}'s launch at line \
             {} on {}: no event wait or synchronization between the two launches orders the {pn} \
             of the node captured at line {pl} before the {cn} of the node captured at line {cl} \
             (launches are ordered only behind earlier work of their stream and earlier launches \
             of the same graph).",
            cg.ordinal,
            cg.launch,
            launch_stream(cg),
            pg.ordinal,
            pg.launch,
            launch_stream(pg)
        )),
        (_, Some(pg)) => {
            let c = actor(cur);
            let head = format!(
                "graph g{}'s launch at line {} (whose node captured at line {pl} made the {pn})",
                pg.ordinal, pg.launch
            );
            Some(match race.why.last_sync() {
                None => format!(
                    "{c} never synchronized with graph g{}: nothing orders {head} before line {cl}.",
                    pg.ordinal
                ),
                Some(sync) => format!(
                    "{c} last synchronized with graph g{} at line {} ({}), which does not cover \
                     {head}; nothing orders that launch before line {cl}.",
                    pg.ordinal, sync.line, sync.op
                ),
            })
        }
        (Some(cg), None) => {
            let p = actor(prev);
            Some(match race.why {
                Unordered::SyncBefore(sync) | Unordered::SyncNotCovering(sync) => format!(
                    "graph g{} last synchronized with {p} at line {} ({}), which is before the \
                     {pn} at line {pl}; nothing orders that {pn} before the launch at line {} \
                     (whose node captured at line {cl} makes the {cn}).",
                    cg.ordinal, sync.line, sync.op, cg.launch
                ),
                _ => format!(
                    "graph g{} never synchronized with {p}: nothing orders the {pn} at line {pl} \
                     before the launch at line {} (whose node captured at line {cl} makes the \
                     {cn}).",
                    cg.ordinal, cg.launch
                ),
            })
        }
        (None, None) => None,
    }
}

/// The calls that order the two sides, when a side is a graph node.
pub(super) fn fix(race: &Race) -> Option<String> {
    let (cur, prev, (cl, pl), (cn, pn)) = sides(race)?;
    match (&cur.graph, &prev.graph) {
        (Some(cg), Some(pg)) if cg.graph == pg.graph && cg.launch == pg.launch => {
            let (ps, cs) = (stream_of(prev), stream_of(cur));
            Some(format!(
                "give graph g{} the edge during the capture: record an event on {ps} after the \
                 node captured at line {pl} and make {cs} wait on it before the node captured at \
                 line {cl} (`cudaEventRecord(ev, {ps})` then `cudaStreamWaitEvent({cs}, ev)`, \
                 both while capturing), then capture the graph again.",
                cg.ordinal
            ))
        }
        (Some(cg), Some(pg)) => {
            let (cs, ps) = (launch_stream(cg), launch_stream(pg));
            Some(format!(
                "record an event on {ps} after the launch of graph g{} at line {} and make {cs} \
                 wait on it before the launch of graph g{} at line {}: `cudaEventRecord(ev, \
                 {ps})` then `cudaStreamWaitEvent({cs}, ev)`, or launch both on one stream (with \
                 cudarc's API `let ev = {ps}.record_event(None)?; {cs}.wait(&ev)?`).",
                pg.ordinal, pg.launch, cg.ordinal, cg.launch
            ))
        }
        (_, Some(pg)) => {
            let ls = launch_stream(pg);
            Some(match &cur.stream {
                Some(cs) => {
                    let c = stream_sym(cs);
                    format!(
                        "record an event on {ls} after the graph launch at line {} and make {c} \
                         wait on it before the {cn} at line {cl}: `cudaEventRecord(ev, {ls})` \
                         after `cudaGraphLaunch`, then `cudaStreamWaitEvent({c}, ev)` (with \
                         cudarc's API `let ev = {ls}.record_event(None)?; {c}.wait(&ev)?`).",
                        pg.launch
                    )
                }
                None => format!(
                    "synchronize {ls} after the graph launch at line {} and before the host {cn} \
                     at line {cl}: `{ls}.synchronize()` (`cudaStreamSynchronize({ls})`).",
                    pg.launch
                ),
            })
        }
        (Some(cg), None) => {
            let ls = launch_stream(cg);
            Some(match &prev.stream {
                Some(ps) => {
                    let p = stream_sym(ps);
                    format!(
                        "make the launch wait for the {pn}: record an event on {p} after the {pn} \
                         at line {pl} and make {ls} wait on it before the graph launch at line \
                         {}: `cudaEventRecord(ev, {p})` then `cudaStreamWaitEvent({ls}, ev)` (with \
                         cudarc's API `let ev = {p}.record_event(None)?; {ls}.wait(&ev)?`).",
                        cg.launch
                    )
                }
                None => format!(
                    "make the host {pn} at line {pl} before enqueueing the graph launch at line {}, \
                     on the same host thread.",
                    cg.launch
                ),
            })
        }
        (None, None) => None,
    }
}

/// Both sides of a race, their lines and their access nouns; `None` for a use after free,
/// whose words do not depend on graphs.
#[allow(clippy::type_complexity)]
fn sides(race: &Race) -> Option<(&Site, &Site, (u64, u64), (&'static str, &'static str))> {
    if race.kind == RaceKind::UseAfterFree {
        return None;
    }
    let (cur, prev) = (&race.current, &race.previous);
    Some((
        cur,
        prev,
        (cur.line, prev.line),
        (access_noun(cur), access_noun(prev)),
    ))
}

/// The stream a node was captured on, as `s2`.
fn stream_of(site: &Site) -> String {
    site.stream.as_ref().map(stream_sym).unwrap_or_default()
}

/// The stream a graph was launched on, as `s1`, or a description when no longer known.
fn launch_stream(g: &GraphSite) -> String {
    g.launch_stream
        .as_ref()
        .map_or_else(|| "the launch stream".to_string(), stream_sym)
}
