//! Records of memory calls, built from what the wrappers gathered (byte ranges, cudarc's events,
//! the tracking state) without touching CUDA, so each is unit-tested on its own. The wrappers in
//! `memory.rs` and `sync_copy.rs` make the cudarc call, then call one of these.
//!
//! Pageable host memory (`&[T]`, `Vec<T>`, arrays) is not tracked beyond a call: each copy gives
//! it a transient `host` buffer (`alloc`, the copy, `free`), and the copy is recorded as
//! `blocking`, because cudarc's safe API hands the slice back (or returns a `Vec`) when the call
//! returns, which is only sound if the driver is done with pageable memory by then. See
//! "Pageable host memory" in `docs/online.md`.

use super::device_ptr::BufRef;
use super::model::{self, HostEnd, PeerCopy, SliceEvents};
use super::sanitizer::Call;
use super::step::Step;
use crate::trace::record::Pool;
use crate::trace::record::{Access, BufId, DeviceId, MemSpace, Op, StreamId};

/// The stream a call runs on, the stream's device, and whether cudarc is managing
/// synchronization (read just before the cudarc call).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallStream {
    pub stream: StreamId,
    pub device: DeviceId,
    pub managing: bool,
}

/// The host side of a copy as the wrapper saw it.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub enum HostMemory {
    /// `&[T]`, `Vec<T>`, arrays: untracked between calls.
    Pageable,
    /// A pinned buffer; `None` when it belongs to an unsanitized context.
    Pinned(Option<BufRef>),
}

/// The host side of a copy, resolved for one call.
struct HostSide {
    end: HostEnd,
    access: Access,
    /// The transient buffer of pageable memory, freed after the copy.
    transient: Option<BufId>,
}

impl HostSide {
    /// Declares the transient buffer of pageable memory, or refers to the pinned buffer;
    /// `None` when the pinned buffer is foreign.
    fn resolve(
        call: &mut Call<'_>,
        host: HostMemory,
        bytes: u64,
        device: DeviceId,
    ) -> Option<Self> {
        match host {
            HostMemory::Pageable => {
                let buf = call.new_buf_id();
                call.push(Step::op(
                    Op::Alloc {
                        buf,
                        bytes,
                        device,
                        space: MemSpace::Host,
                        stream: None,
                        addr: None,
                        pool: Pool::Driver,
                    },
                    Some("pageable host memory".into()),
                ));
                Some(HostSide {
                    end: HostEnd::Pageable,
                    access: Access::whole(buf),
                    transient: Some(buf),
                })
            }
            HostMemory::Pinned(b) => {
                let b = device_side(call, b)?;
                Some(HostSide {
                    end: HostEnd::Pinned(b.pinned.expect("a pinned buffer")),
                    access: b.with_len(bytes).access(None),
                    transient: None,
                })
            }
        }
    }

    /// The synchronous API variant, or pageable memory (see the module docs).
    fn blocking(&self, sync: bool) -> bool {
        sync || self.transient.is_some()
    }

    fn free(&self, call: &mut Call<'_>) {
        if let Some(buf) = self.transient {
            call.push(Step::op(Op::Free { buf, stream: None }, None));
        }
    }
}

/// The memory, when it belongs to the call's sanitizer (else warns once).
fn device_side(call: &mut Call<'_>, b: Option<BufRef>) -> Option<BufRef> {
    let owner = b.map_or(0, |b| b.owner);
    if call.same_sanitizer([owner]) {
        b
    } else {
        None
    }
}

/// `CudaStream::alloc` of `bytes` on `on.stream`: stream-ordered when the device has memory
/// pools; cudarc's two events when tracking is on. Returns the buffer id and the events.
pub(crate) fn record_alloc(
    call: &mut Call<'_>,
    on: CallStream,
    bytes: u64,
    stream_ordered: bool,
    tracking: bool,
    name: Option<&str>,
) -> (BufId, Option<SliceEvents>) {
    let buf = call.new_buf_id();
    let events = tracking.then(|| SliceEvents {
        buf,
        read: call.new_event_id(),
        write: call.new_event_id(),
    });
    let alloc = Op::Alloc {
        buf,
        bytes,
        device: on.device,
        space: MemSpace::Device,
        stream: stream_ordered.then_some(on.stream),
        addr: None,
        pool: Pool::Driver,
    };
    model::plan_alloc(&mut call.steps, alloc, name.map(str::to_string), events);
    (buf, events)
}

/// A memset of `dst` (`sync`: `cuMemsetD8`, else `cuMemsetD8Async`).
pub(crate) fn record_memset(
    call: &mut Call<'_>,
    on: CallStream,
    dst: Option<BufRef>,
    sync: bool,
    label: &str,
) {
    let Some(d) = device_side(call, dst) else {
        return;
    };
    let memset = Step::op(
        Op::Memset {
            stream: on.stream,
            dst: d.access(None),
            blocking: sync,
        },
        Some(label.into()),
    );
    model::plan_memset(&mut call.steps, on.stream, d.events, on.managing, memset);
}

/// A host-to-device copy of `bytes` (the source's size) into `dst`.
pub(crate) fn record_htod(
    call: &mut Call<'_>,
    on: CallStream,
    src: HostMemory,
    dst: Option<BufRef>,
    bytes: u64,
    sync: bool,
    label: &str,
) {
    let Some(d) = device_side(call, dst) else {
        return;
    };
    let Some(host) = HostSide::resolve(call, src, bytes, on.device) else {
        return;
    };
    let copy = Step::op(
        Op::Memcpy {
            stream: on.stream,
            src: host.access.clone(),
            dst: d.with_len(bytes).access(None),
            blocking: host.blocking(sync),
        },
        Some(label.into()),
    );
    model::plan_htod(
        &mut call.steps,
        on.stream,
        host.end,
        d.events,
        on.managing,
        copy,
    );
    host.free(call);
}

/// A device-to-host copy of `bytes`: the destination's size, which is what cudarc copies
/// (result.rs `memcpy_dtoh_async` copies `size_of_val(dst)`), cut at the end of the source's
/// allocation.
pub(crate) fn record_dtoh(
    call: &mut Call<'_>,
    on: CallStream,
    src: Option<BufRef>,
    dst: HostMemory,
    bytes: u64,
    sync: bool,
    label: &str,
) {
    let Some(s) = device_side(call, src) else {
        return;
    };
    let Some(host) = HostSide::resolve(call, dst, bytes, on.device) else {
        return;
    };
    let copy = Step::op(
        Op::Memcpy {
            stream: on.stream,
            src: s.with_len(bytes).access(None),
            dst: host.access.clone(),
            blocking: host.blocking(sync),
        },
        Some(label.into()),
    );
    model::plan_dtoh(
        &mut call.steps,
        on.stream,
        s.events,
        host.end,
        on.managing,
        copy,
    );
    host.free(call);
}

/// A device-to-device copy within one context of `bytes` (the source's size).
pub(crate) fn record_dtod(
    call: &mut Call<'_>,
    on: CallStream,
    src: Option<BufRef>,
    dst: Option<BufRef>,
    bytes: u64,
    sync: bool,
    label: &str,
) {
    let owners = [src.map_or(0, |b| b.owner), dst.map_or(0, |b| b.owner)];
    let (true, Some(s), Some(d)) = (call.same_sanitizer(owners), src, dst) else {
        return;
    };
    let copy = Step::op(
        Op::Memcpy {
            stream: on.stream,
            src: s.access(None),
            dst: d.with_len(bytes).access(None),
            blocking: sync,
        },
        Some(label.into()),
    );
    model::plan_dtod(
        &mut call.steps,
        on.stream,
        s.events,
        d.events,
        on.managing,
        copy,
    );
}

/// A peer copy from another context's memory (`cuMemcpyPeerAsync`); `src_managing` is the
/// source context's tracking state.
pub(crate) fn record_dtod_peer(
    call: &mut Call<'_>,
    on: CallStream,
    src: Option<BufRef>,
    dst: Option<BufRef>,
    bytes: u64,
    src_managing: bool,
    label: &str,
) {
    let owners = [src.map_or(0, |b| b.owner), dst.map_or(0, |b| b.owner)];
    let (true, Some(s), Some(d)) = (call.same_sanitizer(owners), src, dst) else {
        return;
    };
    let (slot, device) = s
        .alloc_stream
        .expect("device memory has an allocation stream");
    let copy = Step::op(
        Op::Memcpy {
            stream: on.stream,
            src: s.access(None),
            dst: d.with_len(bytes).access(None),
            blocking: false,
        },
        Some(label.into()),
    );
    let p = PeerCopy {
        stream: on.stream,
        src_stream: call.stream(slot, device),
        src: s.events,
        dst: d.events,
        src_managing,
        dst_managing: on.managing,
        tmp: call.new_event_id(),
    };
    model::plan_dtod_peer(&mut call.steps, p, copy);
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cuda::model::PinnedEvent;
    use crate::cuda::sanitizer::tests::{captured, recording};
    use crate::cuda::sanitizer::{Sanitizer, StreamSlot};
    use crate::trace::record::Record;

    const ON: CallStream = CallStream {
        stream: 3,
        device: 0,
        managing: false,
    };

    fn device(san: &Arc<Sanitizer>, id: BufId, off: u64, len: u64) -> BufRef {
        BufRef {
            owner: san.identity(),
            id,
            off,
            len,
            bytes: 64,
            events: None,
            pinned: None,
            alloc_stream: Some((StreamSlot::Fixed(7), 0)),
        }
    }

    fn run(san: &Arc<Sanitizer>, f: impl FnOnce(&mut Call<'_>)) -> Vec<Record> {
        let mut call = san.begin(None);
        f(&mut call);
        call.finish();
        captured(san)
    }

    #[test]
    fn alloc_declares_cudarc_events_when_tracking() {
        let san = recording();
        let records = run(&san, |c| {
            let (buf, ev) = record_alloc(c, ON, 64, true, true, Some("x"));
            assert_eq!(buf, 1);
            assert_eq!(
                ev,
                Some(SliceEvents {
                    buf: 1,
                    read: 1,
                    write: 2
                })
            );
            let (buf, ev) = record_alloc(c, ON, 8, false, false, None);
            assert_eq!((buf, ev), (2, None));
        });
        assert_eq!(
            records[0].op,
            Op::Alloc {
                buf: 1,
                bytes: 64,
                device: 0,
                space: MemSpace::Device,
                stream: Some(3),
                addr: None,
                pool: Pool::Driver
            }
        );
        assert_eq!(records[0].name.as_deref(), Some("x"));
        assert_eq!(records[1].op, Op::Event { id: 1 });
        assert_eq!(records[2].name.as_deref(), Some("cudarc:write-event of b1"));
        assert!(matches!(records[3].op, Op::Alloc { stream: None, .. }));
        assert_eq!(records.len(), 4);
    }

    #[test]
    fn pageable_copies_use_a_transient_host_buffer_and_block() {
        let san = recording();
        let dst = device(&san, 10, 16, 32);
        let records = run(&san, |c| {
            record_htod(
                c,
                ON,
                HostMemory::Pageable,
                Some(dst),
                8,
                false,
                "memcpy_htod",
            )
        });
        let ops: Vec<_> = records.iter().map(|r| r.op.clone()).collect();
        assert_eq!(
            ops,
            [
                Op::Alloc {
                    buf: 1,
                    bytes: 8,
                    device: 0,
                    space: MemSpace::Host,
                    stream: None,
                    addr: None,
                    pool: Pool::Driver
                },
                Op::Memcpy {
                    stream: 3,
                    src: Access::whole(1),
                    dst: Access::bytes(10, 16, 8),
                    blocking: true
                },
                Op::Free {
                    buf: 1,
                    stream: None
                },
            ]
        );
        assert_eq!(records[1].name.as_deref(), Some("memcpy_htod"));
    }

    #[test]
    fn pinned_copies_are_async_and_cut_at_the_allocation_end() {
        let san = recording();
        let pinned = BufRef {
            pinned: Some(PinnedEvent { buf: 20, event: 5 }),
            alloc_stream: None,
            ..device(&san, 20, 0, 64)
        };
        // cudarc copies dst.len() elements: here more than the 32-byte view at offset 48 has.
        let src = device(&san, 10, 48, 16);
        let records = run(&san, |c| {
            record_dtoh(
                c,
                ON,
                Some(src),
                HostMemory::Pinned(Some(pinned)),
                32,
                false,
                "memcpy_dtoh",
            )
        });
        assert_eq!(
            records.iter().map(|r| r.op.clone()).collect::<Vec<_>>(),
            [Op::Memcpy {
                stream: 3,
                src: Access::bytes(10, 48, 16),
                dst: Access::bytes(20, 0, 32),
                blocking: false
            }]
        );
    }

    #[test]
    fn sync_variants_block_and_whole_ranges_are_whole_buffers() {
        let san = recording();
        let (a, b) = (device(&san, 10, 0, 64), device(&san, 11, 0, 64));
        let records = run(&san, |c| {
            record_dtod(c, ON, Some(a), Some(b), 64, true, "memcpy_dtod_sync");
            record_memset(c, ON, Some(b), true, "memset_zeros_sync");
        });
        assert_eq!(
            records.iter().map(|r| r.op.clone()).collect::<Vec<_>>(),
            [
                Op::Memcpy {
                    stream: 3,
                    src: Access::whole(10),
                    dst: Access::whole(11),
                    blocking: true
                },
                Op::Memset {
                    stream: 3,
                    dst: Access::whole(11),
                    blocking: true
                }
            ]
        );
    }

    #[test]
    fn foreign_memory_is_not_recorded() {
        let san = recording();
        let other = recording();
        let mine = device(&san, 10, 0, 64);
        let theirs = device(&other, 10, 0, 64);
        let records = run(&san, |c| {
            record_dtod(c, ON, Some(theirs), Some(mine), 64, false, "x");
            record_memset(c, ON, None, false, "y");
            record_htod(c, ON, HostMemory::Pinned(None), Some(mine), 8, false, "z");
        });
        assert!(records.is_empty(), "{records:?}");
    }

    #[test]
    fn peer_copies_resolve_the_source_allocation_stream() {
        let san = recording();
        let (a, b) = (device(&san, 10, 0, 64), device(&san, 11, 0, 64));
        let records = run(&san, |c| {
            record_dtod_peer(c, ON, Some(a), Some(b), 64, true, "peer")
        });
        assert_eq!(
            records.iter().map(|r| r.op.clone()).collect::<Vec<_>>(),
            [
                Op::Event { id: 1 },
                Op::Record {
                    event: 1,
                    stream: 7
                },
                Op::Wait {
                    stream: 3,
                    event: 1
                },
                Op::EventDestroy { id: 1 },
                Op::Memcpy {
                    stream: 3,
                    src: Access::whole(10),
                    dst: Access::whole(11),
                    blocking: false
                }
            ]
        );
    }
}
