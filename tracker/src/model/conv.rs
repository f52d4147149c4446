//! Convolution building blocks with BatchNorm folded in at load time.
//!
//! Inference BatchNorm is an affine map per output channel, so it merges into the preceding
//! convolution's weight and bias (computed in f64, stored f32): one op instead of four.

use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

use crate::kernels::conv::channel_mixer::{channel_mixer, ChannelMixer, MixerInput};
use crate::kernels::conv::dense::{dense_conv, dense_conv_reference, DenseConv, DenseEpilogue};
use crate::kernels::conv::depthwise::Depthwise;
use crate::kernels::conv::pointwise::{
    applies as fused_ok, pointwise, pointwise_reference, Epilogue, PointwiseWeights,
};
use crate::kernels::conv::pointwise_bf16::{PackedWeight, Rounding};
use crate::kernels::gelu::gelu;
use crate::kernels::gemm::PackedA;
use crate::kernels::norm::HostNorm;

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

/// A 1x1 convolution as a matrix product over the flattened spatial axis: on the CPU (f32) one
/// fused pass with its bias, residual and GELU ([`crate::kernels::conv::pointwise`]), elsewhere
/// candle's `matmul` + `broadcast_add`.
pub(crate) struct Pointwise {
    /// `[out, in]`.
    weight: Tensor,
    /// `[out, 1]`.
    bias: Tensor,
    /// Host copies for the CPU op: `[out, in]` in row blocks for the exact products' register
    /// tiles ([`crate::kernels::gemm::PackedA`]) and `[out]`.
    packed_weight: PackedA,
    host_bias: Vec<f32>,
    /// The weight as bf16 pairs when the bf16 fast mode is on (see [`crate::Precision`]).
    bf16: Option<std::sync::Arc<PackedWeight>>,
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
        let packed_weight = PackedA::from_rows(&host_weight, out_ch, in_ch, in_ch);
        Ok(Self {
            weight,
            bias,
            packed_weight,
            host_bias,
            bf16: None,
        })
    }

    /// Switches bf16 products on or off (stays exact where the kernel does not apply: an odd
    /// input width, tiny spatial sizes, or a CPU without AVX512-BF16).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn set_bf16(&mut self, on: bool) {
        self.set_rounding(on.then_some(Rounding::Bf16));
    }

    /// The products' input rounding: `None` exact f32, else bf16 or split (f32-accurate, AMX
    /// only); stays exact where the kernel does not apply. Whether it applied.
    pub(crate) fn set_rounding(&mut self, rounding: Option<Rounding>) -> bool {
        let (out_ch, in_ch) = (self.packed_weight.m(), self.packed_weight.k());
        self.bf16 = rounding.and_then(|r| {
            PackedWeight::with_rounding(&self.packed_weight.rows(), out_ch, in_ch, r)
                .map(std::sync::Arc::new)
        });
        self.bf16.is_some() == rounding.is_some()
    }

    /// The products' input rounding (`None`: exact f32).
    pub(crate) fn rounding(&self) -> Option<Rounding> {
        self.bf16.as_ref().map(|w| w.rounding())
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
        if let Some(r) = self.rounding().or(next.rounding()) {
            composed.set_rounding(Some(r));
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
        gelu(&self.plain(x)?)
    }

    /// `residual + (W x + b)`; `residual` has the output's shape.
    pub(crate) fn forward_add(&self, x: &Tensor, residual: &Tensor) -> candle_core::Result<Tensor> {
        if fused_ok(x) && fused_ok(residual) {
            return self.fused(x, Some(residual), Epilogue::None);
        }
        residual + self.plain(x)?
    }

    fn plain(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        pointwise_reference(x, &self.weight, &self.bias)
    }

    fn fused(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        epilogue: Epilogue,
    ) -> candle_core::Result<Tensor> {
        let weights = PointwiseWeights {
            weight: &self.packed_weight,
            bias: &self.host_bias,
            bf16: self.bf16.as_deref(),
        };
        pointwise(x, residual, weights, epilogue)
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
        token_mixer: &Depthwise,
        x: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        if !token_mixer.is_same_size() {
            return Ok(None);
        }
        self.fused_mixer(conv2, x, x, None, MixerInput::TokenMixer(token_mixer))
    }

    /// `t + conv2(gelu(self(t)))` with `t = x * gate` (squeeze-excite's product, `gate` one
    /// value per image and channel) formed per pixel block inside the same pass; `None` as for
    /// [`Self::channel_mixer`].
    pub(crate) fn channel_mixer_gated(
        &self,
        conv2: &Pointwise,
        x: &Tensor,
        gate: &[f32],
    ) -> candle_core::Result<Option<Tensor>> {
        self.fused_mixer(conv2, x, x, None, MixerInput::Gated(gate))
    }

    /// `t + conv2(gelu(self(t)))` with `t = projection(x)` (a 1x1 conv, RepViT's
    /// `channel_downsample`) computed per pixel block inside the same pass; `None` as for
    /// [`Self::channel_mixer`], or when the projection runs bf16 products (then the ops run one
    /// by one).
    pub(crate) fn channel_mixer_after_projection(
        &self,
        conv2: &Pointwise,
        projection: &Pointwise,
        x: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        if projection.bf16.is_some() {
            return Ok(None);
        }
        let input = MixerInput::Projected(&projection.packed_weight, &projection.host_bias);
        self.fused_mixer(conv2, x, x, None, input)
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
        self.fused_mixer(conv2, x, residual, scale, MixerInput::Map)
    }

    /// The channel-mixer op with `self` as `conv1` on CPU f32 tensors, its MLP input formed as
    /// `input` says; `None` where it does not apply (another device or dtype, or only one conv
    /// switched to bf16).
    fn fused_mixer(
        &self,
        conv2: &Pointwise,
        x: &Tensor,
        residual: &Tensor,
        scale: Option<&[f32]>,
        input: MixerInput,
    ) -> candle_core::Result<Option<Tensor>> {
        let Some(bf16) = self.mixer_weights(conv2) else {
            return Ok(None);
        };
        if !fused_ok(x) || !fused_ok(residual) {
            return Ok(None);
        }
        let op = ChannelMixer {
            w1: &self.packed_weight,
            b1: &self.host_bias,
            w2: &conv2.packed_weight,
            b2: &conv2.host_bias,
            scale,
            input,
            bf16,
        };
        Ok(Some(channel_mixer(x, residual, &op)?))
    }
}

/// A dense `k x k` convolution with bias (the stem, the mask downsampler): on the CPU (f32)
/// im2col + products with the bias and GELU fused in ([`crate::kernels::conv::dense`]),
/// candle's `conv2d` otherwise.
pub(crate) struct Dense {
    weight: Tensor,
    /// `[1, out, 1, 1]`.
    bias: Tensor,
    /// Host copies: `[out, in * k * k]` row-major and `[out]`.
    /// The weight `[out, in * k * k]` in row blocks for the exact products.
    packed_weight: PackedA,
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
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn set_bf16(&mut self, on: bool) {
        self.set_rounding(on.then_some(Rounding::Bf16));
    }

    /// As [`Pointwise::set_rounding`].
    pub(crate) fn set_rounding(&mut self, rounding: Option<Rounding>) -> bool {
        let kk = self.in_ch * self.k * self.k;
        self.bf16 = rounding.and_then(|r| {
            PackedWeight::with_rounding(&self.packed_weight.rows(), self.host_bias.len(), kk, r)
                .map(std::sync::Arc::new)
        });
        self.bf16.is_some() == rounding.is_some()
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
        let host_weight: Vec<f32> = weight.flatten_all()?.to_vec1()?;
        let kk = in_ch * k * k;
        Ok(Self {
            packed_weight: PackedA::from_rows(&host_weight, out_ch, kk, kk),
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

    /// Whether the bf16 products are on (where the kernel applies).
    #[cfg(test)]
    pub(crate) fn is_bf16(&self) -> bool {
        self.bf16.is_some()
    }

    /// The host view the CPU pass takes.
    fn host(&self) -> DenseConv<'_> {
        DenseConv {
            weight: &self.packed_weight,
            bias: &self.host_bias,
            in_ch: self.in_ch,
            k: self.k,
            stride: self.stride,
            padding: self.padding,
            bf16: self.bf16.as_deref(),
        }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if fused_ok(x) {
            return dense_conv(x, self.host(), DenseEpilogue::None);
        }
        self.plain(x)
    }

    /// `gelu(conv(x) + b)`.
    pub(crate) fn forward_gelu(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if fused_ok(x) {
            return dense_conv(x, self.host(), DenseEpilogue::Gelu);
        }
        gelu(&self.plain(x)?)
    }

    /// `gelu(norm(conv(x) + b))` with a channels-first LayerNorm given by its host parameters
    /// (the memory encoder's mask downsampler layers), or `None` off the CPU f32 path. The norm
    /// and GELU run on each pixel block right after its product, while it is in cache; the
    /// arithmetic is that of [`crate::model::layers::LayerNorm2d`] and [`gelu`] (same
    /// f64 statistics in the same order), so the result is bit-identical.
    pub(crate) fn forward_norm_gelu(
        &self,
        x: &Tensor,
        norm: &HostNorm,
    ) -> candle_core::Result<Option<Tensor>> {
        if !fused_ok(x) || norm.weight.len() != self.host_bias.len() {
            return Ok(None);
        }
        Ok(Some(dense_conv(
            x,
            self.host(),
            DenseEpilogue::NormGelu(norm),
        )?))
    }

    fn plain(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        dense_conv_reference(x, &self.weight, &self.bias, self.stride, self.padding)
    }
}
