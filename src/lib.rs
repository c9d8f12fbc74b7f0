//! streamsan: a CUDA stream sanitizer. (Crate documentation comes with the user guide.)

pub mod check;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod engine;
pub mod report;
pub mod synth;
pub mod trace;
