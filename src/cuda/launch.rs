//! Kernel launches: [`Module`] / [`Function`] (which keep the kernel name reports need) and
//! [`LaunchBuilder`], cudarc's `LaunchArgs` whose buffer arguments are declared read or write.
//!
//! As in cudarc, `.arg(&buf)` passes a buffer the kernel reads and `.arg(&mut buf)` (or
//! `.arg_mut`) one it writes; cudarc's event tracking follows that. A kernel may do otherwise
//! (write through a `&` argument, reach memory through a pointer inside a struct): say so with
//! [`LaunchBuilder::arg_as`], [`LaunchBuilder::reads`] and [`LaunchBuilder::writes`]. The
//! sanitizer records what is declared; cudarc keeps tracking what the Rust types say, and the
//! difference is exactly the kind of race the sanitizer then reports.

use std::panic::Location;
use std::sync::Arc;

use cudarc::driver::{
    CudaFunction, CudaModule, DeviceRepr, DriverError, LaunchArgs, LaunchConfig, PushKernelArg, sys,
};

use super::buffer::{BufRef, DeviceBuffer, DeviceView, DeviceViewMut, Tracked};
use super::event::Event;
use super::model::{self, Step, TrackedArg};
use super::stream::Stream;
use crate::trace::record::{self, Op};

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
pub enum Access {
    Read,
    /// Also covers read-modify-write: a write conflicts with everything a read does.
    Write,
}

/// One declared buffer access of a launch.
#[derive(Debug)]
struct Declared {
    buf: BufRef,
    access: Access,
    name: Option<String>,
    /// The argument position, for [`LaunchBuilder::names`]; `None` for `reads` / `writes`.
    position: Option<usize>,
}

/// cudarc's `LaunchArgs` with declared accesses; made by [`Stream::launch_builder`].
#[derive(Debug)]
pub struct LaunchBuilder<'a> {
    stream: &'a Stream,
    func: &'a Function,
    args: LaunchArgs<'a>,
    /// Everything below stays empty (no allocation) when the sanitizer is off.
    declared: Vec<Declared>,
    tracked: Vec<TrackedArg>,
    names: Vec<String>,
    position: usize,
}

/// Something [`LaunchBuilder::arg`] takes: a scalar (`&T`, not recorded), a buffer or view
/// (`&` read, `&mut` write).
pub trait KernelArg<'a> {
    #[doc(hidden)]
    fn push_to(self, b: &mut LaunchBuilder<'a>, name: Option<&str>, access: Option<Access>);
}

/// The arguments [`LaunchBuilder::arg_mut`] takes: `&mut` buffers and views.
pub trait KernelArgMut<'a>: KernelArg<'a> {}

impl<'a, T: DeviceRepr> KernelArg<'a> for &'a T {
    fn push_to(self, b: &mut LaunchBuilder<'a>, _: Option<&str>, _: Option<Access>) {
        b.args.arg(self);
        b.position += 1;
    }
}

impl<'a, T> KernelArg<'a> for &'a DeviceBuffer<T> {
    fn push_to(self, b: &mut LaunchBuilder<'a>, name: Option<&str>, access: Option<Access>) {
        b.note(self.buf_ref(), false, name, access);
        b.args.arg(&*self.slice);
    }
}

impl<'a, T> KernelArg<'a> for &'a mut DeviceBuffer<T> {
    fn push_to(self, b: &mut LaunchBuilder<'a>, name: Option<&str>, access: Option<Access>) {
        b.note(self.buf_ref(), true, name, access);
        b.args.arg(&mut *self.slice);
    }
}
impl<'a, T> KernelArgMut<'a> for &'a mut DeviceBuffer<T> {}

impl<'a, 'v: 'a, T> KernelArg<'a> for &'a DeviceView<'v, T> {
    fn push_to(self, b: &mut LaunchBuilder<'a>, name: Option<&str>, access: Option<Access>) {
        b.note(self.buf_ref(), false, name, access);
        b.args.arg(&self.view);
    }
}

impl<'a, 'v: 'a, T> KernelArg<'a> for &'a mut DeviceViewMut<'v, T> {
    fn push_to(self, b: &mut LaunchBuilder<'a>, name: Option<&str>, access: Option<Access>) {
        b.note(self.buf_ref(), true, name, access);
        b.args.arg(&mut self.view);
    }
}
impl<'a, 'v: 'a, T> KernelArgMut<'a> for &'a mut DeviceViewMut<'v, T> {}

/// The `reads` and `writes` of a launch record: the declared accesses of this sanitizer's
/// memory (`owns`), each named explicitly or by its position in `names`.
fn accesses(
    declared: &[Declared],
    names: &[String],
    owns: impl Fn(usize) -> bool,
) -> (Vec<record::Access>, Vec<record::Access>) {
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    for d in declared.iter().filter(|d| owns(d.buf.owner)) {
        let name = d
            .name
            .clone()
            .or_else(|| d.position.and_then(|p| names.get(p)).map(|n| n.to_string()));
        let access = d.buf.access(name);
        match d.access {
            Access::Read => reads.push(access),
            Access::Write => writes.push(access),
        }
    }
    (reads, writes)
}

impl Stream {
    /// `CudaStream::launch_builder`: launches `func` on this stream.
    pub fn launch_builder<'a>(&'a self, func: &'a Function) -> LaunchBuilder<'a> {
        LaunchBuilder {
            stream: self,
            func,
            args: self.cudarc().launch_builder(&func.cuda),
            declared: Vec::new(),
            tracked: Vec::new(),
            names: Vec::new(),
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
        name: Option<&str>,
        access: Option<Access>,
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
            let default = if mutable { Access::Write } else { Access::Read };
            self.declared.push(Declared {
                buf,
                access: access.unwrap_or(default),
                name: name.map(str::to_string),
                position: Some(position),
            });
        } else {
            // Memory of an unsanitized context or another sanitizer: its events are not this
            // trace's; the launch warns that the access is not recorded.
            self.tracked.push(TrackedArg {
                events: None,
                mutable,
                managing,
            });
            self.declared.push(Declared {
                buf: BufRef::FOREIGN,
                access: Access::Read,
                name: None,
                position: None,
            });
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
    pub fn arg_named<A: KernelArg<'a>>(&mut self, name: &str, arg: A) -> &mut Self {
        arg.push_to(self, Some(name), None);
        self
    }

    /// Adds a buffer argument the kernel accesses as `access`, whatever its Rust type says
    /// (cudarc's tracking still follows the type).
    pub fn arg_as<A: KernelArg<'a>>(&mut self, arg: A, access: Access) -> &mut Self {
        arg.push_to(self, None, Some(access));
        self
    }

    /// [`LaunchBuilder::arg_as`] with a name.
    pub fn arg_as_named<A: KernelArg<'a>>(
        &mut self,
        name: &str,
        arg: A,
        access: Access,
    ) -> &mut Self {
        arg.push_to(self, Some(name), Some(access));
        self
    }

    /// Names the kernel's parameters by position (scalars count), for arguments added without
    /// a name.
    pub fn names(&mut self, names: &[&str]) -> &mut Self {
        if self.stream.san().is_some() {
            self.names = names.iter().map(|n| n.to_string()).collect();
        }
        self
    }

    fn extra(&mut self, mem: &dyn Tracked, access: Access) -> &mut Self {
        if self.stream.san().is_some() {
            let buf = mem.buf_ref().unwrap_or(BufRef::FOREIGN);
            self.declared.push(Declared {
                buf,
                access,
                name: None,
                position: None,
            });
        }
        self
    }

    /// Declares memory the kernel reads without it being an argument (through a pointer in a
    /// struct, say). cudarc does not track it.
    pub fn reads(&mut self, mem: &dyn Tracked) -> &mut Self {
        self.extra(mem, Access::Read)
    }

    /// Declares memory the kernel writes without it being an argument.
    pub fn writes(&mut self, mem: &dyn Tracked) -> &mut Self {
        self.extra(mem, Access::Write)
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
        let owners: Vec<usize> = self.declared.iter().map(|d| d.buf.owner).collect();
        call.same_sanitizer(&owners);
        let (reads, writes) = accesses(&self.declared, &self.names, |o| san.owns(o));
        let timing_ids = timing
            .as_ref()
            .map(|_| (call.new_event_id(), call.new_event_id()));
        let op = Step::op(
            Op::Launch {
                stream,
                reads,
                writes,
            },
            Some(self.func.name().to_string()),
        );
        model::plan_launch(&mut call.steps, stream, &self.tracked, timing_ids, op);
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

    #[test]
    fn declared_accesses_with_names_overrides_and_ranges() {
        let declared = [
            // .arg(&mut out): position 0, unnamed
            Declared {
                buf: buf(1, 1, 0, 64),
                access: Access::Write,
                name: None,
                position: Some(0),
            },
            // .arg_as_named("x", &x, Access::Write) on a view: position 2 (a scalar was 1)
            Declared {
                buf: buf(1, 2, 8, 16),
                access: Access::Write,
                name: Some("x".into()),
                position: Some(2),
            },
            // .arg(&inp): position 3, named by `names`
            Declared {
                buf: buf(1, 3, 0, 64),
                access: Access::Read,
                name: None,
                position: Some(3),
            },
            // .reads(&table): not an argument
            Declared {
                buf: buf(1, 4, 0, 32),
                access: Access::Read,
                name: None,
                position: None,
            },
            // memory of another sanitizer
            Declared {
                buf: buf(2, 5, 0, 64),
                access: Access::Read,
                name: None,
                position: Some(4),
            },
        ];
        let names: Vec<String> = ["out", "n", "ignored", "inp", "other"]
            .map(String::from)
            .to_vec();
        let (reads, writes) = accesses(&declared, &names, |o| o == 1);
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
        let (reads, _) = accesses(&declared, &[], |o| o == 1);
        assert_eq!(reads[0], record::Access::whole(3));
    }
}
