//! CPU references of the ops, the numbers the GPU results are compared with. Each takes and
//! returns plain slices and vectors; none depends on a launch shape.

/// `randn(seed)` of length `n`: the same numbers as the `randn` kernel (see
/// `kernels/random.cu`): output `i` depends only on `(seed, i)`.
pub fn randn(seed: u64, n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n + 3);
    for g in 0..n.div_ceil(4) {
        out.extend_from_slice(&crate::philox::normal_group(seed, g as u64));
    }
    out.truncate(n);
    out
}

/// The sum, accumulated in f64 (the GPU's f32 sum differs from it by rounding only).
pub fn sum(x: &[f32]) -> f32 {
    x.iter().map(|&v| f64::from(v)).sum::<f64>() as f32
}

/// The sum of absolute values: the scale of a sum's rounding error.
pub fn abs_sum(x: &[f32]) -> f32 {
    x.iter().map(|&v| f64::from(v.abs())).sum::<f64>() as f32
}

/// `a * x + y`.
pub fn axpy(a: f32, x: &[f32], y: &[f32]) -> Vec<f32> {
    assert_eq!(x.len(), y.len(), "axpy: x and y differ in length");
    x.iter().zip(y).map(|(&x, &y)| a * x + y).collect()
}

/// `x + y`.
pub fn add(x: &[f32], y: &[f32]) -> Vec<f32> {
    assert_eq!(x.len(), y.len(), "add: x and y differ in length");
    x.iter().zip(y).map(|(&x, &y)| x + y).collect()
}

/// `n` copies of `value`.
pub fn fill(value: f32, n: usize) -> Vec<f32> {
    vec![value; n]
}

/// A copy.
pub fn copy(x: &[f32]) -> Vec<f32> {
    x.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn randn_depends_only_on_seed_and_index() {
        let long = randn(7, 1003);
        let short = randn(7, 10);
        assert_eq!(&long[..10], &short[..]);
        assert_ne!(randn(8, 10), short);
        assert_eq!(long.len(), 1003);
    }

    #[test]
    fn randn_is_standard_normal() {
        let x = randn(42, 1 << 20);
        let n = x.len() as f64;
        let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = x
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        // Standard errors: 1/sqrt(n) ~ 0.001 for the mean, sqrt(2/n) ~ 0.0014 for the variance.
        assert!(mean.abs() < 0.005, "mean {mean}");
        assert!((var.sqrt() - 1.0).abs() < 0.005, "std {}", var.sqrt());
        let within_one = x.iter().filter(|v| v.abs() < 1.0).count() as f64 / n;
        assert!(
            (within_one - 0.6827).abs() < 0.005,
            "P(|z| < 1) = {within_one}"
        );
        assert!(x.iter().all(|v| v.is_finite() && v.abs() < 6.0));
    }

    #[test]
    fn elementwise_references() {
        assert_eq!(axpy(2.0, &[1.0, 2.0], &[0.5, 0.5]), [2.5, 4.5]);
        assert_eq!(add(&[1.0, 2.0], &[3.0, 4.0]), [4.0, 6.0]);
        assert_eq!(fill(1.5, 3), [1.5; 3]);
        assert_eq!(copy(&[1.0, -1.0]), [1.0, -1.0]);
        assert_eq!(sum(&[1.0, 2.0, -0.5]), 2.5);
        assert_eq!(abs_sum(&[1.0, -2.0]), 3.0);
    }
}
