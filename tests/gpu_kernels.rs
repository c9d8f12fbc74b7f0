//! Each kernel of `kernels/` on a real GPU against its CPU reference (`streamsan_demos::cpu`),
//! on random inputs and lengths that are not multiples of the block size; `spin` against the
//! clock; and the accesses the ops declare to the sanitizer (names, arguments, read / write).
//! Run with `cargo test --test gpu_kernels -- --include-ignored` where a GPU is.

#![cfg(feature = "cuda")]

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;
use streamsan::cuda::{CudaContext, CudaSlice, CudaStream};
use streamsan_demos::{
    Error, Kernels,
    compare::{Tolerance, compare},
    cpu, ops,
};

/// Lengths: tiny, one past a block, not a multiple of 4 (randn's groups), past the grid cap.
const LENGTHS: [usize; 5] = [1, 257, 1001, 1 << 20, 3_000_003];

fn context() -> Arc<CudaContext> {
    CudaContext::builder()
        .ignore_env()
        .sanitize(false)
        .build(0)
        .expect("a CUDA device")
}

fn upload(s: &Arc<CudaStream>, x: &[f32]) -> CudaSlice<f32> {
    s.clone_htod(x).unwrap()
}

fn download(s: &Arc<CudaStream>, x: &CudaSlice<f32>) -> Vec<f32> {
    s.clone_dtoh(x).unwrap()
}

#[test]
#[ignore = "needs a CUDA device"]
fn randn_matches_the_cpu_philox_reference() {
    let ctx = context();
    let s = ctx.default_stream();
    for n in LENGTHS {
        let mut x = s.alloc_zeros::<f32>(n).unwrap();
        ops::randn(&s, &mut x, 42).unwrap();
        let gpu = download(&s, &x);
        let reference = cpu::randn(42, n);
        // The first elements one by one, within 1e-5 relative (absolute near 0, where cos or
        // sin of the angle vanishes): the integer stream is the same, only the GPU's
        // logf / cosf / sinf round differently.
        for (i, (&g, &r)) in gpu.iter().zip(&reference).take(4096).enumerate() {
            assert!(
                (g - r).abs() <= 1e-5 * r.abs().max(1.0),
                "n {n}, element {i}: GPU {g}, CPU {r}"
            );
        }
        let c = compare(&gpu, &reference, Tolerance::ELEMENTWISE);
        assert!(c.matches(), "n {n}: {c:?}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn randn_is_standard_normal_and_deterministic() {
    let ctx = context();
    let s = ctx.default_stream();
    let n = 1 << 20;
    let mut x = s.alloc_zeros::<f32>(n).unwrap();
    ops::randn(&s, &mut x, 7).unwrap();
    let a = download(&s, &x);
    let samples = a.len() as f64;
    let mean = a.iter().map(|&v| f64::from(v)).sum::<f64>() / samples;
    let var = a
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / samples;
    assert!(mean.abs() < 0.005, "mean {mean}");
    assert!((var.sqrt() - 1.0).abs() < 0.005, "std {}", var.sqrt());
    assert!(a.iter().all(|v| v.is_finite()));

    // Same seed, same numbers, bit for bit; another seed, other numbers.
    ops::randn(&s, &mut x, 7).unwrap();
    assert!(download(&s, &x) == a);
    ops::randn(&s, &mut x, 8).unwrap();
    assert!(download(&s, &x)[..16] != a[..16]);
}

#[test]
#[ignore = "needs a CUDA device"]
fn sum_matches_the_cpu_reference() {
    let ctx = context();
    let s = ctx.default_stream();
    for (seed, n) in LENGTHS.into_iter().enumerate() {
        // Normal samples shifted by 0.25: a sum far from 0, with cancellation.
        let x: Vec<f32> = cpu::randn(seed as u64, n)
            .iter()
            .map(|v| v + 0.25)
            .collect();
        let dx = upload(&s, &x);
        let mut out = s.alloc_zeros::<f32>(1).unwrap();
        // Twice: the op zeroes `out` before the atomic adds.
        ops::sum(&s, &dx, &mut out).unwrap();
        ops::sum(&s, &dx, &mut out).unwrap();
        let gpu = download(&s, &out);
        let c = compare(&gpu, &[cpu::sum(&x)], Tolerance::for_sum(&x));
        assert!(
            c.matches(),
            "n {n}: GPU {gpu:?}, CPU {}: {c:?}",
            cpu::sum(&x)
        );
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn elementwise_ops_match_the_cpu_references() {
    let ctx = context();
    let s = ctx.default_stream();
    for (i, n) in LENGTHS.into_iter().enumerate() {
        let x = cpu::randn(100 + i as u64, n);
        let y = cpu::randn(200 + i as u64, n);
        let (dx, dy) = (upload(&s, &x), upload(&s, &y));
        let tol = Tolerance::ELEMENTWISE;

        let mut d = upload(&s, &y);
        ops::axpy(&s, -1.5, &dx, &mut d).unwrap();
        let c = compare(&download(&s, &d), &cpu::axpy(-1.5, &x, &y), tol);
        assert!(c.matches(), "axpy, n {n}: {c:?}");

        let mut out = s.alloc_zeros::<f32>(n).unwrap();
        ops::add(&s, &dx, &dy, &mut out).unwrap();
        let c = compare(&download(&s, &out), &cpu::add(&x, &y), tol);
        assert!(c.matches(), "add, n {n}: {c:?}");

        ops::fill(&s, &mut out, 3.25).unwrap();
        assert_eq!(download(&s, &out), cpu::fill(3.25, n), "fill, n {n}");

        ops::copy(&s, &dx, &mut out).unwrap();
        assert_eq!(download(&s, &out), cpu::copy(&x), "copy, n {n}");
    }
}

#[test]
#[ignore = "needs a CUDA device"]
fn mismatched_lengths_are_errors_not_launches() {
    let ctx = context();
    let s = ctx.default_stream();
    let a = s.alloc_zeros::<f32>(4).unwrap();
    let mut b = s.alloc_zeros::<f32>(5).unwrap();
    assert!(matches!(
        ops::axpy(&s, 1.0, &a, &mut b),
        Err(Error::Length { op: "axpy", .. })
    ));
    assert!(matches!(
        ops::copy(&s, &a, &mut b),
        Err(Error::Length { .. })
    ));
    assert!(matches!(
        ops::sum(&s, &a, &mut b),
        Err(Error::Length { .. })
    ));
}

#[test]
#[ignore = "needs a CUDA device"]
fn spin_delays_its_stream() {
    let ctx = context();
    let s = ctx.new_stream().unwrap();
    let timing = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
    ops::spin(&s, 1).unwrap(); // warm up
    s.synchronize().unwrap();
    let start = s.record_event(timing).unwrap();
    ops::spin(&s, 20_000_000).unwrap();
    let end = s.record_event(timing).unwrap();
    assert!(!s.query().unwrap(), "still spinning right after the launch");
    let ms = start.elapsed_ms(&end).unwrap();
    // 2e7 cycles: 10-13 ms at 1.5-2 GHz, longer at lower clocks.
    assert!((2.0..2000.0).contains(&ms), "{ms} ms");
}

#[test]
#[ignore = "needs a CUDA device"]
fn kernels_are_loaded_once_per_cuda_context() {
    let (a, b) = (context(), context());
    let ka = Kernels::get(&a).unwrap();
    let kb = Kernels::get(&b).unwrap();
    // Both wrap the device's primary context: one entry.
    assert!(std::sync::Arc::ptr_eq(&ka, &kb));
    assert_eq!(ka.randn.name(), "randn");
    assert_eq!(ka.spin.name(), "spin");
}

/// The launch records of a record-only sanitizer (no engine), from its trace.
fn launches(f: impl FnOnce(&Arc<CudaContext>)) -> Vec<Value> {
    let path = std::env::temp_dir().join(format!("streamsan-ops-{}.jsonl", std::process::id()));
    let ctx = CudaContext::builder()
        .ignore_env()
        .sanitize(true)
        .check(false)
        .trace_path(&path)
        .build(0)
        .unwrap();
    f(&ctx);
    drop(ctx);
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(PathBuf::from(&path));
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["op"] == "launch")
        .collect()
}

/// The argument names of a launch's `reads` or `writes` (an absent list is empty).
fn args(r: &Value, list: &str) -> Vec<String> {
    r[list]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|a| a["arg"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[ignore = "needs a CUDA device"]
fn ops_declare_named_reads_and_writes_at_the_caller() {
    let mut lines = Vec::new();
    let launches = launches(|ctx| {
        let s = ctx.default_stream();
        let mut x = s.alloc_zeros_named::<f32>("x", 1000).unwrap();
        let mut y = s.alloc_zeros_named::<f32>("y", 1000).unwrap();
        let mut out = s.alloc_zeros_named::<f32>("out", 1000).unwrap();
        let mut total = s.alloc_zeros_named::<f32>("total", 1).unwrap();
        lines.push(line!() + 1);
        ops::randn(&s, &mut x, 1).unwrap();
        lines.push(line!() + 1);
        ops::sum(&s, &x, &mut total).unwrap();
        lines.push(line!() + 1);
        ops::axpy(&s, 2.0, &x, &mut y).unwrap();
        lines.push(line!() + 1);
        ops::add(&s, &x, &y, &mut out).unwrap();
        lines.push(line!() + 1);
        ops::fill(&s, &mut out, 1.0).unwrap();
        lines.push(line!() + 1);
        ops::copy(&s, &x, &mut out).unwrap();
        lines.push(line!() + 1);
        ops::spin(&s, 1).unwrap();
        s.synchronize().unwrap();
    });
    let got: Vec<(String, Vec<String>, Vec<String>)> = launches
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                args(r, "reads"),
                args(r, "writes"),
            )
        })
        .collect();
    let want = [
        ("randn", vec![], vec!["out"]),
        ("fill", vec![], vec!["out"]), // sum zeroes its output first
        ("sum", vec!["x"], vec!["out"]),
        ("axpy", vec!["x"], vec!["y"]),
        ("add", vec!["x", "y"], vec!["out"]),
        ("fill", vec![], vec!["out"]),
        ("copy", vec!["src"], vec!["dst"]),
        ("spin", vec![], vec![]),
    ]
    .map(|(n, r, w)| {
        (
            n.to_string(),
            r.into_iter().map(String::from).collect(),
            w.into_iter().map(String::from).collect(),
        )
    });
    assert_eq!(got, want);
    // Each launch is recorded at the line that called the op (sum's two launches at one).
    let at_lines: Vec<u32> = launches
        .iter()
        .map(|r| {
            let at = r["at"].as_str().unwrap();
            assert!(at.starts_with("tests/gpu_kernels.rs:"), "{at}");
            at.split(':').nth(1).unwrap().parse().unwrap()
        })
        .collect();
    let l = &lines;
    assert_eq!(at_lines, [l[0], l[1], l[1], l[2], l[3], l[4], l[5], l[6]]);
}
