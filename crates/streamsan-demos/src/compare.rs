//! Whether a GPU result agrees with its CPU reference: numpy's `allclose` rule, elementwise
//! `|gpu - reference| <= atol + rtol * |reference|`, with NaN never close and lengths equal.
//! The tolerances say how much rounding each op may add; anything beyond is a wrong number.

/// Absolute and relative tolerance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub atol: f32,
    pub rtol: f32,
}

impl Tolerance {
    /// For element-wise results (a few ulp, and transcendental functions' few ulp).
    pub const ELEMENTWISE: Tolerance = Tolerance {
        atol: 1e-5,
        rtol: 1e-5,
    };

    /// For a sum of `x`: the f32 sum's rounding grows with `sum |x_i|`, not with the result
    /// (which may be near 0).
    pub fn for_sum(x: &[f32]) -> Tolerance {
        Tolerance {
            atol: 1e-6 * crate::cpu::abs_sum(x) + 1e-4,
            rtol: 1e-5,
        }
    }

    /// Whether one value is close to its reference.
    pub fn close(&self, gpu: f32, reference: f32) -> bool {
        (gpu - reference).abs() <= self.atol + self.rtol * reference.abs()
    }
}

/// How a result compares with its reference.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    /// Elements compared (the shorter length).
    pub len: usize,
    /// Elements not close (NaN counts), plus the difference in length.
    pub mismatches: usize,
    /// The first element not close: index, GPU value, reference value.
    pub first_mismatch: Option<(usize, f32, f32)>,
    /// The largest `|gpu - reference|` over the elements (NaN if any is NaN).
    pub max_abs_error: f32,
}

impl Comparison {
    /// True when every element is close and the lengths agree.
    pub fn matches(&self) -> bool {
        self.mismatches == 0
    }
}

/// Compares elementwise.
pub fn compare(gpu: &[f32], reference: &[f32], tol: Tolerance) -> Comparison {
    let len = gpu.len().min(reference.len());
    let mut c = Comparison {
        len,
        mismatches: gpu.len().abs_diff(reference.len()),
        first_mismatch: None,
        max_abs_error: 0.0,
    };
    for (i, (&g, &r)) in gpu.iter().zip(reference).enumerate() {
        let err = (g - r).abs();
        c.max_abs_error = if err.is_nan() || c.max_abs_error.is_nan() {
            f32::NAN
        } else {
            c.max_abs_error.max(err)
        };
        if !tol.close(g, r) {
            c.mismatches += 1;
            c.first_mismatch.get_or_insert((i, g, r));
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_follows_allclose_and_rejects_nan() {
        let t = Tolerance {
            atol: 0.1,
            rtol: 0.01,
        };
        assert!(t.close(10.19, 10.0));
        assert!(!t.close(10.21, 10.0));
        assert!(t.close(-0.09, 0.0));
        assert!(!t.close(f32::NAN, 0.0));
        assert!(!t.close(0.0, f32::NAN));
    }

    #[test]
    fn comparison_counts_and_locates_mismatches() {
        let t = Tolerance::ELEMENTWISE;
        let c = compare(&[1.0, 2.0, f32::NAN, 4.0], &[1.0, 2.5, 3.0, 4.0], t);
        assert_eq!(c.len, 4);
        assert_eq!(c.mismatches, 2);
        assert_eq!(c.first_mismatch, Some((1, 2.0, 2.5)));
        assert!(c.max_abs_error.is_nan());
        assert!(!c.matches());
        let ok = compare(&[1.0, 2.0], &[1.0, 2.0000001], t);
        assert!(ok.matches(), "{ok:?}");
        assert_eq!(compare(&[1.0], &[1.0, 2.0], t).mismatches, 1);
    }

    #[test]
    fn sum_tolerance_scales_with_the_magnitudes() {
        let x = vec![1.0f32; 1000];
        let t = Tolerance::for_sum(&x);
        assert!(t.close(1000.0005, 1000.0));
        assert!(!t.close(0.0, 1000.0));
    }
}
