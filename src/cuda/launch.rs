//! Kernel launches: [`LaunchArgs`] and [`PushKernelArg`], cudarc's builder whose buffer
//! arguments are recorded as reads or writes.
//!
//! As in cudarc, `.arg(&buf)` passes a buffer the kernel reads and `.arg(&mut buf)` one it
//! writes, and cudarc's event tracking follows that. A kernel may do otherwise (only read a
//! `&mut` argument, write part of one, write through a `&` argument, reach memory through a
//! pointer inside a struct): say so per launch with [`LaunchArgs::arg_as`],
//! [`LaunchArgs::arg_range`], [`LaunchArgs::reads`] and [`LaunchArgs::writes`]. The sanitizer
//! records what is declared; cudarc keeps tracking what the Rust types say, and the difference
//! is exactly the kind of race the sanitizer then reports.

use std::ops::{Bound, RangeBounds};
use std::panic::Location;

use cudarc::driver::{DeviceRepr, DriverError, LaunchConfig, PushKernelArg as _, sys};

use super::device_ptr::{BufRef, Tracked};
use super::event::CudaEvent;
use super::inline_list::Inline;
use super::model::{self, TrackedArg};
use super::module::CudaFunction;
use super::sanitizer::AccessList;
use super::slice::CudaSlice;
use super::step::Step;
use super::stream::CudaStream;
use super::view::{CudaView, CudaViewMut, elems, to_range};
#[cfg(test)]
use crate::trace::record;
use crate::trace::record::{BufId, ByteRange, Op};

/// How a kernel touches an argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgAccess {
    Read,
    /// Also covers read-modify-write: a write conflicts with everything a read does.
    Write,
    /// Updated only with atomic read-modify-writes (`atomicAdd`, ...): races with unordered
    /// plain reads and writes, never with another launch's atomics (ordering model R19).
    /// cudarc itself still sees the argument as its mutability says.
    Atomic,
}

/// One declared buffer access of a launch.
#[derive(Clone, Copy, Debug)]
struct Declared<'a> {
    /// The owning sanitizer's identity (0: none).
    owner: usize,
    buf: BufId,
    /// `None`: the whole buffer.
    range: Option<ByteRange>,
    access: ArgAccess,
    name: Option<&'a str>,
    /// The argument position, for [`LaunchArgs::names`]; `None` for `reads` / `writes`.
    position: Option<usize>,
}

impl Declared<'_> {
    fn new(buf: &BufRef, access: ArgAccess) -> Self {
        Declared {
            owner: buf.owner,
            buf: buf.id,
            range: buf.range(),
            access,
            name: None,
            position: None,
        }
    }
}

/// What the next pushed argument is declared as, instead of what its type says.
#[derive(Clone, Copy, Debug, Default)]
struct Refine<'a> {
    name: Option<&'a str>,
    access: Option<ArgAccess>,
    /// Elements of the argument, relative to it.
    elems: Option<(Bound<usize>, Bound<usize>)>,
}

/// Arguments of a launch held inline: kernels with more buffer arguments than this spill to
/// the heap.
const INLINE_ARGS: usize = 4;

/// cudarc's `LaunchArgs`, recording what the kernel reads and writes; made by
/// [`CudaStream::launch_builder`].
#[derive(Debug)]
pub struct LaunchArgs<'a> {
    stream: &'a CudaStream,
    func: &'a CudaFunction,
    args: cudarc::driver::LaunchArgs<'a>,
    /// Everything below stays empty when the sanitizer is off.
    declared: Inline<Declared<'a>, INLINE_ARGS>,
    tracked: Inline<TrackedArg, INLINE_ARGS>,
    names: Inline<&'a str, { 2 * INLINE_ARGS }>,
    position: usize,
    refine: Refine<'a>,
}

/// cudarc's `PushKernelArg`: what [`LaunchArgs::arg`] takes. A scalar `&T` (`T: DeviceRepr`,
/// not recorded), `&CudaSlice` / `&CudaView` (read), `&mut CudaSlice` / `&mut CudaViewMut`
/// (written).
///
/// # Safety
/// As cudarc's: an implementation must push a pointer the kernel can take for `T`.
pub unsafe trait PushKernelArg<T> {
    fn arg(&mut self, arg: T) -> &mut Self;
}

unsafe impl<'a, 'b: 'a, T: DeviceRepr> PushKernelArg<&'b T> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b T) -> &mut Self {
        if self.stream.san().is_some() {
            self.position += 1;
            self.refine = Refine::default();
        }
        self.args.arg(arg);
        self
    }
}

unsafe impl<'a, 'b: 'a, T> PushKernelArg<&'b CudaSlice<T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b CudaSlice<T>) -> &mut Self {
        if self.stream.san().is_some() {
            self.note::<T>(arg.buf_ref(), false, arg.len());
        }
        self.args.arg(arg.cuda_ref());
        self
    }
}

unsafe impl<'a, 'b: 'a, T> PushKernelArg<&'b mut CudaSlice<T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b mut CudaSlice<T>) -> &mut Self {
        if self.stream.san().is_some() {
            self.note::<T>(arg.buf_ref(), true, arg.len());
        }
        self.args.arg(arg.cuda_mut_ref());
        self
    }
}

unsafe impl<'a, 'b: 'a, 'c: 'b, T> PushKernelArg<&'b CudaView<'c, T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b CudaView<'c, T>) -> &mut Self {
        if self.stream.san().is_some() {
            self.note::<T>(arg.buf, false, arg.len());
        }
        self.args.arg(&arg.cuda);
        self
    }
}

unsafe impl<'a, 'b: 'a, 'c: 'b, T> PushKernelArg<&'b mut CudaViewMut<'c, T>> for LaunchArgs<'a> {
    #[inline(always)]
    fn arg(&mut self, arg: &'b mut CudaViewMut<'c, T>) -> &mut Self {
        if self.stream.san().is_some() {
            self.note::<T>(arg.buf, true, arg.len());
        }
        self.args.arg(&mut arg.cuda);
        self
    }
}

/// Fills the `reads` and `writes` of a launch record: the declared accesses of this sanitizer's
/// memory (`owns`), each named explicitly or by its position in `names`.
fn fill_accesses(
    declared: &[Declared<'_>],
    names: &[&str],
    owns: impl Fn(usize) -> bool,
    reads: &mut AccessList,
    writes: &mut AccessList,
    atomics: &mut AccessList,
) {
    for d in declared.iter().filter(|d| owns(d.owner)) {
        let name = d
            .name
            .or_else(|| d.position.and_then(|p| names.get(p).copied()));
        let list = match d.access {
            ArgAccess::Read => &mut *reads,
            ArgAccess::Write => &mut *writes,
            ArgAccess::Atomic => &mut *atomics,
        };
        list.push(d.buf, d.range, name);
    }
}

impl CudaStream {
    /// `CudaStream::launch_builder`: launches `func` on this stream.
    pub fn launch_builder<'a>(&'a self, func: &'a CudaFunction) -> LaunchArgs<'a> {
        LaunchArgs {
            stream: self,
            func,
            args: self.cudarc().launch_builder(func.cudarc()),
            declared: Inline::new(),
            tracked: Inline::new(),
            names: Inline::new(),
            position: 0,
            refine: Refine::default(),
        }
    }
}

impl<'a> LaunchArgs<'a> {
    /// Notes a buffer argument of `len` elements of `T` as cudarc sees it (`mutable`) and as
    /// declared (the type, or the pending [`Refine`]). Not `#[cold]`: every buffer argument
    /// of a sanitized launch comes here.
    fn note<T>(&mut self, buf: Option<BufRef>, mutable: bool, len: usize) {
        let refine = std::mem::take(&mut self.refine);
        let position = self.position;
        self.position += 1;
        let Some(san) = self.stream.san() else {
            return;
        };
        // What cudarc pushes to its wait / record lists right now (launch.rs:100-166).
        let managing = self.stream.managing();
        let Some(buf) = buf.filter(|b| san.owns(b.owner)) else {
            // Memory of an unsanitized context or another sanitizer: its events are not this
            // trace's; the launch warns that the access is not recorded.
            self.tracked.push(TrackedArg {
                events: None,
                mutable,
                managing,
            });
            self.declared
                .push(Declared::new(&BufRef::FOREIGN, ArgAccess::Read));
            return;
        };
        self.tracked.push(TrackedArg {
            events: buf.events,
            mutable,
            managing,
        });
        let default = if mutable {
            ArgAccess::Write
        } else {
            ArgAccess::Read
        };
        let buf = match refine.elems {
            None => buf,
            Some(bounds) => {
                let Some((start, end)) = to_range(bounds, len) else {
                    panic!(
                        "arg_range: {bounds:?} is out of bounds for an argument of {len} elements"
                    );
                };
                elems::<T>(Some(buf), start, end - start).expect("a buffer")
            }
        };
        self.declared.push(Declared {
            name: refine.name,
            position: Some(position),
            ..Declared::new(&buf, refine.access.unwrap_or(default))
        });
    }

    /// Pushes `arg` declared as `refine` says.
    fn refined<A>(&mut self, arg: A, refine: Refine<'a>) -> &mut Self
    where
        Self: PushKernelArg<A>,
    {
        if self.stream.san().is_some() {
            self.refine = refine;
        }
        self.arg(arg);
        self.refine = Refine::default();
        self
    }

    /// [`PushKernelArg::arg`] with the parameter's name, for reports. Not in cudarc.
    pub fn arg_named<A>(&mut self, name: &'a str, arg: A) -> &mut Self
    where
        Self: PushKernelArg<A>,
    {
        let refine = Refine {
            name: Some(name),
            ..Refine::default()
        };
        self.refined(arg, refine)
    }

    /// Adds a buffer argument the kernel accesses as `access`, whatever its Rust type says: a
    /// `&mut` argument the kernel only reads, a `&` one it writes. cudarc's tracking still
    /// follows the type. Not in cudarc.
    pub fn arg_as<A>(&mut self, arg: A, access: ArgAccess) -> &mut Self
    where
        Self: PushKernelArg<A>,
    {
        let refine = Refine {
            access: Some(access),
            ..Refine::default()
        };
        self.refined(arg, refine)
    }

    /// [`LaunchArgs::arg_as`] with a name.
    pub fn arg_as_named<A>(&mut self, name: &'a str, arg: A, access: ArgAccess) -> &mut Self
    where
        Self: PushKernelArg<A>,
    {
        let refine = Refine {
            name: Some(name),
            access: Some(access),
            ..Refine::default()
        };
        self.refined(arg, refine)
    }

    /// Adds a buffer argument of which the kernel touches only elements `elems` (counted from
    /// the argument's start), as `access`. The kernel still gets the whole argument. Panics
    /// (when sanitizing) if `elems` is out of the argument's bounds. Not in cudarc.
    pub fn arg_range<A>(
        &mut self,
        arg: A,
        access: ArgAccess,
        elems: impl RangeBounds<usize>,
    ) -> &mut Self
    where
        Self: PushKernelArg<A>,
    {
        let refine = Refine {
            access: Some(access),
            elems: Some((elems.start_bound().cloned(), elems.end_bound().cloned())),
            ..Refine::default()
        };
        self.refined(arg, refine)
    }

    /// Names the kernel's parameters by position (scalars count), for arguments added without
    /// a name. Not in cudarc.
    pub fn names(&mut self, names: &[&'a str]) -> &mut Self {
        if self.stream.san().is_some() {
            self.names = Inline::new();
            for name in names {
                self.names.push(name);
            }
        }
        self
    }

    fn extra(&mut self, mem: &dyn Tracked, access: ArgAccess) -> &mut Self {
        if self.stream.san().is_some() {
            let buf = mem.buf_ref().unwrap_or(BufRef::FOREIGN);
            self.declared.push(Declared::new(&buf, access));
        }
        self
    }

    /// Declares memory the kernel reads without it being an argument (through a pointer in a
    /// struct, a module global). cudarc does not track it. Not in cudarc.
    pub fn reads(&mut self, mem: &dyn Tracked) -> &mut Self {
        self.extra(mem, ArgAccess::Read)
    }

    /// Declares memory the kernel writes without it being an argument. Not in cudarc.
    pub fn writes(&mut self, mem: &dyn Tracked) -> &mut Self {
        self.extra(mem, ArgAccess::Write)
    }

    /// `LaunchArgs::record_kernel_launch`: the launch returns events recorded just before and
    /// just after the kernel.
    pub fn record_kernel_launch(&mut self, flags: sys::CUevent_flags) -> &mut Self {
        self.args.record_kernel_launch(flags);
        self
    }

    /// `LaunchArgs::launch`.
    ///
    /// # Safety
    /// As cudarc's: the arguments must match the kernel, which must stay in bounds. The
    /// declared accesses must cover what the kernel touches, or the sanitizer misses races.
    #[track_caller]
    pub unsafe fn launch(
        &mut self,
        cfg: LaunchConfig,
    ) -> Result<Option<(CudaEvent, CudaEvent)>, DriverError> {
        let at = Location::caller();
        self.run(at, |args| unsafe { args.launch(cfg) })
    }

    /// `LaunchArgs::launch_cooperative`.
    ///
    /// # Safety
    /// As [`LaunchArgs::launch`].
    #[track_caller]
    pub unsafe fn launch_cooperative(
        &mut self,
        cfg: LaunchConfig,
    ) -> Result<Option<(CudaEvent, CudaEvent)>, DriverError> {
        let at = Location::caller();
        self.run(at, |args| unsafe { args.launch_cooperative(cfg) })
    }

    fn run(
        &mut self,
        at: &'static Location<'static>,
        launch: impl FnOnce(
            &mut cudarc::driver::LaunchArgs<'a>,
        ) -> Result<
            Option<(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent)>,
            DriverError,
        >,
    ) -> Result<Option<(CudaEvent, CudaEvent)>, DriverError> {
        let ctx = self.stream.context();
        let Some(san) = self.stream.san() else {
            return Ok(launch(&mut self.args)?
                .map(|(a, b)| (CudaEvent::untracked(a, ctx), CudaEvent::untracked(b, ctx))));
        };
        let mut call = san.begin(Some(at));
        let stream = self.stream.id_in(&mut call);
        let timing = launch(&mut self.args)?;
        call.same_sanitizer(self.declared.as_slice().iter().map(|d| d.owner));
        let (mut reads, mut writes) = (call.access_list(), call.access_list());
        // Few kernels declare atomic updates: their list is taken only then.
        let mut atomics = if self
            .declared
            .as_slice()
            .iter()
            .any(|d| d.access == ArgAccess::Atomic)
        {
            call.access_list()
        } else {
            AccessList::default()
        };
        fill_accesses(
            self.declared.as_slice(),
            self.names.as_slice(),
            |o| san.owns(o),
            &mut reads,
            &mut writes,
            &mut atomics,
        );
        let timing_ids = timing
            .as_ref()
            .map(|_| (call.new_event_id(), call.new_event_id()));
        let op = Step::labeled(
            Op::Launch {
                stream,
                reads: reads.done(),
                writes: writes.done(),
                atomics: atomics.done(),
            },
            self.func.label(),
        );
        model::plan_launch(
            &mut call.emit(),
            stream,
            self.tracked.as_slice(),
            timing_ids,
            op,
        );
        Ok(match (timing, timing_ids) {
            (Some((a, b)), Some((ia, ib))) => Some((
                CudaEvent::tracked(a, ctx, san, ia),
                CudaEvent::tracked(b, ctx, san, ib),
            )),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(owner: usize, id: u64, off: u64, len: u64) -> BufRef {
        BufRef {
            owner,
            id,
            off,
            len,
            bytes: 64,
            ..BufRef::FOREIGN
        }
    }

    fn declared<'a>(
        b: BufRef,
        access: ArgAccess,
        name: Option<&'a str>,
        position: Option<usize>,
    ) -> Declared<'a> {
        Declared {
            name,
            position,
            ..Declared::new(&b, access)
        }
    }

    type Lists = (
        Vec<record::Access>,
        Vec<record::Access>,
        Vec<record::Access>,
    );

    /// The reads, writes and atomics `declared` become.
    fn fill(declared: &[Declared<'_>], names: &[&str]) -> Lists {
        let (mut reads, mut writes, mut atomics) = (
            AccessList::default(),
            AccessList::default(),
            AccessList::default(),
        );
        fill_accesses(
            declared,
            names,
            |o| o == 1,
            &mut reads,
            &mut writes,
            &mut atomics,
        );
        (reads.done(), writes.done(), atomics.done())
    }

    #[test]
    fn declared_accesses_with_names_overrides_and_ranges() {
        let declared = [
            // .arg(&mut out): position 0, unnamed
            declared(buf(1, 1, 0, 64), ArgAccess::Write, None, Some(0)),
            // .arg_as_named("x", &x, ArgAccess::Write) on a view: position 2 (a scalar was 1)
            declared(buf(1, 2, 8, 16), ArgAccess::Write, Some("x"), Some(2)),
            // .arg(&inp): position 3, named by `names`
            declared(buf(1, 3, 0, 64), ArgAccess::Read, None, Some(3)),
            // .reads(&table): not an argument
            declared(buf(1, 4, 0, 32), ArgAccess::Read, None, None),
            // memory of another sanitizer
            declared(buf(2, 5, 0, 64), ArgAccess::Read, None, Some(4)),
            // .arg_as(&mut bins, ArgAccess::Atomic): position 5
            declared(buf(1, 6, 0, 64), ArgAccess::Atomic, None, Some(5)),
        ];
        let names = ["out", "n", "ignored", "inp", "other", "bins"];
        let (reads, writes, atomics) = fill(&declared, &names);
        assert_eq!(atomics, [record::Access::whole(6).arg("bins")]);
        assert_eq!(
            writes,
            [
                record::Access::whole(1).arg("out"),
                record::Access::bytes(2, 8, 16).arg("x"),
            ]
        );
        assert_eq!(
            reads,
            [
                record::Access::whole(3).arg("inp"),
                record::Access::bytes(4, 0, 32),
            ]
        );
        let (reads, _, _) = fill(&declared, &[]);
        assert_eq!(reads[0], record::Access::whole(3));
    }
}
