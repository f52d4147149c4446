//! bf16 conversions shared by the bf16 fast mode's kernels: round-to-nearest-even bits of one
//! value, and whole rows converted or interleaved into the pairs `vdpbf16ps` reads (AVX512-BF16
//! `vcvtne2ps2bf16`, the same rounding).

// The bf16 kernels run on x86_64 only (AVX512-BF16, AMX): elsewhere `set_precision` refuses
// bf16 before they are reached, so parts of their packing go unread there.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

/// Round-to-nearest-even bf16 bits of `x`.
pub(crate) fn bf16_bits(x: f32) -> u32 {
    u32::from(half::bf16::from_f32(x).to_bits())
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{interleave_bf16, interleave_bf16_split, to_bf16_pairs};

/// Visits the register tiles of a `rows x blocks` product, blocks outer and rows inner (a group
/// of blocks stays in L1 while every row passes over it): `f(r, four_rows, b, four_blocks)` for
/// tiles of 4 rows x 4 blocks where they fit, single rows and blocks at the edges.
#[inline(always)]
pub(crate) fn for_each_tile(
    rows: std::ops::Range<usize>,
    blocks: usize,
    mut f: impl FnMut(usize, bool, usize, bool),
) {
    let mut b = 0;
    while b < blocks {
        let four_blocks = blocks - b >= 4;
        let mut r = rows.start;
        while r < rows.end {
            let four_rows = rows.end - r >= 4;
            f(r, four_rows, b, four_blocks);
            r += if four_rows { 4 } else { 1 };
        }
        b += if four_blocks { 4 } else { 1 };
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `n` f32 at `src` -> `n` bf16 at `dst` (as `ceil(n / 2)` pairs, an odd last value paired
    /// with a zero); the tail past the last multiple of 32 is converted one pair at a time with
    /// the same rounding.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(crate) unsafe fn to_bf16_pairs(src: &[f32], dst: &mut [u32]) {
        let n = src.len();
        let mut i = 0;
        while i + 32 <= n {
            let lo = _mm512_loadu_ps(src.as_ptr().add(i));
            let hi = _mm512_loadu_ps(src.as_ptr().add(i + 16));
            let packed = _mm512_cvtne2ps_pbh(hi, lo);
            _mm512_storeu_si512(
                dst.as_mut_ptr().add(i / 2).cast(),
                std::mem::transmute::<__m512bh, __m512i>(packed),
            );
            i += 32;
        }
        while i < n {
            let b = src.get(i + 1).copied().unwrap_or(0.0);
            dst[i / 2] = super::bf16_bits(src[i]) | (super::bf16_bits(b) << 16);
            i += 2;
        }
    }

    /// The word order that turns `cvtne2ps2bf16(b, a)` (16 bf16 of `a`, then 16 of `b`) into
    /// pairs `(a[i], b[i])`.
    #[target_feature(enable = "avx512f,avx512bw")]
    fn pair_lanes() -> __m512i {
        _mm512_set_epi16(
            31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20,
            4, 19, 3, 18, 2, 17, 1, 16, 0,
        )
    }

    /// The first `valid` (<= 16) of 16 lanes.
    fn first_lanes(valid: usize) -> __mmask16 {
        if valid >= 16 {
            0xffff
        } else {
            (1u16 << valid) - 1
        }
    }

    /// [`interleave_bf16`] of `a` and `b` into `heads`, and of what the rounding left
    /// (`a - head`, `b - head`, rounded to bf16 in turn) into `tails`: the operands of the split
    /// (f32-accurate) products. Same length for all four.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(crate) unsafe fn interleave_bf16_split(
        a: &[f32],
        b: &[f32],
        heads: &mut [u32],
        tails: &mut [u32],
    ) {
        let idx = pair_lanes();
        let n = heads.len().min(tails.len()).min(a.len()).min(b.len());
        let mut i = 0;
        while i < n {
            let mask = first_lanes((n - i).min(16));
            let va = _mm512_maskz_loadu_ps(mask, a.as_ptr().add(i));
            let vb = _mm512_maskz_loadu_ps(mask, b.as_ptr().add(i));
            let (ha, hb) = (_mm512_cvtneps_pbh(va), _mm512_cvtneps_pbh(vb));
            let ta = _mm512_sub_ps(va, _mm512_cvtpbh_ps(ha));
            let tb = _mm512_sub_ps(vb, _mm512_cvtpbh_ps(hb));
            let head = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(vb, va));
            let tail = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(tb, ta));
            let dst = heads.as_mut_ptr().add(i).cast();
            _mm512_mask_storeu_epi32(dst, mask, _mm512_permutexvar_epi16(idx, head));
            let dst = tails.as_mut_ptr().add(i).cast();
            _mm512_mask_storeu_epi32(dst, mask, _mm512_permutexvar_epi16(idx, tail));
            i += 16;
        }
    }

    /// `out[i] = bf16(a[i]) | bf16(b[i]) << 16` (`b` absent: zeros), 16 lanes at a time.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(crate) unsafe fn interleave_bf16(a: &[f32], b: Option<&[f32]>, out: &mut [u32]) {
        // Lanes (a0, b0, a1, b1, ...) from the two converted 16-lane halves.
        let idx = pair_lanes();
        let n = out.len().min(a.len());
        let mut i = 0;
        while i < n {
            let mask = first_lanes((n - i).min(16));
            let va = _mm512_maskz_loadu_ps(mask, a.as_ptr().add(i));
            let vb = match b {
                Some(b) => _mm512_maskz_loadu_ps(mask, b.as_ptr().add(i)),
                None => _mm512_setzero_ps(),
            };
            let halves = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(vb, va));
            let pairs = _mm512_permutexvar_epi16(idx, halves);
            _mm512_mask_storeu_epi32(out.as_mut_ptr().add(i).cast(), mask, pairs);
            i += 16;
        }
    }
}
