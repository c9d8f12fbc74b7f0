//! Device-side access capture: the patches of kernels/sanitizer_patches.cu loaded into each
//! context, every module patched as it loads, and one log per launch in flight (a counter in
//! device memory from `sanitizerAlloc`, entries in pinned host memory from
//! `sanitizerAllocHost`; the API reports neither to anybody), read once the launch's stream has
//! finished it.
//!
//! Reading back waits for the kernel (`sanitizerStreamSynchronize` on the launch's stream, as
//! HPCToolkit's GPU tool does): every instrumented kernel runs to completion before its launch
//! call returns. That slows the program and changes its timing, not its verdict: the engine
//! orders work by the calls, never by when it ran.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::Mutex;

use crate::fold::Entry;
use crate::sys::{self, Api, Handle};

/// The patches, built with nvcc on the GPU machine (tests/run_gpu/build-patches.sh).
static PATCHES: &[u8] = include_bytes!("../../../kernels/sanitizer_patches.fatbin");

/// The log header the patch reads: `{count, cap, entries}` (three u64).
const HEADER: usize = 24;
/// One entry: `{addr: u64, len: u32, kind: u32}`.
const ENTRY: usize = 16;

/// Entries per launch log when `STREAMSAN_RUN_LOG_ENTRIES` does not say (16 MiB of pinned
/// host memory per launch in flight).
pub const DEFAULT_LOG_ENTRIES: u64 = 1 << 20;

/// The most entries a log may have (4 GiB of pinned host memory); `streamsan run
/// --log-entries` refuses more.
pub const MAX_LOG_ENTRIES: u64 = 1 << 28;

#[derive(Default)]
struct Context {
    patches_loaded: bool,
    /// Modules whose patching failed: their launches get no log and count as not
    /// instrumented.
    failed_modules: std::collections::HashSet<usize>,
    /// (device header, pinned host entries) of logs not in use.
    free_logs: Vec<(usize, usize)>,
}

/// One launch's log, armed on its stream.
pub struct Log {
    ctx: usize,
    header: usize,
    entries: usize,
}

/// Entries the device wanted to write past a log's capacity (lost: those bytes go unchecked).
pub type Dropped = u64;

// A log entry as the patch writes it (kernels/sanitizer_patches.cu, `StreamsanEntry`: a u64
// address, then u32 length and u32 kind) is an [`Entry`]: the log is read in place.
const _: () = assert!(std::mem::size_of::<Entry>() == 16 && std::mem::align_of::<Entry>() == 8);

pub struct DeviceCapture {
    api: &'static Api,
    image: Vec<u64>,
    cap: u64,
    contexts: Mutex<HashMap<usize, Context>>,
}

impl DeviceCapture {
    pub fn new(api: &'static Api, cap: u64) -> DeviceCapture {
        // The driver reads the fat binary as 8-byte words: copy it to an aligned buffer.
        let mut image = vec![0u64; PATCHES.len().div_ceil(8)];
        // SAFETY: the Vec holds at least PATCHES.len() bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                PATCHES.as_ptr(),
                image.as_mut_ptr().cast::<u8>(),
                PATCHES.len(),
            );
        }
        DeviceCapture {
            api,
            image,
            cap: cap.max(1),
            contexts: Mutex::new(HashMap::new()),
        }
    }

    /// `MODULE_LOADED`: loads the patches into the module's context the first time, then
    /// patches the module's global-memory accesses and `cp.async` reads. The API asks callers
    /// to serialize these calls: the lock does.
    pub fn module_loaded(&self, ctx: Handle, module: Handle) -> Result<(), String> {
        let mut contexts = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        let c = contexts.entry(ctx as usize).or_default();
        let api = self.api;
        if !c.patches_loaded {
            let r = unsafe { (api.add_patches)(self.image.as_ptr().cast(), ctx) };
            if r != sys::SUCCESS {
                return Err(format!("loading the patches: {}", api.describe(r)));
            }
            c.patches_loaded = true;
        }
        let patch = |instruction, name: &str| {
            let n = CString::new(name).expect("no NUL");
            let r = unsafe { (api.patch_instructions)(instruction, module, n.as_ptr()) };
            if r == sys::SUCCESS {
                Ok(())
            } else {
                Err(format!("patching {name}: {}", api.describe(r)))
            }
        };
        let global = patch(
            sys::INSTRUCTION_GLOBAL_MEMORY_ACCESS,
            "streamsan_global_access",
        );
        if let Err(e) = global {
            c.failed_modules.insert(module as usize);
            return Err(e);
        }
        // cp.async reads only: a module whose patch fails here keeps its global accesses.
        let cp_async = patch(sys::INSTRUCTION_MEMCPY_ASYNC, "streamsan_memcpy_async");
        let r = unsafe { (api.patch_module)(module) };
        if r != sys::SUCCESS {
            c.failed_modules.insert(module as usize);
            return Err(format!("patching a module: {}", api.describe(r)));
        }
        cp_async
    }

    /// A free log of `ctx`, or a new one: the header (the patch's atomic counter) in device
    /// memory, the entries in pinned host memory that the device writes through (as NVIDIA's
    /// DeviceMalloc sample does), so reading them back is no copy.
    fn take_log(&self, ctx: Handle, module: Handle) -> Result<Log, String> {
        let api = self.api;
        let free = {
            let mut contexts = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
            let c = contexts.entry(ctx as usize).or_default();
            if !c.patches_loaded || c.failed_modules.contains(&(module as usize)) {
                return Err("a kernel of a module that could not be patched".into());
            }
            c.free_logs.pop()
        };
        if let Some((header, entries)) = free {
            return Ok(Log {
                ctx: ctx as usize,
                header,
                entries,
            });
        }
        let mut header: *mut c_void = std::ptr::null_mut();
        let r = unsafe { (api.alloc)(ctx, &mut header, HEADER) };
        if r != sys::SUCCESS {
            return Err(format!("allocating a log header: {}", api.describe(r)));
        }
        let mut entries: *mut c_void = std::ptr::null_mut();
        let bytes = usize::try_from(self.cap)
            .ok()
            .and_then(|c| c.checked_mul(ENTRY))
            .ok_or_else(|| format!("a log of {} entries does not fit in memory", self.cap))?;
        let r = unsafe { (api.alloc_host)(ctx, &mut entries, bytes) };
        if r != sys::SUCCESS {
            return Err(format!(
                "allocating a {bytes}-byte log: {}",
                api.describe(r)
            ));
        }
        Ok(Log {
            ctx: ctx as usize,
            header: header as usize,
            entries: entries as usize,
        })
    }

    /// Arms a log for the launch `launch` of `function` on `stream`: resets its header on that
    /// stream (so ahead of the kernel) and hands it to the patch as the launch's user data.
    pub fn arm(&self, l: &sys::LaunchData) -> Result<Log, String> {
        let (ctx, launch, function, stream) = (l.context, l.h_launch, l.function, l.h_stream);
        let api = self.api;
        let log = self.take_log(ctx, l.module)?;
        let header: [u64; 3] = [0, self.cap, log.entries as u64];
        let r = unsafe {
            (api.memcpy_h2d_async)(
                log.header as *mut c_void,
                header.as_ptr().cast(),
                HEADER,
                stream,
            )
        };
        if r != sys::SUCCESS {
            self.give_back(log);
            return Err(format!("resetting a log: {}", api.describe(r)));
        }
        let r = unsafe {
            (api.set_launch_callback_data)(launch, function, stream, log.header as *const c_void)
        };
        if r != sys::SUCCESS {
            self.give_back(log);
            return Err(format!("handing a log to a launch: {}", api.describe(r)));
        }
        Ok(log)
    }

    /// Waits for `stream` and hands what the launch logged to `use_entries`, in place in the
    /// pinned log; the log then goes back to the pool.
    pub fn read<R>(
        &self,
        log: Log,
        stream: Handle,
        use_entries: impl FnOnce(&[Entry], Dropped) -> R,
    ) -> Result<R, String> {
        /// Returns the log to the pool however the read ends, a panic in `use_entries`
        /// included.
        struct GiveBack<'a>(&'a DeviceCapture, Option<Log>);
        impl Drop for GiveBack<'_> {
            fn drop(&mut self) {
                if let Some(log) = self.1.take() {
                    self.0.give_back(log);
                }
            }
        }
        let api = self.api;
        let (header_addr, entries_addr) = (log.header, log.entries);
        let _give_back = GiveBack(self, Some(log));
        (|| {
            let r = unsafe { (api.stream_synchronize)(stream) };
            if r != sys::SUCCESS {
                return Err(format!("waiting for a launch: {}", api.describe(r)));
            }
            let mut header = [0u64; 3];
            let r = unsafe {
                (api.memcpy_d2h)(
                    header.as_mut_ptr().cast(),
                    header_addr as *const c_void,
                    HEADER,
                    stream,
                )
            };
            if r != sys::SUCCESS {
                return Err(format!("reading a log: {}", api.describe(r)));
            }
            let n = header[0].min(self.cap) as usize;
            // SAFETY: the kernel has finished (the stream is synchronized), and the log holds
            // `cap` entries laid out as `Entry` (checked above), of which the first `n` were
            // written; the log is not reused before `use_entries` returns.
            let entries = unsafe { std::slice::from_raw_parts(entries_addr as *const Entry, n) };
            Ok(use_entries(entries, header[0].saturating_sub(self.cap)))
        })()
    }

    /// A context is being destroyed: its patches and logs go with it (its memory is freed by
    /// the driver); a context created later at the same handle starts afresh.
    pub fn context_destroyed(&self, ctx: Handle) {
        let mut contexts = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        contexts.remove(&(ctx as usize));
    }

    fn give_back(&self, log: Log) {
        let mut contexts = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        contexts
            .entry(log.ctx)
            .or_default()
            .free_logs
            .push((log.header, log.entries));
    }
}
