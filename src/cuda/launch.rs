//! Kernel launches: [`Module`] / [`Function`] (which keep the kernel name reports need) and
//! [`LaunchBuilder`], cudarc's `LaunchArgs` whose buffer arguments are declared read or write.
//!
//! As in cudarc, `.arg(&buf)` passes a buffer the kernel reads and `.arg(&mut buf)` (or
//! `.arg_mut`) one it writes; cudarc's event tracking follows that. A kernel may do otherwise
//! (write through a `&` argument, reach memory through a pointer inside a struct): say so with
//! [`LaunchBuilder::arg_as`], [`LaunchBuilder::reads`] and [`LaunchBuilder::writes`]. The
//! sanitizer records what is declared; cudarc keeps tracking what the Rust types say, and the
//! difference is exactly the kind of race the sanitizer then reports.

use std::mem::MaybeUninit;
use std::panic::Location;
use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaModule, DeviceRepr, DriverError, LaunchArgs, LaunchConfig, PushKernelArg, sys,
};

use super::buffer::{BufRef, DeviceBuffer, DeviceView, DeviceViewMut, Tracked};
use super::event::Event;
use super::model::{self, TrackedArg};
use super::sanitizer::AccessList;
use super::step::{Label, Step};
use super::stream::Stream;
#[cfg(test)]
use crate::trace::record;
use crate::trace::record::{BufId, ByteRange, Op};

/// `CudaModule`, made by [`super::Context::load_module`].
#[derive(Clone, Debug)]
pub struct Module {
    pub(crate) cuda: Arc<CudaModule>,
}

impl Module {
    /// `CudaModule::load_function`; the name is kept for reports.
    pub fn load_function(&self, name: &str) -> Result<Function, DriverError> {
        Ok(Function::new(self.cuda.load_function(name)?, name))
    }

    /// The wrapped cudarc module.
    pub fn cudarc(&self) -> &Arc<CudaModule> {
        &self.cuda
    }
}

/// A kernel and its name.
#[derive(Clone, Debug)]
pub struct Function {
    cuda: CudaFunction,
    name: Arc<str>,
}

impl Function {
    /// Names a cudarc function, for one loaded elsewhere.
    pub fn new(cuda: CudaFunction, name: impl Into<Arc<str>>) -> Function {
        Function {
            cuda,
            name: name.into(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn cudarc(&self) -> &CudaFunction {
        &self.cuda
    }
}

/// How a kernel touches an argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgAccess {
    Read,
    /// Also covers read-modify-write: a write conflicts with everything a read does.
    Write,
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
    /// The argument position, for [`LaunchBuilder::names`]; `None` for `reads` / `writes`.
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

/// Arguments of a launch held inline: kernels with more buffer arguments than this spill to
/// the heap.
const INLINE_ARGS: usize = 4;

/// cudarc's `LaunchArgs` with declared accesses; made by [`Stream::launch_builder`].
#[derive(Debug)]
pub struct LaunchBuilder<'a> {
    stream: &'a Stream,
    func: &'a Function,
    args: LaunchArgs<'a>,
    /// Everything below stays empty when the sanitizer is off.
    declared: Inline<Declared<'a>, INLINE_ARGS>,
    tracked: Inline<TrackedArg, INLINE_ARGS>,
    names: Inline<&'a str, { 2 * INLINE_ARGS }>,
    position: usize,
}

/// A list of `Copy` items, held inline up to `N` and on the heap beyond: a launch with few
/// buffer arguments records without allocating. It has no `Drop` of its own (unlike
/// `SmallVec`), so a builder holding borrows of temporaries may be dropped after them, as
/// cudarc's `LaunchArgs` (which holds `Vec`s) may.
struct Inline<T: Copy, const N: usize> {
    len: usize,
    /// Items `..len` are initialized while `len <= N`.
    items: [MaybeUninit<T>; N],
    /// All the items once there are more than `N`.
    spill: Vec<T>,
}

impl<T: Copy, const N: usize> Inline<T, N> {
    fn new() -> Self {
        Inline {
            len: 0,
            items: [const { MaybeUninit::uninit() }; N],
            spill: Vec::new(),
        }
    }

    fn push(&mut self, item: T) {
        if self.len < N {
            self.items[self.len].write(item);
        } else {
            if self.len == N {
                let mut spill = Vec::with_capacity(2 * N);
                spill.extend_from_slice(self.inline());
                self.spill = spill;
            }
            self.spill.push(item);
        }
        self.len += 1;
    }

    fn inline(&self) -> &[T] {
        let len = self.len.min(N);
        // SAFETY: items `..len` were written by `push` (`T: Copy`: nothing to drop).
        unsafe { std::slice::from_raw_parts(self.items.as_ptr().cast::<T>(), len) }
    }

    fn as_slice(&self) -> &[T] {
        if self.len <= N {
            self.inline()
        } else {
            &self.spill
        }
    }
}

impl<T: Copy + std::fmt::Debug, const N: usize> std::fmt::Debug for Inline<T, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// Something [`LaunchBuilder::arg`] takes: a scalar (`&T`, not recorded), a buffer or view
/// (`&` read, `&mut` write).
pub trait KernelArg<'a> {
    #[doc(hidden)]
    fn push_to(self, b: &mut LaunchBuilder<'a>, name: Option<&'a str>, access: Option<ArgAccess>);
}

/// The arguments [`LaunchBuilder::arg_mut`] takes: `&mut` buffers and views.
pub trait KernelArgMut<'a>: KernelArg<'a> {}

impl<'a, T: DeviceRepr> KernelArg<'a> for &'a T {
    fn push_to(self, b: &mut LaunchBuilder<'a>, _: Option<&'a str>, _: Option<ArgAccess>) {
        b.args.arg(self);
        b.position += 1;
    }
}

impl<'a, T> KernelArg<'a> for &'a DeviceBuffer<T> {
    fn push_to(self, b: &mut LaunchBuilder<'a>, name: Option<&'a str>, access: Option<ArgAccess>) {
        b.note(self.buf_ref(), false, name, access);
        b.args.arg(&*self.slice);
    }
}

impl<'a, T> KernelArg<'a> for &'a mut DeviceBuffer<T> {
    fn push_to(self, b: &mut LaunchBuilder<'a>, name: Option<&'a str>, access: Option<ArgAccess>) {
        b.note(self.buf_ref(), true, name, access);
        b.args.arg(&mut *self.slice);
    }
}
impl<'a, T> KernelArgMut<'a> for &'a mut DeviceBuffer<T> {}

impl<'a, 'v: 'a, T> KernelArg<'a> for &'a DeviceView<'v, T> {
    fn push_to(self, b: &mut LaunchBuilder<'a>, name: Option<&'a str>, access: Option<ArgAccess>) {
        b.note(self.buf_ref(), false, name, access);
        b.args.arg(&self.view);
    }
}

impl<'a, 'v: 'a, T> KernelArg<'a> for &'a mut DeviceViewMut<'v, T> {
    fn push_to(self, b: &mut LaunchBuilder<'a>, name: Option<&'a str>, access: Option<ArgAccess>) {
        b.note(self.buf_ref(), true, name, access);
        b.args.arg(&mut self.view);
    }
}
impl<'a, 'v: 'a, T> KernelArgMut<'a> for &'a mut DeviceViewMut<'v, T> {}

/// Fills the `reads` and `writes` of a launch record: the declared accesses of this sanitizer's
/// memory (`owns`), each named explicitly or by its position in `names`.
fn fill_accesses(
    declared: &[Declared<'_>],
    names: &[&str],
    owns: impl Fn(usize) -> bool,
    reads: &mut AccessList,
    writes: &mut AccessList,
) {
    for d in declared.iter().filter(|d| owns(d.owner)) {
        let name = d
            .name
            .or_else(|| d.position.and_then(|p| names.get(p).copied()));
        let list = match d.access {
            ArgAccess::Read => &mut *reads,
            ArgAccess::Write => &mut *writes,
        };
        list.push(d.buf, d.range, name);
    }
}

impl Stream {
    /// `CudaStream::launch_builder`: launches `func` on this stream.
    pub fn launch_builder<'a>(&'a self, func: &'a Function) -> LaunchBuilder<'a> {
        LaunchBuilder {
            stream: self,
            func,
            args: self.cudarc().launch_builder(&func.cuda),
            declared: Inline::new(),
            tracked: Inline::new(),
            names: Inline::new(),
            position: 0,
        }
    }
}

impl<'a> LaunchBuilder<'a> {
    /// Notes a buffer argument as cudarc sees it (`mutable`) and as declared.
    fn note(
        &mut self,
        buf: Option<BufRef>,
        mutable: bool,
        name: Option<&'a str>,
        access: Option<ArgAccess>,
    ) {
        let position = self.position;
        self.position += 1;
        let Some(san) = self.stream.san() else {
            return;
        };
        // What cudarc pushes to its wait / record lists right now (launch.rs:100-166).
        let managing = self.stream.managing();
        if let Some(buf) = buf.filter(|b| san.owns(b.owner)) {
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
            self.declared.push(Declared {
                name,
                position: Some(position),
                ..Declared::new(&buf, access.unwrap_or(default))
            });
        } else {
            // Memory of an unsanitized context or another sanitizer: its events are not this
            // trace's; the launch warns that the access is not recorded.
            self.tracked.push(TrackedArg {
                events: None,
                mutable,
                managing,
            });
            self.declared
                .push(Declared::new(&BufRef::FOREIGN, ArgAccess::Read));
        }
    }

    /// Adds a kernel argument: a scalar (`&n`), a buffer or view the kernel reads (`&buf`) or
    /// writes (`&mut buf`).
    pub fn arg<A: KernelArg<'a>>(&mut self, arg: A) -> &mut Self {
        arg.push_to(self, None, None);
        self
    }

    /// Adds a buffer argument the kernel writes.
    pub fn arg_mut<A: KernelArgMut<'a>>(&mut self, arg: A) -> &mut Self {
        arg.push_to(self, None, None);
        self
    }

    /// [`LaunchBuilder::arg`] with the parameter's name, for reports.
    pub fn arg_named<A: KernelArg<'a>>(&mut self, name: &'a str, arg: A) -> &mut Self {
        arg.push_to(self, Some(name), None);
        self
    }

    /// Adds a buffer argument the kernel accesses as `access`, whatever its Rust type says
    /// (cudarc's tracking still follows the type).
    pub fn arg_as<A: KernelArg<'a>>(&mut self, arg: A, access: ArgAccess) -> &mut Self {
        arg.push_to(self, None, Some(access));
        self
    }

    /// [`LaunchBuilder::arg_as`] with a name.
    pub fn arg_as_named<A: KernelArg<'a>>(
        &mut self,
        name: &'a str,
        arg: A,
        access: ArgAccess,
    ) -> &mut Self {
        arg.push_to(self, Some(name), Some(access));
        self
    }

    /// Names the kernel's parameters by position (scalars count), for arguments added without
    /// a name.
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
    /// struct, say). cudarc does not track it.
    pub fn reads(&mut self, mem: &dyn Tracked) -> &mut Self {
        self.extra(mem, ArgAccess::Read)
    }

    /// Declares memory the kernel writes without it being an argument.
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
    ) -> Result<Option<(Event, Event)>, DriverError> {
        let at = Location::caller();
        self.run(at, |args| unsafe { args.launch(cfg) })
    }

    /// `LaunchArgs::launch_cooperative`.
    ///
    /// # Safety
    /// As [`LaunchBuilder::launch`].
    #[track_caller]
    pub unsafe fn launch_cooperative(
        &mut self,
        cfg: LaunchConfig,
    ) -> Result<Option<(Event, Event)>, DriverError> {
        let at = Location::caller();
        self.run(at, |args| unsafe { args.launch_cooperative(cfg) })
    }

    fn run(
        &mut self,
        at: &'static Location<'static>,
        launch: impl FnOnce(
            &mut LaunchArgs<'a>,
        ) -> Result<
            Option<(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent)>,
            DriverError,
        >,
    ) -> Result<Option<(Event, Event)>, DriverError> {
        let Some(san) = self.stream.san() else {
            return Ok(
                launch(&mut self.args)?.map(|(a, b)| (Event::untracked(a), Event::untracked(b)))
            );
        };
        let mut call = san.begin(Some(at));
        let stream = self.stream.id_in(&mut call);
        let timing = launch(&mut self.args)?;
        call.same_sanitizer(self.declared.as_slice().iter().map(|d| d.owner));
        let (mut reads, mut writes) = (call.access_list(), call.access_list());
        fill_accesses(
            self.declared.as_slice(),
            self.names.as_slice(),
            |o| san.owns(o),
            &mut reads,
            &mut writes,
        );
        let timing_ids = timing
            .as_ref()
            .map(|_| (call.new_event_id(), call.new_event_id()));
        let op = Step::labeled(
            Op::Launch {
                stream,
                reads: reads.done(),
                writes: writes.done(),
            },
            Label::Shared(self.func.name.clone()),
        );
        model::plan_launch(
            &mut call.steps,
            stream,
            self.tracked.as_slice(),
            timing_ids,
            op,
        );
        call.finish();
        Ok(timing
            .zip(timing_ids)
            .map(|((a, b), (ia, ib))| (Event::tracked(a, san, ia), Event::tracked(b, san, ib))))
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

    fn fill(
        declared: &[Declared<'_>],
        names: &[&str],
    ) -> (Vec<record::Access>, Vec<record::Access>) {
        let (mut reads, mut writes) = (AccessList::default(), AccessList::default());
        fill_accesses(declared, names, |o| o == 1, &mut reads, &mut writes);
        (reads.done(), writes.done())
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
        ];
        let names = ["out", "n", "ignored", "inp", "other"];
        let (reads, writes) = fill(&declared, &names);
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
        let (reads, _) = fill(&declared, &[]);
        assert_eq!(reads[0], record::Access::whole(3));
    }

    #[test]
    fn inline_lists_spill_to_the_heap_in_order() {
        let mut list: Inline<u32, 3> = Inline::new();
        assert!(list.as_slice().is_empty());
        for i in 0..3 {
            list.push(i);
        }
        assert_eq!(list.as_slice(), [0, 1, 2]);
        assert!(list.spill.is_empty());
        for i in 3..10 {
            list.push(i);
        }
        let all: Vec<u32> = (0..10).collect();
        assert_eq!(list.as_slice(), all);
        assert_eq!(format!("{list:?}"), format!("{all:?}"));
    }
}
