//! The part of NVIDIA's Sanitizer API (`libsanitizer-public.so`, CUDA 12 and 13) the tool uses,
//! declared by hand so that nothing here needs CUDA to build. The library is opened at run time
//! ([`Api::load`]).
//!
//! Layouts follow the CUDA 13.0 headers (`sanitizer_callbacks.h`, `sanitizer_patching.h`,
//! `sanitizer_memory.h`); the offsets asserted below were printed against the real headers on an
//! H100 machine (CUDA 13.0, driver 580; tests/run_gpu/probe/offsets.c). Fields are only ever
//! appended at the end of these structs, so reading a prefix stays valid on CUDA 12.

use std::ffi::{CStr, CString, c_char, c_int, c_void};

pub type Handle = *mut c_void;
pub type SanitizerResult = u32;
pub const SUCCESS: SanitizerResult = 0;

/// `Sanitizer_CallbackDomain`.
pub mod domain {
    pub const DRIVER_API: u32 = 1;
    pub const RUNTIME_API: u32 = 2;
    pub const RESOURCE: u32 = 3;
    pub const LAUNCH: u32 = 5;
    pub const MEMCPY: u32 = 6;
    pub const MEMSET: u32 = 7;
    pub const GRAPHS: u32 = 10;
    pub const EVENTS: u32 = 11;
}

/// `Sanitizer_CallbackIdResource`.
pub mod resource {
    pub const CONTEXT_CREATION_STARTING: u32 = 2;
    pub const CONTEXT_CREATION_FINISHED: u32 = 3;
    pub const CONTEXT_DESTROY_STARTING: u32 = 4;
    pub const STREAM_CREATED: u32 = 6;
    pub const STREAM_DESTROY_STARTING: u32 = 7;
    pub const MODULE_LOADED: u32 = 9;
    pub const DEVICE_MEMORY_ALLOC: u32 = 11;
    pub const DEVICE_MEMORY_FREE: u32 = 12;
    pub const HOST_MEMORY_ALLOC: u32 = 13;
    pub const HOST_MEMORY_FREE: u32 = 14;
    pub const MEMORY_ALLOC_ASYNC: u32 = 15;
    pub const MEMORY_FREE_ASYNC: u32 = 16;
}

/// `Sanitizer_ResourceMemoryFlags`.
pub mod memflag {
    pub const MODULE: u32 = 0x1;
    pub const MANAGED: u32 = 0x2;
    pub const CG_RUNTIME: u32 = 0x40;
    pub const CNP: u32 = 0x80;
}

pub const LAUNCH_BEGIN: u32 = 1;
pub const LAUNCH_END: u32 = 3;
pub const GRAPHS_GRAPHEXEC_DESTROYING: u32 = 3;
pub const GRAPHS_NODE_LAUNCH_BEGIN: u32 = 4;
pub const GRAPHS_LAUNCH_BEGIN: u32 = 6;
pub const GRAPHS_LAUNCH_END: u32 = 7;
pub const EVENTS_CREATED: u32 = 1;
pub const EVENTS_DESTROYED: u32 = 2;
pub const EVENTS_RECORD: u32 = 3;
pub const EVENTS_STREAM_WAIT: u32 = 4;

pub const API_ENTER: u32 = 0;
pub const API_EXIT: u32 = 1;

/// `Sanitizer_InstructionId`.
pub const INSTRUCTION_GLOBAL_MEMORY_ACCESS: u32 = 3;
pub const INSTRUCTION_MEMCPY_ASYNC: u32 = 14;

/// `CUgraphNodeType` (cuda.h).
pub mod node {
    pub const KERNEL: u32 = 0;
    pub const MEMCPY: u32 = 1;
    pub const MEMSET: u32 = 2;
    pub const HOST: u32 = 3;
}

/// `Sanitizer_MemcpyDirection`.
pub mod direction {
    pub const HOST_TO_HOST: u32 = 1;
    pub const HOST_TO_DEVICE: u32 = 2;
    pub const DEVICE_TO_HOST: u32 = 3;
}

/// Special public stream handles of `cuda.h`: `CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD`.
pub const STREAM_LEGACY: usize = 0x1;
pub const STREAM_PER_THREAD: usize = 0x2;

#[repr(C)]
pub struct CallbackData {
    pub callback_site: u32,
    pub function_name: *const c_char,
    pub function_params: *const c_void,
    pub function_return_value: *const c_void,
    pub symbol_name: *const c_char,
    pub context: Handle,
}

#[repr(C)]
pub struct ResourceContextData {
    pub context: Handle,
    pub device: c_int,
}

#[repr(C)]
pub struct ResourceStreamData {
    pub context: Handle,
    pub stream: Handle,
    pub h_stream: Handle,
}

#[repr(C)]
pub struct ResourceModuleData {
    pub context: Handle,
    pub module: Handle,
    pub cubin_size: usize,
    pub cubin: *const c_char,
}

#[repr(C)]
pub struct ResourceMemoryData {
    pub address: u64,
    pub size: u64,
    pub context: Handle,
    pub device: c_int,
    pub stream: Handle,
    pub h_stream: Handle,
    pub memory_pool: Handle,
    pub flags: u32,
    pub permissions: u32,
    pub visibility: u32,
    pub source_device: c_int,
}

#[repr(C)]
pub struct LaunchData {
    pub context: Handle,
    pub stream: Handle,
    pub h_stream: Handle,
    pub module: Handle,
    pub function: Handle,
    pub function_name: *const c_char,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub cluster: [u32; 3],
    pub grid_id: u64,
    pub h_launch: Handle,
    pub device: c_int,
    pub api_context: Handle,
    pub api_stream: Handle,
    pub h_api_stream: Handle,
}

#[repr(C)]
pub struct MemcpyData {
    pub src_context: Handle,
    pub dst_context: Handle,
    pub src_stream: Handle,
    pub h_src_stream: Handle,
    pub dst_stream: Handle,
    pub h_dst_stream: Handle,
    pub src_address: u64,
    pub dst_address: u64,
    pub size: u64,
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    pub src_pitch: u64,
    pub dst_pitch: u64,
    pub is_async: u32,
    pub direction: u32,
    pub api_context: Handle,
    pub api_stream: Handle,
    pub h_api_stream: Handle,
}

#[repr(C)]
pub struct MemsetData {
    pub context: Handle,
    pub stream: Handle,
    pub h_stream: Handle,
    pub address: u64,
    pub width: u64,
    pub height: u64,
    pub pitch: u64,
    pub element_size: u32,
    pub value: u32,
    pub is_async: u32,
}

/// `Sanitizer_GraphExecData` (its first fields).
#[repr(C)]
pub struct GraphExecData {
    pub graph: Handle,
    pub graph_exec: Handle,
}

#[repr(C)]
pub struct GraphLaunchData {
    pub context: Handle,
    pub stream: Handle,
    pub h_stream: Handle,
    pub graph_exec: Handle,
    pub is_graph_upload: u32,
}

/// `Sanitizer_GraphNodeLaunchData`: the union is read through the member `node_type` names.
#[repr(C)]
pub struct GraphNodeLaunchData {
    pub graph_exec: Handle,
    pub launch_id: u32,
    pub node: Handle,
    pub node_type: u32,
    pub data: GraphNodeUnion,
    pub is_graph_upload: u32,
}

#[repr(C)]
pub union GraphNodeUnion {
    pub launch: std::mem::ManuallyDrop<LaunchData>,
    pub memcpy: std::mem::ManuallyDrop<MemcpyData>,
    pub memset: std::mem::ManuallyDrop<MemsetData>,
}

#[repr(C)]
pub struct EventData {
    pub event: Handle,
    pub context: Handle,
    pub stream: Handle,
    pub h_stream: Handle,
}

// The sizes and offsets the CUDA 13.0 headers give (x86_64 / aarch64 Linux).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<CallbackData>() == 48);
    assert!(offset_of!(CallbackData, context) == 40);
    assert!(size_of::<ResourceContextData>() == 16);
    assert!(size_of::<ResourceStreamData>() == 24);
    assert!(size_of::<ResourceMemoryData>() == 72);
    assert!(offset_of!(ResourceMemoryData, stream) == 32);
    assert!(offset_of!(ResourceMemoryData, flags) == 56);
    assert!(size_of::<LaunchData>() == 136);
    assert!(offset_of!(LaunchData, grid_id) == 88);
    assert!(offset_of!(LaunchData, h_launch) == 96);
    assert!(offset_of!(LaunchData, api_stream) == 120);
    assert!(size_of::<MemcpyData>() == 144);
    assert!(offset_of!(MemcpyData, src_address) == 48);
    assert!(offset_of!(MemcpyData, is_async) == 112);
    assert!(offset_of!(MemcpyData, api_stream) == 128);
    assert!(size_of::<MemsetData>() == 72);
    assert!(offset_of!(MemsetData, element_size) == 56);
    assert!(offset_of!(MemsetData, is_async) == 64);
    assert!(size_of::<GraphNodeLaunchData>() == 184);
    assert!(offset_of!(GraphNodeLaunchData, node_type) == 24);
    assert!(offset_of!(GraphNodeLaunchData, data) == 32);
    assert!(offset_of!(GraphNodeLaunchData, is_graph_upload) == 176);
    assert!(size_of::<GraphLaunchData>() == 40);
    assert!(size_of::<EventData>() == 32);
};

pub type Callback = unsafe extern "C" fn(*mut c_void, u32, u32, *const c_void);

/// The functions of `libsanitizer-public.so` the tool calls, resolved with `dlsym`.
pub struct Api {
    pub subscribe: unsafe extern "C" fn(*mut Handle, Callback, *mut c_void) -> SanitizerResult,
    pub enable_domain: unsafe extern "C" fn(u32, Handle, u32) -> SanitizerResult,
    pub enable_callback: unsafe extern "C" fn(u32, Handle, u32, u32) -> SanitizerResult,
    pub add_patches: unsafe extern "C" fn(*const c_void, Handle) -> SanitizerResult,
    pub patch_instructions: unsafe extern "C" fn(u32, Handle, *const c_char) -> SanitizerResult,
    pub patch_module: unsafe extern "C" fn(Handle) -> SanitizerResult,
    pub set_launch_callback_data:
        unsafe extern "C" fn(Handle, Handle, Handle, *const c_void) -> SanitizerResult,
    pub alloc: unsafe extern "C" fn(Handle, *mut *mut c_void, usize) -> SanitizerResult,
    pub alloc_host: unsafe extern "C" fn(Handle, *mut *mut c_void, usize) -> SanitizerResult,
    pub memcpy_h2d_async:
        unsafe extern "C" fn(*mut c_void, *const c_void, usize, Handle) -> SanitizerResult,
    pub memcpy_d2h:
        unsafe extern "C" fn(*mut c_void, *const c_void, usize, Handle) -> SanitizerResult,
    pub stream_synchronize: unsafe extern "C" fn(Handle) -> SanitizerResult,
    pub result_string: unsafe extern "C" fn(SanitizerResult, *mut *const c_char) -> SanitizerResult,
}

unsafe extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}
const RTLD_NOW: c_int = 2;
const RTLD_GLOBAL: c_int = 0x100;

/// Where `libsanitizer-public.so` is looked for, in order: `$STREAMSAN_SANITIZER_LIB`, the
/// toolkit under `$CUDA_HOME` / `$CUDA_PATH` / `/usr/local/cuda` (`compute-sanitizer/`, where
/// NVIDIA's samples link it from), then the loader's own search (`LD_LIBRARY_PATH`).
pub fn library_candidates() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(p) = std::env::var("STREAMSAN_SANITIZER_LIB") {
        out.push(p);
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(home) = std::env::var(var) {
            out.push(format!("{home}/compute-sanitizer/libsanitizer-public.so"));
        }
    }
    out.push("/usr/local/cuda/compute-sanitizer/libsanitizer-public.so".into());
    out.push("libsanitizer-public.so".into());
    out
}

/// A resolved symbol as the function pointer type `F`.
///
/// # Safety
/// `F` must be the symbol's C signature.
unsafe fn as_fn<F: Copy>(p: *mut c_void) -> F {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
    unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) }
}

impl Api {
    /// Opens the first library of [`library_candidates`] that loads and resolves every symbol.
    pub fn load() -> Result<Api, String> {
        let mut tried = Vec::new();
        for path in library_candidates() {
            match unsafe { Api::open(&path) } {
                Ok(api) => return Ok(api),
                Err(e) => tried.push(format!("{path}: {e}")),
            }
        }
        Err(format!(
            "libsanitizer-public.so not found (set STREAMSAN_SANITIZER_LIB): {}",
            tried.join("; ")
        ))
    }

    unsafe fn open(path: &str) -> Result<Api, String> {
        let c = CString::new(path).map_err(|e| e.to_string())?;
        let lib = unsafe { dlopen(c.as_ptr(), RTLD_NOW | RTLD_GLOBAL) };
        if lib.is_null() {
            let e = unsafe { dlerror() };
            return Err(if e.is_null() {
                "dlopen failed".into()
            } else {
                unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
            });
        }
        let sym = |name: &str| -> Result<*mut c_void, String> {
            let n = CString::new(name).expect("symbol names have no NUL");
            let p = unsafe { dlsym(lib, n.as_ptr()) };
            if p.is_null() {
                Err(format!("no symbol {name}"))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol has the C signature of the Sanitizer API header it comes from.
        unsafe {
            Ok(Api {
                subscribe: as_fn(sym("sanitizerSubscribe")?),
                enable_domain: as_fn(sym("sanitizerEnableDomain")?),
                enable_callback: as_fn(sym("sanitizerEnableCallback")?),
                add_patches: as_fn(sym("sanitizerAddPatches")?),
                patch_instructions: as_fn(sym("sanitizerPatchInstructions")?),
                patch_module: as_fn(sym("sanitizerPatchModule")?),
                set_launch_callback_data: as_fn(sym("sanitizerSetLaunchCallbackData")?),
                alloc: as_fn(sym("sanitizerAlloc")?),
                alloc_host: as_fn(sym("sanitizerAllocHost")?),
                memcpy_h2d_async: as_fn(sym("sanitizerMemcpyHostToDeviceAsync")?),
                memcpy_d2h: as_fn(sym("sanitizerMemcpyDeviceToHost")?),
                stream_synchronize: as_fn(sym("sanitizerStreamSynchronize")?),
                result_string: as_fn(sym("sanitizerGetResultString")?),
            })
        }
    }

    /// The library's name for a result code.
    pub fn describe(&self, r: SanitizerResult) -> String {
        let mut s: *const c_char = std::ptr::null();
        if unsafe { (self.result_string)(r, &mut s) } == SUCCESS && !s.is_null() {
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        } else {
            format!("error {r}")
        }
    }
}

/// The API-domain calls the tool listens to, by callback id (`sanitizer_runtime_cbid.h`,
/// `sanitizer_driver_cbid.h`, CUDA 13.0).
pub mod cbid {
    /// What a call means to the trace.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Call {
        /// `(pStream, flags)`; `flags` absent for `cudaStreamCreate`.
        StreamCreate {
            has_flags: bool,
        },
        StreamSync,
        StreamQuery,
        EventSync,
        EventQuery,
        DeviceSync,
        /// `(stream, fn, ...)`.
        HostFunc,
        /// `(stream, ...)`.
        BeginCapture,
        /// `(stream, pGraph)`.
        EndCapture,
    }

    /// `(cbid, call, per-thread-default variant)` of the runtime API.
    pub const RUNTIME: &[(u32, Call, bool)] = &[
        (129, Call::StreamCreate { has_flags: false }, false),
        (198, Call::StreamCreate { has_flags: true }, false),
        (202, Call::StreamCreate { has_flags: true }, false),
        (131, Call::StreamSync, false),
        (239, Call::StreamSync, true),
        (132, Call::StreamQuery, false),
        (240, Call::StreamQuery, true),
        (137, Call::EventSync, false),
        (138, Call::EventQuery, false),
        (165, Call::DeviceSync, false),
        (284, Call::HostFunc, false),
        (285, Call::HostFunc, true),
        (197, Call::HostFunc, false),
        (248, Call::HostFunc, true),
        (315, Call::BeginCapture, false),
        (316, Call::BeginCapture, true),
        (452, Call::BeginCapture, false),
        (453, Call::BeginCapture, true),
        (319, Call::EndCapture, false),
        (320, Call::EndCapture, true),
    ];

    /// The same for the driver API.
    pub const DRIVER: &[(u32, Call, bool)] = &[
        (124, Call::StreamCreate { has_flags: true }, false),
        (367, Call::StreamCreate { has_flags: true }, false),
        (126, Call::StreamSync, false),
        (440, Call::StreamSync, true),
        (125, Call::StreamQuery, false),
        (439, Call::StreamQuery, true),
        (121, Call::EventSync, false),
        (120, Call::EventQuery, false),
        (17, Call::DeviceSync, false),
        (800, Call::DeviceSync, false),
        (527, Call::HostFunc, false),
        (528, Call::HostFunc, true),
        (346, Call::HostFunc, false),
        (437, Call::HostFunc, true),
        (495, Call::BeginCapture, false),
        (496, Call::BeginCapture, true),
        (539, Call::BeginCapture, false),
        (540, Call::BeginCapture, true),
        (720, Call::BeginCapture, false),
        (721, Call::BeginCapture, true),
        (497, Call::EndCapture, false),
        (498, Call::EndCapture, true),
    ];

    /// The call behind `(domain, cbid)`, if the tool listens to it.
    pub fn lookup(runtime: bool, id: u32) -> Option<(Call, bool)> {
        let table = if runtime { RUNTIME } else { DRIVER };
        table
            .iter()
            .find(|(c, _, _)| *c == id)
            .map(|(_, call, ptsz)| (*call, *ptsz))
    }
}
