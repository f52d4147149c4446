//! Convolution building blocks with BatchNorm folded in at load time.
//!
//! Inference BatchNorm is an affine map per output channel, so it merges into the preceding
//! convolution's weight and bias (computed in f64, stored f32): one op instead of four.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Shape, Tensor};

use crate::kernels::conv::pointwise_bf16::PackedWeight;
use crate::kernels::gemm::{packed_unchecked, PackedB};
use crate::kernels::{f32_slice, run_tasks_with, threads};
use candle_nn::VarBuilder;

/// BatchNorm eps of every RepViT `ConvNorm` (torch's default).
const BN_EPS: f64 = 1e-5;

/// A `ConvNorm` (`c` conv without bias + `bn`) folded into `(weight, bias)`, f64.
///
/// `w' = w * g / sqrt(var + eps)`, `b' = beta - mean * g / sqrt(var + eps)` (timm's `fuse`).
pub(crate) fn conv_norm(
    vb: &VarBuilder,
    out_ch: usize,
    in_per_group: usize,
    k: usize,
) -> candle_core::Result<(Tensor, Tensor)> {
    let w = vb
        .get((out_ch, in_per_group, k, k), "c.weight")?
        .to_dtype(DType::F64)?;
    let bn = vb.pp("bn");
    let get =
        |name: &str| -> candle_core::Result<Tensor> { bn.get(out_ch, name)?.to_dtype(DType::F64) };
    let (gamma, beta, mean, var) = (
        get("weight")?,
        get("bias")?,
        get("running_mean")?,
        get("running_var")?,
    );
    let s = gamma.broadcast_div(&(var + BN_EPS)?.sqrt()?)?;
    let w = w.broadcast_mul(&s.reshape((out_ch, 1, 1, 1))?)?;
    let b = (beta - mean.mul(&s)?)?;
    Ok((w, b))
}

/// A 1x1 convolution as a matrix product over the flattened spatial axis.
///
/// On CPU (f32) it runs as one fused op: the output starts as the bias (plus an optional
/// residual), `gemm` accumulates `W x` into it, and an optional GELU runs in place; that saves
/// the separate bias-add, residual-add and activation passes (and their allocations) over
/// large activations. Other devices use candle's `matmul` + `broadcast_add`.
pub(crate) struct Pointwise {
    /// `[out, in]`.
    weight: Tensor,
    /// `[out, 1]`.
    bias: Tensor,
    /// Host copies for the CPU op: `[out, in]` row-major and `[out]`.
    host_weight: Vec<f32>,
    host_bias: Vec<f32>,
    /// The weight as bf16 pairs when the bf16 fast mode is on (see [`crate::Precision`]).
    bf16: Option<std::sync::Arc<crate::kernels::conv::pointwise_bf16::PackedWeight>>,
}

/// What the fused CPU op adds after the product.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Epilogue {
    None,
    Gelu,
}

impl Pointwise {
    /// From a `[out, in, 1, 1]` (or `[out, in]`) weight and `[out]` bias, any float dtype.
    pub(crate) fn new(weight: &Tensor, bias: &Tensor) -> candle_core::Result<Self> {
        let out_ch = weight.dim(0)?;
        let in_ch = weight.elem_count() / out_ch.max(1);
        let weight = weight.reshape((out_ch, in_ch))?.to_dtype(DType::F32)?;
        let bias = bias.reshape((out_ch, 1))?.to_dtype(DType::F32)?;
        let host_weight = weight.flatten_all()?.to_vec1::<f32>()?;
        let host_bias = bias.flatten_all()?.to_vec1::<f32>()?;
        Ok(Self {
            weight,
            bias,
            host_weight,
            host_bias,
            bf16: None,
        })
    }

    /// Switches bf16 products on or off (stays exact where the kernel does not apply: an odd
    /// input width, tiny spatial sizes, or a CPU without AVX512-BF16).
    pub(crate) fn set_bf16(&mut self, on: bool) {
        let (out_ch, in_ch) = (
            self.host_bias.len(),
            self.host_weight.len() / self.host_bias.len().max(1),
        );
        self.bf16 = if on {
            crate::kernels::conv::pointwise_bf16::PackedWeight::new(
                &self.host_weight,
                out_ch,
                in_ch,
            )
            .map(std::sync::Arc::new)
        } else {
            None
        };
    }

    /// `next(self(x))` as one 1x1 conv: `W = W_next W_self`, `b = W_next b_self + b_next`
    /// (computed in f64, stored f32). Exact algebra; only float rounding differs from running the
    /// two convs. Worth it when the middle is wide: the FPN's 256-channel stride-4 lateral
    /// followed by the decoder's 32-channel `conv_s0` becomes one 48 -> 32 conv.
    pub(crate) fn then(&self, next: &Pointwise) -> candle_core::Result<Pointwise> {
        let (mid, inp) = self.weight.dims2()?;
        let (out, next_in) = next.weight.dims2()?;
        if next_in != mid {
            candle_core::bail!("composing 1x1 convs {inp} -> {mid} and {next_in} -> {out}");
        }
        let w1 = self.weight.to_dtype(DType::F64)?;
        let b1 = self.bias.to_dtype(DType::F64)?;
        let w2 = next.weight.to_dtype(DType::F64)?;
        let b2 = next.bias.to_dtype(DType::F64)?;
        let weight = w2.matmul(&w1)?.to_dtype(DType::F32)?;
        let bias = (w2.matmul(&b1)? + b2)?.to_dtype(DType::F32)?;
        let mut composed = Pointwise::new(&weight, &bias)?;
        if self.bf16.is_some() || next.bf16.is_some() {
            composed.set_bf16(true);
        }
        Ok(composed)
    }

    /// `diag(scale) (W x + b)` as one 1x1 conv (a per-output-channel scale folded in).
    pub(crate) fn scale_outputs(&self, scale: &[f32]) -> candle_core::Result<Pointwise> {
        let out = self.host_bias.len();
        if scale.len() != out {
            candle_core::bail!("scaling {out} output channels by {} values", scale.len());
        }
        let s = Tensor::from_slice(scale, (out, 1), self.weight.device())?.to_dtype(DType::F64)?;
        let weight = self.weight.to_dtype(DType::F64)?.broadcast_mul(&s)?;
        let bias = self.bias.to_dtype(DType::F64)?.broadcast_mul(&s)?;
        Pointwise::new(&weight.to_dtype(DType::F32)?, &bias.to_dtype(DType::F32)?)
    }

    /// The same conv without its bias.
    pub(crate) fn without_bias(&self) -> candle_core::Result<Pointwise> {
        Pointwise::new(&self.weight, &self.bias.zeros_like()?)
    }

    /// A plain `nn.Conv2d(in, out, 1)` with bias, read from `vb` (`weight`, `bias`).
    pub(crate) fn load(vb: &VarBuilder, in_ch: usize, out_ch: usize) -> candle_core::Result<Self> {
        let w = vb.get((out_ch, in_ch, 1, 1), "weight")?;
        let b = vb.get(out_ch, "bias")?;
        Self::new(&w, &b)
    }

    /// A folded `ConvNorm` 1x1.
    pub(crate) fn conv_norm(
        vb: &VarBuilder,
        in_ch: usize,
        out_ch: usize,
    ) -> candle_core::Result<Self> {
        let (w, b) = conv_norm(vb, out_ch, in_ch, 1)?;
        Self::new(&w, &b)
    }

    /// `W x + b`.
    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if fused_ok(x) {
            return self.fused(x, None, Epilogue::None);
        }
        self.plain(x)
    }

    /// `gelu(W x + b)`.
    pub(crate) fn forward_gelu(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if fused_ok(x) {
            return self.fused(x, None, Epilogue::Gelu);
        }
        crate::kernels::gelu::gelu(&self.plain(x)?)
    }

    /// `residual + (W x + b)`; `residual` has the output's shape.
    pub(crate) fn forward_add(&self, x: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        if fused_ok(x) && fused_ok(residual) {
            return self.fused(x, Some(residual), Epilogue::None);
        }
        residual + self.plain(x)?
    }

    fn plain(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (n, c, h, w) = x.dims4()?;
        let out_ch = self.weight.dim(0)?;
        let x = x.reshape((n, c, h * w))?;
        let y = if n == 1 {
            self.weight.matmul(&x.squeeze(0)?)?.unsqueeze(0)?
        } else {
            self.weight.broadcast_matmul(&x)?
        };
        y.broadcast_add(&self.bias)?.reshape((n, out_ch, h, w))
    }

    fn fused(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        epilogue: Epilogue,
    ) -> candle_core::Result<Tensor> {
        let op = FusedPointwise {
            weight: &self.host_weight,
            bias: &self.host_bias,
            epilogue,
            bf16: self.bf16.as_deref(),
        };
        let x = x.contiguous()?;
        match residual {
            Some(r) => x.apply_op2_no_bwd(&r.contiguous()?, &op),
            None => x.apply_op1_no_bwd(&op),
        }
    }
}

impl Pointwise {
    /// `x + conv2(gelu(self(x)))` in one pass ([`crate::kernels::conv::channel_mixer`]) on CPU f32 inputs
    /// where both convs run exact f32; `None` means: run them one by one.
    pub(crate) fn channel_mixer(
        &self,
        conv2: &Pointwise,
        x: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        self.mlp_residual(conv2, x, x, None)
    }

    /// `t + conv2(gelu(self(t)))` with `t = token_mixer(x)` computed per pixel block inside the
    /// same pass (a RepViT block without squeeze-excite); `None` as for
    /// [`Self::channel_mixer`], or when the token mixer is not a stride-1 same-size conv.
    pub(crate) fn channel_mixer_after(
        &self,
        conv2: &Pointwise,
        token_mixer: &crate::kernels::conv::depthwise::Depthwise,
        x: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let Some(bf16) = self.mixer_weights(conv2) else {
            return Ok(None);
        };
        if !fused_ok(x) || !token_mixer.is_same_size() {
            return Ok(None);
        }
        let x = x.contiguous()?;
        let op = crate::kernels::conv::channel_mixer::ChannelMixer {
            w1: &self.host_weight,
            b1: &self.host_bias,
            w2: &conv2.host_weight,
            b2: &conv2.host_bias,
            scale: None,
            token_mixer: Some(token_mixer),
            bf16,
        };
        Ok(Some(x.apply_op2_no_bwd(&x, &op)?))
    }

    /// The fused MLP's products: both exact (`Some(None)`), both bf16, or `None` when only one
    /// conv is switched to bf16 (then the ops run one by one).
    #[allow(clippy::type_complexity)]
    fn mixer_weights<'a>(
        &'a self,
        conv2: &'a Pointwise,
    ) -> Option<Option<(&'a PackedWeight, &'a PackedWeight)>> {
        match (self.bf16.as_deref(), conv2.bf16.as_deref()) {
            (Some(a), Some(b)) => Some(Some((a, b))),
            (None, None) => Some(None),
            _ => None,
        }
    }

    /// `residual + scale * conv2(gelu(self(x)))` in one pass on CPU f32 inputs (`scale` per
    /// output channel; bf16 products when both convs are switched to bf16); `None` means: run
    /// the ops one by one.
    pub(crate) fn mlp_residual(
        &self,
        conv2: &Pointwise,
        x: &Tensor,
        residual: &Tensor,
        scale: Option<&[f32]>,
    ) -> candle_core::Result<Option<Tensor>> {
        let Some(bf16) = self.mixer_weights(conv2) else {
            return Ok(None);
        };
        if !fused_ok(x) || !fused_ok(residual) {
            return Ok(None);
        }
        let op = crate::kernels::conv::channel_mixer::ChannelMixer {
            w1: &self.host_weight,
            b1: &self.host_bias,
            w2: &conv2.host_weight,
            b2: &conv2.host_bias,
            scale,
            token_mixer: None,
            bf16,
        };
        Ok(Some(
            x.contiguous()?
                .apply_op2_no_bwd(&residual.contiguous()?, &op)?,
        ))
    }
}

fn fused_ok(x: &Tensor) -> bool {
    x.device().is_cpu() && x.dtype() == DType::F32
}

/// The CPU op behind [`Pointwise`]: `epilogue(residual + b + W x)` per batch entry.
struct FusedPointwise<'a> {
    weight: &'a [f32],
    bias: &'a [f32],
    epilogue: Epilogue,
    bf16: Option<&'a crate::kernels::conv::pointwise_bf16::PackedWeight>,
}

/// Below this many pixels per image a 1x1 conv stays f32 in the bf16 mode (the squeeze-excite
/// layers on pooled `1x1` maps: nothing to gain).
const BF16_MIN_PIXELS: usize = 64;

/// Pixels per task of the exact 1x1 conv: the packed input block (`c x 256`) stays in L2.
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
        if self.weight.len() != out_ch * c {
            candle_core::bail!(
                "1x1 conv has a {out_ch}x{} weight, input has {c} channels",
                self.weight.len() / out_ch.max(1)
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
            let mut out =
                crate::kernels::conv::pointwise_bf16::conv(packed, x, hw, n, self.bias, residual)?;
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
        let chunks = hw.div_ceil(POINTWISE_COLS);
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
                let (b, j0) = (task / chunks, (task % chunks) * POINTWISE_COLS);
                let cols = POINTWISE_COLS.min(hw - j0);
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
                // SAFETY: `weight` is `out_ch x c`, the packed block `c x cols` and `block`
                // `out_ch x POINTWISE_LD` with `cols <= POINTWISE_LD`.
                unsafe {
                    packed_unchecked(
                        out_ch,
                        self.weight,
                        c,
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

/// A dense `k x k` convolution with bias (the stem).
///
/// On CPU (f32) it runs as im2col + `gemm` over chunks of output pixels, one chunk per thread
/// at a time, with the bias (and an optional GELU) fused in; candle's `conv2d` otherwise.
pub(crate) struct Dense {
    weight: Tensor,
    /// `[1, out, 1, 1]`.
    bias: Tensor,
    /// Host copies: `[out, in * k * k]` row-major and `[out]`.
    host_weight: Vec<f32>,
    host_bias: Vec<f32>,
    in_ch: usize,
    k: usize,
    stride: usize,
    padding: usize,
    /// The weight as bf16 pairs `[out, in * k * k]` when the bf16 fast mode is on.
    bf16: Option<std::sync::Arc<PackedWeight>>,
}

impl Dense {
    /// Switches bf16 products on or off (stays exact where the kernel does not apply: an odd
    /// `in * k * k`, or no AVX512-BF16).
    pub(crate) fn set_bf16(&mut self, on: bool) {
        let kk = self.in_ch * self.k * self.k;
        self.bf16 = if on {
            PackedWeight::new(&self.host_weight, self.host_bias.len(), kk).map(std::sync::Arc::new)
        } else {
            None
        };
    }

    /// A `k x k` convolution with bias from `weight` `[out, in, k, k]` and `bias` `[out]`.
    pub(crate) fn new(
        weight: &Tensor,
        bias: &Tensor,
        stride: usize,
        padding: usize,
    ) -> candle_core::Result<Self> {
        let (out_ch, in_ch, k, k2) = weight.dims4()?;
        if k != k2 {
            candle_core::bail!(
                "dense conv expects a square kernel, got {:?}",
                weight.dims()
            );
        }
        let weight = weight.to_dtype(DType::F32)?;
        let bias = bias.to_dtype(DType::F32)?;
        Ok(Self {
            host_weight: weight.flatten_all()?.to_vec1()?,
            host_bias: bias.to_vec1()?,
            weight,
            bias: bias.reshape((1, out_ch, 1, 1))?,
            in_ch,
            k,
            stride: stride.max(1),
            padding,
            bf16: None,
        })
    }

    /// A folded `ConvNorm` `k x k`, padding `(k-1)/2`.
    pub(crate) fn conv_norm(
        vb: &VarBuilder,
        in_ch: usize,
        out_ch: usize,
        k: usize,
        stride: usize,
    ) -> candle_core::Result<Self> {
        let (w, b) = conv_norm(vb, out_ch, in_ch, k)?;
        Self::new(&w, &b, stride, (k - 1) / 2)
    }

    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if fused_ok(x) {
            return x.contiguous()?.apply_op1_no_bwd(&DenseOp {
                conv: self,
                epilogue: DenseEpilogue::None,
            });
        }
        self.plain(x)
    }

    /// `gelu(conv(x) + b)`.
    pub(crate) fn forward_gelu(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if fused_ok(x) {
            return x.contiguous()?.apply_op1_no_bwd(&DenseOp {
                conv: self,
                epilogue: DenseEpilogue::Gelu,
            });
        }
        crate::kernels::gelu::gelu(&self.plain(x)?)
    }

    /// `gelu(norm(conv(x) + b))` with a channels-first LayerNorm given by its host parameters
    /// (the memory encoder's mask downsampler layers), or `None` off the CPU f32 path. The norm
    /// and GELU run on each pixel block right after its product, while it is in cache; the
    /// arithmetic is that of [`crate::model::layers::LayerNorm2d`] and [`crate::kernels::gelu::gelu`] (same
    /// f64 statistics in the same order), so the result is bit-identical.
    pub(crate) fn forward_norm_gelu(
        &self,
        x: &Tensor,
        norm: &crate::kernels::norm::HostNorm,
    ) -> candle_core::Result<Option<Tensor>> {
        if !fused_ok(x) || norm.weight.len() != self.host_bias.len() {
            return Ok(None);
        }
        let op = DenseOp {
            conv: self,
            epilogue: DenseEpilogue::NormGelu(norm),
        };
        Ok(Some(x.contiguous()?.apply_op1_no_bwd(&op)?))
    }

    fn plain(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.conv2d(&self.weight, self.padding, self.stride, 1, 1)?
            .broadcast_add(&self.bias)
    }
}

struct DenseOp<'a> {
    conv: &'a Dense,
    epilogue: DenseEpilogue<'a>,
}

/// What [`DenseOp`] applies to each output block after the product and bias.
enum DenseEpilogue<'a> {
    None,
    Gelu,
    /// Channels-first LayerNorm, then GELU.
    NormGelu(&'a crate::kernels::norm::HostNorm),
}

/// Output pixels per im2col chunk.
const DENSE_CHUNK: usize = 256;
/// Row stride of a chunk's local output block: not a power of two (see the copy-out).
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
        let x = f32_slice(storage, layout, "dense conv input")?;
        let (k, s, p) = (d.k, d.stride, d.padding);
        let out_ch = d.host_bias.len();
        let kk = c * k * k;
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
        let chunks = hw.div_ceil(DENSE_CHUNK);
        let jobs = n * chunks;
        let threads = threads().clamp(1, jobs);
        // Threads write disjoint column ranges of `out`; the address travels as an integer.
        let out_addr = out.as_mut_ptr() as usize;
        std::thread::scope(|scope| {
            for t in 0..threads {
                scope.spawn(move || {
                    let mut cols = vec![0f32; kk * DENSE_CHUNK];
                    let bf16 = d.bf16.as_deref();
                    let mut packed =
                        PackedB::zeroed(if bf16.is_some() { 0 } else { kk }, DENSE_CHUNK);
                    let mut pairs = match bf16 {
                        Some(_) => {
                            crate::kernels::conv::pointwise_bf16::block_scratch(kk, DENSE_CHUNK)
                        }
                        None => Vec::new(),
                    };
                    let mut block = vec![0f32; out_ch * LDC];
                    for job in (t..jobs).step_by(threads) {
                        let (b, ci) = (job / chunks, job % chunks);
                        let p0 = ci * DENSE_CHUNK;
                        let np = DENSE_CHUNK.min(hw - p0);
                        let img = &x[b * c * h * w..(b + 1) * c * h * w];
                        // im2col: row `(ch, ky, kx)`, column = output pixel.
                        for ch in 0..c {
                            for ky in 0..k {
                                for kx in 0..k {
                                    let row = (ch * k + ky) * k + kx;
                                    let dst = &mut cols[row * np..(row + 1) * np];
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
                        for (row, &bias) in block.chunks_mut(LDC).zip(&d.host_bias) {
                            row[..np].fill(bias);
                        }
                        if let Some(pw) = bf16 {
                            // SAFETY: `cols` is `kk x np` (row stride `np`), `pairs` sized for
                            // `kk` rows of DENSE_CHUNK >= np pixels, `block` `out_ch x LDC`;
                            // a `PackedWeight` exists only where AVX512-BF16 does.
                            unsafe {
                                crate::kernels::conv::pointwise_bf16::accumulate_block(
                                    pw,
                                    &cols,
                                    np,
                                    np,
                                    &mut pairs,
                                    block.as_mut_ptr(),
                                    LDC,
                                );
                            }
                        } else {
                            packed.fill_columns_from_rows(&cols, np, np);
                            // SAFETY: `weight` is `out_ch x kk`, `packed` is `kk x np` and
                            // `block` is `out_ch x LDC` with `np <= LDC`.
                            unsafe {
                                packed_unchecked(
                                    out_ch,
                                    &d.host_weight,
                                    kk,
                                    &packed,
                                    0..kk,
                                    0..np,
                                    block.as_mut_ptr(),
                                    LDC,
                                    true,
                                );
                            }
                        }
                        if let DenseEpilogue::NormGelu(norm) = self.epilogue {
                            norm.normalize_columns(&mut block, LDC, np);
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
                                let out =
                                    unsafe { std::slice::from_raw_parts_mut(dst.add(o * hw), np) };
                                crate::kernels::gelu::gelu_slice(out);
                            }
                        }
                    }
                });
            }
        });
        // SAFETY: the jobs `(b, chunk)` cover every image and pixel chunk (each thread takes
        // every `threads`-th job), and each wrote all `out_ch` rows of its columns; the scope
        // joined every thread (a panic propagates before this line).
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

/// `out[t] = src[2 t]` (`src` holds `2 * out.len()` values), on the widest vectors the CPU
/// has: the callers' threads are not compiled for AVX-512, and at SSE width this gather was
/// about a third of the stride-2 convolutions' time.
fn every_other(src: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            unsafe { every_other_avx512(src, out) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            unsafe { every_other_avx2(src, out) };
            return;
        }
    }
    every_other_body(src, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn every_other_avx512(src: &[f32], out: &mut [f32]) {
    every_other_body(src, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn every_other_avx2(src: &[f32], out: &mut [f32]) {
    every_other_body(src, out);
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
    use candle_core::Device;

    /// The fused CPU op must agree with the candle matmul + bias path (and GELU / residual).
    #[test]
    fn fused_matches_plain() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        for (n, c, o, h, w) in [(1, 48, 96, 9, 7), (2, 5, 3, 4, 4), (1, 7, 7, 1, 1)] {
            let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
            let r = Tensor::randn(0f32, 1.0, (n, o, h, w), &dev)?;
            let wt = Tensor::randn(0f32, 1.0, (o, c, 1, 1), &dev)?;
            let b = Tensor::randn(0f32, 1.0, o, &dev)?;
            let pw = Pointwise::new(&wt, &b)?;
            let plain = pw.plain(&x)?;
            let pairs = [
                (pw.forward(&x)?, plain.clone()),
                (pw.forward_gelu(&x)?, plain.gelu_erf()?),
                (pw.forward_add(&x, &r)?, (&r + &plain)?),
            ];
            for (i, (ours, theirs)) in pairs.iter().enumerate() {
                assert_eq!(ours.dims(), theirs.dims());
                let d = (ours - theirs)?.abs()?.max_all()?.to_scalar::<f32>()?;
                assert!(d < 1e-4, "case {i} {n}x{c}->{o} {h}x{w}: {d}");
            }
        }
        Ok(())
    }

    /// The im2col CPU op must agree with candle's `conv2d` (plain and with GELU).
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

    #[test]
    fn dense_matches_conv2d() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        for (n, c, o, k, s, h, w) in [(1, 3, 24, 3, 2, 70, 67), (2, 4, 5, 3, 1, 9, 8)] {
            let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
            let wt = Tensor::randn(0f32, 1.0, (o, c, k, k), &dev)?;
            let b = Tensor::randn(0f32, 1.0, o, &dev)?;
            let d = Dense {
                host_weight: wt.flatten_all()?.to_vec1()?,
                host_bias: b.to_vec1()?,
                weight: wt,
                bias: b.reshape((1, o, 1, 1))?,
                in_ch: c,
                k,
                stride: s,
                padding: (k - 1) / 2,
                bf16: None,
            };
            let plain = d.plain(&x)?;
            let pairs = [
                (d.forward(&x)?, plain.clone()),
                (d.forward_gelu(&x)?, plain.gelu_erf()?),
            ];
            for (i, (ours, theirs)) in pairs.iter().enumerate() {
                assert_eq!(ours.dims(), theirs.dims());
                let diff = (ours - theirs)?.abs()?.max_all()?.to_scalar::<f32>()?;
                assert!(diff < 1e-4, "case {i} {n}x{c}->{o} s{s} {h}x{w}: {diff}");
            }
        }
        Ok(())
    }

    /// bf16 products in the dense conv: within bf16 rounding of candle's conv (channel counts
    /// whose `in * k * k` is even), exact where it is odd (the kernel does not apply).
    #[test]
    fn dense_bf16_within_rounding() -> candle_core::Result<()> {
        if !crate::kernels::attention::bf16::supported() {
            eprintln!("skipped: this CPU has no AVX512-BF16");
            return Ok(());
        }
        let dev = Device::Cpu;
        for (n, c, o, s, h, w, applies) in [
            (1usize, 64usize, 256usize, 2usize, 40usize, 36usize, true),
            (2, 4, 16, 2, 33, 31, true),
            (1, 3, 24, 2, 20, 20, false),
        ] {
            let x = Tensor::randn(0f32, 1.0, (n, c, h, w), &dev)?;
            let wt = Tensor::randn(0f32, 0.1, (o, c, 3, 3), &dev)?;
            let b = Tensor::randn(0f32, 1.0, o, &dev)?;
            let mut d = Dense::new(&wt, &b, s, 1)?;
            let plain = d.plain(&x)?;
            d.set_bf16(true);
            assert_eq!(d.bf16.is_some(), applies);
            let got = d.forward(&x)?;
            let err = crate::checks::compare::compare(&got, &plain)
                .map_err(|e| candle_core::Error::Msg(e.to_string()))?
                .rel_l2;
            if applies {
                assert!(err < 1e-2 && err > 0.0, "{c}->{o}: rel {err}");
            } else {
                assert!(err < 1e-6, "{c}->{o} stays exact: rel {err}");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod speed {
    use candle_core::{Device, Tensor};

    /// Time per call of the dense convs at their 1024 shapes (the stem; the mask downsampler):
    /// `cargo test --release -p edgetam-tracker --lib repvit::conv::speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn dense_shapes() -> candle_core::Result<()> {
        crate::instrument::allocator::keep_freed_memory();
        let dev = Device::Cpu;
        for (c, o, side, gelu) in [
            (3usize, 24usize, 1024usize, true),
            (24, 48, 512, false),
            (1, 4, 1024, false),
            (4, 16, 512, false),
            (16, 64, 256, false),
            (64, 256, 128, false),
        ] {
            let x = Tensor::randn(0f32, 1.0, (1, c, side, side), &dev)?;
            let wt = Tensor::randn(0f32, 0.1, (o, c, 3, 3), &dev)?;
            let b = Tensor::randn(0f32, 1.0, o, &dev)?;
            let d = super::Dense::new(&wt, &b, 2, 1)?;
            let run = || {
                if gelu {
                    d.forward_gelu(&x)
                } else {
                    d.forward(&x)
                }
            };
            let s = crate::instrument::timings::measure::mean_ms(10, run)? / 1e3;
            let mac = (o * c * 9 * side * side / 4) as f64;
            println!(
                "{c:3} -> {o:3} at {side}: {:.2} ms, {:.0} GFLOP/s",
                s * 1e3,
                2.0 * mac / s / 1e9
            );
        }
        Ok(())
    }
}
