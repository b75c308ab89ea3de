//! Dot-product kernels. Vectors are normalized on insert, so cosine similarity is a plain dot
//! product and the graph distance is `1 - dot`. Stored vectors are IEEE half precision
//! (`half.rs`); a query stays f32, so a score is the f32 query against the stored row widened
//! exactly to f32. The kernel is chosen once per index at runtime: AVX2+FMA+F16C when the CPU
//! has it (checked with `is_x86_feature_detected!`), a portable scalar loop otherwise, so one
//! binary runs everywhere and still uses the wide units where present.
//!
//! Two shapes, f32 x f16 (a query against a row) and f16 x f16 (two rows, while linking). Both
//! widen the f16 side exactly and then run the same operations in the same order, so
//! `dot_rows(a, b)` is bit for bit `dot(widen(a), b)`: a node scored as a query (on insert) and
//! as a row (while re-linking) gets the same distance.

use super::half::f16_to_f32;

/// Query (f32) against a stored row (f16 bits), `len` values each.
type RawDot = unsafe fn(*const f32, *const u16, usize) -> f32;
/// Two stored rows (f16 bits), `len` values each.
type RawDotRows = unsafe fn(*const u16, *const u16, usize) -> f32;

/// A runtime-selected dot-product kernel.
#[derive(Clone, Copy)]
pub struct Kernel {
    raw: RawDot,
    raw_rows: RawDotRows,
    name: &'static str,
}

impl Kernel {
    /// The fastest kernel this CPU supports.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c")
            {
                return Kernel {
                    raw: dot_avx2_raw,
                    raw_rows: dot_rows_avx2_raw,
                    name: "avx2+fma+f16c",
                };
            }
        }
        Self::scalar()
    }

    /// The portable fallback (also used by tests to cross-check the SIMD kernel).
    pub fn scalar() -> Self {
        Kernel {
            raw: dot_scalar_raw,
            raw_rows: dot_rows_scalar_raw,
            name: "scalar",
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Dot product of a query and a stored row of the same length.
    #[inline]
    pub fn dot(&self, query: &[f32], row: &[u16]) -> f32 {
        assert_eq!(
            query.len(),
            row.len(),
            "dot over slices of different length"
        );
        // SAFETY: both pointers cover `query.len()` values, and `raw` is either the scalar
        // kernel or the AVX2 one, which `detect` only picks after confirming the CPU features.
        unsafe { (self.raw)(query.as_ptr(), row.as_ptr(), query.len()) }
    }

    /// Dot product of two stored rows of the same length (`dot(widen(a), b)`, bit for bit).
    #[inline]
    pub fn dot_rows(&self, a: &[u16], b: &[u16]) -> f32 {
        assert_eq!(a.len(), b.len(), "dot over slices of different length");
        // SAFETY: as in `dot`.
        unsafe { (self.raw_rows)(a.as_ptr(), b.as_ptr(), a.len()) }
    }

    /// Graph distance from a query to a row: smaller is closer, about 0 for identical.
    #[inline]
    pub fn distance(&self, query: &[f32], row: &[u16]) -> f32 {
        1.0 - self.dot(query, row)
    }

    /// Graph distance between two stored rows.
    #[inline]
    pub fn distance_rows(&self, a: &[u16], b: &[u16]) -> f32 {
        1.0 - self.dot_rows(a, b)
    }
}

/// Eight independent accumulators let the compiler vectorize without reassociating one sum.
/// `a(i)` is the i-th value of the left operand as f32.
#[inline(always)]
fn dot_scalar(a: impl Fn(usize) -> f32, b: &[u16]) -> f32 {
    let len = b.len();
    let mut acc = [0.0f32; 8];
    let chunks = len / 8;
    for c in 0..chunks {
        for (lane, slot) in acc.iter_mut().enumerate() {
            let i = c * 8 + lane;
            *slot += a(i) * f16_to_f32(b[i]);
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for (i, &h) in b.iter().enumerate().skip(chunks * 8) {
        sum += a(i) * f16_to_f32(h);
    }
    sum
}

unsafe fn dot_scalar_raw(a: *const f32, b: *const u16, len: usize) -> f32 {
    // SAFETY: the caller guarantees both pointers cover `len` values.
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(a, len),
            std::slice::from_raw_parts(b, len),
        )
    };
    dot_scalar(|i| a[i], b)
}

unsafe fn dot_rows_scalar_raw(a: *const u16, b: *const u16, len: usize) -> f32 {
    // SAFETY: the caller guarantees both pointers cover `len` values.
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(a, len),
            std::slice::from_raw_parts(b, len),
        )
    };
    dot_scalar(|i| f16_to_f32(a[i]), b)
}

#[cfg(target_arch = "x86_64")]
unsafe fn dot_avx2_raw(a: *const f32, b: *const u16, len: usize) -> f32 {
    // SAFETY: only installed by `Kernel::detect` after the feature check; pointers per caller.
    unsafe { dot_avx2(a, b, len) }
}

#[cfg(target_arch = "x86_64")]
unsafe fn dot_rows_avx2_raw(a: *const u16, b: *const u16, len: usize) -> f32 {
    // SAFETY: as above.
    unsafe { dot_rows_avx2(a, b, len) }
}

/// Eight f16 values at `p` widened to f32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn widen8(p: *const u16) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // SAFETY: the caller guarantees 8 readable values at `p` (an unaligned load).
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast::<__m128i>())) }
}

/// Four 8-wide FMA accumulators (32 values per step) hide the FMA latency on 384..1024 dims.
/// `load_a(i)` loads 8 values of the left operand from index i, `scalar_a(i)` one of them.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn dot_avx2_with(
    load_a: impl Fn(usize) -> std::arch::x86_64::__m256,
    scalar_a: impl Fn(usize) -> f32,
    b: *const u16,
    len: usize,
) -> f32 {
    use std::arch::x86_64::*;
    // SAFETY (whole body): every load reads inside `[0, len)` of both operands.
    unsafe {
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut acc2 = _mm256_setzero_ps();
        let mut acc3 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 32 <= len {
            acc0 = _mm256_fmadd_ps(load_a(i), widen8(b.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(load_a(i + 8), widen8(b.add(i + 8)), acc1);
            acc2 = _mm256_fmadd_ps(load_a(i + 16), widen8(b.add(i + 16)), acc2);
            acc3 = _mm256_fmadd_ps(load_a(i + 24), widen8(b.add(i + 24)), acc3);
            i += 32;
        }
        while i + 8 <= len {
            acc0 = _mm256_fmadd_ps(load_a(i), widen8(b.add(i)), acc0);
            i += 8;
        }
        let acc = _mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3));
        let half = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        let quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
        let one = _mm_add_ss(quarter, _mm_shuffle_ps(quarter, quarter, 1));
        let mut sum = _mm_cvtss_f32(one);
        while i < len {
            sum += scalar_a(i) * f16_to_f32(*b.add(i));
            i += 1;
        }
        sum
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_avx2(a: *const f32, b: *const u16, len: usize) -> f32 {
    use std::arch::x86_64::_mm256_loadu_ps;
    // SAFETY: the kernel loads only inside `[0, len)`.
    unsafe { dot_avx2_with(|i| _mm256_loadu_ps(a.add(i)), |i| *a.add(i), b, len) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_rows_avx2(a: *const u16, b: *const u16, len: usize) -> f32 {
    // SAFETY: the kernel loads only inside `[0, len)`.
    unsafe { dot_avx2_with(|i| widen8(a.add(i)), |i| f16_to_f32(*a.add(i)), b, len) }
}

/// Leading cache lines of a row to prefetch: 8. Measured on 20k x 384 f32 rows (search CPU
/// time vs hnswlib): 4 lines and whole vectors (24 lines, which floods the line-fill buffers)
/// were both 5 to 15% slower than 8; the hardware prefetcher streams the rest. An f16 row of
/// 384 values is 12 lines.
const PREFETCH_LINES: usize = 8;

/// Ask the cache for the start of a vector we are about to score. Scoring is bound by memory,
/// not arithmetic (a 384-d vector is 24 cache lines at a random address), so requesting it a
/// couple of candidates ahead hides much of the latency. A hint only: results never change.
#[inline(always)]
pub fn prefetch(data: &[u16]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        const VALUES_PER_LINE: usize = 32;
        let end = data.len().min(PREFETCH_LINES * VALUES_PER_LINE);
        let mut offset = 0;
        while offset < end {
            // SAFETY: prefetch never faults, and the address stays inside the live slice.
            unsafe { _mm_prefetch(data.as_ptr().add(offset) as *const i8, _MM_HINT_T0) };
            offset += VALUES_PER_LINE;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Prefetch hint for a small metadata slice (a neighbour list).
#[inline(always)]
pub fn prefetch_u32(data: &[u32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetch never faults; the pointer comes from a live slice.
        unsafe { _mm_prefetch(data.as_ptr() as *const i8, _MM_HINT_T0) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Scale `v` to unit length in place; `None` when it has no direction (zero or non-finite).
pub fn normalize(v: &mut [f32]) -> Option<()> {
    if v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let norm = v
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return None;
    }
    let inv = (1.0 / norm) as f32;
    for x in v.iter_mut() {
        *x *= inv;
    }
    if v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::index::half::f16_from_f32;

    fn naive(a: &[f32], b: &[u16]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * f16_to_f32(*y)).sum()
    }

    fn rows(len: usize) -> (Vec<f32>, Vec<u16>, Vec<u16>) {
        let a: Vec<f32> = (0..len)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0)
            .collect();
        let b: Vec<u16> = (0..len)
            .map(|i| f16_from_f32(((i * 5 % 11) as f32 - 5.0) / 3.0))
            .collect();
        let a_half: Vec<u16> = a.iter().map(|&x| f16_from_f32(x)).collect();
        (a, a_half, b)
    }

    #[test]
    fn kernels_agree_with_naive_on_every_length() {
        let detected = Kernel::detect();
        let scalar = Kernel::scalar();
        for len in 0..200 {
            let (a, _, b) = rows(len);
            let want = naive(&a, &b);
            for k in [detected, scalar] {
                let got = k.dot(&a, &b);
                assert!(
                    (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{len} {}",
                    k.name()
                );
            }
        }
    }

    #[test]
    fn a_row_scores_as_its_widened_query_bit_for_bit() {
        for k in [Kernel::detect(), Kernel::scalar()] {
            for len in [0, 1, 7, 8, 31, 32, 33, 384, 385] {
                let (_, a_half, b) = rows(len);
                let widened: Vec<f32> = a_half.iter().map(|&h| f16_to_f32(h)).collect();
                assert_eq!(
                    k.dot_rows(&a_half, &b).to_bits(),
                    k.dot(&widened, &b).to_bits(),
                    "{len} {}",
                    k.name()
                );
            }
        }
    }

    #[test]
    fn normalize_rejects_directionless_vectors() {
        assert!(normalize(&mut [0.0, 0.0]).is_none());
        assert!(normalize(&mut [f32::NAN, 1.0]).is_none());
        assert!(normalize(&mut [f32::INFINITY, 1.0]).is_none());
        let mut v = [3.0, 4.0];
        normalize(&mut v).unwrap();
        assert!((v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6);
    }

    #[test]
    fn normalize_handles_huge_finite_values() {
        let mut v = [f32::MAX, f32::MAX];
        normalize(&mut v).unwrap();
        assert!((v[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
    }
}
