//! Convolution building blocks with BatchNorm folded in at load time.
//!
//! Inference BatchNorm is an affine map per output channel, so it merges into the preceding
//! convolution's weight and bias (computed in f64, stored f32): one op instead of four.

use candle_core::{DType, Tensor};
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
pub(crate) struct Pointwise {
    /// `[out, in]`.
    weight: Tensor,
    /// `[out, 1]`.
    bias: Tensor,
}

impl Pointwise {
    /// From a `[out, in, 1, 1]` (or `[out, in]`) weight and `[out]` bias, any float dtype.
    pub(crate) fn new(weight: &Tensor, bias: &Tensor) -> candle_core::Result<Self> {
        let out_ch = weight.dim(0)?;
        let in_ch = weight.elem_count() / out_ch.max(1);
        Ok(Self {
            weight: weight.reshape((out_ch, in_ch))?.to_dtype(DType::F32)?,
            bias: bias.reshape((out_ch, 1))?.to_dtype(DType::F32)?,
        })
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

    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
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
}

/// A dense `k x k` convolution with bias (the stem), through candle's `conv2d`.
pub(crate) struct Dense {
    weight: Tensor,
    /// `[1, out, 1, 1]`.
    bias: Tensor,
    stride: usize,
    padding: usize,
}

impl Dense {
    /// A folded `ConvNorm` `k x k`, padding `(k-1)/2`.
    pub(crate) fn conv_norm(
        vb: &VarBuilder,
        in_ch: usize,
        out_ch: usize,
        k: usize,
        stride: usize,
    ) -> candle_core::Result<Self> {
        let (w, b) = conv_norm(vb, out_ch, in_ch, k)?;
        Ok(Self {
            weight: w.to_dtype(DType::F32)?,
            bias: b.reshape((1, out_ch, 1, 1))?.to_dtype(DType::F32)?,
            stride,
            padding: (k - 1) / 2,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.conv2d(&self.weight, self.padding, self.stride, 1, 1)?
            .broadcast_add(&self.bias)
    }
}
