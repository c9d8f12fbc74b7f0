//! Host functions (`cuLaunchHostFunc`): a Rust closure run by the driver in stream order, after
//! the work enqueued before it and before the work enqueued after it (ordering model R14). cudarc
//! only has the raw `result::stream::launch_host_function`; this is the safe wrapper, with the
//! memory the closure touches declared like a kernel's.

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, Location};

use cudarc::driver::{DriverError, result};

use super::device_ptr::{BufRef, Tracked};
use super::step::Step;
use super::stream::CudaStream;
use crate::trace::record::Op;

type HostFn = Box<dyn FnOnce() + Send + 'static>;

/// Runs the boxed closure once. A panic cannot unwind into the driver: it aborts.
unsafe extern "C" fn trampoline(data: *mut c_void) {
    // SAFETY: `data` is the `Box<HostFn>` leaked by `enqueue`, passed to this function once.
    let f = unsafe { Box::from_raw(data.cast::<HostFn>()) };
    if std::panic::catch_unwind(AssertUnwindSafe(f)).is_err() {
        eprintln!("streamsan: a host function panicked; aborting (it cannot unwind into CUDA)");
        std::process::abort();
    }
}

/// Declares what a host function touches; made by [`CudaStream::host_func`].
#[derive(Debug)]
pub struct HostFuncBuilder<'a> {
    stream: &'a CudaStream,
    reads: Vec<BufRef>,
    writes: Vec<BufRef>,
}

impl CudaStream {
    /// A host function on this stream; declare its memory, then [`HostFuncBuilder::launch`].
    pub fn host_func(&self) -> HostFuncBuilder<'_> {
        HostFuncBuilder {
            stream: self,
            reads: Vec::new(),
            writes: Vec::new(),
        }
    }

    /// `cuLaunchHostFunc` with a closure that touches no tracked memory. The closure must not
    /// make CUDA calls (a driver rule).
    #[track_caller]
    pub fn launch_host_func<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<(), DriverError> {
        HostFuncBuilder {
            stream: self,
            reads: Vec::new(),
            writes: Vec::new(),
        }
        .enqueue(Box::new(f), Location::caller())
    }
}

impl HostFuncBuilder<'_> {
    /// The closure reads `mem` (pinned or managed memory, typically).
    pub fn reads(mut self, mem: &dyn Tracked) -> Self {
        if self.stream.san().is_some() {
            self.reads.push(mem.buf_ref().unwrap_or(BufRef::FOREIGN));
        }
        self
    }

    /// The closure writes `mem`.
    pub fn writes(mut self, mem: &dyn Tracked) -> Self {
        if self.stream.san().is_some() {
            self.writes.push(mem.buf_ref().unwrap_or(BufRef::FOREIGN));
        }
        self
    }

    /// Enqueues `f`. It must not make CUDA calls (a driver rule).
    #[track_caller]
    pub fn launch<F: FnOnce() + Send + 'static>(self, f: F) -> Result<(), DriverError> {
        self.enqueue(Box::new(f), Location::caller())
    }

    fn enqueue(self, f: HostFn, at: &'static Location<'static>) -> Result<(), DriverError> {
        let stream = self.stream;
        let raw = |f: HostFn| -> Result<(), DriverError> {
            stream.context().bind_to_thread()?;
            let data = Box::into_raw(Box::new(f)).cast::<c_void>();
            // SAFETY: `trampoline` takes ownership of `data` when the driver calls it.
            let r = unsafe {
                result::stream::launch_host_function(stream.cudarc().cu_stream(), trampoline, data)
            };
            if r.is_err() {
                // SAFETY: not enqueued, so still ours.
                drop(unsafe { Box::from_raw(data.cast::<HostFn>()) });
            }
            r
        };
        let Some(san) = stream.san() else {
            return raw(f);
        };
        let mut call = san.begin(Some(at));
        let id = stream.id_in(&mut call);
        raw(f)?;
        let owners: Vec<usize> = self
            .reads
            .iter()
            .chain(&self.writes)
            .map(|b| b.owner)
            .collect();
        call.same_sanitizer(owners);
        let keep = |list: &[BufRef]| {
            list.iter()
                .filter(|b| san.owns(b.owner))
                .map(|b| b.access(None))
                .collect()
        };
        call.push(Step::op(
            Op::HostFunc {
                stream: id,
                reads: keep(&self.reads),
                writes: keep(&self.writes),
            },
            None,
        ));
        call.finish();
        Ok(())
    }
}
