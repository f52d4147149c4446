//! Building blocks shared by several EdgeTAM stages (prompt encoder, mask decoder, and later the
//! memory encoder and the object-pointer projection).
//!
//! Each block mirrors one transformers module exactly (same weight names under its
//! [`VarBuilder`] prefix, same order of floating-point operations where it matters), so stages can
//! be checked against the reference one by one.

use candle_core::{Module, Result, Tensor};
use candle_nn::{layer_norm, linear, LayerNorm, Linear, VarBuilder};

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
            inner: layer_norm(channels, eps, vb)?,
        })
    }

    /// `x`: `[N, C, H, W]` -> `[N, C, H, W]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        // Same route as the reference: permute to channels-last, normalise the last dim, permute
        // back. Contiguous input takes candle's fused layer-norm kernel.
        let x = x.permute((0, 2, 3, 1))?.contiguous()?;
        self.inner.forward(&x)?.permute((0, 3, 1, 2))
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
        if num_heads == 0 || internal % num_heads != 0 {
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

/// A token LayerNorm over the last dim (`nn.LayerNorm`, eps 1e-5 by default in the reference).
pub fn token_layer_norm(size: usize, eps: f64, vb: VarBuilder) -> Result<LayerNorm> {
    layer_norm(size, eps, vb)
}

/// torch's default `nn.LayerNorm` eps, used by the two-way transformer's token norms.
pub const TORCH_LAYER_NORM_EPS: f64 = 1e-5;
