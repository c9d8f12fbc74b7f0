//! The fix of a race across a caching block's reuse (trace v1 minor 1): the previous access
//! was to an earlier block on the same bytes, made on a stream the pool knew nothing about.
//! PyTorch's `Tensor.record_stream(stream)` is the documented fix: "the tensor memory is not
//! reused for another tensor until all work queued on stream at the time of deallocation will
//! be complete".

use super::super::names::{access_noun, buffer_label, stream_sym};
use crate::engine::finding::Race;

/// The calls that order the two sides, when the previous side was on an earlier caching block
/// and on a stream other than that block's pool stream.
pub(super) fn fix(race: &Race) -> Option<String> {
    let reuse = race.reused.as_ref()?;
    let prev = &race.previous;
    let used_on = prev.stream.as_ref()?;
    let pool_stream = reuse.buffer.alloc_stream.as_ref().map(|s| s.id);
    if pool_stream == Some(used_on.id) {
        // The pool's own stream: stream order covers it; the generic fix applies.
        return None;
    }
    let u = stream_sym(used_on);
    let old = buffer_label(&reuse.buffer);
    Some(format!(
        "call record_stream({u}) on {old} after the {} at line {} and before its free at line \
         {} (PyTorch: `tensor.record_stream({u})`), so the caching allocator does not hand its \
         bytes to a new block before {u}'s work is done; or make the freeing thread wait for \
         {u} before the free (`{u}.synchronize()`, or an event recorded on {u} and synchronized).",
        access_noun(prev),
        prev.line,
        reuse.freed_line
    ))
}
