//! Proptest strategies for any record the format can express, shared by the tests of both
//! encodings' writers and readers.

use proptest::prelude::*;

use super::record::{Access, ByteRange, MemSpace, Op, Pool, Record, StreamFlags, StreamKind};

pub(crate) fn any_string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z_][a-z0-9_]{0,12}",
        1 => any::<String>(),
    ]
}

pub(crate) fn any_id() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0u64..16, 1 => any::<u64>()]
}

pub(crate) fn any_access() -> impl Strategy<Value = Access> {
    let range = any::<u64>()
        .prop_flat_map(|off| (Just(off), 0..=u64::MAX - off))
        .prop_map(|(off, len)| ByteRange { off, len });
    (
        any_id(),
        proptest::option::of(range),
        proptest::option::of(any_string()),
    )
        .prop_map(|(buf, range, arg)| Access { buf, range, arg })
}

pub(crate) fn any_accesses() -> impl Strategy<Value = Vec<Access>> {
    proptest::collection::vec(any_access(), 0..4)
}

pub(crate) fn any_device() -> impl Strategy<Value = u32> {
    prop_oneof![3 => Just(0u32), 1 => any::<u32>()]
}

pub(crate) fn any_op() -> impl Strategy<Value = Op> {
    let kind = prop_oneof![
        Just(StreamKind::LegacyDefault),
        Just(StreamKind::PerThreadDefault),
        Just(StreamKind::Created)
    ];
    let flags = prop_oneof![Just(StreamFlags::Blocking), Just(StreamFlags::NonBlocking)];
    let space = prop_oneof![
        Just(MemSpace::Device),
        Just(MemSpace::Pinned),
        Just(MemSpace::Managed),
        Just(MemSpace::Host)
    ];
    let opt_id = || proptest::option::of(any_id());
    prop_oneof![
        (any_id(), any_device(), kind, flags).prop_map(|(id, device, kind, flags)| Op::Stream {
            id,
            device,
            kind,
            flags
        }),
        any_id().prop_map(|id| Op::Event { id }),
        any_id().prop_map(|id| Op::EventDestroy { id }),
        any_id().prop_map(|id| Op::StreamDestroy { id }),
        (
            any_id(),
            any::<u64>(),
            any_device(),
            space,
            opt_id(),
            opt_id(),
            any::<bool>()
        )
            .prop_map(
                |(buf, bytes, device, space, stream, addr, caching)| Op::Alloc {
                    // A caching block always has its address.
                    addr: if caching {
                        Some(addr.unwrap_or(0))
                    } else {
                        addr
                    },
                    pool: if caching { Pool::Caching } else { Pool::Driver },
                    buf,
                    bytes,
                    device,
                    space,
                    stream,
                }
            ),
        (any_id(), opt_id()).prop_map(|(buf, stream)| Op::Free { buf, stream }),
        (any_id(), any_accesses(), any_accesses(), any_accesses()).prop_map(
            |(stream, reads, writes, atomics)| Op::Launch {
                stream,
                reads,
                writes,
                atomics,
            }
        ),
        (any_id(), any_access(), any_access(), any::<bool>()).prop_map(
            |(stream, src, dst, blocking)| Op::Memcpy {
                stream,
                src,
                dst,
                blocking
            }
        ),
        (any_id(), any_access(), any::<bool>()).prop_map(|(stream, dst, blocking)| {
            Op::Memset {
                stream,
                dst,
                blocking,
            }
        }),
        (any_id(), any_accesses(), any_accesses()).prop_map(|(stream, reads, writes)| {
            Op::HostFunc {
                stream,
                reads,
                writes,
            }
        }),
        (any_accesses(), any_accesses())
            .prop_map(|(reads, writes)| Op::HostAccess { reads, writes }),
        (any_id(), any_id()).prop_map(|(event, stream)| Op::Record { event, stream }),
        (any_id(), any_id()).prop_map(|(stream, event)| Op::Wait { stream, event }),
        any_id().prop_map(|event| Op::EventSync { event }),
        (any_id(), any::<bool>()).prop_map(|(event, done)| Op::EventQuery { event, done }),
        any_id().prop_map(|stream| Op::StreamSync { stream }),
        (any_id(), any::<bool>()).prop_map(|(stream, done)| Op::StreamQuery { stream, done }),
        any_device().prop_map(|device| Op::DeviceSync { device }),
        (any_id(), any_id()).prop_map(|(buf, stream)| Op::RecordStream { buf, stream }),
        (any_id(), any_id()).prop_map(|(graph, stream)| Op::GraphBegin { graph, stream }),
        (any_id(), any_id()).prop_map(|(graph, stream)| Op::GraphEnd { graph, stream }),
        (any_id(), any_id()).prop_map(|(graph, stream)| Op::GraphLaunch { graph, stream }),
        any_id().prop_map(|graph| Op::GraphDestroy { graph }),
    ]
}

/// Any record the format can express (a launch always has its kernel name).
pub(crate) fn any_record() -> impl Strategy<Value = Record> {
    (
        prop_oneof![3 => Just(0u64), 1 => any::<u64>()],
        proptest::option::of(any_string()),
        proptest::option::of(any_string()),
        any_op(),
    )
        .prop_map(|(thread, at, name, op)| {
            let name = match (&op, name) {
                (Op::Launch { .. }, None) => Some("kernel".to_string()),
                (_, name) => name,
            };
            Record {
                line: 0,
                thread,
                at,
                name,
                op,
            }
        })
}
