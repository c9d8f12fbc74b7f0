//! Fix hints in PyTorch's terms, for traces recorded by the PyTorch front end (header
//! `"api": "torch"`): the same edges as the CUDA hints, named by the calls a PyTorch program
//! makes (`Stream.wait_stream`, `Event.record` / `Stream.wait_event`, `Tensor.record_stream`,
//! `Stream.synchronize`, `torch.cuda.synchronize`). PyTorch documents these in "CUDA semantics"
//! (<https://pytorch.org/docs/stable/notes/cuda.html>, "Asynchronous execution" and "Use of
//! multiple streams") and in `Tensor.record_stream`'s documentation. `None` leaves a race to
//! the CUDA wording (use after free, host threads), which names no CUDA call PyTorch hides.

use super::super::names::{access_noun, buffer_label};
use crate::engine::finding::{Race, RaceKind, Site, StreamInfo};
use crate::trace::record::StreamKind;

/// A stream as PyTorch code names it: the default stream by its accessor, any other by its
/// report symbol (the report's stream lines say which stream that is).
fn stream(s: &StreamInfo) -> String {
    match s.kind {
        StreamKind::LegacyDefault => "torch.cuda.default_stream()".to_string(),
        _ => format!("s{}", s.ordinal),
    }
}

/// The stream a graph was replayed on, or the replaying stream in words.
fn replay_stream(site: &Site) -> String {
    site.graph
        .as_ref()
        .and_then(|g| g.launch_stream.as_ref())
        .map_or_else(|| "the replaying stream".to_string(), stream)
}

/// The fix in PyTorch's terms, where it differs from the CUDA wording.
pub(super) fn fix(race: &Race) -> Option<String> {
    if race.kind == RaceKind::UseAfterFree || race.kind == RaceKind::FreeWhileInUse {
        return None;
    }
    let (cur, prev) = (&race.current, &race.previous);
    let (cn, pn) = (access_noun(cur), access_noun(prev));
    let (cl, pl) = (cur.line, prev.line);
    if let Some(reuse) = &race.reused
        && let Some(used_on) = &prev.stream
    {
        let u = stream(used_on);
        return Some(format!(
            "call `{old}.record_stream({u})` after its {pn} at line {pl} (before the tensor is \
             freed at line {freed}), so the caching allocator does not hand its block to a new \
             tensor before {u}'s work is done; or make the stream that frees it wait first: \
             `torch.cuda.current_stream().wait_stream({u})` before the last reference is dropped.",
            old = buffer_label(&reuse.buffer),
            freed = reuse.freed_line
        ));
    }
    if let Some(g) = &prev.graph
        && cur.graph.is_none()
    {
        let r = replay_stream(prev);
        return Some(match &cur.stream {
            Some(cs) => format!(
                "make {c} wait for the replay before the {cn} at line {cl}: `{c}.wait_stream({r})` \
                 after `g.replay()` at line {launch}.",
                c = stream(cs),
                launch = g.launch
            ),
            None => format!(
                "synchronize after the replay at line {launch} and before the host {cn} at line \
                 {cl}: `{r}.synchronize()` or `torch.cuda.synchronize()`.",
                launch = g.launch
            ),
        });
    }
    if cur.graph.is_some() || prev.graph.is_some() {
        return None;
    }
    match (&cur.stream, &prev.stream) {
        (Some(cs), Some(ps)) => {
            let (c, p) = (stream(cs), stream(ps));
            Some(format!(
                "make {c} wait for {p} after its {pn} (line {pl}) and before the {cn} (line {cl}): \
                 `{c}.wait_stream({p})`, or `ev = torch.cuda.Event(); ev.record({p})` after the \
                 {pn} and `{c}.wait_event(ev)` before the {cn}."
            ))
        }
        (None, Some(ps)) if cur.thread == prev.thread => {
            let p = stream(ps);
            Some(format!(
                "wait on the host for {p} after its {pn} (line {pl}) and before the host {cn} \
                 (line {cl}): `{p}.synchronize()` or `torch.cuda.synchronize()`, or \
                 `ev = torch.cuda.Event(); ev.record({p})` after the {pn}, then `ev.synchronize()` \
                 (a loop until `ev.query()` returns True also orders it). A non-blocking copy \
                 (`non_blocking=True`) is only done once its stream is synchronized."
            ))
        }
        _ => None,
    }
}
