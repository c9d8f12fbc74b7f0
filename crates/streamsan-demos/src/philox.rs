//! Philox4x32-10 and Box-Muller on the CPU, step for step as `kernels/random.cu` does them, so
//! [`crate::cpu::randn`] reproduces the GPU's numbers (the integer part exactly, the floats to a
//! few ulp: the GPU's `logf` / `cosf` / `sinf` are not correctly rounded).

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

fn round(c: [u32; 4], k: [u32; 2]) -> [u32; 4] {
    let (hi0, lo0) = mulhilo(M0, c[0]);
    let (hi1, lo1) = mulhilo(M1, c[2]);
    [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
}

/// Ten rounds, the key bumped between rounds (Random123's `philox4x32_R(10, ctr, key)`).
pub(crate) fn philox4x32_10(mut c: [u32; 4], mut k: [u32; 2]) -> [u32; 4] {
    for _ in 0..9 {
        c = round(c, k);
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    round(c, k)
}

/// The top 24 bits as a float in (0, 1] (exact).
fn open_unit(x: u32) -> f32 {
    ((x >> 8) + 1) as f32 * (1.0 / 16_777_216.0)
}

/// The top 24 bits as a float in [0, 1) (exact).
fn closed_unit(x: u32) -> f32 {
    (x >> 8) as f32 * (1.0 / 16_777_216.0)
}

fn box_muller(a: u32, b: u32) -> (f32, f32) {
    let r = (-2.0f32 * open_unit(a).ln()).sqrt();
    let t = std::f32::consts::TAU * closed_unit(b);
    (r * t.cos(), r * t.sin())
}

/// Outputs `4 g .. 4 g + 3` of `randn(seed)`.
pub(crate) fn normal_group(seed: u64, g: u64) -> [f32; 4] {
    let r = philox4x32_10(
        [g as u32, (g >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    );
    let (z0, z1) = box_muller(r[0], r[1]);
    let (z2, z3) = box_muller(r[2], r[3]);
    [z0, z1, z2, z3]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123 `tests/kat_vectors`, the three `philox4x32 10` lines (counter, key, result).
    #[test]
    fn known_answers() {
        let kat = [
            (
                [0u32; 4],
                [0u32; 2],
                [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
            ),
            (
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (ctr, key, want) in kat {
            assert_eq!(philox4x32_10(ctr, key), want, "ctr {ctr:x?} key {key:x?}");
        }
    }

    #[test]
    fn uniforms_stay_in_range_and_are_exact() {
        assert_eq!(open_unit(0), 1.0 / 16_777_216.0);
        assert_eq!(open_unit(u32::MAX), 1.0);
        assert_eq!(closed_unit(0), 0.0);
        assert_eq!(closed_unit(u32::MAX), 1.0 - 1.0 / 16_777_216.0);
        // u = 1 gives radius 0: both outputs exactly 0.
        assert_eq!(box_muller(u32::MAX, 12345), (0.0, 0.0));
    }
}
