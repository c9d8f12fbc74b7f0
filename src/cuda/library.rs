//! Calls into CUDA libraries bound to a stream (cuBLAS, cuRAND): recorded as a `launch` named
//! after the library function, with the bytes it reads and writes, and cudarc's waits and
//! records around it (`model::plan_guarded`).

use std::panic::Location;

use super::device_ptr::BufRef;
use super::launch::ArgAccess;
use super::model::{self, TrackedArg};
use super::step::{Label, Step};
use super::stream::CudaStream;
use crate::trace::record::Op;

/// One memory argument of a library call: its bytes (those the call touches) and how.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LibArg {
    pub buf: Option<BufRef>,
    pub access: ArgAccess,
}

impl LibArg {
    pub(crate) fn read(buf: Option<BufRef>) -> Self {
        LibArg {
            buf,
            access: ArgAccess::Read,
        }
    }

    pub(crate) fn write(buf: Option<BufRef>) -> Self {
        LibArg {
            buf,
            access: ArgAccess::Write,
        }
    }
}

/// The first `bytes` bytes of `buf` (at most all of it): what a call reaches from the start of
/// an argument.
pub(crate) fn prefix(buf: Option<BufRef>, bytes: u64) -> Option<BufRef> {
    buf.map(|b| {
        let len = b.len.min(bytes);
        b.sub(0, len)
    })
}

/// Makes `call` (the library function `name` on `stream`, which takes `args` through cudarc's
/// `DevicePtr` / `DevicePtrMut` in that order) and records it when `stream` is sanitized.
pub(crate) fn record_call<E>(
    stream: &CudaStream,
    name: &'static str,
    args: &[LibArg],
    at: &'static Location<'static>,
    call: impl FnOnce() -> Result<(), E>,
) -> Result<(), E> {
    let Some(san) = stream.san() else {
        return call();
    };
    let mut c = san.begin(Some(at));
    let id = stream.id_in(&mut c);
    let managing = stream.managing();
    call()?;
    c.same_sanitizer(args.iter().filter_map(|a| a.buf.map(|b| b.owner)));
    let owned: Vec<(BufRef, ArgAccess)> = args
        .iter()
        .filter_map(|a| a.buf.filter(|b| san.owns(b.owner)).map(|b| (b, a.access)))
        .collect();
    let tracked: Vec<TrackedArg> = args
        .iter()
        .map(|a| TrackedArg {
            events: a.buf.filter(|b| san.owns(b.owner)).and_then(|b| b.events),
            mutable: a.access != ArgAccess::Read,
            managing,
        })
        .collect();
    let (mut reads, mut writes, mut atomics) = (c.access_list(), c.access_list(), c.access_list());
    for (b, access) in owned {
        let list = match access {
            ArgAccess::Read => &mut reads,
            ArgAccess::Write => &mut writes,
            ArgAccess::Atomic => &mut atomics,
        };
        list.push(b.id, b.range(), None);
    }
    let op = Step::labeled(
        Op::Launch {
            stream: id,
            reads: reads.done(),
            writes: writes.done(),
            atomics: atomics.done(),
        },
        Label::Static(name),
    );
    model::plan_guarded(&mut c.steps, id, &tracked, op);
    c.finish();
    Ok(())
}
