//! streamsan: a CUDA stream sanitizer. (Crate documentation comes with the user guide.)

pub mod check;
pub mod engine;
pub mod report;
pub mod synth;
pub mod trace;
