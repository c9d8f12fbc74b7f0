//! streamsan: a CUDA stream sanitizer. (Crate documentation comes with the user guide.)

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod engine;
#[cfg(feature = "cuda")]
pub mod ops;
pub mod report;
pub mod trace;
