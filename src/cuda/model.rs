//! What cudarc 0.19.10 does on its own around each call, as pure functions from a description
//! of the call to the [`Step`]s to record, in the order cudarc performs them.
//!
//! The wrappers make the real cudarc call and then record these steps; keeping the model apart
//! from CUDA lets every rule be unit-tested without a GPU. Each function cites the cudarc source
//! it mirrors (`core.rs` / `launch.rs` under `src/driver/safe/`); `docs/online.md` ("What
//! cudarc does on its own") is the same list in prose.
//!
//! Two facts decide everything here:
//! - A `CudaSlice` has a read and a write event only if event tracking was on when it was
//!   allocated (core.rs:1633): [`SliceEvents`] is `None` otherwise.
//! - cudarc uses them only while the context "is managing stream synchronization", i.e. event
//!   tracking is on *and* at least one stream made by `new_stream` / `fork` is alive
//!   (core.rs:450-468): the `managing` arguments, read live before each call.

use super::step::{Label, Step};
use crate::trace::record::{BufId, DeviceId, EventId, Op, StreamId};

/// Where planned steps go: a list, recorded once the call succeeded, or the records
/// themselves as they are planned ([`Call::emit`](super::sanitizer::Call::emit), for a launch,
/// planned after its cudarc call), so that a launch's steps are never stored and moved.
pub(crate) trait Steps {
    fn push(&mut self, step: Step);
}

impl Steps for Vec<Step> {
    #[inline]
    fn push(&mut self, step: Step) {
        Vec::push(self, step);
    }
}

/// The read and write events cudarc keeps for one allocation (core.rs:846-847).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceEvents {
    pub(crate) buf: BufId,
    pub(crate) read: EventId,
    pub(crate) write: EventId,
}

impl SliceEvents {
    pub(crate) fn read_name(&self) -> Label {
        Label::ReadEvent(self.buf)
    }
    pub(crate) fn write_name(&self) -> Label {
        Label::WriteEvent(self.buf)
    }

    /// The label of `event`, one of the two.
    fn name_of(&self, event: EventId) -> Label {
        if event == self.read {
            self.read_name()
        } else {
            self.write_name()
        }
    }

    /// cudarc's wait on `event` (the read or the write event) before an access on `stream`.
    fn wait(&self, event: EventId, stream: StreamId) -> Step {
        Step::TrackedWait {
            stream,
            event,
            name: self.name_of(event),
        }
    }

    /// The record of the read event (`write` false) or the write event after an access on
    /// `stream`, as a `SyncOnDrop` guard makes it.
    pub(crate) fn record_step(&self, write: bool, stream: StreamId) -> Step {
        self.record(if write { self.write } else { self.read }, stream)
    }

    /// cudarc's record of `event` (the read or the write event) after an access on `stream`.
    fn record(&self, event: EventId, stream: StreamId) -> Step {
        Step::TrackedRecord {
            event,
            stream,
            name: self.name_of(event),
        }
    }
}

/// The one event of a `PinnedHostSlice` (core.rs:1462), made at allocation (core.rs:1513).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinnedEvent {
    pub(crate) buf: BufId,
    pub(crate) event: EventId,
}

impl PinnedEvent {
    pub(crate) fn name(&self) -> Label {
        Label::PinnedEvent(self.buf)
    }
}

/// The host side of a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostEnd {
    /// `&[T]`, `Vec<T>`, `[T; N]`: cudarc does nothing for them (core.rs:1398-1450).
    Pageable,
    /// A pinned buffer: cudarc waits on and records its event (core.rs:1574-1599).
    Pinned(PinnedEvent),
}

/// `DevicePtr::device_ptr` (core.rs:1237-1297): before a read on `stream`, wait for the last
/// recorded write.
pub(crate) fn wait_before_read(
    steps: &mut impl Steps,
    stream: StreamId,
    ev: Option<SliceEvents>,
    managing: bool,
) {
    if let (true, Some(ev)) = (managing, ev) {
        steps.push(ev.wait(ev.write, stream));
    }
}

/// The `SyncOnDrop::Record` guard of a read (core.rs:1199-1207, 1246): after the read is
/// enqueued, record the read event on `stream`. It replaces the previous reader's record: only
/// the latest reader is remembered.
pub(crate) fn record_after_read(
    steps: &mut impl Steps,
    stream: StreamId,
    ev: Option<SliceEvents>,
    managing: bool,
) {
    if let (true, Some(ev)) = (managing, ev) {
        steps.push(ev.record(ev.read, stream));
    }
}

/// `DevicePtrMut::device_ptr_mut` (core.rs:1321-1372): before a write, wait for the last
/// recorded read, then the last recorded write.
pub(crate) fn wait_before_write(
    steps: &mut impl Steps,
    stream: StreamId,
    ev: Option<SliceEvents>,
    managing: bool,
) {
    if let (true, Some(ev)) = (managing, ev) {
        steps.push(ev.wait(ev.read, stream));
        steps.push(ev.wait(ev.write, stream));
    }
}

/// The `SyncOnDrop::Record` guard of a write (core.rs:1199-1207, 1336): record the write event.
pub(crate) fn record_after_write(
    steps: &mut impl Steps,
    stream: StreamId,
    ev: Option<SliceEvents>,
    managing: bool,
) {
    if let (true, Some(ev)) = (managing, ev) {
        steps.push(ev.record(ev.write, stream));
    }
}

/// `HostSlice::stream_synced_slice` / `_mut_slice` of a pinned buffer (core.rs:1583, 1593):
/// the copy's stream waits on the pinned event, whatever the tracking state.
pub(crate) fn wait_pinned(steps: &mut Vec<Step>, stream: StreamId, host: HostEnd) {
    if let HostEnd::Pinned(p) = host {
        steps.push(Step::TrackedWait {
            stream,
            event: p.event,
            name: p.name(),
        });
    }
}

impl PinnedEvent {
    /// The record of the pinned event on `stream`, as the guard of a pinned slice makes it.
    pub(crate) fn record_step(&self, stream: StreamId) -> Step {
        Step::TrackedRecord {
            event: self.event,
            stream,
            name: self.name(),
        }
    }
}

/// The guard returned with a pinned slice (core.rs:1586, 1596) records the pinned event after
/// the copy, but `SyncOnDrop::Record` only records while the context is managing
/// synchronization (core.rs:1204).
pub(crate) fn record_pinned(
    steps: &mut Vec<Step>,
    stream: StreamId,
    host: HostEnd,
    managing: bool,
) {
    if let (true, HostEnd::Pinned(p)) = (managing, host) {
        steps.push(p.record_step(stream));
    }
}

/// `CudaStream::alloc` (core.rs:1623-1649): the allocation, then the two events when tracking
/// was on. The events start unrecorded.
pub(crate) fn plan_alloc(
    steps: &mut Vec<Step>,
    alloc: Op,
    name: Option<String>,
    ev: Option<SliceEvents>,
) {
    steps.push(Step::op(alloc, name));
    if let Some(ev) = ev {
        steps.push(Step::labeled(Op::Event { id: ev.read }, ev.read_name()));
        steps.push(Step::labeled(Op::Event { id: ev.write }, ev.write_name()));
    }
}

/// `CudaStream::memset_zeros` (core.rs:1662-1671): wait as a writer, memset, record the write.
pub(crate) fn plan_memset(
    steps: &mut Vec<Step>,
    stream: StreamId,
    dst: Option<SliceEvents>,
    managing: bool,
    memset: Step,
) {
    wait_before_write(steps, stream, dst, managing);
    steps.push(memset);
    record_after_write(steps, stream, dst, managing);
}

/// `CudaStream::memcpy_htod` (core.rs:1695-1705). The guards drop in reverse order of
/// declaration: the destination's write record comes before the pinned source's record.
pub(crate) fn plan_htod(
    steps: &mut Vec<Step>,
    stream: StreamId,
    src: HostEnd,
    dst: Option<SliceEvents>,
    managing: bool,
    copy: Step,
) {
    wait_pinned(steps, stream, src);
    wait_before_write(steps, stream, dst, managing);
    steps.push(copy);
    record_after_write(steps, stream, dst, managing);
    record_pinned(steps, stream, src, managing);
}

/// `CudaStream::memcpy_dtoh` (core.rs:1737-1747): the pinned destination's record comes before
/// the source's read record.
pub(crate) fn plan_dtoh(
    steps: &mut Vec<Step>,
    stream: StreamId,
    src: Option<SliceEvents>,
    dst: HostEnd,
    managing: bool,
    copy: Step,
) {
    wait_before_read(steps, stream, src, managing);
    wait_pinned(steps, stream, dst);
    steps.push(copy);
    record_pinned(steps, stream, dst, managing);
    record_after_read(steps, stream, src, managing);
}

/// `CudaStream::memcpy_dtod` within one context (core.rs:1763-1766).
pub(crate) fn plan_dtod(
    steps: &mut Vec<Step>,
    stream: StreamId,
    src: Option<SliceEvents>,
    dst: Option<SliceEvents>,
    managing: bool,
    copy: Step,
) {
    wait_before_read(steps, stream, src, managing);
    wait_before_write(steps, stream, dst, managing);
    steps.push(copy);
    record_after_write(steps, stream, dst, managing);
    record_after_read(steps, stream, src, managing);
}

/// The two sides of a peer copy between contexts (core.rs:1767-1791).
#[derive(Clone, Copy, Debug)]
pub(crate) struct PeerCopy {
    /// The stream the copy runs on.
    pub stream: StreamId,
    /// The stream the source was allocated on: cudarc takes the source pointer "on" it.
    pub src_stream: StreamId,
    pub src: Option<SliceEvents>,
    pub dst: Option<SliceEvents>,
    /// Whether the source's and the copy stream's contexts are managing synchronization.
    pub src_managing: bool,
    pub dst_managing: bool,
    /// The event cudarc records on the source's stream and the copy stream waits on.
    pub tmp: EventId,
}

/// `CudaStream::memcpy_dtod` across contexts (core.rs:1767-1791): the source's waits and its
/// read record happen on the source's *allocation* stream, not on the copy's stream, so the
/// read event does not cover the copy (a later writer of the source is not ordered after it).
pub(crate) fn plan_dtod_peer(steps: &mut Vec<Step>, p: PeerCopy, copy: Step) {
    wait_before_read(steps, p.src_stream, p.src, p.src_managing);
    wait_before_write(steps, p.stream, p.dst, p.dst_managing);
    plan_join(steps, p.stream, p.src_stream, p.tmp, "cudarc:peer copy");
    steps.push(copy);
    record_after_write(steps, p.stream, p.dst, p.dst_managing);
    record_after_read(steps, p.src_stream, p.src, p.src_managing);
}

/// How a kernel argument looks to cudarc: `&CudaSlice` / `&CudaView` (read) or `&mut` (write),
/// whatever the program declared to the sanitizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TrackedArg {
    pub events: Option<SliceEvents>,
    pub mutable: bool,
    /// `is_managing_stream_synchronization()` when the argument was pushed (launch.rs:103).
    pub managing: bool,
}

/// `LaunchArgs::launch` (launch.rs:208-236): every argument's waits in argument order (a read
/// argument waits for the write event; a write argument for the read, then the write event;
/// launch.rs:100-166), the optional start event, the kernel, the optional end event, then every
/// argument's record (read event for read arguments, write event for write arguments).
pub(crate) fn plan_launch(
    steps: &mut impl Steps,
    stream: StreamId,
    args: &[TrackedArg],
    timing: Option<(EventId, EventId)>,
    launch: Step,
) {
    for a in args {
        if a.mutable {
            wait_before_write(steps, stream, a.events, a.managing);
        } else {
            wait_before_read(steps, stream, a.events, a.managing);
        }
    }
    if let Some((start, _)) = timing {
        plan_record_event(steps, stream, start, Label::Static("kernel start"));
    }
    steps.push(launch);
    if let Some((_, end)) = timing {
        plan_record_event(steps, stream, end, Label::Static("kernel end"));
    }
    for a in args {
        if a.mutable {
            record_after_write(steps, stream, a.events, a.managing);
        } else {
            record_after_read(steps, stream, a.events, a.managing);
        }
    }
}

/// A library call bound to `stream` (cuBLAS, cuRAND) that takes its arguments through
/// `DevicePtr::device_ptr` / `device_ptr_mut` on the stream (cudarc's `cublas/safe/*.rs`,
/// `curand/safe.rs`): each argument's waits in argument order, the call, then the guards'
/// records in reverse order (they drop in reverse order of declaration).
#[cfg_attr(not(any(feature = "cublas", feature = "curand")), allow(dead_code))]
pub(crate) fn plan_guarded(
    steps: &mut Vec<Step>,
    stream: StreamId,
    args: &[TrackedArg],
    call: Step,
) {
    for a in args {
        if a.mutable {
            wait_before_write(steps, stream, a.events, a.managing);
        } else {
            wait_before_read(steps, stream, a.events, a.managing);
        }
    }
    steps.push(call);
    for a in args.iter().rev() {
        if a.mutable {
            record_after_write(steps, stream, a.events, a.managing);
        } else {
            record_after_read(steps, stream, a.events, a.managing);
        }
    }
}

/// `CudaStream::record_event` (core.rs:806-813): a new event, recorded on `stream`.
pub(crate) fn plan_record_event(
    steps: &mut impl Steps,
    stream: StreamId,
    event: EventId,
    name: Label,
) {
    steps.push(Step::labeled(Op::Event { id: event }, name.clone()));
    steps.push(Step::labeled(Op::Record { event, stream }, name));
}

/// `CudaStream::join` (core.rs:834-836): `waiter.wait(&other.record_event(None)?)`; the
/// temporary event is destroyed when the call returns.
pub(crate) fn plan_join(
    steps: &mut Vec<Step>,
    waiter: StreamId,
    other: StreamId,
    tmp: EventId,
    label: &'static str,
) {
    let name = Label::Static(label);
    plan_record_event(steps, other, tmp, name.clone());
    steps.push(Step::labeled(
        Op::Wait {
            stream: waiter,
            event: tmp,
        },
        name.clone(),
    ));
    steps.push(Step::labeled(Op::EventDestroy { id: tmp }, name));
}

/// `CudaContext::new_stream` (core.rs:726-738): when it makes the context's first stream and
/// tracking is on, it synchronizes the whole context first (`cuCtxSynchronize`), then creates a
/// non-blocking stream. `declare` is the `stream` record.
pub(crate) fn plan_new_stream(steps: &mut Vec<Step>, first_sync: Option<DeviceId>, declare: Step) {
    if let Some(device) = first_sync {
        steps.push(Step::labeled(
            Op::DeviceSync { device },
            Label::Static("cudarc:new_stream synchronizes the context (first stream)"),
        ));
    }
    steps.push(declare);
}

/// `CudaStream::fork` (core.rs:771-782): a new non-blocking stream (no context synchronize,
/// even for the first stream), which then joins its parent.
pub(crate) fn plan_fork(
    steps: &mut Vec<Step>,
    parent: StreamId,
    child: StreamId,
    declare: Step,
    tmp: EventId,
) {
    steps.push(declare);
    plan_join(steps, child, parent, tmp, "cudarc:fork");
}

/// How `Drop for CudaSlice` frees (core.rs:866-873).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FreeKind {
    /// `cuMemFreeAsync` on the allocation stream (`has_async_alloc`).
    Async,
    /// `stream.synchronize()` on the allocation stream, then `cuMemFree`.
    SyncThenFree,
}

/// `Drop for CudaSlice` (core.rs:855-875): while managing, the *allocation* stream waits on the
/// read and the write event; then the free; then the two events are destroyed with the fields.
/// Drop never waits on the host, except through the synchronize of a non-async free.
pub(crate) fn plan_slice_drop(
    steps: &mut Vec<Step>,
    buf: BufId,
    alloc_stream: StreamId,
    ev: Option<SliceEvents>,
    managing: bool,
    kind: FreeKind,
    name: Option<String>,
) {
    wait_before_release(steps, alloc_stream, ev, managing);
    match kind {
        FreeKind::Async => steps.push(Step::op(
            Op::Free {
                buf,
                stream: Some(alloc_stream),
            },
            name,
        )),
        FreeKind::SyncThenFree => {
            steps.push(Step::labeled(
                Op::StreamSync {
                    stream: alloc_stream,
                },
                Label::Static("cudarc:synchronize before cuMemFree"),
            ));
            steps.push(Step::op(Op::Free { buf, stream: None }, name));
        }
    }
    destroy_events(steps, ev);
}

/// `CudaSlice::leak` (core.rs:2565-2587): the drop's waits on the allocation stream, no free,
/// and the events destroyed. The memory stays allocated; the buffer stays alive in the trace.
pub(crate) fn plan_leak(
    steps: &mut Vec<Step>,
    alloc_stream: StreamId,
    ev: Option<SliceEvents>,
    managing: bool,
) {
    wait_before_release(steps, alloc_stream, ev, managing);
    destroy_events(steps, ev);
}

/// While managing, the allocation stream waits on the read and the write event (core.rs:859-864,
/// 2570-2577).
fn wait_before_release(
    steps: &mut Vec<Step>,
    alloc_stream: StreamId,
    ev: Option<SliceEvents>,
    managing: bool,
) {
    if let (true, Some(ev)) = (managing, ev) {
        steps.push(ev.wait(ev.read, alloc_stream));
        steps.push(ev.wait(ev.write, alloc_stream));
    }
}

/// The two events destroyed with the slice's fields.
fn destroy_events(steps: &mut Vec<Step>, ev: Option<SliceEvents>) {
    if let Some(ev) = ev {
        steps.push(Step::labeled(
            Op::EventDestroy { id: ev.read },
            ev.read_name(),
        ));
        steps.push(Step::labeled(
            Op::EventDestroy { id: ev.write },
            ev.write_name(),
        ));
    }
}

/// `PinnedHostSlice::as_slice` / `as_mut_slice` (core.rs:1547-1571): the host synchronizes the
/// pinned event, then touches the memory. The event is only recorded while managing, so in a
/// single-stream program this sync orders nothing.
pub(crate) fn plan_pinned_host_access(steps: &mut Vec<Step>, p: PinnedEvent, access: Step) {
    steps.push(Step::TrackedSync {
        event: p.event,
        name: p.name(),
    });
    steps.push(access);
}

/// `Drop for PinnedHostSlice` (core.rs:1468-1474): host sync on the event, `cuMemFreeHost`,
/// then the event is destroyed with the field.
pub(crate) fn plan_pinned_drop(steps: &mut Vec<Step>, p: PinnedEvent, name: Option<String>) {
    steps.push(Step::TrackedSync {
        event: p.event,
        name: p.name(),
    });
    steps.push(Step::op(
        Op::Free {
            buf: p.buf,
            stream: None,
        },
        name,
    ));
    steps.push(Step::labeled(Op::EventDestroy { id: p.event }, p.name()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::record::Access;

    const S: StreamId = 5;
    const EV: SliceEvents = SliceEvents {
        buf: 3,
        read: 10,
        write: 11,
    };

    fn marker() -> Step {
        Step::op(Op::DeviceSync { device: 9 }, Some("main".into()))
    }

    /// The steps as short strings, so expectations read like the docs.
    fn show(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Op { op, name } => match (op, name.text().as_deref()) {
                    (_, Some("main")) => "main".into(),
                    (Op::Event { id }, _) => format!("event {id}"),
                    (Op::EventDestroy { id }, _) => format!("destroy {id}"),
                    (Op::Record { event, stream }, _) => format!("record {event} on {stream}"),
                    (Op::Wait { stream, event }, _) => format!("{stream} waits {event}"),
                    (Op::Free { stream, .. }, _) => format!("free on {stream:?}"),
                    (Op::StreamSync { stream }, _) => format!("sync {stream}"),
                    (op, _) => op.name().to_string(),
                },
                Step::TrackedWait { stream, event, .. } => format!("{stream} waits {event}*"),
                Step::TrackedRecord { event, stream, .. } => {
                    format!("record {event} on {stream}*")
                }
                Step::TrackedSync { event, .. } => format!("host syncs {event}*"),
            })
            .collect()
    }

    fn run(f: impl FnOnce(&mut Vec<Step>)) -> Vec<String> {
        let mut steps = Vec::new();
        f(&mut steps);
        show(&steps)
    }

    #[test]
    fn nothing_when_not_managing_or_untracked() {
        for (ev, managing) in [(Some(EV), false), (None, true), (None, false)] {
            assert_eq!(
                run(|s| plan_dtod(s, S, ev, ev, managing, marker())),
                ["main"]
            );
            assert_eq!(run(|s| plan_memset(s, S, ev, managing, marker())), ["main"]);
        }
    }

    #[test]
    fn memset_waits_as_writer() {
        assert_eq!(
            run(|s| plan_memset(s, S, Some(EV), true, marker())),
            ["5 waits 10*", "5 waits 11*", "main", "record 11 on 5*"]
        );
    }

    #[test]
    fn dtod_guards_drop_in_reverse() {
        let dst = SliceEvents {
            buf: 4,
            read: 20,
            write: 21,
        };
        assert_eq!(
            run(|s| plan_dtod(s, S, Some(EV), Some(dst), true, marker())),
            [
                "5 waits 11*",
                "5 waits 20*",
                "5 waits 21*",
                "main",
                "record 21 on 5*",
                "record 10 on 5*"
            ]
        );
    }

    #[test]
    fn pinned_wait_is_unconditional_but_record_needs_managing() {
        let p = HostEnd::Pinned(PinnedEvent { buf: 7, event: 30 });
        assert_eq!(
            run(|s| plan_htod(s, S, p, Some(EV), false, marker())),
            ["5 waits 30*", "main"]
        );
        assert_eq!(
            run(|s| plan_htod(s, S, p, Some(EV), true, marker())),
            [
                "5 waits 30*",
                "5 waits 10*",
                "5 waits 11*",
                "main",
                "record 11 on 5*",
                "record 30 on 5*"
            ]
        );
        assert_eq!(
            run(|s| plan_dtoh(s, S, Some(EV), p, true, marker())),
            [
                "5 waits 11*",
                "5 waits 30*",
                "main",
                "record 30 on 5*",
                "record 10 on 5*"
            ]
        );
        assert_eq!(
            run(|s| plan_dtoh(s, S, Some(EV), HostEnd::Pageable, true, marker())),
            ["5 waits 11*", "main", "record 10 on 5*"]
        );
    }

    #[test]
    fn library_calls_record_in_reverse_argument_order() {
        let c = SliceEvents {
            buf: 4,
            read: 20,
            write: 21,
        };
        let arg = |events, mutable| TrackedArg {
            events: Some(events),
            mutable,
            managing: true,
        };
        // gemm(a, b, c): a and b read, c written.
        let b = SliceEvents {
            buf: 6,
            read: 30,
            write: 31,
        };
        let args = [arg(EV, false), arg(b, false), arg(c, true)];
        assert_eq!(
            run(|s| plan_guarded(s, S, &args, marker())),
            [
                "5 waits 11*",
                "5 waits 31*",
                "5 waits 20*",
                "5 waits 21*",
                "main",
                "record 21 on 5*",
                "record 30 on 5*",
                "record 10 on 5*"
            ]
        );
        let off = args.map(|a| TrackedArg {
            managing: false,
            ..a
        });
        assert_eq!(run(|s| plan_guarded(s, S, &off, marker())), ["main"]);
    }

    #[test]
    fn launch_waits_then_records_in_argument_order() {
        let out = SliceEvents {
            buf: 4,
            read: 20,
            write: 21,
        };
        let args = [
            TrackedArg {
                events: Some(out),
                mutable: true,
                managing: true,
            },
            TrackedArg {
                events: Some(EV),
                mutable: false,
                managing: true,
            },
        ];
        assert_eq!(
            run(|s| plan_launch(s, S, &args, None, marker())),
            [
                "5 waits 20*",
                "5 waits 21*",
                "5 waits 11*",
                "main",
                "record 21 on 5*",
                "record 10 on 5*"
            ]
        );
        assert_eq!(
            run(|s| plan_launch(s, S, &args[1..], Some((40, 41)), marker())),
            [
                "5 waits 11*",
                "event 40",
                "record 40 on 5",
                "main",
                "event 41",
                "record 41 on 5",
                "record 10 on 5*"
            ]
        );
    }

    #[test]
    fn join_and_fork_use_a_temporary_event() {
        assert_eq!(
            run(|s| plan_join(s, 1, 2, 50, "join")),
            ["event 50", "record 50 on 2", "1 waits 50", "destroy 50"]
        );
        let declare = Step::op(Op::DeviceSync { device: 0 }, Some("main".into()));
        assert_eq!(
            run(|s| plan_fork(s, 1, 2, declare, 51)),
            [
                "main",
                "event 51",
                "record 51 on 1",
                "2 waits 51",
                "destroy 51"
            ]
        );
    }

    #[test]
    fn first_new_stream_syncs_the_context() {
        assert_eq!(
            run(|s| plan_new_stream(s, Some(0), marker())),
            ["device_sync", "main"]
        );
        assert_eq!(run(|s| plan_new_stream(s, None, marker())), ["main"]);
    }

    #[test]
    fn slice_drop() {
        assert_eq!(
            run(|s| plan_slice_drop(s, 3, S, Some(EV), true, FreeKind::Async, None)),
            [
                "5 waits 10*",
                "5 waits 11*",
                "free on Some(5)",
                "destroy 10",
                "destroy 11"
            ]
        );
        assert_eq!(
            run(|s| plan_slice_drop(s, 3, S, Some(EV), false, FreeKind::SyncThenFree, None)),
            ["sync 5", "free on None", "destroy 10", "destroy 11"]
        );
    }

    #[test]
    fn peer_copy_records_the_source_read_on_its_own_stream() {
        let p = PeerCopy {
            stream: 1,
            src_stream: 2,
            src: Some(EV),
            dst: None,
            src_managing: true,
            dst_managing: true,
            tmp: 60,
        };
        assert_eq!(
            run(|s| plan_dtod_peer(s, p, marker())),
            [
                "2 waits 11*",
                "event 60",
                "record 60 on 2",
                "1 waits 60",
                "destroy 60",
                "main",
                "record 10 on 2*"
            ]
        );
    }

    #[test]
    fn pinned_accessors_and_drop_sync_the_event() {
        let p = PinnedEvent { buf: 7, event: 30 };
        let access = Step::op(
            Op::HostAccess {
                reads: vec![Access::whole(7)],
                writes: vec![],
            },
            Some("main".into()),
        );
        assert_eq!(
            run(|s| plan_pinned_host_access(s, p, access)),
            ["host syncs 30*", "main"]
        );
        assert_eq!(
            run(|s| plan_pinned_drop(s, p, None)),
            ["host syncs 30*", "free on None", "destroy 30"]
        );
    }
}
