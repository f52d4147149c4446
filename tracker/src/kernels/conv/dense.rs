//! Dense `k x k` convolutions on the CPU (f32): im2col + products over chunks of output pixels
//! with the bias, and optionally a channels-first LayerNorm and GELU, applied while each chunk is
//! in cache; beside candle's `conv2d` form it must match ([`dense_conv_reference`]).

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

use super::pointwise_bf16::PackedWeight;
use crate::kernels::gemm::{packed_a_unchecked, PackedA, PackedB, NR};
use crate::kernels::norm::{ColumnScratch, HostNorm};
use crate::kernels::{f32_slice, run_tasks_with, threads};

/// A dense conv's parameters on the host: `weight` `[out, in * k * k]` in row blocks for the
/// exact products, `bias` `[out]`, the geometry, and the weight as bf16 pairs when the bf16 mode
/// is on.
#[derive(Clone, Copy)]
pub(crate) struct DenseConv<'a> {
    pub weight: &'a PackedA,
    pub bias: &'a [f32],
    pub in_ch: usize,
    pub k: usize,
    pub stride: usize,
    pub padding: usize,
    pub bf16: Option<&'a PackedWeight>,
}

/// `epilogue(conv(x) + b)` for an NCHW f32 CPU `x`.
pub(crate) fn dense_conv(
    x: &Tensor,
    conv: DenseConv,
    epilogue: DenseEpilogue,
) -> candle_core::Result<Tensor> {
    x.contiguous()?
        .apply_op1_no_bwd(&DenseOp { conv, epilogue })
}

/// `conv2d(x) + b` through candle (`weight` `[out, in, k, k]`, `bias` `[1, out, 1, 1]`): the
/// form [`dense_conv`] must match, and the path on other devices.
pub(crate) fn dense_conv_reference(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    stride: usize,
    padding: usize,
) -> candle_core::Result<Tensor> {
    x.conv2d(weight, padding, stride, 1, 1)?.broadcast_add(bias)
}

struct DenseOp<'a> {
    conv: DenseConv<'a>,
    epilogue: DenseEpilogue<'a>,
}

/// What [`dense_conv`] applies to each output block after the product and bias.
#[derive(Clone, Copy)]
pub(crate) enum DenseEpilogue<'a> {
    None,
    Gelu,
    /// Channels-first LayerNorm, then GELU.
    NormGelu(&'a HostNorm),
}

/// Output pixels per im2col chunk at most (small maps take fewer, so that every worker gets
/// several).
const DENSE_CHUNK: usize = 256;
/// Row stride of a chunk's local output block: not a power of two (see the copy-out). The exact
/// products' im2col rows use it too (the product reads them in place).
const LDC: usize = DENSE_CHUNK + 16;

impl CustomOp1 for DenseOp<'_> {
    fn name(&self) -> &'static str {
        "dense-conv-im2col"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let d = self.conv;
        let (n, c, h, w) = layout.shape().dims4()?;
        if c != d.in_ch {
            candle_core::bail!("dense conv has {} input channels, got {c}", d.in_ch);
        }
        let kk = c * d.k * d.k;
        if (d.weight.m(), d.weight.k()) != (d.bias.len(), kk) {
            candle_core::bail!(
                "dense conv: a {}x{} weight for {} outputs of {kk} taps",
                d.weight.m(),
                d.weight.k(),
                d.bias.len()
            );
        }
        let x = f32_slice(storage, layout, "dense conv input")?;
        let (k, s, p) = (d.k, d.stride, d.padding);
        let out_ch = d.bias.len();
        let oh = (h + 2 * p).saturating_sub(k) / s + 1;
        let ow = (w + 2 * p).saturating_sub(k) / s + 1;
        let hw = oh * ow;
        // Every element is written by exactly one job before `set_len` below (no zeroing pass
        // over the stem's 12-25 MiB outputs).
        let len = n * out_ch * hw;
        let mut out: Vec<f32> = Vec::with_capacity(len);
        let shape = Shape::from((n, out_ch, oh, ow));
        if len == 0 {
            return Ok((CpuStorage::F32(out), shape));
        }
        let per = crate::kernels::units_per_task(n * hw, DENSE_CHUNK, NR, kk * out_ch);
        let chunks = hw.div_ceil(per);
        let jobs = n * chunks;
        let threads = threads().clamp(1, jobs);
        // Jobs write disjoint column ranges of `out`; the address travels as an integer.
        let out_addr = out.as_mut_ptr() as usize;
        let bf16 = d.bf16;
        // Per-worker scratch: im2col columns (bf16: row-major `kk x np`, packed into pairs; f32:
        // the right-hand side the product reads in place, rows `LDC` apart), the bf16 pairs,
        // the output block.
        let scratch = || {
            let pairs = match bf16 {
                Some(_) => super::pointwise_bf16::BlockScratch::new(kk, DENSE_CHUNK),
                None => Default::default(),
            };
            (
                vec![0f32; if bf16.is_some() { kk * DENSE_CHUNK } else { 0 }],
                PackedB::zeroed_row_major(if bf16.is_some() { 0 } else { kk }, DENSE_CHUNK, LDC),
                pairs,
                vec![0f32; out_ch * LDC],
                ColumnScratch::default(),
            )
        };
        let jobs: Vec<usize> = (0..jobs).collect();
        run_tasks_with(
            jobs,
            threads,
            scratch,
            |(cols, packed, pairs, block, stats), job| {
                let (b, ci) = (job / chunks, job % chunks);
                let p0 = ci * per;
                let np = per.min(hw - p0);
                let img = &x[b * c * h * w..(b + 1) * c * h * w];
                // im2col: row `(ch, ky, kx)`, column = output pixel; rows `ld` apart.
                let (cols, ld) = if bf16.is_some() {
                    (&mut cols[..], np)
                } else {
                    let ld = packed.row_stride();
                    (packed.rows_mut(np), ld)
                };
                for ch in 0..c {
                    for ky in 0..k {
                        for kx in 0..k {
                            let row = (ch * k + ky) * k + kx;
                            let dst = &mut cols[row * ld..][..np];
                            // Walk the output pixels row segment by row segment (no
                            // division per element).
                            let mut j = 0;
                            while j < np {
                                let q = p0 + j;
                                let (oy, ox0) = (q / ow, q % ow);
                                let seg = (ow - ox0).min(np - j);
                                let iy = (oy * s + ky) as isize - p as isize;
                                let out = &mut dst[j..j + seg];
                                if iy < 0 || iy as usize >= h {
                                    out.fill(0.0);
                                } else {
                                    let src = &img[(ch * h + iy as usize) * w..][..w];
                                    im2col_segment(src, out, ox0 * s + kx, p, s);
                                }
                                j += seg;
                            }
                        }
                    }
                }
                // The product goes to a local block (row stride `LDC`) and is copied
                // out once: written in place, its rows would sit `hw` floats apart, a
                // power of two that maps every row of a tile to the same cache sets.
                for (row, &bias) in block.chunks_mut(LDC).zip(d.bias) {
                    row[..np].fill(bias);
                }
                if let Some(pw) = bf16 {
                    // SAFETY: `cols` is `kk x np` (row stride `np`), `pairs` sized for
                    // `kk` rows of DENSE_CHUNK >= np pixels, `block` `out_ch x LDC`;
                    // a `PackedWeight` exists only where AVX512-BF16 does.
                    unsafe {
                        super::pointwise_bf16::accumulate_block(
                            pw,
                            cols,
                            np,
                            np,
                            pairs,
                            block.as_mut_ptr(),
                            LDC,
                        );
                    }
                } else {
                    // SAFETY: `weight` is `out_ch x kk`, `packed` is `kk x np` (written just
                    // above) and `block` is `out_ch x LDC` with `np <= LDC`.
                    unsafe {
                        packed_a_unchecked(
                            d.weight,
                            packed,
                            0..kk,
                            0..np,
                            block.as_mut_ptr(),
                            LDC,
                            true,
                        );
                    }
                }
                if let DenseEpilogue::NormGelu(norm) = self.epilogue {
                    norm.normalize_columns(block, LDC, np, stats);
                }
                let dst = (out_addr as *mut f32).wrapping_add(b * out_ch * hw + p0);
                for (o, row) in block.chunks(LDC).enumerate() {
                    let row = &row[..np];
                    // SAFETY: `dst` addresses columns `p0..p0 + np` of batch `b`'s
                    // `out_ch x hw` block (row stride `hw`), which no other job touches.
                    let fresh = unsafe { crate::kernels::uninit_row(dst.add(o * hw), np) };
                    for (v, &x) in fresh.iter_mut().zip(row) {
                        v.write(x);
                    }
                    if !matches!(self.epilogue, DenseEpilogue::None) {
                        // SAFETY: the same range, every value written just above.
                        let out = unsafe { std::slice::from_raw_parts_mut(dst.add(o * hw), np) };
                        crate::kernels::gelu::gelu_slice(out);
                    }
                }
            },
        );
        // SAFETY: the jobs `(b, chunk)` cover every image and pixel chunk, and each wrote all
        // `out_ch` rows of its columns; `run_tasks_with` returns only after every job ran (a
        // panic propagates before this line).
        unsafe { out.set_len(len) };
        Ok((CpuStorage::F32(out), shape))
    }
}

/// One im2col row segment: `out[t] = src[x0 + t * s - p]`, zero where that falls outside
/// `src` (the padding). The in-bounds middle runs without per-element checks: the stem's
/// stride-2 convs spent most of their time on those branches.
#[inline(always)]
fn im2col_segment(src: &[f32], out: &mut [f32], x0: usize, p: usize, s: usize) {
    let w = src.len();
    // First t with x0 + t * s >= p, and first t with x0 + t * s - p >= w.
    let lo = p.saturating_sub(x0).div_ceil(s).min(out.len());
    let hi = (w + p).saturating_sub(x0).div_ceil(s).clamp(lo, out.len());
    out[..lo].fill(0.0);
    out[hi..].fill(0.0);
    if lo == hi {
        return;
    }
    let first = x0 + lo * s - p;
    let mid = &mut out[lo..hi];
    if s == 1 {
        mid.copy_from_slice(&src[first..first + mid.len()]);
    } else if s == 2 {
        // Pairs: the form LLVM vectorizes as an interleaved load (the stem's stride-2 convs).
        // `mid` is not empty (`lo < hi`).
        if let Some((last, body)) = mid.split_last_mut() {
            every_other(&src[first..first + 2 * body.len()], body);
            *last = src[first + 2 * body.len()];
        }
    } else {
        let src = &src[first..first + (mid.len() - 1) * s + 1];
        for (o, v) in mid.iter_mut().zip(src.iter().step_by(s)) {
            *o = *v;
        }
    }
}

/// `out[t] = src[2 t]` (`src` holds `2 * out.len()` values), on the widest vectors in effect:
/// the callers' threads are compiled for baseline x86-64, and at SSE width this gather was
/// about a third of the stride-2 convolutions' time.
fn every_other(src: &[f32], out: &mut [f32]) {
    crate::kernels::wide(
        #[inline(always)]
        || every_other_body(src, out),
    );
}

/// Pairs: the form LLVM vectorizes as an interleaved load.
#[inline(always)]
fn every_other_body(src: &[f32], out: &mut [f32]) {
    for (o, pair) in out.iter_mut().zip(src.chunks_exact(2)) {
        *o = pair[0];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The branch-free im2col segment against the per-element definition.
    #[test]
    fn im2col_segment_matches_definition() {
        let src: Vec<f32> = (0..11).map(|v| v as f32 + 1.0).collect();
        for s in 1..=3 {
            for p in 0..=2 {
                for x0 in 0..6 {
                    for len in 0..9 {
                        let mut out = vec![-1.0; len];
                        im2col_segment(&src, &mut out, x0, p, s);
                        let want: Vec<f32> = (0..len)
                            .map(|t| {
                                let ix = (x0 + t * s) as isize - p as isize;
                                if ix >= 0 && (ix as usize) < src.len() {
                                    src[ix as usize]
                                } else {
                                    0.0
                                }
                            })
                            .collect();
                        assert_eq!(out, want, "s {s} p {p} x0 {x0} len {len}");
                    }
                }
            }
        }
    }
}
