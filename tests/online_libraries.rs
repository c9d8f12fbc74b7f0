//! cuBLAS and cuRAND online (cargo features `cublas` and `curand`), on a real GPU: a cuRAND
//! fill on one stream and a cuBLAS gemm reading its output on another, recorded on the
//! streams their handles are bound to. Unordered, the gemm reads the old values (a spin kernel
//! delays the fill): wrong numbers, reported; joined, right and clean. Run with
//! `cargo test --features cublas,curand -- --include-ignored` where a GPU is.

#![cfg(all(feature = "cublas", feature = "curand"))]

use std::sync::Arc;

use streamsan::cuda::cublas::{CudaBlas, Gemm, GemmConfig, sys::cublasOperation_t};
use streamsan::cuda::curand::CudaRng;
use streamsan::cuda::testing::{self, Run};
use streamsan::cuda::{CudaContext, CudaSlice};
use streamsan::engine::RaceKind;
use streamsan_demos::{Error, Kernels, SPIN_CYCLES, ops};

/// Square matrices of this order.
const M: usize = 256;

/// `c = x * I` with `x` from cuRAND on `s1` and the gemm on `s2`; returns (x, c) read back
/// after everything finished. Fixed: `s2` joins `s1` before the gemm.
fn random_times_identity(fixed: bool) -> ((Vec<f32>, Vec<f32>), Run) {
    let mut out = (Vec::new(), Vec::new());
    let run = testing::sanitize(0, |ctx: &Arc<CudaContext>| {
        Kernels::get(ctx)?;
        unsafe { ctx.disable_event_tracking() };
        let s1 = ctx.new_stream()?;
        let s2 = ctx.new_stream()?;
        let rng = CudaRng::new(7, s1.clone()).map_err(|e| Error::Context(format!("{e}")))?;
        let blas = CudaBlas::new(s2.clone()).map_err(|e| Error::Context(format!("{e}")))?;
        let mut identity = vec![0.0f32; M * M];
        for i in 0..M {
            identity[i * M + i] = 1.0;
        }
        let eye = s2.clone_htod(&identity)?;
        let mut x: CudaSlice<f32> = s1.alloc_zeros(M * M)?;
        let mut c: CudaSlice<f32> = s2.alloc_zeros(M * M)?;
        let cfg = GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_N,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: M as i32,
            n: M as i32,
            k: M as i32,
            alpha: 1.0f32,
            lda: M as i32,
            ldb: M as i32,
            beta: 0.0,
            ldc: M as i32,
        };
        // Warm up both libraries and the spin kernel outside the racy part.
        let mut w: CudaSlice<f32> = s1.alloc_zeros(M * M)?;
        rng.fill_with_normal(&mut w, 0.0, 1.0).unwrap();
        ops::spin(&s1, 1)?;
        unsafe { blas.gemm(cfg, &eye, &eye, &mut c) }.unwrap();
        ctx.synchronize()?;

        ops::spin(&s1, SPIN_CYCLES)?;
        rng.fill_with_normal(&mut x, 0.0, 1.0).unwrap(); // cuRAND writes x on s1
        if fixed {
            s2.join(&s1)?;
        }
        unsafe { blas.gemm(cfg, &x, &eye, &mut c) }.unwrap(); // cuBLAS reads x on s2
        ctx.synchronize()?;
        out = (s1.clone_dtoh(&x)?, s2.clone_dtoh(&c)?);
        Ok::<(), Error>(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    (out, run)
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_gemm_reading_curand_output_on_another_stream_races() {
    let ((x, c), run) = random_times_identity(false);
    println!("unordered: c[0] = {}, x[0] = {}", c[0], x[0]);
    assert!(x.iter().any(|&v| v != 0.0));
    assert!(
        c.iter().all(|&v| v == 0.0),
        "the gemm ran before the fill: {}",
        c[0]
    );
    let races = run.races();
    let race = races
        .iter()
        .find(|r| r.kind == RaceKind::ReadAfterWrite)
        .unwrap_or_else(|| panic!("{}", run.report()));
    assert_eq!(race.current.name.as_deref(), Some("cublasSgemm"));
    assert_eq!(race.previous.name.as_deref(), Some("curandGenerateNormal"));
}

#[test]
#[ignore = "needs a CUDA device"]
fn a_gemm_after_a_join_is_right_and_clean() {
    let ((x, c), run) = random_times_identity(true);
    assert_eq!(x, c, "x * I = x");
    run.assert_no_races();
}
