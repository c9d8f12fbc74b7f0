//! [`CudaModule`] and [`CudaFunction`]: cudarc's, keeping each kernel's name for reports, and a
//! module's globals (`get_global`) tracked as buffers of their own.

use std::collections::{HashMap, HashSet};
use std::panic::Location;
use std::sync::{Arc, Mutex, Weak};

use cudarc::driver::DriverError;

use super::context::CudaContext;
use super::device_ptr::BufRef;
use super::sanitizer::Sanitizer;
use super::step::{Label, Step};
use super::stream::CudaStream;
use super::view::CudaViewMut;
use crate::trace::record::{BufId, DeviceId, MemSpace, Op, Pool};

/// A loaded module, shared as `Arc<CudaModule>` like cudarc's. Made by
/// [`CudaContext::load_module`].
#[derive(Debug)]
pub struct CudaModule {
    cuda: Arc<cudarc::driver::CudaModule>,
    /// The context's sanitizer, not kept alive by the module: kernels are often cached for
    /// the life of a program (and shared by contexts), and must not keep a sanitizer from
    /// ending (its trace from closing).
    san: Option<Weak<Sanitizer>>,
    device: DeviceId,
    /// The globals handed out so far, by name: their buffer ids and sizes.
    globals: Mutex<HashMap<String, (BufId, u64)>>,
}

impl Drop for CudaModule {
    /// Unloading frees the globals: recorded as host frees.
    fn drop(&mut self) {
        let Some(san) = self.san.as_ref().and_then(Weak::upgrade) else {
            return;
        };
        let globals = std::mem::take(self.globals.get_mut().unwrap_or_else(|e| e.into_inner()));
        if globals.is_empty() {
            return;
        }
        let mut call = san.begin(None);
        let mut ids: Vec<BufId> = globals.values().map(|g| g.0).collect();
        ids.sort_unstable();
        for buf in ids {
            call.push(Step::op(Op::Free { buf, stream: None }, None));
        }
        call.finish();
    }
}

impl CudaModule {
    pub(crate) fn new(cuda: Arc<cudarc::driver::CudaModule>, ctx: &Arc<CudaContext>) -> Arc<Self> {
        Arc::new(CudaModule {
            cuda,
            san: ctx.san.as_ref().map(Arc::downgrade),
            device: ctx.device,
            globals: Mutex::new(HashMap::new()),
        })
    }

    /// The wrapped cudarc module.
    pub fn cudarc(&self) -> &Arc<cudarc::driver::CudaModule> {
        &self.cuda
    }

    /// `CudaModule::load_function`; the name is kept for reports.
    pub fn load_function(self: &Arc<Self>, fn_name: &str) -> Result<CudaFunction, DriverError> {
        Ok(CudaFunction {
            cuda: self.cuda.load_function(fn_name)?,
            name: match interned(fn_name) {
                Some(kept) => KernelName::Kept(kept),
                None => KernelName::Counted(fn_name.into()),
            },
            _module: self.clone(),
        })
    }

    /// `CudaModule::get_global`: a `__device__` or `__constant__` symbol as bytes. Sanitized,
    /// each symbol is a buffer named after it (allocated at its first `get_global`, freed when
    /// the module is). Kernels reach globals without arguments: declare their reads with
    /// [`super::LaunchArgs::reads`] to have them checked.
    #[track_caller]
    pub fn get_global<'a>(
        self: &'a Arc<Self>,
        name: &str,
        stream: &'a Arc<CudaStream>,
    ) -> Result<CudaViewMut<'a, u8>, DriverError> {
        let cuda = self.cuda.get_global(name, stream.cudarc())?;
        let Some(san) = self.san.as_ref().and_then(Weak::upgrade) else {
            return Ok(CudaViewMut {
                cuda,
                buf: None,
                stream,
            });
        };
        let mut globals = self.globals.lock().unwrap_or_else(|e| e.into_inner());
        let bytes = cuda.len() as u64;
        let (id, bytes) = match globals.get(name) {
            Some(&known) => known,
            None => {
                let mut call = san.begin(Some(Location::caller()));
                let id = call.new_buf_id();
                call.push(Step::op(
                    Op::Alloc {
                        buf: id,
                        bytes,
                        device: self.device,
                        space: MemSpace::Device,
                        stream: None,
                        addr: None,
                        pool: Pool::Driver,
                    },
                    Some(name.to_string()),
                ));
                call.finish();
                globals.insert(name.to_string(), (id, bytes));
                (id, bytes)
            }
        };
        let buf = BufRef {
            owner: san.identity(),
            id,
            off: 0,
            len: bytes,
            bytes,
            events: None,
            pinned: None,
            alloc_stream: Some((stream.slot, self.device)),
        };
        Ok(CudaViewMut {
            cuda,
            buf: Some(buf),
            stream,
        })
    }
}

/// At most this many distinct kernel names are kept for the life of the process (about a
/// megabyte with C++'s mangled names of a few hundred bytes each): a program that makes kernels
/// of new names without end (an autotuner naming each variant) gets counted names for the later
/// ones, and memory stays bounded.
const KEPT_NAMES: usize = 4096;

/// Kernel names, each kept once for the life of the process: a program loads the same kernels
/// again rather than new names, and a name that never goes away is one a record can point to
/// without counting. `None` once [`KEPT_NAMES`] other names are kept.
fn interned(name: &str) -> Option<&'static str> {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut names = NAMES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    keep(names.get_or_insert_with(HashSet::new), name, KEPT_NAMES)
}

/// `name` as kept in `names`, kept now if fewer than `most` are.
fn keep(names: &mut HashSet<&'static str>, name: &str, most: usize) -> Option<&'static str> {
    if let Some(&kept) = names.get(name) {
        return Some(kept);
    }
    if names.len() >= most {
        return None;
    }
    let kept: &'static str = Box::leak(name.into());
    names.insert(kept);
    Some(kept)
}

/// A kernel's name: kept for the process's life ([`interned`]), or counted.
#[derive(Clone, Debug)]
enum KernelName {
    Kept(&'static str),
    Counted(Arc<str>),
}

/// A kernel and its name. cudarc's queries (occupancy, attributes, `cu_function`) are reached
/// through `Deref`; they enqueue nothing.
#[derive(Clone, Debug)]
pub struct CudaFunction {
    cuda: cudarc::driver::CudaFunction,
    name: KernelName,
    /// Keeps the module (and so its globals' records) alive, as cudarc's function does.
    _module: Arc<CudaModule>,
}

impl CudaFunction {
    /// The kernel's name, as reports give it.
    pub fn name(&self) -> &str {
        match &self.name {
            KernelName::Kept(name) => name,
            KernelName::Counted(name) => name,
        }
    }

    /// The name for a launch's record, which then holds no reference count where the name is
    /// kept: the checker thread reads the name's text for each record, and a count beside the
    /// text would move between the program's core and the checker's at every launch.
    pub(crate) fn label(&self) -> Label {
        match &self.name {
            KernelName::Kept(name) => Label::Static(name),
            KernelName::Counted(name) => Label::Shared(name.clone()),
        }
    }

    /// The wrapped cudarc function.
    pub fn cudarc(&self) -> &cudarc::driver::CudaFunction {
        &self.cuda
    }
}

impl std::ops::Deref for CudaFunction {
    type Target = cudarc::driver::CudaFunction;

    fn deref(&self) -> &Self::Target {
        &self.cuda
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{interned, keep};

    /// A name loaded again is the one kept the first time, not a second copy.
    #[test]
    fn a_kernel_name_is_kept_once() {
        let first = interned("streamsan_test_kernel_a").expect("room");
        let again = interned(&String::from("streamsan_test_kernel_a")).expect("kept");
        let other = interned("streamsan_test_kernel_b").expect("room");
        assert_eq!(first, "streamsan_test_kernel_a");
        assert!(std::ptr::eq(first, again));
        assert_eq!(other, "streamsan_test_kernel_b");
        assert!(!std::ptr::eq(first, other));
    }

    /// Once the set is full, a new name is not kept (memory stays bounded); names kept before
    /// are still found.
    #[test]
    fn no_more_names_are_kept_than_the_bound() {
        let mut names = HashSet::new();
        let a = keep(&mut names, "a", 2).expect("room");
        assert!(keep(&mut names, "b", 2).is_some());
        assert_eq!(keep(&mut names, "c", 2), None);
        assert_eq!(names.len(), 2);
        assert!(std::ptr::eq(keep(&mut names, "a", 2).expect("kept"), a));
    }
}
