//! Stride-2 transposed convolutions (`ConvTranspose2d(kernel_size=2, stride=2)`) with what the
//! mask decoder does after them (a high-resolution residual, a channels-first LayerNorm, GELU) as
//! one CPU pass per block of input rows, beside the product + interleave form it must match
//! ([`upscale_2x_reference`]).
//!
//! Every input pixel writes its own 2x2 output block, so the layer is one product
//! `[4 * C_out, C_in] x [C_in, h * w]` and an interleave. As tensor ops the product, the
//! interleave, the add, the norm and the GELU each wrote and read the whole map; here they run
//! while the product sits in cache.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};

use crate::kernels::gemm::{packed_unchecked, PackedB};
use crate::kernels::norm::{ColumnScratch, HostNorm};
use crate::kernels::{f32_slice, run_tasks_with, threads};

/// How the input holds its `C_in x (h * w)` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InputLayout {
    /// Tokens `[N, h * w, C_in]` (the transformer's image tokens).
    Tokens,
    /// Channels-first `[N, C_in, h, w]`.
    Channels,
}

/// A 2x upscale's parameters on the host: `weight` `[4 * C_out, C_in]` row-major (row
/// `4c + 2ki + kj`), `bias` `[C_out]`.
#[derive(Clone, Copy)]
pub(crate) struct UpscaleWeights<'a> {
    pub weight: &'a [f32],
    pub bias: &'a [f32],
}

/// `gelu(norm(up(x) + residual))` (the norm optional) for f32 CPU tensors; `None` for others.
/// `x` is `[N, C_in, h, w]` ([`InputLayout::Channels`]) or `[N, h * w, C_in]`
/// ([`InputLayout::Tokens`]); `residual` is `[N | 1, C_out, 2h, 2w]` (a batch of 1 is shared
/// by all rows).
pub(crate) fn upscale_2x(
    x: &Tensor,
    layout: InputLayout,
    (h, w): (usize, usize),
    residual: &Tensor,
    norm: Option<&HostNorm>,
    weights: UpscaleWeights,
) -> candle_core::Result<Option<Tensor>> {
    let cpu_f32 = |t: &Tensor| t.device().is_cpu() && t.dtype() == DType::F32;
    if !cpu_f32(x) || !cpu_f32(residual) {
        return Ok(None);
    }
    let c_out = weights.bias.len();
    if norm.is_some_and(|nm| nm.weight.len() != c_out) {
        candle_core::bail!("upscale: norm of the wrong width");
    }
    let op = UpscaleOp {
        up: weights,
        layout,
        h,
        w,
        norm,
    };
    Ok(Some(
        x.contiguous()?
            .apply_op2_no_bwd(&residual.contiguous()?, &op)?,
    ))
}

/// The upscale as tensor ops: `x` (`[N, C_in, h * w]`, any strides) -> `[N, C_out, 2h, 2w]`
/// with the bias (`weight_t` `[4 * C_out, C_in]`): candle's product, then the interleave.
pub(crate) fn upscale_2x_reference(
    x: &Tensor,
    weight_t: &Tensor,
    bias: &Tensor,
    h: usize,
    w: usize,
) -> candle_core::Result<Tensor> {
    let (n, _, _) = x.dims3()?;
    let y = weight_t.broadcast_left(n)?.matmul(x)?; // [N, C_out * 4, hw]
    crate::kernels::interleave_2x2(&y, bias, h, w)
}

struct UpscaleOp<'a> {
    up: UpscaleWeights<'a>,
    layout: InputLayout,
    h: usize,
    w: usize,
    norm: Option<&'a HostNorm>,
}

/// Input pixels per task at most (rounded to whole input rows; small maps take fewer rows, so
/// that every worker gets several tasks).
const PIXELS_PER_TASK: usize = 256;
/// Floats between a task's channel planes beyond the plane itself (see the norm).
const BLOCK_PAD: usize = 16;

/// Per-worker scratch.
struct Scratch {
    packed: PackedB,
    /// The product `[4 * C_out, pixels]`.
    y: Vec<f32>,
    /// The norm's statistics.
    stats: ColumnScratch,
    /// The interleaved output block `[C_out, 2 rows, 2w]`.
    block: Vec<f32>,
}

impl CustomOp2 for UpscaleOp<'_> {
    fn name(&self) -> &'static str {
        "upscale-2x-fused"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(s1, l1, "upscale input")?;
        let res = f32_slice(s2, l2, "upscale residual")?;
        let (h, w) = (self.h, self.w);
        let hw = h * w;
        let c_in = self.up.weight.len() / self.up.bias.len().max(1) / 4;
        let c_out = self.up.bias.len();
        let m = 4 * c_out;
        let n = x.len() / (c_in * hw).max(1);
        let ok_input = match self.layout {
            InputLayout::Tokens => l1.shape().dims() == [n, hw, c_in],
            InputLayout::Channels => l1.shape().dims() == [n, c_in, h, w],
        };
        let (rn, rc, rh, rw) = l2.shape().dims4()?;
        if !ok_input || (rn != n && rn != 1) || (rc, rh, rw) != (c_out, 2 * h, 2 * w) {
            candle_core::bail!(
                "upscale: input {:?} ({:?}, {h}x{w}) with residual {:?}, {c_in} -> {c_out} channels",
                l1.shape().dims(),
                self.layout,
                l2.shape().dims()
            );
        }
        let shape = Shape::from((n, c_out, 2 * h, 2 * w));
        let plane = 4 * hw; // one output channel
                            // Every value is written by one task's copy-out (no zeroing pass first).
        let len = n * c_out * plane;
        let mut out: Vec<f32> = Vec::with_capacity(len);
        if len == 0 {
            return Ok((CpuStorage::F32(out), shape));
        }
        let rows_per = crate::kernels::units_per_task(
            n * h,
            (PIXELS_PER_TASK / w).clamp(1, h),
            1,
            w * c_in * m,
        );
        let tiles = h.div_ceil(rows_per);
        let tasks: Vec<usize> = (0..n * tiles).collect();
        let max_pixels = rows_per * w;
        // Tasks write disjoint output rows of every channel; the address travels as an integer.
        let out_addr = out.as_mut_ptr() as usize;
        run_tasks_with(
            tasks,
            threads(),
            || Scratch {
                packed: PackedB::zeroed(c_in, max_pixels),
                y: vec![0f32; m * max_pixels],
                block: vec![0f32; c_out * (4 * max_pixels + BLOCK_PAD)],
                stats: ColumnScratch::default(),
            },
            |s, task| {
                let (b, t) = (task / tiles, task % tiles);
                let i0 = t * rows_per;
                let rows = rows_per.min(h - i0);
                let np = rows * w;
                let p0 = i0 * w;
                let img = &x[b * c_in * hw..(b + 1) * c_in * hw];
                match self.layout {
                    InputLayout::Tokens => {
                        s.packed
                            .fill_columns_from_transposed(&img[p0 * c_in..], c_in, np)
                    }
                    InputLayout::Channels => s.packed.fill_columns_from_rows(&img[p0..], hw, np),
                }
                let y = &mut s.y[..m * np];
                // SAFETY: the weight is `m x c_in`, the packed block `c_in x np`, `y` `m x np`.
                unsafe {
                    packed_unchecked(
                        m,
                        self.up.weight,
                        c_in,
                        &s.packed,
                        0..c_in,
                        0..np,
                        y.as_mut_ptr(),
                        np,
                        false,
                    );
                }
                // Interleave with the bias, then add the residual: `(y + b) + r`, the
                // reference's order (conv output, then the skip connection).
                let (ow, orows) = (2 * w, 2 * rows);
                let block_plane = orows * ow;
                // Channel planes `stride` apart: the norm reads down the channels, and planes a
                // power of two apart would share their cache sets.
                let stride = block_plane + BLOCK_PAD;
                let block = &mut s.block[..c_out * stride];
                let rb = if rn == 1 { 0 } else { b };
                for (c, dst) in block.chunks_exact_mut(stride).enumerate() {
                    let dst = &mut dst[..block_plane];
                    let bias = self.up.bias[c];
                    let r = &res[(rb * c_out + c) * plane + 2 * i0 * ow..][..block_plane];
                    for (rr, (row, rrow)) in
                        dst.chunks_exact_mut(ow).zip(r.chunks_exact(ow)).enumerate()
                    {
                        let (i, ki) = (rr / 2, rr % 2);
                        let t0 = &y[(4 * c + 2 * ki) * np + i * w..][..w];
                        let t1 = &y[(4 * c + 2 * ki + 1) * np + i * w..][..w];
                        for (((pair, rp), &a), &bb) in row
                            .chunks_exact_mut(2)
                            .zip(rrow.chunks_exact(2))
                            .zip(t0)
                            .zip(t1)
                        {
                            pair[0] = (a + bias) + rp[0];
                            pair[1] = (bb + bias) + rp[1];
                        }
                    }
                }
                if let Some(norm) = self.norm {
                    norm.normalize_columns(block, stride, block_plane, &mut s.stats);
                }
                let base = (out_addr as *mut f32).wrapping_add(b * c_out * plane + 2 * i0 * ow);
                for (c, src) in block.chunks_exact_mut(stride).enumerate() {
                    let src = &mut src[..block_plane];
                    crate::kernels::gelu::gelu_slice(src);
                    // SAFETY: output rows `2 i0 .. 2 (i0 + rows)` of channel `c` of image `b`,
                    // which no other task writes.
                    let dst =
                        unsafe { crate::kernels::uninit_row(base.add(c * plane), block_plane) };
                    for (d, &v) in dst.iter_mut().zip(&*src) {
                        d.write(v);
                    }
                }
            },
        );
        // SAFETY: the tasks cover every (image, row tile) and each wrote all `c_out` planes of
        // its output rows; `run_tasks_with` returns only after every task ran (a panic
        // propagates first).
        unsafe { out.set_len(len) };
        Ok((CpuStorage::F32(out), shape))
    }
}
