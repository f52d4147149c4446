//! Building blocks shared by several EdgeTAM stages (prompt encoder, mask decoder, and later the
//! memory encoder and the object-pointer projection).
//!
//! Each block mirrors one transformers module exactly (same weight names under its
//! [`VarBuilder`] prefix, same order of floating-point operations where it matters), so stages can
//! be checked against the reference one by one.

use candle_core::{DType, Module, Result, Tensor};
use candle_nn::{linear, VarBuilder};

use crate::kernels::linear_bf16::SwitchLinear;
use crate::kernels::norm::{self, HostNorm};

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
            // The multi-threaded kernel with torch's vectorized erf formula (candle's `gelu_erf`
            // is scalar libm on one thread); other devices fall back to `gelu_erf`.
            Self::Gelu => crate::kernels::gelu::gelu(x),
        }
    }
}

/// LayerNorm over one dimension (`nn.LayerNorm`, and over channels for [`LayerNorm2d`]), with
/// torch's accuracy for the statistics ([`crate::kernels::norm`] says why that matters).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
    /// Host copies of f32 CPU parameters, for [`Self::add_and_norm`]'s fused pass.
    host: Option<std::sync::Arc<HostNorm>>,
}

impl LayerNorm {
    /// Loads `weight`/`bias` of size `size` from `vb`.
    pub fn new(size: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        let weight = vb.get(size, "weight")?;
        let bias = vb.get(size, "bias")?;
        let cpu_f32 = |t: &Tensor| t.device().is_cpu() && t.dtype() == DType::F32;
        let host = if cpu_f32(&weight) && cpu_f32(&bias) {
            Some(std::sync::Arc::new(HostNorm {
                weight: weight.to_vec1::<f32>()?,
                bias: bias.to_vec1::<f32>()?,
                eps,
            }))
        } else {
            None
        };
        Ok(Self {
            weight,
            bias,
            eps,
            host,
        })
    }

    /// Normalises `x` over `dim` (whose size is the weight's); other dims are independent.
    pub fn forward_dim(&self, x: &Tensor, dim: usize) -> Result<Tensor> {
        norm::layer_norm(x, &self.weight, &self.bias, dim, self.eps)
    }

    /// A residual update and the pre-norm of what follows it: `(s, norm(s))` with `s = x + update`
    /// over the last dimension, fused on the CPU ([`norm::add_and_norm`]), bit-identical to
    /// the add and [`Module::forward`].
    pub fn add_and_norm(&self, x: &Tensor, update: &Tensor) -> Result<(Tensor, Tensor)> {
        if let Some(host) = &self.host {
            if let Some(both) = norm::add_and_norm(x, update, host)? {
                return Ok(both);
            }
        }
        let s = (x + update)?;
        let n = self.forward(&s)?;
        Ok((s, n))
    }
}

impl Module for LayerNorm {
    /// Normalises over the last dimension (token LayerNorm).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_dim(x, x.rank().saturating_sub(1))
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
            inner: LayerNorm::new(channels, eps, vb)?,
        })
    }

    /// Host copies of the parameters, for CPU ops that fuse the norm into their output pass.
    pub(crate) fn host(&self) -> Result<HostNorm> {
        if let Some(h) = &self.inner.host {
            return Ok(HostNorm::clone(h));
        }
        let get = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
        Ok(HostNorm {
            weight: get(&self.inner.weight)?,
            bias: get(&self.inner.bias)?,
            eps: self.inner.eps,
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
    proj_in: SwitchLinear,
    layers: Vec<SwitchLinear>,
    proj_out: SwitchLinear,
    activation: Activation,
    sigmoid_output: bool,
}

/// The shape of a [`FeedForward`] (the reference's constructor arguments, by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedForwardSpec {
    pub input_dim: usize,
    pub hidden_dim: usize,
    pub output_dim: usize,
    /// Counts `proj_in` and `proj_out`, so at least 2.
    pub num_layers: usize,
    pub activation: Activation,
    /// A sigmoid after the last layer (the IoU head).
    pub sigmoid_output: bool,
}

impl FeedForward {
    /// Loads the layers of `spec` from `vb`.
    pub fn new(spec: FeedForwardSpec, vb: VarBuilder) -> Result<Self> {
        let FeedForwardSpec {
            input_dim,
            hidden_dim,
            output_dim,
            num_layers,
            activation,
            sigmoid_output,
        } = spec;
        if num_layers < 2 {
            candle_core::bail!("FeedForward needs at least 2 layers, got {num_layers}");
        }
        // Packed at load: candle's layer re-packs its weight on every call, which made the
        // decoder's few-token MLPs slower than its image-wide products.
        let layer = |i: usize, o: usize, vb: VarBuilder| -> Result<SwitchLinear> {
            Ok(SwitchLinear::new(linear(i, o, vb)?))
        };
        let proj_in = layer(input_dim, hidden_dim, vb.pp("proj_in"))?;
        let layers = (0..num_layers - 2)
            .map(|i| layer(hidden_dim, hidden_dim, vb.pp("layers").pp(i)))
            .collect::<Result<Vec<_>>>()?;
        let proj_out = layer(hidden_dim, output_dim, vb.pp("proj_out"))?;
        Ok(Self {
            proj_in,
            layers,
            proj_out,
            activation,
            sigmoid_output,
        })
    }

    /// Switches bf16 products on or off for every layer (the `mask_decoder` row of the fast
    /// mode's policy); a layer whose width the bf16 kernel does not take stays exact.
    pub(crate) fn set_bf16(&mut self, on: bool) -> Result<()> {
        self.proj_in.set_bf16(on)?;
        for layer in &mut self.layers {
            layer.set_bf16(on)?;
        }
        self.proj_out.set_bf16(on)
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

/// The four projections of a multi-head attention and the softmax attention between them.
///
/// Every attention of EdgeTAM (decoder, memory attention with RoPE, perceiver) is built from
/// this; they differ only in what they do to the split heads (RoPE, added positions) before
/// [`HeadProjections::attend`].
#[derive(Debug, Clone)]
pub struct HeadProjections {
    q_proj: SwitchLinear,
    k_proj: SwitchLinear,
    v_proj: SwitchLinear,
    o_proj: SwitchLinear,
    num_heads: usize,
    head_dim: usize,
    scaling: f64,
    /// bf16 products in the attention (the fast mode; see [`crate::Precision`]).
    pub(crate) bf16_products: bool,
}

impl HeadProjections {
    /// Queries from `q_in` channels, keys/values from `kv_in`, `num_heads` heads of `head_dim`;
    /// the output projection returns to `q_in` channels.
    pub fn new(
        q_in: usize,
        kv_in: usize,
        num_heads: usize,
        head_dim: usize,
        bias: bool,
        vb: VarBuilder,
    ) -> Result<Self> {
        let inner = num_heads * head_dim;
        let lin = |i: usize, o: usize, name: &str| {
            if bias {
                linear(i, o, vb.pp(name))
            } else {
                candle_nn::linear_no_bias(i, o, vb.pp(name))
            }
        };
        Ok(Self {
            q_proj: SwitchLinear::new(lin(q_in, inner, "q_proj")?),
            k_proj: SwitchLinear::new(lin(kv_in, inner, "k_proj")?),
            v_proj: SwitchLinear::new(lin(kv_in, inner, "v_proj")?),
            o_proj: SwitchLinear::new(lin(inner, q_in, "o_proj")?),
            num_heads,
            head_dim,
            scaling: (head_dim as f64).powf(-0.5),
            bf16_products: false,
        })
    }

    /// Switches bf16 products on or off for the projections and the attention (the fast mode,
    /// see [`crate::Precision`]).
    pub(crate) fn set_bf16(&mut self, on: bool) -> Result<()> {
        for p in [
            &mut self.q_proj,
            &mut self.k_proj,
            &mut self.v_proj,
            &mut self.o_proj,
        ] {
            p.set_bf16(on)?;
        }
        self.bf16_products = on;
        Ok(())
    }

    /// The exact key, value and output projections and the head count (for folding them into
    /// the attention: [`crate::model::memory_attention::cross_attention`], [`crate::model::decoder::cross_attention`]).
    pub(crate) fn kvo(
        &self,
    ) -> (
        &candle_nn::Linear,
        &candle_nn::Linear,
        &candle_nn::Linear,
        usize,
    ) {
        (
            self.k_proj.exact(),
            self.v_proj.exact(),
            self.o_proj.exact(),
            self.num_heads,
        )
    }

    /// The softmax scale `head_dim^-0.5`.
    /// The query projection's exact layer (for folds composed at load).
    pub(crate) fn q(&self) -> &candle_nn::Linear {
        self.q_proj.exact()
    }

    pub(crate) fn scaling(&self) -> f64 {
        self.scaling
    }

    /// Projected queries `[N, heads, L, head_dim]` (contiguous).
    pub fn queries(&self, x: &Tensor) -> Result<Tensor> {
        self.split_heads(&self.q_proj.forward(x)?)
    }

    /// Projected keys `[N, heads, L, head_dim]` (contiguous).
    pub fn keys(&self, x: &Tensor) -> Result<Tensor> {
        self.split_heads(&self.k_proj.forward(x)?)
    }

    /// Projected values `[N, heads, L, head_dim]` (contiguous).
    pub fn values(&self, x: &Tensor) -> Result<Tensor> {
        self.split_heads(&self.v_proj.forward(x)?)
    }

    /// `[N, L, heads * head_dim]` -> contiguous `[N, heads, L, head_dim]`.
    pub fn split_heads(&self, x: &Tensor) -> Result<Tensor> {
        let (n, l, _) = x.dims3()?;
        crate::kernels::swap_axes_1_2(&x.reshape((n, l, self.num_heads, self.head_dim))?)
    }

    /// Heads `[N, heads, L, head_dim]` merged and through the output projection:
    /// `[N, L, q_in]` (what [`Self::attend`] does after the attention).
    pub fn project_out(&self, heads: &Tensor) -> Result<Tensor> {
        let (n, _, l, _) = heads.dims4()?;
        let merged = crate::kernels::swap_axes_1_2(heads)?.reshape((
            n,
            l,
            self.num_heads * self.head_dim,
        ))?;
        self.o_proj.forward(&merged)
    }

    /// `softmax(q k^T * scale) v`, heads merged, output projection: `[N, Lq, q_in]`.
    pub fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        // Scale after the product, softmax in f32: the reference's (eager) order; on CPU f32 a
        // fused kernel that never materialises the `Lq x Lk` scores.
        let out = if self.bf16_products {
            crate::kernels::attention::bf16::scaled_dot_product_bf16(q, k, v, self.scaling)?
        } else {
            crate::kernels::attention::scaled_dot_product(q, k, v, self.scaling)?
        }; // [N, heads, Lq, head_dim]
        self.project_out(&out)
    }
}

/// torch's default `nn.LayerNorm` eps, used by the two-way transformer's token norms.
pub const TORCH_LAYER_NORM_EPS: f64 = 1e-5;
