//! 1x1 convolutions on the CPU (f32): `epilogue(residual + b + W x)` in one pass over blocks
//! of pixels, beside the matrix-product form it must match ([`pointwise_reference`]).
//!
//! The output starts as the bias (plus an optional residual), the product accumulates into it
//! and an optional GELU runs in place, so there are no separate bias, residual and activation
//! passes over large activations.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Shape, Tensor};

use super::pointwise_bf16::PackedWeight;
use crate::kernels::gemm::{packed_a_unchecked, PackedA, PackedB, NR};
use crate::kernels::{f32_slice, run_tasks_with, threads};

/// What the fused pass applies after the product.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Epilogue {
    None,
    Gelu,
}

/// A 1x1 conv's parameters on the host: `weight` `[out, in]` in row blocks for the exact
/// products, `bias` `[out]`, and the weight as bf16 pairs when the bf16 mode is on.
#[derive(Clone, Copy)]
pub(crate) struct PointwiseWeights<'a> {
    pub weight: &'a PackedA,
    pub bias: &'a [f32],
    pub bf16: Option<&'a PackedWeight>,
}

/// Whether the CPU pass takes this tensor (f32 on the CPU).
pub(crate) fn applies(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == DType::F32
}

/// `epilogue(residual + b + W x)` for an NCHW `x` (and `residual` of the output's shape) on
/// the CPU.
pub(crate) fn pointwise(
    x: &Tensor,
    residual: Option<&Tensor>,
    weights: PointwiseWeights,
    epilogue: Epilogue,
) -> candle_core::Result<Tensor> {
    let op = FusedPointwise {
        weight: weights.weight,
        bias: weights.bias,
        epilogue,
        bf16: weights.bf16,
    };
    let x = x.contiguous()?;
    match residual {
        Some(r) => x.apply_op2_no_bwd(&r.contiguous()?, &op),
        None => x.apply_op1_no_bwd(&op),
    }
}

/// `W x + b` as candle's matrix product over the flattened pixels (`weight` `[out, in]`,
/// `bias` `[out, 1]`): the form [`pointwise`] must match, and the path on other devices.
pub(crate) fn pointwise_reference(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
) -> candle_core::Result<Tensor> {
    let (n, c, h, w) = x.dims4()?;
    let out_ch = weight.dim(0)?;
    let x = x.reshape((n, c, h * w))?;
    let y = if n == 1 {
        weight.matmul(&x.squeeze(0)?)?.unsqueeze(0)?
    } else {
        weight.broadcast_matmul(&x)?
    };
    y.broadcast_add(bias)?.reshape((n, out_ch, h, w))
}

/// `epilogue(residual + b + W x)` per batch entry.
struct FusedPointwise<'a> {
    weight: &'a PackedA,
    bias: &'a [f32],
    epilogue: Epilogue,
    bf16: Option<&'a PackedWeight>,
}

/// Below this many pixels per image a 1x1 conv stays f32 in the bf16 mode (the squeeze-excite
/// layers on pooled `1x1` maps: nothing to gain).
const BF16_MIN_PIXELS: usize = 64;

/// Pixels per task of the exact 1x1 conv at most: the packed input block (`c x 256`) stays in
/// L2. Small maps take fewer (whole panels), so that every worker gets several tasks.
const POINTWISE_COLS: usize = 256;
/// Row stride of the exact 1x1 conv's local output block: not a power of two.
const POINTWISE_LD: usize = POINTWISE_COLS + 16;

impl FusedPointwise<'_> {
    fn run(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        residual: Option<&[f32]>,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, c, h, w) = xl.shape().dims4()?;
        let out_ch = self.bias.len();
        if (self.weight.m(), self.weight.k()) != (out_ch, c) {
            candle_core::bail!(
                "1x1 conv has a {}x{} weight and {out_ch} biases, input has {c} channels",
                self.weight.m(),
                self.weight.k()
            );
        }
        let x = f32_slice(x, xl, "1x1 conv input")?;
        let hw = h * w;
        let total = n * out_ch * hw;
        if let Some(r) = residual {
            if r.len() != total {
                candle_core::bail!(
                    "1x1 conv residual has {} values, output has {total}",
                    r.len()
                );
            }
        }
        let shape = Shape::from((n, out_ch, h, w));
        if let Some(packed) = self.bf16.filter(|_| hw >= BF16_MIN_PIXELS) {
            // Start from the bias (plus the residual); the product accumulates on top.
            let mut out = super::pointwise_bf16::conv(packed, x, hw, n, self.bias, residual)?;
            if self.epilogue == Epilogue::Gelu {
                crate::kernels::gelu::gelu_in_place(&mut out);
            }
            return Ok((CpuStorage::F32(out), shape));
        }
        // Exact f32: blocks of pixels, each packed once; the bias (plus residual) and the GELU
        // run on the block while it is in cache instead of as passes over the whole output.
        // The product goes to a local block (rows `POINTWISE_LD` apart) and is copied out once:
        // in place its rows would lie `hw` floats apart, a power of two at these map sizes,
        // which maps every row of a tile to the same cache sets.
        let mut out: Vec<f32> = Vec::with_capacity(total);
        if total == 0 {
            return Ok((CpuStorage::F32(out), shape));
        }
        let per = crate::kernels::units_per_task(n * hw, POINTWISE_COLS, NR, c * out_ch);
        let chunks = hw.div_ceil(per);
        let tasks: Vec<usize> = (0..n * chunks).collect();
        // Tasks write disjoint pixel columns of `out`; its address travels as an integer.
        let out_addr = out.as_mut_ptr() as usize;
        run_tasks_with(
            tasks,
            threads(),
            || {
                (
                    PackedB::zeroed(c, POINTWISE_COLS),
                    vec![0f32; out_ch * POINTWISE_LD],
                )
            },
            |(packed, block), task| {
                let (b, j0) = (task / chunks, (task % chunks) * per);
                let cols = per.min(hw - j0);
                packed.fill_columns_from_rows(&x[b * c * hw + j0..], hw, cols);
                let base = b * out_ch * hw + j0;
                for (o, row) in block.chunks_mut(POINTWISE_LD).enumerate() {
                    let (row, bias) = (&mut row[..cols], self.bias[o]);
                    match residual {
                        Some(r) => {
                            for (v, r) in row.iter_mut().zip(&r[base + o * hw..][..cols]) {
                                *v = r + bias;
                            }
                        }
                        None => row.fill(bias),
                    }
                }
                // SAFETY: `weight` is `out_ch x c` (checked above), the packed block `c x cols`
                // and `block` `out_ch x POINTWISE_LD` with `cols <= POINTWISE_LD`.
                unsafe {
                    packed_a_unchecked(
                        self.weight,
                        packed,
                        0..c,
                        0..cols,
                        block.as_mut_ptr(),
                        POINTWISE_LD,
                        true,
                    );
                }
                let dst = (out_addr as *mut f32).wrapping_add(base);
                for (o, row) in block.chunks_mut(POINTWISE_LD).enumerate() {
                    let row = &mut row[..cols];
                    if self.epilogue == Epilogue::Gelu {
                        crate::kernels::gelu::gelu_slice(row);
                    }
                    // SAFETY: pixels `j0..j0 + cols` of output row `o` of image `b`: inside
                    // the allocation, written by this task only.
                    let fresh = unsafe { crate::kernels::uninit_row(dst.add(o * hw), cols) };
                    for (v, &y) in fresh.iter_mut().zip(&*row) {
                        v.write(y);
                    }
                }
            },
        );
        // SAFETY: the tasks cover every (image, pixel block) and each wrote all `out_ch` rows
        // of its block; `run_tasks_with` returns only after every task ran (a panic propagates
        // first).
        unsafe { out.set_len(total) };
        Ok((CpuStorage::F32(out), Shape::from((n, out_ch, h, w))))
    }
}

impl CustomOp1 for FusedPointwise<'_> {
    fn name(&self) -> &'static str {
        "pointwise-conv-fused"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.run(storage, layout, None)
    }
}

impl CustomOp2 for FusedPointwise<'_> {
    fn name(&self) -> &'static str {
        "pointwise-conv-fused-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let r = f32_slice(s2, l2, "1x1 conv residual")?;
        self.run(s1, l1, Some(r))
    }
}
