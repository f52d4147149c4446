//! Building blocks shared by several EdgeTAM stages (prompt encoder, mask decoder, and later the
//! memory encoder and the object-pointer projection).
//!
//! Each block mirrors one transformers module exactly (same weight names under its
//! [`VarBuilder`] prefix, same order of floating-point operations where it matters), so stages can
//! be checked against the reference one by one.

use candle_core::{Module, Result, Tensor};
use candle_nn::{linear, Linear, VarBuilder};

/// Activation between the layers of a [`FeedForward`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `max(x, 0)`: every `EdgeTamVideoFeedForward` in the decoder uses it.
    Relu,
    /// Exact (erf) GELU, as torch's `nn.GELU()` / transformers' `"gelu"`.
    Gelu,
}

impl Activation {
    pub fn apply(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::Relu => x.relu(),
            Self::Gelu => x.gelu_erf(),
        }
    }
}

/// LayerNorm over one dimension: two passes (mean, then centred variance), each a blocked sum.
///
/// candle's fused `layer_norm` kernel computes the variance as `E[x^2] - E[x]^2` with one
/// sequential f32 sum, which cancels when a token's mean is large against its spread, and a
/// sequential sum's rounding grows with the length. The decoder's attention (large logits on
/// these activations) amplifies such noise 10-100x, so the statistics need torch's accuracy
/// (its kernel uses cascaded moments); blocked sums get there with ordinary tensor ops on any
/// device.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    /// Loads `weight`/`bias` of size `size` from `vb`.
    pub fn new(size: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            weight: vb.get(size, "weight")?,
            bias: vb.get(size, "bias")?,
            eps,
        })
    }

    /// Normalises `x` over `dim` (whose size is the weight's); other dims are independent.
    pub fn forward_dim(&self, x: &Tensor, dim: usize) -> Result<Tensor> {
        let mean = blocked_mean_keepdim(x, dim)?;
        let centred = x.broadcast_sub(&mean)?;
        let var = blocked_mean_keepdim(&centred.sqr()?, dim)?;
        let normed = centred.broadcast_div(&(var + self.eps)?.sqrt()?)?;
        // Weight and bias broadcast along `dim`: shape [size, 1, ..., 1].
        let mut shape = vec![1usize; x.rank() - dim];
        shape[0] = self.weight.dim(0)?;
        normed
            .broadcast_mul(&self.weight.reshape(shape.as_slice())?)?
            .broadcast_add(&self.bias.reshape(shape.as_slice())?)
    }
}

impl Module for LayerNorm {
    /// Normalises over the last dimension (token LayerNorm).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_dim(x, x.rank().saturating_sub(1))
    }
}

/// Mean over `dim` (kept, size 1) summed in blocks of about `sqrt(len)`: the rounding error of
/// the sum grows with `sqrt(len)`-long runs instead of `len`.
pub fn blocked_mean_keepdim(x: &Tensor, dim: usize) -> Result<Tensor> {
    let len = x.dim(dim)?;
    let block = (1..=len)
        .take_while(|b| b * b <= len)
        .filter(|b| len.is_multiple_of(*b))
        .last()
        .unwrap_or(1);
    if block <= 1 {
        return x.mean_keepdim(dim);
    }
    let mut shape = x.dims().to_vec();
    shape[dim] = len / block;
    shape.insert(dim + 1, block);
    let sum = x
        .reshape(shape)?
        .sum_keepdim(dim + 1)?
        .sum_keepdim(dim)?
        .squeeze(dim + 1)?;
    sum / len as f64
}

/// Channels-first LayerNorm (`EdgeTamVideoLayerNorm(data_format="channels_first")`): normalises
/// each pixel of an NCHW map over its channels.
///
/// The eps differs per use (1e-6 in the upscale norm, mask embedding and mask downsampler, while
/// the token LayerNorms use torch's default 1e-5), so callers pass it explicitly.
#[derive(Debug, Clone)]
pub struct LayerNorm2d {
    inner: LayerNorm,
}

impl LayerNorm2d {
    /// Loads `weight`/`bias` of size `channels` from `vb`.
    pub fn new(channels: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            inner: LayerNorm::new(channels, eps, vb)?,
        })
    }

    /// `x`: `[N, C, H, W]` -> `[N, C, H, W]`, normalised over `C` in place of the reference's
    /// permute / normalise / permute (same arithmetic, no copies).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.inner.forward_dim(x, 1)
    }
}

/// The reference's `EdgeTamVideoFeedForward`: `proj_in`, `num_layers - 2` hidden `layers.{i}`,
/// `proj_out`, an activation after every layer but the last, and an optional final sigmoid.
///
/// Used for the transformer MLP, the hypernetwork MLPs, the IoU head (sigmoid) and the
/// object-score head; later also for the object-pointer projection.
#[derive(Debug, Clone)]
pub struct FeedForward {
    proj_in: Linear,
    layers: Vec<Linear>,
    proj_out: Linear,
    activation: Activation,
    sigmoid_output: bool,
}

impl FeedForward {
    /// `num_layers` counts `proj_in` and `proj_out` (so it must be at least 2).
    pub fn new(
        input_dim: usize,
        hidden_dim: usize,
        output_dim: usize,
        num_layers: usize,
        activation: Activation,
        sigmoid_output: bool,
        vb: VarBuilder,
    ) -> Result<Self> {
        if num_layers < 2 {
            candle_core::bail!("FeedForward needs at least 2 layers, got {num_layers}");
        }
        let proj_in = linear(input_dim, hidden_dim, vb.pp("proj_in"))?;
        let layers = (0..num_layers - 2)
            .map(|i| linear(hidden_dim, hidden_dim, vb.pp("layers").pp(i)))
            .collect::<Result<Vec<_>>>()?;
        let proj_out = linear(hidden_dim, output_dim, vb.pp("proj_out"))?;
        Ok(Self {
            proj_in,
            layers,
            proj_out,
            activation,
            sigmoid_output,
        })
    }

    /// `x`: `[..., input_dim]` -> `[..., output_dim]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.activation.apply(&self.proj_in.forward(x)?)?;
        for layer in &self.layers {
            h = self.activation.apply(&layer.forward(&h)?)?;
        }
        let h = self.proj_out.forward(&h)?;
        if self.sigmoid_output {
            candle_nn::ops::sigmoid(&h)
        } else {
            Ok(h)
        }
    }
}

/// Multi-head attention with an internal width of `hidden / downsample_rate`
/// (`EdgeTamVideoAttention` + `eager_attention_forward`): no mask, no RoPE.
///
/// The decoder's cross-attentions run at half width (downsample 2); its self-attention at full
/// width (downsample 1).
#[derive(Debug, Clone)]
pub struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    num_heads: usize,
    head_dim: usize,
    scaling: f64,
}

impl Attention {
    pub fn new(
        hidden_size: usize,
        num_heads: usize,
        downsample_rate: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        let internal = hidden_size / downsample_rate.max(1);
        if num_heads == 0 || !internal.is_multiple_of(num_heads) {
            candle_core::bail!("attention width {internal} is not divisible by {num_heads} heads");
        }
        let head_dim = internal / num_heads;
        Ok(Self {
            q_proj: linear(hidden_size, internal, vb.pp("q_proj"))?,
            k_proj: linear(hidden_size, internal, vb.pp("k_proj"))?,
            v_proj: linear(hidden_size, internal, vb.pp("v_proj"))?,
            o_proj: linear(internal, hidden_size, vb.pp("o_proj"))?,
            num_heads,
            head_dim,
            scaling: (head_dim as f64).powf(-0.5),
        })
    }

    /// `query`: `[N, Lq, C]`, `key`/`value`: `[N, Lk, C]` -> `[N, Lq, C]`.
    pub fn forward(&self, query: &Tensor, key: &Tensor, value: &Tensor) -> Result<Tensor> {
        let (n, lq, _) = query.dims3()?;
        let q = self.split_heads(&self.q_proj.forward(query)?)?;
        let k = self.split_heads(&self.k_proj.forward(key)?)?;
        let v = self.split_heads(&self.v_proj.forward(value)?)?;
        // Scale after the product, softmax in f32: the reference's order.
        let logits = (q.matmul(&k.t()?.contiguous()?)? * self.scaling)?;
        let weights = candle_nn::ops::softmax_last_dim(&logits)?;
        let out = weights.matmul(&v)?; // [N, heads, Lq, head_dim]
        let out =
            out.transpose(1, 2)?
                .contiguous()?
                .reshape((n, lq, self.num_heads * self.head_dim))?;
        self.o_proj.forward(&out)
    }

    /// `[N, L, heads * head_dim]` -> contiguous `[N, heads, L, head_dim]`.
    fn split_heads(&self, x: &Tensor) -> Result<Tensor> {
        let (n, l, _) = x.dims3()?;
        x.reshape((n, l, self.num_heads, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()
    }
}

/// torch's default `nn.LayerNorm` eps, used by the two-way transformer's token norms.
pub const TORCH_LAYER_NORM_EPS: f64 = 1e-5;
