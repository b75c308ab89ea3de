//! IEEE 754 half precision (binary16), the index's storage format for vector values.
//!
//! Why half: a 384-d row is 768 bytes instead of 1,536, which was most of the server's resident
//! memory per intent, and a search reads half the bytes. The values stored are components of
//! unit vectors, so no row can overflow (|x| <= 1); each keeps 11 significant bits (relative
//! error at most 2^-11 once rounded to nearest, ties to even), and components under 2^-14 lose
//! relative precision but never more than 2^-25 absolute. So a stored row `v'` of a unit `v`
//! scores a unit query `q` within `|q.(v' - v)| <= 2^-11 * |q| |v| + 2^-25 * sum |q_i|`, under
//! 5e-4 (Cauchy-Schwarz) and in practice about 1e-5 at 384 dims, since the rounding errors of
//! the components mostly cancel (`MAX_SCORE_ERROR`).
//!
//! The conversion is written out rather than taken from the CPU (F16C's `vcvtps2ph`) so that
//! every machine stores the same bits for the same vector; widening is exact either way.

/// Bound on how far a score against a stored (rounded) row can be from the exact f32 cosine,
/// for unit vectors of up to `MAX_DIM` values: 2^-11 relative per component, summed.
pub const MAX_SCORE_ERROR: f32 = 5.0e-4;

/// `x` rounded to the nearest half (ties to even). Out-of-range values saturate to infinity
/// and NaN stays NaN (the index never stores either: rows are finite unit vectors).
pub fn f16_from_f32(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let mantissa = bits & 0x007f_ffff;
    if exp == 0xff {
        // infinity, or NaN kept quiet with a mantissa bit set
        return sign | 0x7c00 | if mantissa != 0 { 0x0200 } else { 0 };
    }
    let half_exp = exp - 127 + 15;
    if half_exp >= 0x1f {
        return sign | 0x7c00; // too large: infinity
    }
    if half_exp <= 0 {
        // subnormal half (or zero): shift the mantissa with its implicit bit into place
        if half_exp < -10 {
            return sign; // below half the smallest subnormal: rounds to zero
        }
        let full = mantissa | 0x0080_0000;
        let shift = (14 - half_exp) as u32; // 14..=24
        let kept = full >> shift;
        let rest = full & ((1 << shift) - 1);
        let halfway = 1 << (shift - 1);
        let round_up = rest > halfway || (rest == halfway && kept & 1 == 1);
        return sign | (kept + u32::from(round_up)) as u16;
    }
    let kept = mantissa >> 13;
    let rest = mantissa & 0x1fff;
    let round_up = rest > 0x1000 || (rest == 0x1000 && kept & 1 == 1);
    // A carry out of the mantissa bumps the exponent, which is the right result (up to
    // infinity for the largest values).
    let out = ((half_exp as u32) << 10 | kept) + u32::from(round_up);
    sign | out as u16
}

/// The half `h` as f32 (exact: every half is an f32).
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1f);
    let mantissa = u32::from(h & 0x03ff);
    let bits = match (exp, mantissa) {
        (0, 0) => sign,
        (0, _) => {
            // subnormal: value = mantissa * 2^-24, exact in f32
            let value = mantissa as f32 * (1.0 / 16_777_216.0);
            return if sign != 0 { -value } else { value };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, _) => sign | 0x7fc0_0000 | (mantissa << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (mantissa << 13),
    };
    f32::from_bits(bits)
}

/// Whether `h` is a finite half (not infinity or NaN).
pub fn is_finite(h: u16) -> bool {
    h & 0x7c00 != 0x7c00
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round to nearest even by brute force: the closer of the two halves around `x`.
    fn reference(x: f32) -> u16 {
        let mut best = 0u16;
        let mut best_err = f64::INFINITY;
        for h in 0..=u16::MAX {
            if !is_finite(h) {
                continue;
            }
            let err = (f64::from(f16_to_f32(h)) - f64::from(x)).abs();
            let tie_to_even = err == best_err && h & 1 == 0;
            if err < best_err || tie_to_even {
                best = h;
                best_err = err;
            }
        }
        // -0.0 and 0.0 score the same: keep the sign of the input
        if f16_to_f32(best) == 0.0 {
            return if x.is_sign_negative() { 0x8000 } else { 0 };
        }
        best
    }

    #[test]
    fn every_half_widens_and_narrows_back_to_itself() {
        for h in 0..=u16::MAX {
            let x = f16_to_f32(h);
            if is_finite(h) {
                assert_eq!(f16_from_f32(x), h, "{h:#06x}");
            } else if x.is_nan() {
                assert!(f16_to_f32(f16_from_f32(x)).is_nan());
            } else {
                assert_eq!(f16_from_f32(x), h);
            }
        }
    }

    #[test]
    fn rounding_matches_the_nearest_half_ties_to_even() {
        // exact halfway points and their neighbours, in the normal and subnormal ranges
        let mut inputs = vec![
            1.0f32 + 2f32.powi(-11),
            1.0 + 3.0 * 2f32.powi(-11),
            2f32.powi(-25),
        ];
        inputs.push(3.0 * 2f32.powi(-25));
        inputs.push(2f32.powi(-26));
        for i in 0..2000 {
            let x = ((i as f32) * 0.618_034).sin() * 2f32.powi(-(i % 30));
            inputs.push(x);
            inputs.push(f32::from_bits(x.to_bits() + 1));
        }
        for x in inputs {
            assert_eq!(f16_from_f32(x), reference(x), "{x:e}");
        }
    }

    #[test]
    fn f16c_rounds_the_same_way() {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("f16c") {
            for i in 0..100_000u32 {
                let x =
                    f32::from_bits(0x3000_0000 + i * 7919) * if i % 2 == 0 { 1.0 } else { -1.0 };
                // SAFETY: the feature was detected above.
                let hw = unsafe { cvtss_sh(x) };
                assert_eq!(f16_from_f32(x), hw, "{x:e}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "f16c")]
    unsafe fn cvtss_sh(x: f32) -> u16 {
        use std::arch::x86_64::*;
        let packed = _mm_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT }>(_mm_set1_ps(x));
        _mm_extract_epi16::<0>(packed) as u16
    }

    #[test]
    fn special_values() {
        assert_eq!(f16_from_f32(0.0), 0);
        assert_eq!(f16_from_f32(-0.0), 0x8000);
        assert_eq!(f16_from_f32(1.0), 0x3c00);
        assert_eq!(f16_from_f32(-2.0), 0xc000);
        assert_eq!(f16_from_f32(65504.0), 0x7bff);
        assert_eq!(f16_from_f32(1e6), 0x7c00);
        assert!(!is_finite(f16_from_f32(f32::NAN)));
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x8001), -(2f32.powi(-24)));
    }
}
