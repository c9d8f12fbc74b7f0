//! The ops: one launch each (two for `sum`), every buffer parameter named as in `kernels/*.cu`
//! and passed as `&` (read) or `&mut` (written), every op `#[track_caller]` so the sanitizer
//! records the line that called it. Lengths are checked here; the kernels trust `n`.

use streamsan::cuda::{CudaSlice, CudaStream, LaunchConfig};

use crate::{Error, Kernels};

/// Threads per block: a multiple of 32 (`sum` reduces per warp).
const BLOCK: u32 = 256;
/// At most this many blocks; the kernels loop over the rest (grid-stride), and `sum` makes one
/// atomic add per block.
const MAX_BLOCKS: u32 = 1024;

/// A launch shape for `items` independent work items, one per thread.
fn config(items: usize) -> LaunchConfig {
    let blocks = items.div_ceil(BLOCK as usize).clamp(1, MAX_BLOCKS as usize) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn same_len(op: &'static str, a: (&str, usize), b: (&str, usize)) -> Result<(), Error> {
    if a.1 == b.1 {
        return Ok(());
    }
    Err(Error::Length {
        op,
        what: format!("{} has {} elements, {} has {}", a.0, a.1, b.0, b.1),
    })
}

/// Fills `out` with standard normal samples: `out[i]` depends only on `(seed, i)`
/// ([`crate::cpu::randn`] computes the same numbers).
#[track_caller]
pub fn randn(stream: &CudaStream, out: &mut CudaSlice<f32>, seed: u64) -> Result<(), Error> {
    let k = Kernels::get(stream.context())?;
    let n = out.len();
    // SAFETY: `randn(float *out, unsigned long long seed, size_t n)` writes out[0..n).
    unsafe {
        stream
            .launch_builder(&k.randn)
            .arg_named("out", out)
            .arg_named("seed", &seed)
            .arg_named("n", &n)
            .launch(config(n.div_ceil(4)))
    }?;
    Ok(())
}

/// `out[0] = sum(x)`: zeroes `out`, then adds each block's partial sum atomically (both on
/// `stream`). `out` has one element.
#[track_caller]
pub fn sum(stream: &CudaStream, x: &CudaSlice<f32>, out: &mut CudaSlice<f32>) -> Result<(), Error> {
    same_len("sum", ("out", out.len()), ("a scalar", 1))?;
    fill(stream, out, 0.0)?;
    let k = Kernels::get(stream.context())?;
    let n = x.len();
    // SAFETY: `sum(const float *x, float *out, size_t n)` reads x[0..n), adds to out[0].
    unsafe {
        stream
            .launch_builder(&k.sum)
            .arg_named("x", x)
            .arg_named("out", out)
            .arg_named("n", &n)
            .launch(config(n))
    }?;
    Ok(())
}

/// `y = a * x + y`.
#[track_caller]
pub fn axpy(
    stream: &CudaStream,
    a: f32,
    x: &CudaSlice<f32>,
    y: &mut CudaSlice<f32>,
) -> Result<(), Error> {
    same_len("axpy", ("x", x.len()), ("y", y.len()))?;
    let k = Kernels::get(stream.context())?;
    let n = x.len();
    // SAFETY: `axpy(float a, const float *x, float *y, size_t n)` reads x, y and writes y in
    // [0, n).
    unsafe {
        stream
            .launch_builder(&k.axpy)
            .arg_named("a", &a)
            .arg_named("x", x)
            .arg_named("y", y)
            .arg_named("n", &n)
            .launch(config(n))
    }?;
    Ok(())
}

/// `out = x + y`.
#[track_caller]
pub fn add(
    stream: &CudaStream,
    x: &CudaSlice<f32>,
    y: &CudaSlice<f32>,
    out: &mut CudaSlice<f32>,
) -> Result<(), Error> {
    same_len("add", ("x", x.len()), ("y", y.len()))?;
    same_len("add", ("x", x.len()), ("out", out.len()))?;
    let k = Kernels::get(stream.context())?;
    let n = x.len();
    // SAFETY: `add(const float *x, const float *y, float *out, size_t n)`, all in [0, n).
    unsafe {
        stream
            .launch_builder(&k.add)
            .arg_named("x", x)
            .arg_named("y", y)
            .arg_named("out", out)
            .arg_named("n", &n)
            .launch(config(n))
    }?;
    Ok(())
}

/// `out = value` everywhere.
#[track_caller]
pub fn fill(stream: &CudaStream, out: &mut CudaSlice<f32>, value: f32) -> Result<(), Error> {
    let k = Kernels::get(stream.context())?;
    let n = out.len();
    // SAFETY: `fill(float *out, float value, size_t n)` writes out[0..n).
    unsafe {
        stream
            .launch_builder(&k.fill)
            .arg_named("out", out)
            .arg_named("value", &value)
            .arg_named("n", &n)
            .launch(config(n))
    }?;
    Ok(())
}

/// `dst = src`, as a kernel (not a copy-engine memcpy).
#[track_caller]
pub fn copy(
    stream: &CudaStream,
    src: &CudaSlice<f32>,
    dst: &mut CudaSlice<f32>,
) -> Result<(), Error> {
    same_len("copy", ("src", src.len()), ("dst", dst.len()))?;
    let k = Kernels::get(stream.context())?;
    let n = src.len();
    // SAFETY: `copy(const float *src, float *dst, size_t n)`, both in [0, n).
    unsafe {
        stream
            .launch_builder(&k.copy)
            .arg_named("src", src)
            .arg_named("dst", dst)
            .arg_named("n", &n)
            .launch(config(n))
    }?;
    Ok(())
}

/// Keeps `stream` busy for `cycles` GPU clock cycles (one thread, no memory): work enqueued
/// after it on `stream` starts that much later. 10^8 cycles is 50-70 ms on an H100 / H200.
#[track_caller]
pub fn spin(stream: &CudaStream, cycles: i64) -> Result<(), Error> {
    let k = Kernels::get(stream.context())?;
    let one = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (1, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: `spin(long long cycles)` touches no memory.
    unsafe {
        stream
            .launch_builder(&k.spin)
            .arg_named("cycles", &cycles)
            .launch(one)
    }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_shapes_cover_any_length_with_bounded_grids() {
        assert_eq!(config(0).grid_dim, (1, 1, 1));
        assert_eq!(config(1).grid_dim, (1, 1, 1));
        assert_eq!(config(257).grid_dim, (2, 1, 1));
        assert_eq!(config(1 << 30).grid_dim, (MAX_BLOCKS, 1, 1));
        assert_eq!(config(5).block_dim, (BLOCK, 1, 1));
        assert_eq!(BLOCK % 32, 0);
    }

    #[test]
    fn length_errors_name_both_buffers() {
        let e = same_len("axpy", ("x", 3), ("y", 4)).unwrap_err();
        assert_eq!(e.to_string(), "axpy: x has 3 elements, y has 4");
    }
}
