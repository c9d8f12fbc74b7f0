//! The two sentences that make a race report actionable: *why* nothing orders the two accesses
//! (naming the missing edge), and a *fix* that names the concrete calls adding it.
//!
//! Both follow `docs/ordering-model.md` and claim no ordering the model does not grant:
//!
//! - Two streams are ordered only by an event wait (R2, R3), by a host thread that synchronized
//!   (R5) and then enqueued (R1), or by a legacy-default-stream barrier (R6), which never
//!   involves a non-blocking stream.
//! - A host thread learns of stream work only by a stream, event or device synchronization, or
//!   a query that returned done (R5); other host threads learn nothing from it.
//! - Stream work learns of a host access only through the enqueue call of the thread that made
//!   it (R1): host-side locks or channels between threads are not in the model.
//! - A free must be ordered after every use, any use after a free is invalid, and memory from
//!   `cudaMallocAsync` is usable on another stream only once the allocation is ordered before
//!   the use (R12).
//!
//! Fix hints give the CUDA runtime calls and the streamsan / cudarc wrapper verbs
//! (`record_event`, `wait`, `join`, `synchronize`), with streams by their report symbols.

mod graphs;
mod reuse;
mod torch;

use super::names::{access_noun, actor, is_allocation, is_non_blocking, stream_sym};
use crate::engine::finding::{AccessKind, Race, RaceKind, StreamInfo, Unordered};
use crate::trace::record::OpKind;

/// The one sentence saying why nothing orders the previous access before the current one,
/// naming the last synchronization the current actor had with the previous actor, or saying
/// that they never synchronized. Ends with a full stop.
pub fn why(race: &Race) -> String {
    if let Some(why) = graphs::why(race) {
        return why;
    }
    let cur = &race.current;
    let prev = &race.previous;
    match race.kind {
        RaceKind::UseAfterFree => {
            if prev.access == AccessKind::Free {
                format!(
                    "the buffer was freed at line {}; any use after a free is invalid.",
                    prev.line
                )
            } else {
                format!(
                    "the buffer was freed before line {}; any use after a free is invalid.",
                    cur.line
                )
            }
        }
        RaceKind::FreeWhileInUse => {
            let noun = access_noun(prev);
            let head = format!(
                "the free at line {} is not ordered after the {noun} at line {}",
                cur.line, prev.line
            );
            match race.why.last_sync() {
                None => format!(
                    "{head}: {} never synchronized with {}.",
                    actor(cur),
                    actor(prev)
                ),
                Some(sync) => format!(
                    "{head}: {} last synchronized with {} at line {} ({}), which {} that {noun}.",
                    actor(cur),
                    actor(prev),
                    sync.line,
                    sync.op,
                    covers(race.why)
                ),
            }
        }
        RaceKind::ReadAfterWrite | RaceKind::WriteAfterRead | RaceKind::WriteAfterWrite => {
            conflict_why(race)
        }
    }
}

/// "is before" when the last synchronization came before the previous access; else it came
/// later but did not cover it (a wait or sync on an event recorded before that access).
fn covers(why: Unordered) -> &'static str {
    match why {
        Unordered::SyncNotCovering(_) => "does not cover",
        _ => "is before",
    }
}

fn conflict_why(race: &Race) -> String {
    let cur = &race.current;
    let prev = &race.previous;
    let (c, p) = (actor(cur), actor(prev));
    let noun = access_noun(prev);
    let (pl, cl) = (prev.line, cur.line);
    if let Some(sync) = race.why.last_sync() {
        if sync.line == cl && cur.stream.is_some() {
            // The current access's own enqueue carried what its host thread knew: there was
            // no synchronization of the stream itself to name.
            return format!(
                "{c} knows of {p}'s work only what host thread {} knew when it enqueued line \
                 {cl}, which does not cover the {noun} at line {pl}; nothing orders that {noun} \
                 before line {cl}.",
                cur.thread
            );
        }
        return format!(
            "{c} last synchronized with {p} at line {} ({}), which {} the {noun} at line {pl}; \
             nothing orders that {noun} before line {cl}.",
            sync.line,
            sync.op,
            covers(race.why)
        );
    }
    match (&cur.stream, &prev.stream) {
        (Some(_), Some(ps)) if is_allocation(prev) => format!(
            "{c} never synchronized with {p}: nothing orders the stream-ordered allocation \
             (cudaMallocAsync) on {} at line {pl} before line {cl}, and such memory is usable on \
             another stream only once its allocation is ordered before the use.",
            stream_sym(ps)
        ),
        (Some(cs), Some(ps)) => format!(
            "{c} never synchronized with {p}: no event wait, stream/device synchronization or \
             legacy-stream barrier orders line {pl} before line {cl}{}.",
            non_blocking_note(cs, ps)
        ),
        (None, Some(_)) => format!(
            "{c} never synchronized with {p}: no stream, event or device synchronization (or \
             query that returned done) orders line {pl} before line {cl}."
        ),
        (Some(_), None) if cur.thread != prev.thread => format!(
            "{c} never synchronized with {p}: the enqueue at line {cl} was made by host thread \
             {}, and no CUDA call orders host thread {}'s {noun} at line {pl} before it.",
            cur.thread, prev.thread
        ),
        (Some(_), None) => format!(
            "{c} never synchronized with {p}: the host {noun} at line {pl} was not made before \
             the enqueue at line {cl}."
        ),
        (None, None) => format!(
            "{c} never synchronized with {p}: no CUDA call orders line {pl} before line {cl} \
             (streamsan does not see locks, channels or joins between host threads)."
        ),
    }
}

/// Says which of the two streams legacy-stream barriers cannot order (rule R6), if any.
fn non_blocking_note(cur: &StreamInfo, prev: &StreamInfo) -> String {
    match (is_non_blocking(cur), is_non_blocking(prev)) {
        (true, true) => format!(
            " ({} and {} are non-blocking, so legacy-stream barriers do not order them)",
            stream_sym(prev),
            stream_sym(cur)
        ),
        (true, false) => format!(
            " ({} is non-blocking, so legacy-stream barriers do not order it)",
            stream_sym(cur)
        ),
        (false, true) => format!(
            " ({} is non-blocking, so legacy-stream barriers do not order it)",
            stream_sym(prev)
        ),
        (false, false) => String::new(),
    }
}

/// [`fix_hint`] in the words of `api`: PyTorch's calls for traces its front end recorded.
pub fn fix_hint_for(race: &Race, api: super::Api) -> String {
    match api {
        super::Api::Torch => torch::fix(race).unwrap_or_else(|| fix_hint(race)),
        super::Api::Cuda => fix_hint(race),
    }
}

/// A fix for the situation, naming concrete calls: CUDA runtime calls, and the streamsan /
/// cudarc wrapper verbs. Ends with a full stop.
pub fn fix_hint(race: &Race) -> String {
    if let Some(fix) = reuse::fix(race).or_else(|| graphs::fix(race)) {
        return fix;
    }
    let cur = &race.current;
    let prev = &race.previous;
    let (cn, pn) = (access_noun(cur), access_noun(prev));
    let (cl, pl) = (cur.line, prev.line);
    match race.kind {
        RaceKind::UseAfterFree => format!(
            "move the free after the last use: the free at line {pl} comes before this {cn} at \
             line {cl}; free the buffer only after its last use (and ordered after it), or \
             allocate a new buffer for this use."
        ),
        RaceKind::FreeWhileInUse => match (&cur.stream, &prev.stream) {
            (None, Some(used_on)) => {
                let u = stream_sym(used_on);
                format!(
                    "synchronize {u} after the {pn} at line {pl} and before the free at line \
                     {cl}: `{u}.synchronize()` (`cudaStreamSynchronize({u})`), or free on the \
                     stream that used the buffer: `cudaFreeAsync(ptr, {u})`."
                )
            }
            (Some(freed_on), Some(used_on)) if cur.op == OpKind::GraphLaunch => {
                // The free a relaunch makes of what the graph's previous launch left allocated.
                let (f, u) = (stream_sym(freed_on), stream_sym(used_on));
                format!(
                    "make {f} wait for the {pn} before relaunching the graph, whose launch at \
                     line {cl} frees what its previous launch left allocated: \
                     `cudaEventRecord(ev, {u})` after the {pn} at line {pl}, then \
                     `cudaStreamWaitEvent({f}, ev)` before the launch (with cudarc's API \
                     `let ev = {u}.record_event(None)?; {f}.wait(&ev)?` or `{f}.join(&{u})?`)."
                )
            }
            (Some(freed_on), Some(used_on)) => {
                let (f, u) = (stream_sym(freed_on), stream_sym(used_on));
                format!(
                    "make {f} wait for the {pn} before freeing: `cudaEventRecord(ev, {u})` after \
                     the {pn} at line {pl}, then `cudaStreamWaitEvent({f}, ev)` before the \
                     `cudaFreeAsync` at line {cl} (with cudarc's API \
                     `let ev = {u}.record_event(None)?; {f}.wait(&ev)?` or `{f}.join(&{u})?`), or free \
                     on the stream that used the buffer: `cudaFreeAsync(ptr, {u})`."
                )
            }
            (_, None) => format!(
                "free after the last host use, from the thread that made it: issue the free at \
                 line {cl} on host thread {} after its {pn} at line {pl} (streamsan sees no \
                 ordering between host threads other than CUDA calls).",
                prev.thread
            ),
        },
        RaceKind::ReadAfterWrite | RaceKind::WriteAfterRead | RaceKind::WriteAfterWrite => {
            match (&cur.stream, &prev.stream) {
                (Some(cs), Some(ps)) if is_allocation(prev) => {
                    let (c, p) = (stream_sym(cs), stream_sym(ps));
                    format!(
                        "wait on an event recorded after the `cudaMallocAsync` at line {pl}: \
                         `cudaEventRecord(ev, {p})` right after the allocation, then \
                         `cudaStreamWaitEvent({c}, ev)` before the {cn} at line {cl} (with \
                         cudarc's API `let ev = {p}.record_event(None)?; {c}.wait(&ev)?` or \
                         `{c}.join(&{p})?`), or allocate the buffer on {c}."
                    )
                }
                (Some(cs), Some(ps)) => {
                    let (c, p) = (stream_sym(cs), stream_sym(ps));
                    format!(
                        "record an event on {p} after its {pn} (line {pl}) and make {c} wait on \
                         it before its {cn} (line {cl}): `cudaEventRecord(ev, {p})` then \
                         `cudaStreamWaitEvent({c}, ev)`; with cudarc's API \
                         `let ev = {p}.record_event(None)?; {c}.wait(&ev)?`, or `{c}.join(&{p})?`."
                    )
                }
                (None, Some(ps)) => {
                    let p = stream_sym(ps);
                    let thread = if cur.thread != prev.thread {
                        format!(
                            " on host thread {}, the thread that makes the access",
                            cur.thread
                        )
                    } else {
                        String::new()
                    };
                    format!(
                        "synchronize {p} after its {pn} (line {pl}) and before the host {cn} \
                         (line {cl}){thread}: `{p}.synchronize()` (`cudaStreamSynchronize({p})`), \
                         or record an event after the {pn} and wait for it on the host: \
                         `let ev = {p}.record_event(None)?; ev.synchronize()?` \
                         (`cudaEventRecord(ev, {p})` then `cudaEventSynchronize(ev)`)."
                    )
                }
                (Some(cs), None) if cur.thread != prev.thread => {
                    let c = stream_sym(cs);
                    format!(
                        "enqueue after the host {pn}, from the thread that made it: host thread \
                         {pt} made its {pn} at line {pl} but host thread {ct} enqueued on {c} at \
                         line {cl}; enqueue on host thread {pt} after its {pn} (the host {pn} \
                         must happen before the enqueue call, and streamsan sees no ordering \
                         between host threads other than CUDA calls).",
                        pt = prev.thread,
                        ct = cur.thread
                    )
                }
                (Some(_), None) => format!(
                    "enqueue after the host {pn}: the host {pn} at line {pl} must happen before \
                     the enqueue call at line {cl}."
                ),
                (None, None) => format!(
                    "make both host accesses on one host thread, or hand the buffer over through \
                     CUDA: host thread {} enqueues work on a stream after its {pn} (line {pl}) \
                     and host thread {} synchronizes that stream (`cudaStreamSynchronize`) \
                     before its {cn} (line {cl}); streamsan does not see locks, channels or \
                     joins between host threads.",
                    prev.thread, cur.thread
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::finding::{LastSync, Site};
    use crate::report::fixtures::*;
    use crate::trace::record::OpKind;

    #[test]
    fn stream_stream_never_synchronized() {
        let race = stream_stream_never_synced();
        assert_eq!(
            why(&race),
            "stream s1 never synchronized with stream s0: no event wait, stream/device \
             synchronization or legacy-stream barrier orders line 5 before line 9 (s1 is \
             non-blocking, so legacy-stream barriers do not order it)."
        );
        let fix = fix_hint(&race);
        assert_eq!(
            fix,
            "record an event on s0 after its write (line 5) and make s1 wait on it before its \
             read (line 9): `cudaEventRecord(ev, s0)` then `cudaStreamWaitEvent(s1, ev)`; with \
             cudarc's API `let ev = s0.record_event(None)?; s1.wait(&ev)?`, or `s1.join(&s0)?`."
        );
    }

    #[test]
    fn stream_stream_between_blocking_streams_has_no_non_blocking_note() {
        let mut race = stream_stream_never_synced();
        race.current.stream = Some(stream_created_blocking());
        let why = why(&race);
        assert!(
            why.starts_with("stream s2 never synchronized with stream s0:"),
            "{why}"
        );
        assert!(!why.contains("non-blocking"), "{why}");
        assert!(why.ends_with("line 5 before line 9."), "{why}");
    }

    #[test]
    fn stream_stream_last_synchronized_before_the_write() {
        let race = stream_stream_last_synced();
        assert_eq!(
            why(&race),
            "stream s1 last synchronized with stream s0 at line 7 (wait), which is before the \
             write at line 8; nothing orders that write before line 9."
        );
        // The fix is the same edge, after the write this time.
        assert!(fix_hint(&race).contains("record an event on s0 after its write (line 8)"));
    }

    #[test]
    fn a_wait_after_the_write_on_an_older_record_does_not_cover_it() {
        let mut race = stream_stream_last_synced();
        race.why = Unordered::SyncNotCovering(LastSync {
            line: 8,
            op: OpKind::Wait,
        });
        race.previous.line = 6;
        assert_eq!(
            why(&race),
            "stream s1 last synchronized with stream s0 at line 8 (wait), which does not cover \
             the write at line 6; nothing orders that write before line 9."
        );
    }

    #[test]
    fn knowledge_carried_by_the_enqueue_itself_is_named_as_the_host_threads() {
        // The host synchronized with s0 (say a device_sync at line 5), s0 wrote at line 8, and
        // the launch at line 9 on s1 brought what the host knew: s1 last learned of s0 at 9.
        let mut race = stream_stream_last_synced();
        race.why = Unordered::SyncNotCovering(LastSync {
            line: 9,
            op: OpKind::Launch,
        });
        assert_eq!(
            why(&race),
            "stream s1 knows of stream s0's work only what host thread 0 knew when it enqueued \
             line 9, which does not cover the write at line 8; nothing orders that write before \
             line 9."
        );
    }

    #[test]
    fn host_reader_after_device_write_needs_a_host_synchronization() {
        let race = host_reader_after_device_write();
        assert_eq!(
            why(&race),
            "host thread 0 never synchronized with stream s1: no stream, event or device \
             synchronization (or query that returned done) orders line 10 before line 11."
        );
        assert_eq!(
            fix_hint(&race),
            "synchronize s1 after its write (line 10) and before the host read (line 11): \
             `s1.synchronize()` (`cudaStreamSynchronize(s1)`), or record an event after the \
             write and wait for it on the host: `let ev = s1.record_event(None)?; ev.synchronize()?` \
             (`cudaEventRecord(ev, s1)` then `cudaEventSynchronize(ev)`)."
        );
    }

    #[test]
    fn host_reader_last_synchronized_and_on_another_thread() {
        let mut race = host_reader_after_device_write();
        race.why = Unordered::SyncBefore(LastSync {
            line: 9,
            op: OpKind::StreamSync,
        });
        race.current.thread = 2;
        assert_eq!(
            why(&race),
            "host thread 2 last synchronized with stream s1 at line 9 (stream_sync), which is \
             before the write at line 10; nothing orders that write before line 11."
        );
        assert!(fix_hint(&race).contains("(line 11) on host thread 2, the thread that makes"));
    }

    #[test]
    fn device_op_after_host_write_must_be_enqueued_after_it() {
        let race = device_after_host_write();
        assert_eq!(
            why(&race),
            "stream s1 never synchronized with host thread 1: the enqueue at line 14 was made by \
             host thread 0, and no CUDA call orders host thread 1's write at line 13 before it."
        );
        let fix = fix_hint(&race);
        assert!(fix.starts_with("enqueue after the host write, from the thread that made it"));
        assert!(fix.contains("must happen before the enqueue call"), "{fix}");

        let mut same_thread = race.clone();
        same_thread.previous.thread = 0;
        assert_eq!(
            fix_hint(&same_thread),
            "enqueue after the host write: the host write at line 13 must happen before the \
             enqueue call at line 14."
        );
    }

    #[test]
    fn host_host_needs_one_thread_or_a_cuda_handover() {
        let race = host_host();
        assert_eq!(
            why(&race),
            "host thread 1 never synchronized with host thread 0: no CUDA call orders line 18 \
             before line 20 (streamsan does not see locks, channels or joins between host \
             threads)."
        );
        assert!(fix_hint(&race).starts_with("make both host accesses on one host thread"));
    }

    #[test]
    fn free_while_in_use_by_a_host_free() {
        let race = free_while_in_use_host_free();
        assert_eq!(
            why(&race),
            "the free at line 12 is not ordered after the read at line 9: host thread 0 never \
             synchronized with stream s1."
        );
        assert_eq!(
            fix_hint(&race),
            "synchronize s1 after the read at line 9 and before the free at line 12: \
             `s1.synchronize()` (`cudaStreamSynchronize(s1)`), or free on the stream that used \
             the buffer: `cudaFreeAsync(ptr, s1)`."
        );
    }

    #[test]
    fn free_while_in_use_by_a_stream_ordered_free() {
        let race = free_while_in_use_stream_free();
        assert_eq!(
            why(&race),
            "the free at line 12 is not ordered after the read at line 9: stream s2 last \
             synchronized with stream s1 at line 6 (wait), which is before that read."
        );
        let fix = fix_hint(&race);
        assert!(
            fix.starts_with("make s2 wait for the read before freeing"),
            "{fix}"
        );
        assert!(fix.contains("`cudaEventRecord(ev, s1)`"), "{fix}");
        assert!(fix.contains("`cudaStreamWaitEvent(s2, ev)`"), "{fix}");
        assert!(fix.contains("`cudaFreeAsync(ptr, s1)`"), "{fix}");
    }

    #[test]
    fn free_while_in_use_by_another_host_thread() {
        let mut race = free_while_in_use_host_free();
        race.previous = Site {
            thread: 1,
            stream: None,
            op: OpKind::HostAccess,
            ..race.previous
        };
        assert!(
            fix_hint(&race)
                .starts_with("free after the last host use, from the thread that made it")
        );
        assert!(fix_hint(&race).contains("on host thread 1 after its read at line 9"));
    }

    #[test]
    fn use_after_free() {
        let race = super::super::fixtures::use_after_free();
        assert_eq!(
            why(&race),
            "the buffer was freed at line 12; any use after a free is invalid."
        );
        assert_eq!(
            fix_hint(&race),
            "move the free after the last use: the free at line 12 comes before this read at \
             line 15; free the buffer only after its last use (and ordered after it), or \
             allocate a new buffer for this use."
        );
    }

    #[test]
    fn stream_ordered_allocation_used_on_another_stream() {
        let race = stream_ordered_alloc_on_other_stream();
        assert_eq!(
            why(&race),
            "stream s1 never synchronized with stream s2: nothing orders the stream-ordered \
             allocation (cudaMallocAsync) on s2 at line 4 before line 6, and such memory is \
             usable on another stream only once its allocation is ordered before the use."
        );
        assert_eq!(
            fix_hint(&race),
            "wait on an event recorded after the `cudaMallocAsync` at line 4: \
             `cudaEventRecord(ev, s2)` right after the allocation, then \
             `cudaStreamWaitEvent(s1, ev)` before the read at line 6 (with cudarc's API \
             `let ev = s2.record_event(None)?; s1.wait(&ev)?` or `s1.join(&s2)?`), or allocate the \
             buffer on s1."
        );
    }

    #[test]
    fn every_sentence_is_one_sentence_ending_with_a_full_stop() {
        for race in [
            stream_stream_never_synced(),
            stream_stream_last_synced(),
            host_reader_after_device_write(),
            device_after_host_write(),
            host_host(),
            free_while_in_use_host_free(),
            free_while_in_use_stream_free(),
            super::super::fixtures::use_after_free(),
            stream_ordered_alloc_on_other_stream(),
        ] {
            for s in [why(&race), fix_hint(&race)] {
                assert!(s.ends_with('.'), "{s}");
                assert!(!s.contains('\n'), "{s}");
                assert!(!s.contains("  "), "{s}");
            }
        }
    }
}
