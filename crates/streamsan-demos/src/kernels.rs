//! The kernels of `kernels/`: compiled to PTX by NVRTC once per process, loaded as modules once
//! per CUDA context.
//!
//! Why at run time: cudarc loads libcuda and libnvrtc dynamically, so the crate builds on
//! machines without CUDA (CI, the developers' machines) and the same binary runs on any GPU.
//! The PTX is compiled without an explicit `--gpu-architecture` (NVRTC's default virtual
//! architecture); the driver JIT-compiles it for the GPU it finds, once, when the module is
//! loaded, and caches the result on disk.
//!
//! Why cached: NVRTC takes a fraction of a second per file, and the examples make their race
//! visible by timing (a `spin` kernel ahead of the producer): compiling in the middle of one
//! would blur that. [`Kernels::get`] compiles every family the first time any op runs and keeps
//! the loaded functions for the rest of the process, keyed by the CUDA context handle. cudarc
//! retains the device's primary context, so every `CudaContext` of one device shares one entry; the
//! entry keeps that primary context alive (as a framework's kernel cache does).
//!
//! Every function is fetched (`cuModuleGetFunction`) when the module is loaded: under CUDA's
//! lazy loading (the default since 12.2) that is when a kernel is loaded, which may have to
//! wait for the device; fetched up front, it cannot happen between an example's racing calls.
//!
//! Loading a module is not a stream operation: the sanitizer records nothing for it.

use std::sync::{Arc, OnceLock};

use dashmap::DashMap;

use cudarc::driver::sys;
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};

use streamsan::cuda::{CudaContext, CudaFunction, DriverError};

use crate::Error;

/// One `.cu` file: its name, source and the kernels it defines.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    pub file: &'static str,
    pub code: &'static str,
    pub kernels: &'static [&'static str],
}

/// Every kernel family, one file each.
pub const SOURCES: [Source; 4] = [
    Source {
        file: "random.cu",
        code: include_str!("../../../kernels/random.cu"),
        kernels: &["randn"],
    },
    Source {
        file: "reduce.cu",
        code: include_str!("../../../kernels/reduce.cu"),
        kernels: &["sum"],
    },
    Source {
        file: "elementwise.cu",
        code: include_str!("../../../kernels/elementwise.cu"),
        kernels: &["axpy", "add", "fill", "copy"],
    },
    Source {
        file: "spin.cu",
        code: include_str!("../../../kernels/spin.cu"),
        kernels: &["spin"],
    },
];

/// The loaded kernels of one CUDA context. Each [`CudaFunction`] keeps its kernel name, which is
/// what reports call the launch.
#[derive(Debug)]
pub struct Kernels {
    pub randn: CudaFunction,
    pub sum: CudaFunction,
    pub axpy: CudaFunction,
    pub add: CudaFunction,
    pub fill: CudaFunction,
    pub copy: CudaFunction,
    pub spin: CudaFunction,
}

/// The NVRTC options: none but the program name (so errors name the file). No architecture:
/// see the module docs. Not fast-math: `randn` must agree with its CPU reference.
fn options(file: &'static str) -> CompileOptions {
    CompileOptions {
        name: Some(file.to_string()),
        ..Default::default()
    }
}

fn compile_error(file: &'static str, e: CompileError) -> Error {
    let log = match e {
        CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
        other => format!("{other:?}"),
    };
    Error::Compile { file, log }
}

/// A driver that cannot JIT the PTX: most often a libnvrtc newer than the driver (NVRTC
/// writes the PTX ISA of its own CUDA version, which an older driver rejects).
fn load_error(file: &'static str, ptx: &Ptx, e: DriverError) -> Error {
    let bad = [
        sys::CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION,
        sys::CUresult::CUDA_ERROR_INVALID_PTX,
    ];
    if !bad.contains(&e.0) {
        return Error::Driver(e);
    }
    let text = ptx.to_src();
    let version = text
        .lines()
        .find(|l| l.starts_with(".version"))
        .unwrap_or(".version ?");
    Error::Compile {
        file,
        log: format!(
            "the driver rejected the PTX ({version}, {:?}): use a libnvrtc no newer than the \
             CUDA version nvidia-smi shows for the driver",
            e.0
        ),
    }
}

/// The PTX of every source, in [`SOURCES`] order; compiled once per process.
pub fn ptx() -> Result<&'static [Ptx], Error> {
    static PTX: OnceLock<Result<Vec<Ptx>, Error>> = OnceLock::new();
    PTX.get_or_init(|| {
        SOURCES
            .iter()
            .map(|s| {
                cudarc::nvrtc::compile_ptx_with_opts(s.code, options(s.file))
                    .map_err(|e| compile_error(s.file, e))
            })
            .collect()
    })
    .as_ref()
    .map(Vec::as_slice)
    .map_err(Clone::clone)
}

/// Loaded kernels per CUDA context handle (as an integer: the handle is a raw pointer). Host
/// threads launching ops concurrently look it up on every op: a sharded concurrent map, not one
/// global lock.
type Cache = DashMap<usize, Arc<Kernels>>;

impl Kernels {
    /// The kernels of `ctx`'s CUDA context: compiled and loaded on first use, then shared.
    pub fn get(ctx: &Arc<CudaContext>) -> Result<Arc<Kernels>, Error> {
        static CACHE: OnceLock<Cache> = OnceLock::new();
        let key = ctx.cudarc().cu_ctx() as usize;
        let cache = CACHE.get_or_init(Cache::default);
        if let Some(k) = cache.get(&key) {
            return Ok(k.clone());
        }
        // Loading holds the entry's shard, so two threads never load one context twice.
        let entry = cache
            .entry(key)
            .or_try_insert_with(|| Kernels::load(ctx).map(Arc::new))?;
        Ok(entry.clone())
    }

    fn load(ctx: &Arc<CudaContext>) -> Result<Kernels, Error> {
        let mut functions = Vec::new();
        for (source, ptx) in SOURCES.iter().zip(ptx()?) {
            let module = ctx
                .load_module(ptx.clone())
                .map_err(|e| load_error(source.file, ptx, e))?;
            for name in source.kernels {
                functions.push(module.load_function(name)?);
            }
        }
        let mut f = functions.into_iter();
        let mut next = || f.next().expect("one function per kernel name");
        Ok(Kernels {
            randn: next(),
            sum: next(),
            axpy: next(),
            add: next(),
            fill: next(),
            copy: next(),
            spin: next(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel names in `SOURCES` are the `extern "C"` kernels of each file, in the order
    /// `Kernels::load` assigns them.
    #[test]
    fn sources_declare_their_kernels() {
        let names: Vec<&str> = SOURCES
            .iter()
            .flat_map(|s| s.kernels.iter().copied())
            .collect();
        assert_eq!(
            names,
            ["randn", "sum", "axpy", "add", "fill", "copy", "spin"]
        );
        for s in SOURCES {
            for k in s.kernels {
                let decl = format!("extern \"C\" __global__ void {k}(");
                assert!(s.code.contains(&decl), "{} lacks {decl}", s.file);
            }
            let declared = s.code.matches("extern \"C\" __global__").count();
            assert_eq!(declared, s.kernels.len(), "{}", s.file);
        }
    }

    /// Compiles every source with NVRTC when the library is present (it needs no GPU); set
    /// `STREAMSAN_REQUIRE_NVRTC=1` to fail instead of skipping where it is missing.
    #[test]
    fn sources_compile_with_nvrtc_when_available() {
        let required = std::env::var_os("STREAMSAN_REQUIRE_NVRTC").is_some();
        // SAFETY: only tries to open the library.
        let loaded = unsafe { cudarc::nvrtc::sys::is_culib_present() };
        if !loaded {
            assert!(!required, "libnvrtc not found");
            eprintln!("libnvrtc not found: NVRTC compile check skipped");
            return;
        }
        let ptx = ptx().unwrap_or_else(|e| panic!("{e}"));
        for (s, p) in SOURCES.iter().zip(ptx) {
            let text = p.to_src();
            for k in s.kernels {
                assert!(text.contains(&format!(".entry {k}(")), "{}: {k}", s.file);
            }
        }
    }
}
