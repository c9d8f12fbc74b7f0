//! cuRAND as cudarc exposes it (`cudarc::curand`; cargo feature `curand`): [`CudaRng`], a
//! generator bound to a stream. Each fill is recorded as a `launch` on the generator's stream
//! named after the cuRAND function, writing the whole destination, with cudarc's waits and
//! record around it. A program using `cudarc::curand::CudaRng` changes that path to
//! `streamsan::cuda::curand` too.

use std::panic::Location;
use std::sync::Arc;

pub use cudarc::curand::result::{CurandError, LogNormalFill, NormalFill, UniformFill};
pub use cudarc::curand::{result, sys};

use super::device_ptr::DevicePtrMut;
use super::library::{LibArg, record_call};
use super::stream::CudaStream;

/// cudarc's `CudaRng`: a pseudo-random generator whose fills run on one stream.
pub struct CudaRng {
    cuda: cudarc::curand::CudaRng,
    stream: Arc<CudaStream>,
}

impl std::fmt::Debug for CudaRng {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaRng")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl CudaRng {
    /// `CudaRng::new`: a generator seeded with `seed`, bound to `stream`.
    pub fn new(seed: u64, stream: Arc<CudaStream>) -> Result<Self, CurandError> {
        let cuda = cudarc::curand::CudaRng::new(seed, stream.cudarc().clone())?;
        Ok(CudaRng { cuda, stream })
    }

    /// `CudaRng::set_stream`: later fills run on `stream`.
    ///
    /// # Safety
    /// As cudarc's: work already enqueued is not synchronized with `stream`.
    pub unsafe fn set_stream(&mut self, stream: Arc<CudaStream>) -> Result<(), CurandError> {
        unsafe { self.cuda.set_stream(stream.cudarc().clone()) }?;
        self.stream = stream;
        Ok(())
    }

    /// `CudaRng::set_seed` (host state: not recorded).
    pub fn set_seed(&mut self, seed: u64) -> Result<(), CurandError> {
        self.cuda.set_seed(seed)
    }

    /// `CudaRng::set_offset` (host state: not recorded).
    pub fn set_offset(&mut self, offset: u64) -> Result<(), CurandError> {
        self.cuda.set_offset(offset)
    }

    /// The stream fills run on. Not in cudarc.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// A fill of `dst` by the cuRAND function `name` (`fill`: cudarc's call on `dst`'s cudarc
    /// memory), recorded as a launch writing all of `dst`.
    #[track_caller]
    fn fill<T, Dst: DevicePtrMut<T>>(
        &self,
        name: &'static str,
        dst: &mut Dst,
        fill: impl FnOnce(&cudarc::curand::CudaRng, &mut Dst::CudaMut) -> Result<(), CurandError>,
    ) -> Result<(), CurandError> {
        let args = [LibArg::write(dst.buf_ref())];
        record_call(&self.stream, name, &args, Location::caller(), || {
            fill(&self.cuda, dst.cuda_mut())
        })
    }

    /// `CudaRng::fill_with_uniform` (`curandGenerateUniform*`).
    #[track_caller]
    pub fn fill_with_uniform<T, Dst: DevicePtrMut<T>>(
        &self,
        dst: &mut Dst,
    ) -> Result<(), CurandError>
    where
        sys::curandGenerator_t: UniformFill<T>,
    {
        self.fill("curandGenerateUniform", dst, |rng, d| {
            rng.fill_with_uniform(d)
        })
    }
}

/// cudarc's fills with a distribution of `mean` and `std`, each recorded as its cuRAND function.
macro_rules! fill_with_distribution {
    ($($(#[$doc:meta])* $method:ident, $fill:ident, $name:literal;)*) => {
        impl CudaRng {
            $(
                $(#[$doc])*
                #[track_caller]
                pub fn $method<T, Dst: DevicePtrMut<T>>(
                    &self,
                    dst: &mut Dst,
                    mean: T,
                    std: T,
                ) -> Result<(), CurandError>
                where
                    sys::curandGenerator_t: $fill<T>,
                {
                    self.fill($name, dst, |rng, d| rng.$method(d, mean, std))
                }
            )*
        }
    };
}

fill_with_distribution! {
    /// `CudaRng::fill_with_normal` (`curandGenerateNormal*`).
    fill_with_normal, NormalFill, "curandGenerateNormal";
    /// `CudaRng::fill_with_log_normal` (`curandGenerateLogNormal*`).
    fill_with_log_normal, LogNormalFill, "curandGenerateLogNormal";
}
