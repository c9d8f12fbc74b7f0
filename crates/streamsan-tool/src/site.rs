//! Names for reports: the host call site of a CUDA call (the innermost frame of the program's
//! own code, from a native backtrace, symbolized where symbols exist) and demangled kernel
//! names.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

unsafe extern "C" {
    fn backtrace(buffer: *mut *mut c_void, size: c_int) -> c_int;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn free(p: *mut c_void);
}

const RTLD_NOW: c_int = 2;
const RTLD_NOLOAD: c_int = 4;

type CxaDemangle =
    unsafe extern "C" fn(*const c_char, *mut c_char, *mut usize, *mut c_int) -> *mut c_char;

/// `__cxa_demangle` from the C++ runtime the program loaded, if it loaded one.
fn cxa_demangle() -> Option<CxaDemangle> {
    static F: OnceLock<Option<usize>> = OnceLock::new();
    let f = *F.get_or_init(|| {
        let name = CString::new("__cxa_demangle").expect("no NUL");
        // RTLD_DEFAULT is the null handle on glibc.
        let mut p = unsafe { dlsym(std::ptr::null_mut(), name.as_ptr()) };
        if p.is_null() {
            // Loaded privately (Python loads extension modules with RTLD_LOCAL): ask the
            // C++ runtime itself, without loading it if the program did not.
            let lib = CString::new("libstdc++.so.6").expect("no NUL");
            let h = unsafe { dlopen(lib.as_ptr(), RTLD_NOW | RTLD_NOLOAD) };
            if !h.is_null() {
                p = unsafe { dlsym(h, name.as_ptr()) };
            }
        }
        (!p.is_null()).then_some(p as usize)
    });
    // SAFETY: the symbol has the Itanium C++ ABI signature.
    f.map(|p| unsafe { std::mem::transmute::<usize, CxaDemangle>(p) })
}

/// `name` demangled by the program's C++ runtime (`_Z4fillPfif` → `fill(float*, int, float)`);
/// as given when it is not mangled or no runtime is loaded.
pub fn demangle(name: &str) -> String {
    if !name.starts_with("_Z") {
        return name.to_owned();
    }
    let (Some(f), Ok(c)) = (cxa_demangle(), CString::new(name)) else {
        return name.to_owned();
    };
    let mut status: c_int = -1;
    let out = unsafe {
        f(
            c.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut status,
        )
    };
    if out.is_null() || status != 0 {
        return name.to_owned();
    }
    let s = unsafe { CStr::from_ptr(out) }
        .to_string_lossy()
        .into_owned();
    unsafe { free(out.cast()) };
    s
}

/// Frames that are CUDA's, the runtime's, an interpreter's or this tool's, never the
/// program's call site (a Python program's line is not in its native stack: the innermost
/// native frame outside the interpreter, e.g. a PyTorch operator, is named instead).
fn is_plumbing(symbol: &str, kernel: Option<&str>) -> bool {
    const PREFIXES: &[&str] = &[
        "std::",
        "core::",
        "alloc::",
        "streamsan_tool",
        "<unknown>",
        "__rust",
        "rust_",
        "backtrace",
        "cuda",
        "__cuda",
        "cudart",
        "_ZN6cudart",
        "libcuda",
        "__device_stub",
        "_Z", // still mangled: no C++ runtime to demangle it, so no user-readable name either
        "Py",
        "_Py",
        "cfunction_",
        "method_vectorcall",
        "slot_tp_",
        "wrapper_",
        "c10::",
        "torch::autograd::",
        "at::_ops::",
        "pybind11::",
        "__libc_",
    ];
    let driver_api = symbol.starts_with("cu")
        && symbol[2..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_uppercase());
    driver_api
        || PREFIXES.iter().any(|p| symbol.starts_with(p))
        || symbol.contains("__device_stub__")
        || kernel.is_some_and(|k| symbol == k || symbol.starts_with(&format!("{k}(")))
}

/// Picks the call site from a `std::backtrace` rendering: the first frame that is not
/// plumbing, as `file:line:col` where debug info has it, else its symbol.
pub fn pick_site(rendered: &str, kernel: Option<&str>) -> Option<String> {
    let mut lines = rendered.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((_, symbol)) = line.trim_start().split_once(": ") else {
            continue;
        };
        if !line.trim_start().starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        let location = lines
            .peek()
            .and_then(|l| l.trim_start().strip_prefix("at "))
            .map(str::to_owned);
        let symbol = demangle(symbol.trim());
        if is_plumbing(&symbol, kernel)
            || location.as_deref().is_some_and(|l| l.contains("tmpxft_"))
        {
            continue;
        }
        return Some(location.unwrap_or(symbol));
    }
    None
}

/// Call sites, cached by the raw return addresses of the stack (symbolizing is slow; the
/// same loop calls from the same place many times).
#[derive(Default)]
pub struct Sites {
    cache: Mutex<HashMap<Vec<usize>, Option<String>>>,
    /// No call sites at all (`--no-call-sites`): the stack walk is most of the cost of an
    /// API-only run.
    off: bool,
}

impl Sites {
    pub fn new(off: bool) -> Sites {
        Sites {
            off,
            ..Sites::default()
        }
    }

    /// The program's frame that made the current CUDA call; `kernel` (demangled) is skipped
    /// too, since nvcc names the host-side launch wrapper after the kernel.
    pub fn here(&self, kernel: Option<&str>) -> Option<String> {
        if self.off {
            return None;
        }
        let mut frames = [std::ptr::null_mut::<c_void>(); 48];
        let n = unsafe { backtrace(frames.as_mut_ptr(), frames.len() as c_int) }.max(0) as usize;
        let key: Vec<usize> = frames[..n].iter().map(|p| *p as usize).collect();
        if let Some(hit) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return hit.clone();
        }
        let rendered = std::backtrace::Backtrace::force_capture().to_string();
        let site = pick_site(&rendered, kernel);
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, site.clone());
        site
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RENDERED: &str = "   0: streamsan_tool::site::Sites::here
             at ./crates/streamsan-tool/src/site.rs:90:24
   1: <unknown>
   2: cudaLaunchKernel
   3: __device_stub__Z4fillPfif(float*, int, float)
             at /tmp/tmpxft_0001_00000000-6_app.cudafe1.stub.c:13:1
   4: fill(float*, int, float)
             at /tmp/tmpxft_0001_00000000-6_app.cudafe1.stub.c:14:1
   5: main
             at ./app.cu:30:5
   6: __libc_start_main
";

    #[test]
    fn the_site_is_the_first_frame_of_the_program_with_its_location() {
        assert_eq!(
            pick_site(RENDERED, Some("fill(float*, int, float)")).as_deref(),
            Some("./app.cu:30:5")
        );
    }

    #[test]
    fn without_debug_info_the_site_is_the_symbol() {
        let stripped =
            "   0: streamsan_tool::x\n   1: cuLaunchKernel\n   2: run_model\n   3: main\n";
        assert_eq!(pick_site(stripped, None).as_deref(), Some("run_model"));
    }

    #[test]
    fn names_that_are_not_mangled_stay_as_given() {
        assert_eq!(demangle("main"), "main");
    }
}
