//! cuBLAS as cudarc exposes it (`cudarc::cublas`; cargo feature `cublas`): [`CudaBlas`] bound
//! to a stream, and [`Gemm`] (`gemm`, `gemm_strided_batched`) over this layer's memory. Each call
//! is recorded as a `launch` on the handle's stream named after the cuBLAS function, reading the
//! bytes of `a` and `b` and writing those of `c` that the matrix shapes and leading dimensions
//! reach (a prefix of each argument), with cudarc's waits and records around it.
//!
//! A program using `cudarc::cublas::{CudaBlas, Gemm, GemmConfig, ...}` changes that path to
//! `streamsan::cuda::cublas` too (the handle takes a [`CudaStream`] of this layer).

use std::panic::Location;
use std::sync::Arc;

pub use cudarc::cublas::result::CublasError;
pub use cudarc::cublas::{GemmConfig, StridedBatchedConfig, result, sys};

use super::device_ptr::{BufRef, DevicePtr, DevicePtrMut};
use super::library::{LibArg, prefix, record_call};
use super::stream::CudaStream;

/// cudarc's `CudaBlas`: a cuBLAS handle whose work runs on one stream.
#[derive(Debug)]
pub struct CudaBlas {
    cuda: cudarc::cublas::CudaBlas,
    stream: Arc<CudaStream>,
}

impl CudaBlas {
    /// `CudaBlas::new`: a handle bound to `stream`.
    pub fn new(stream: Arc<CudaStream>) -> Result<Self, CublasError> {
        let cuda = cudarc::cublas::CudaBlas::new(stream.cudarc().clone())?;
        Ok(CudaBlas { cuda, stream })
    }

    /// The raw handle; calls made with it directly are not recorded.
    pub fn handle(&self) -> &sys::cublasHandle_t {
        self.cuda.handle()
    }

    /// The stream the handle's work runs on. Not in cudarc.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// `CudaBlas::set_stream`: later calls run on `stream`.
    ///
    /// # Safety
    /// As cudarc's: work already enqueued is not synchronized with `stream`.
    pub unsafe fn set_stream(&mut self, stream: Arc<CudaStream>) -> Result<(), CublasError> {
        unsafe { self.cuda.set_stream(stream.cudarc().clone()) }?;
        self.stream = stream;
        Ok(())
    }

    /// `CudaBlas::set_pointer_mode`.
    pub fn set_pointer_mode(&self, mode: sys::cublasPointerMode_t) -> Result<(), CublasError> {
        self.cuda.set_pointer_mode(mode)
    }

    /// `CudaBlas::get_pointer_mode`.
    pub fn get_pointer_mode(&self) -> Result<sys::cublasPointerMode_t, CublasError> {
        self.cuda.get_pointer_mode()
    }

    /// The wrapped cudarc handle. Calls made through it directly are not recorded.
    pub fn cudarc(&self) -> &cudarc::cublas::CudaBlas {
        &self.cuda
    }
}

/// Elements of a column-major matrix of `rows` x `cols` with leading dimension `ld`, counted
/// from its first: what cuBLAS reads or writes of it.
fn matrix_elems(rows: i32, cols: i32, ld: i32) -> u64 {
    if rows <= 0 || cols <= 0 {
        return 0;
    }
    (cols as u64 - 1) * ld.max(rows) as u64 + rows as u64
}

/// Whether `op` transposes (`CUBLAS_OP_T`, `CUBLAS_OP_C`).
fn transposed(op: sys::cublasOperation_t) -> bool {
    op != sys::cublasOperation_t::CUBLAS_OP_N
}

/// The elements of `a`, `b` and `c` one multiplication of `cfg` reaches.
fn gemm_elems<T>(cfg: &GemmConfig<T>) -> [u64; 3] {
    let (a_rows, a_cols) = if transposed(cfg.transa) {
        (cfg.k, cfg.m)
    } else {
        (cfg.m, cfg.k)
    };
    let (b_rows, b_cols) = if transposed(cfg.transb) {
        (cfg.n, cfg.k)
    } else {
        (cfg.k, cfg.n)
    };
    [
        matrix_elems(a_rows, a_cols, cfg.lda),
        matrix_elems(b_rows, b_cols, cfg.ldb),
        matrix_elems(cfg.m, cfg.n, cfg.ldc),
    ]
}

/// The elements of `a`, `b` and `c` all `batch_size` multiplications of `cfg` reach: the first
/// one's, and `stride` more for each further one.
fn strided_elems<T>(cfg: &StridedBatchedConfig<T>) -> [u64; 3] {
    let [na, nb, nc] = gemm_elems(&cfg.gemm);
    let batches = cfg.batch_size.max(1) as u64 - 1;
    let reach = |n: u64, stride: i64| {
        if n == 0 {
            0
        } else {
            n + batches * stride.max(0) as u64
        }
    };
    [
        reach(na, cfg.stride_a),
        reach(nb, cfg.stride_b),
        reach(nc, cfg.stride_c),
    ]
}

/// A gemm's arguments as the sanitizer records them: `elems` elements of `T` from the start of
/// `a` and `b` (read) and `c` (written).
fn gemm_args<T>(
    a: Option<BufRef>,
    b: Option<BufRef>,
    c: Option<BufRef>,
    elems: [u64; 3],
) -> [LibArg; 3] {
    let bytes = |n: u64| n * size_of::<T>() as u64;
    [
        LibArg::read(prefix(a, bytes(elems[0]))),
        LibArg::read(prefix(b, bytes(elems[1]))),
        LibArg::write(prefix(c, bytes(elems[2]))),
    ]
}

/// The cuBLAS function a `gemm` of `T` calls, for reports.
fn gemm_name<T>(batched: bool) -> &'static str {
    match (std::any::type_name::<T>(), batched) {
        ("f32", false) => "cublasSgemm",
        ("f64", false) => "cublasDgemm",
        ("f32", true) => "cublasSgemmStridedBatched",
        ("f64", true) => "cublasDgemmStridedBatched",
        (_, false) => "cublasGemmEx",
        (_, true) => "cublasGemmStridedBatchedEx",
    }
}

/// cudarc's `Gemm`: matrix multiplication with elements of `T`, for every `T` cudarc has it
/// for (`f32`, `f64`; `f16` and `bf16` with cudarc's `f16` feature).
pub trait Gemm<T> {
    /// `C = alpha * op(A) op(B) + beta * C`.
    ///
    /// # Safety
    /// As cudarc's: the configuration must fit the arguments.
    #[track_caller]
    unsafe fn gemm<A: DevicePtr<T>, B: DevicePtr<T>, C: DevicePtrMut<T>>(
        &self,
        cfg: GemmConfig<T>,
        a: &A,
        b: &B,
        c: &mut C,
    ) -> Result<(), CublasError>
    where
        cudarc::cublas::CudaBlas: cudarc::cublas::Gemm<T>,
    {
        let (cuda, stream) = self.handle_parts();
        let args = gemm_args::<T>(a.buf_ref(), b.buf_ref(), c.buf_ref(), gemm_elems(&cfg));
        record_call(
            stream,
            gemm_name::<T>(false),
            &args,
            Location::caller(),
            || {
                // SAFETY: the caller's obligation.
                unsafe { cudarc::cublas::Gemm::gemm(cuda, cfg, a.cuda(), b.cuda(), c.cuda_mut()) }
            },
        )
    }

    /// `batch_size` multiplications, each argument advancing by its stride.
    ///
    /// # Safety
    /// As cudarc's.
    #[track_caller]
    unsafe fn gemm_strided_batched<A: DevicePtr<T>, B: DevicePtr<T>, C: DevicePtrMut<T>>(
        &self,
        cfg: StridedBatchedConfig<T>,
        a: &A,
        b: &B,
        c: &mut C,
    ) -> Result<(), CublasError>
    where
        cudarc::cublas::CudaBlas: cudarc::cublas::Gemm<T>,
    {
        let (cuda, stream) = self.handle_parts();
        let elems = strided_elems(&cfg);
        let args = gemm_args::<T>(a.buf_ref(), b.buf_ref(), c.buf_ref(), elems);
        record_call(
            stream,
            gemm_name::<T>(true),
            &args,
            Location::caller(),
            || {
                // SAFETY: the caller's obligation.
                unsafe {
                    cudarc::cublas::Gemm::gemm_strided_batched(
                        cuda,
                        cfg,
                        a.cuda(),
                        b.cuda(),
                        c.cuda_mut(),
                    )
                }
            },
        )
    }

    /// The cudarc handle and the stream its work runs on.
    #[doc(hidden)]
    fn handle_parts(&self) -> (&cudarc::cublas::CudaBlas, &Arc<CudaStream>);
}

impl<T> Gemm<T> for CudaBlas {
    fn handle_parts(&self) -> (&cudarc::cublas::CudaBlas, &Arc<CudaStream>) {
        (&self.cuda, &self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};

    fn cfg(m: i32, n: i32, k: i32, lds: (i32, i32, i32)) -> GemmConfig<f32> {
        GemmConfig {
            transa: CUBLAS_OP_N,
            transb: CUBLAS_OP_N,
            m,
            n,
            k,
            alpha: 1.0,
            lda: lds.0,
            ldb: lds.1,
            beta: 0.0,
            ldc: lds.2,
        }
    }

    /// cuBLAS's column-major layout (cuBLAS docs, "Data Layout"): element (i, j) of a matrix
    /// with leading dimension ld is at j * ld + i, so the last one touched is at
    /// (cols - 1) * ld + rows - 1.
    #[test]
    fn gemm_reaches_the_prefix_its_shapes_and_leading_dimensions_give() {
        // A 2x3, B 3x4, C 2x4, packed.
        assert_eq!(gemm_elems(&cfg(2, 4, 3, (2, 3, 2))), [6, 12, 8]);
        // Padded leading dimensions: the last column starts at (cols - 1) * ld.
        assert_eq!(gemm_elems(&cfg(2, 4, 3, (8, 8, 8))), [18, 27, 26]);
        // op(A) = A^T: A is stored k x m.
        let t = GemmConfig {
            transa: CUBLAS_OP_T,
            ..cfg(2, 4, 3, (3, 3, 2))
        };
        assert_eq!(gemm_elems(&t), [6, 12, 8]);
        // An empty product touches nothing.
        assert_eq!(gemm_elems(&cfg(0, 4, 3, (1, 3, 1))), [0, 12, 0]);
    }

    #[test]
    fn strided_batches_reach_one_stride_further_each() {
        let batched = StridedBatchedConfig {
            gemm: cfg(2, 4, 3, (2, 3, 2)),
            batch_size: 3,
            stride_a: 6,
            stride_b: 12,
            stride_c: 8,
        };
        assert_eq!(strided_elems(&batched), [18, 36, 24]);
        let one = StridedBatchedConfig {
            batch_size: 1,
            ..batched
        };
        assert_eq!(strided_elems(&one), gemm_elems(&one.gemm));
    }

    #[test]
    fn gemm_names_follow_the_element_type() {
        assert_eq!(gemm_name::<f32>(false), "cublasSgemm");
        assert_eq!(gemm_name::<f64>(true), "cublasDgemmStridedBatched");
    }
}
