//! 1x1 convolutions with bf16 products and f32 accumulation (the `bf16` fast mode).
//!
//! `out[o][p] = start[o][p] + sum_c w[o][c] x[c][p]` in NCHW, where `start` already holds the
//! bias (and residual). Lanes run along pixels: the input is rounded to bf16 and interleaved in
//! channel pairs (`(x[2c][p], x[2c+1][p])` per lane), the weight is rounded once into
//! `(w[o][2c], w[o][2c+1])` pairs that are broadcast. Tiles of 4 output channels x 64 pixels
//! sit in registers; each worker owns a range of pixels, so its slice of the packed input stays
//! in cache while every output channel reads it.

// The bf16 kernels run on x86_64 only (AVX512-BF16, AMX): elsewhere `set_precision` refuses
// bf16 before they are reached, so parts of their packing go unread there.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use crate::kernels::amx::{self, AlignedPairs};

/// Pixels per task of [`conv`] (a multiple of 64): its local output block (`out x 256`
/// floats, 256 KiB at 256 channels) stays in L2.
const PIXELS_PER_TASK: usize = 256;
/// Row stride of [`conv`]'s local block: not a power of two (see there).
const LOCAL_STRIDE: usize = PIXELS_PER_TASK + 16;

/// Input channel pairs per pass over a 64-pixel strip: their packed rows (24 KiB) stay in L1
/// while every output channel reads them. Without the split, the 768-wide hidden of RepViT's
/// last stage (96 KiB per strip) streamed from L2 for each 4 outputs (`cargo bench --bench
/// stages -- channel_mixer`; BENCHMARKS.md, "Kernel notes").
const K_PAIRS: usize = 96;

/// How a [`PackedWeight`]'s products round their inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rounding {
    /// Inputs rounded to bf16 (relative error ~2^-9 per value).
    Bf16,
    /// Inputs split into bf16 head + tail, three products (see [`amx::gemm_split`]): close to
    /// f32 accuracy; only where AMX runs it.
    Split,
}

/// A 1x1 convolution's weight `[out, in]` as bf16 channel pairs, `in` even.
#[derive(Debug)]
pub(crate) struct PackedWeight {
    /// Heads, `[out][stride]` pairs: the `in/2` pairs of each row, then zeros.
    heads: AlignedPairs,
    /// Tails, the same layout ([`Rounding::Split`] only).
    tails: Option<AlignedPairs>,
    /// Pairs per row: `in/2`, rounded up to whole AMX tiles where AMX runs the products (rows
    /// on cache-line boundaries for the tile loads; the AVX-512 kernels read the same rows).
    stride: usize,
    /// Whether AMX runs the whole tiles.
    amx: bool,
    pub(crate) out_ch: usize,
    pub(crate) in_ch: usize,
}

impl PackedWeight {
    /// `None` when the kernel does not apply (odd input width, or no AVX512-BF16), and for
    /// [`Rounding::Split`] without AMX (three AVX-512 bf16 products would be slower than the
    /// exact f32 kernels).
    pub(crate) fn with_rounding(
        weight: &[f32],
        out_ch: usize,
        in_ch: usize,
        rounding: Rounding,
    ) -> Option<Self> {
        if !crate::kernels::cpu::bf16()
            || in_ch == 0
            || !in_ch.is_multiple_of(2)
            || weight.len() != out_ch * in_ch
            || (rounding == Rounding::Split && !amx::available())
        {
            return None;
        }
        let kp = in_ch / 2;
        let tiles = amx::available();
        let stride = if tiles { amx::round_up(kp) } else { kp };
        let split = rounding == Rounding::Split;
        let mut heads = AlignedPairs::zeroed(out_ch * stride);
        let mut tails = split.then(|| AlignedPairs::zeroed(out_ch * stride));
        for (o, row) in weight.chunks_exact(in_ch).enumerate() {
            for (k, p) in row.chunks_exact(2).enumerate() {
                // The head is `bf16_bits` of the value: the pairs of the bf16 rounding.
                let ((h0, t0), (h1, t1)) = (amx::split_bits(p[0]), amx::split_bits(p[1]));
                heads.as_mut_slice()[o * stride + k] = h0 | (h1 << 16);
                if let Some(t) = &mut tails {
                    t.as_mut_slice()[o * stride + k] = t0 | (t1 << 16);
                }
            }
        }
        Some(Self {
            heads,
            tails,
            stride,
            amx: tiles,
            out_ch,
            in_ch,
        })
    }

    /// How the products round their inputs.
    pub(crate) fn rounding(&self) -> Rounding {
        match self.tails {
            Some(_) => Rounding::Split,
            None => Rounding::Bf16,
        }
    }
}

/// `start + w x` for `x` `images x in_ch x hw`, where `start` is the bias per output channel
/// plus `residual` (`images x out_ch x hw`) when given. Each task takes [`PIXELS_PER_TASK`]
/// pixels: it fills a local block (rows [`LOCAL_STRIDE`] apart) with the start values,
/// accumulates the product into it and copies it out. In place, the tiles' rows would lie `hw`
/// floats apart, a power of two at every map size here, which puts all rows of a tile in the
/// same cache sets.
pub(crate) fn conv(
    w: &PackedWeight,
    x: &[f32],
    hw: usize,
    images: usize,
    bias: &[f32],
    residual: Option<&[f32]>,
) -> candle_core::Result<Vec<f32>> {
    let (oc, ic) = (w.out_ch, w.in_ch);
    let len = images * oc * hw;
    if x.len() != images * ic * hw || bias.len() != oc || residual.is_some_and(|r| r.len() != len) {
        candle_core::bail!(
            "bf16 1x1 conv {ic}->{oc}: {} input values, {} biases and {:?} residual values for \
             {images} images of {hw} pixels",
            x.len(),
            bias.len(),
            residual.map(<[f32]>::len)
        );
    }
    let mut out: Vec<f32> = Vec::with_capacity(len);
    if len == 0 {
        return Ok(out);
    }
    let chunks = hw.div_ceil(PIXELS_PER_TASK);
    // Tasks write disjoint pixel ranges of the output rows; its address travels as an integer.
    let out_addr = out.as_mut_ptr() as usize;
    crate::kernels::run_tasks_with(
        (0..images * chunks).collect(),
        crate::kernels::threads(),
        || {
            (
                BlockScratch::new(ic, PIXELS_PER_TASK),
                vec![0f32; oc * LOCAL_STRIDE],
            )
        },
        |(packed, block), task| {
            let (b, p0) = (task / chunks, (task % chunks) * PIXELS_PER_TASK);
            let n = PIXELS_PER_TASK.min(hw - p0);
            for (o, (row, &bo)) in block.chunks_mut(LOCAL_STRIDE).zip(bias).enumerate() {
                let row = &mut row[..n];
                match residual {
                    Some(r) => {
                        let r = &r[(b * oc + o) * hw + p0..][..n];
                        for (v, &rv) in row.iter_mut().zip(r) {
                            *v = rv + bo;
                        }
                    }
                    None => row.fill(bo),
                }
            }
            // SAFETY: image `b`'s input holds `ic x hw` values from `b * ic * hw`; `block` is
            // this worker's `oc x LOCAL_STRIDE` buffer, `n <= LOCAL_STRIDE`.
            unsafe {
                accumulate_block(
                    w,
                    &x[b * ic * hw + p0..],
                    hw,
                    n,
                    packed,
                    block.as_mut_ptr(),
                    LOCAL_STRIDE,
                );
            }
            let dst = (out_addr as *mut f32).wrapping_add(b * oc * hw + p0);
            for (o, row) in block.chunks(LOCAL_STRIDE).enumerate() {
                // SAFETY: pixels `p0..p0 + n` of output row `o` of image `b`: inside the
                // allocation, written by this task only.
                let fresh = unsafe { crate::kernels::uninit_row(dst.add(o * hw), n) };
                for (v, &y) in fresh.iter_mut().zip(&row[..n]) {
                    v.write(y);
                }
            }
        },
    );
    // SAFETY: the tasks cover every (image, pixel range) and each wrote all `oc` rows of its
    // range; `run_tasks_with` returns only after every task ran (a panic propagates first).
    unsafe { out.set_len(len) };
    Ok(out)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{BlockScratch, PackedWeight};
    use crate::kernels::amx;
    use crate::kernels::bf16::{interleave_bf16, interleave_bf16_split};

    /// Packs the first `n` pixels of the `ic` planes (`ld` apart) into channel pairs: `ic/2`
    /// rows of `stride` lanes (`n` rounded up to 16, padded with zeros), then zero rows up to
    /// `rows`; with `tails`, their bf16 tails too.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn pack(
        x: &[f32],
        ld: usize,
        ic: usize,
        n: usize,
        rows: usize,
        heads: &mut [u32],
        mut tails: Option<&mut [u32]>,
    ) {
        let stride = n.div_ceil(16) * 16;
        for cp in 0..rows {
            let head = &mut heads[cp * stride..(cp + 1) * stride];
            let tail = tails
                .as_deref_mut()
                .map(|t| &mut t[cp * stride..(cp + 1) * stride]);
            if cp >= ic / 2 {
                head.fill(0);
                if let Some(t) = tail {
                    t.fill(0);
                }
                continue;
            }
            let a = &x[2 * cp * ld..][..n];
            let b = &x[(2 * cp + 1) * ld..][..n];
            match tail {
                Some(t) => {
                    interleave_bf16_split(a, b, &mut head[..n], &mut t[..n]);
                    t[n..].fill(0);
                }
                None => interleave_bf16(a, Some(b), &mut head[..n]),
            }
            head[n..].fill(0);
        }
    }

    /// `R` output channels x 4 blocks of 16 pixels: weight rows `o0..o0+R` of `pairs` (rows
    /// `stride` pairs apart), packed lanes `q..q+64`, output pixels `q..q+valid` of rows `ld`
    /// apart (`valid <= 64`; the rest is masked).
    #[target_feature(enable = "avx512f,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn block<const R: usize>(
        (pairs, stride_w): (&[u32], usize),
        o0: usize,
        ks: std::ops::Range<usize>,
        packed: &[u32],
        stride: usize,
        q: usize,
        valid: usize,
        out: *mut f32,
        ld: usize,
    ) {
        const C: usize = 4;
        let mut acc = [[_mm512_setzero_ps(); C]; R];
        let masks: [__mmask16; C] = std::array::from_fn(|c| {
            let v = valid.saturating_sub(c * 16).min(16);
            ((1u32 << v) - 1) as u16
        });
        for (r, row) in acc.iter_mut().enumerate() {
            for (c, a) in row.iter_mut().enumerate() {
                *a = _mm512_maskz_loadu_ps(masks[c], out.add((o0 + r) * ld + q + c * 16));
            }
        }
        for k in ks {
            let base = packed.as_ptr().add(k * stride + q);
            let mut b = [_mm512_setzero_si512(); C];
            for (c, bc) in b.iter_mut().enumerate() {
                *bc = _mm512_loadu_si512(base.add(c * 16).cast());
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let a: __m512bh = std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(
                    pairs[(o0 + r) * stride_w + k] as i32,
                ));
                for (c, x) in row.iter_mut().enumerate() {
                    *x = _mm512_dpbf16_ps(*x, a, std::mem::transmute::<__m512i, __m512bh>(b[c]));
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (c, a) in row.iter().enumerate() {
                _mm512_mask_storeu_ps(out.add((o0 + r) * ld + q + c * 16), masks[c], *a);
            }
        }
    }

    /// Output rows `rows` x pixels `pixels` with the AVX-512 blocks: one product of the
    /// weight's `kp` pairs (`weight`: rows and their stride) and `packed` (rows `stride` lanes
    /// apart).
    #[target_feature(enable = "avx512f,avx512bf16")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn region(
        weight: (&[u32], usize),
        kp: usize,
        packed: &[u32],
        stride: usize,
        rows: std::ops::Range<usize>,
        pixels: std::ops::Range<usize>,
        out: *mut f32,
        ld_out: usize,
    ) {
        let mut q = pixels.start;
        while q < pixels.end {
            let valid = (pixels.end - q).min(64);
            let mut k0 = 0;
            while k0 < kp {
                let ks = k0..(k0 + super::K_PAIRS).min(kp);
                // Output channels innermost: the strip's `K_PAIRS` packed rows stay in L1 for
                // all of them.
                let mut o = rows.start;
                while o < rows.end {
                    if rows.end - o >= 4 {
                        block::<4>(weight, o, ks.clone(), packed, stride, q, valid, out, ld_out);
                        o += 4;
                    } else {
                        block::<1>(weight, o, ks.clone(), packed, stride, q, valid, out, ld_out);
                        o += 1;
                    }
                }
                k0 = ks.end;
            }
            q += 64;
        }
    }

    /// `n` pixels of every output channel: the input planes `ld_x` apart, the output rows
    /// `ld_out` apart, both from the block's first pixel. Whole tiles (16 outputs x 16 pixels)
    /// go to AMX where it runs; the rest, or everything without AMX, to the AVX-512 blocks.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(super) unsafe fn task(
        w: &PackedWeight,
        x: &[f32],
        ld_x: usize,
        n: usize,
        scratch: &mut BlockScratch,
        out: *mut f32,
        ld_out: usize,
    ) {
        let (stride, oc, kp) = (n.div_ceil(16) * 16, w.out_ch, w.in_ch / 2);
        let rows = w.stride;
        let split = w.tails.is_some();
        let (heads, mut tails) = scratch.buffers(rows * stride + 64, split);
        pack(x, ld_x, w.in_ch, n, rows, heads, tails.as_deref_mut());
        let (mut m, mut n16) = (0, 0);
        if w.amx {
            (m, n16) = (oc / amx::TILE * amx::TILE, n / amx::TILE * amx::TILE);
            if m > 0 && n16 > 0 {
                let shape = (m, n16, w.stride);
                // SAFETY: the weight holds `oc >= m` rows of `stride` pairs (a multiple of
                // 16), the packed input `stride` rows of `stride >= n16` lanes, `out` `oc` rows
                // `ld_out` apart from the block's first pixel (per the caller); `w.amx` only
                // where AMX runs.
                match (&w.tails, tails.as_deref()) {
                    (Some(wt), Some(xt)) => amx::gemm_split(
                        (w.heads.as_slice().as_ptr(), wt.as_slice().as_ptr()),
                        w.stride,
                        (amx::BMatrix::rows(heads.as_ptr(), stride), xt.as_ptr()),
                        out,
                        ld_out,
                        shape,
                    ),
                    _ => amx::gemm(
                        w.heads.as_slice().as_ptr(),
                        w.stride,
                        amx::BMatrix::rows(heads.as_ptr(), stride),
                        out,
                        ld_out,
                        shape,
                    ),
                }
            } else {
                (m, n16) = (0, 0);
            }
        }
        // Everything the tiles left: the rows past `m` at every pixel, the pixels past `n16`
        // in the first `m` rows.
        let edges = |weight: &[u32], packed: &[u32]| {
            let weight = (weight, w.stride);
            region(weight, kp, packed, stride, m..oc, 0..n, out, ld_out);
            region(weight, kp, packed, stride, 0..m, n16..n, out, ld_out);
        };
        edges(w.heads.as_slice(), heads);
        if let (Some(wt), Some(xt)) = (&w.tails, tails.as_deref()) {
            edges(w.heads.as_slice(), xt);
            edges(wt.as_slice(), heads);
        }
    }
}

/// Per-worker packing space of [`accumulate_block`]: the input's bf16 pairs (and tails), on
/// cache-line boundaries.
#[derive(Debug, Default)]
pub(crate) struct BlockScratch {
    heads: AlignedPairs,
    tails: AlignedPairs,
}

impl BlockScratch {
    /// Room for `in_ch` channels of `n` pixels (grows on demand otherwise).
    pub(crate) fn new(in_ch: usize, n: usize) -> Self {
        let len = amx::round_up(in_ch.div_ceil(2)) * n.div_ceil(16) * 16 + 64;
        Self {
            heads: AlignedPairs::zeroed(len),
            tails: AlignedPairs::default(),
        }
    }

    /// The head buffer (and, for split products, the tail buffer) with at least `len` pairs.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn buffers(&mut self, len: usize, split: bool) -> (&mut [u32], Option<&mut [u32]>) {
        if self.heads.len() < len {
            self.heads = AlignedPairs::zeroed(len);
        }
        if split && self.tails.len() < len {
            self.tails = AlignedPairs::zeroed(len);
        }
        let tails = match split {
            true => Some(&mut self.tails.as_mut_slice()[..len]),
            false => None,
        };
        (&mut self.heads.as_mut_slice()[..len], tails)
    }
}

/// Accumulates `w x` into one block of `n` pixels: `x` holds `w.in_ch` planes `ld_x` apart,
/// `out` `w.out_ch` pre-filled rows `ld_out` apart, both from the block's first pixel.
///
/// # Safety
/// `x` must hold `(in_ch - 1) * ld_x + n` values, and `out .. out + (out_ch - 1) * ld_out + n`
/// be writable by this caller alone; the CPU must have AVX512-BF16 (true wherever a
/// [`PackedWeight`] exists).
pub(crate) unsafe fn accumulate_block(
    w: &PackedWeight,
    x: &[f32],
    ld_x: usize,
    n: usize,
    scratch: &mut BlockScratch,
    out: *mut f32,
    ld_out: usize,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: per the caller.
    unsafe {
        x86::task(w, x, ld_x, n, scratch, out, ld_out);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (w, x, ld_x, n, scratch, out, ld_out);
}
