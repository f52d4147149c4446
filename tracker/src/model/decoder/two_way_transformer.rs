//! The mask decoder's two-way transformer (`EdgeTamVideoTwoWayTransformer`): prompt tokens and
//! image tokens attend to each other, then a final token-to-image attention.

use candle_core::{Module, Tensor};
use candle_nn::VarBuilder;

use crate::error::Result;
use crate::kernels::nchw_to_tokens;
use crate::model::config::MaskDecoderConfig;
use crate::model::decoder::attention::Attention;
use crate::model::layers::{
    Activation, FeedForward, FeedForwardSpec, LayerNorm, TORCH_LAYER_NORM_EPS,
};

/// One `EdgeTamVideoTwoWayAttentionBlock`.
#[derive(Debug, Clone)]
struct TwoWayBlock {
    self_attn: Attention,
    norm1: LayerNorm,
    cross_token_to_image: Attention,
    norm2: LayerNorm,
    mlp: FeedForward,
    norm3: LayerNorm,
    norm4: LayerNorm,
    cross_image_to_token: Attention,
    /// Layer 0: the self-attention sees no positional term and has **no residual** (its output
    /// replaces the tokens), as in SAM.
    skip_first_layer_pe: bool,
}

impl TwoWayBlock {
    fn new(
        cfg: &MaskDecoderConfig,
        skip_first_layer_pe: bool,
        vb: VarBuilder,
    ) -> candle_core::Result<Self> {
        let c = cfg.hidden_size;
        let heads = cfg.num_attention_heads;
        let down = cfg.attention_downsample_rate;
        let ln = |name: &str| LayerNorm::new(c, TORCH_LAYER_NORM_EPS, vb.pp(name));
        Ok(Self {
            self_attn: Attention::new(c, heads, 1, vb.pp("self_attn"))?,
            norm1: ln("layer_norm1")?,
            cross_token_to_image: Attention::new(
                c,
                heads,
                down,
                vb.pp("cross_attn_token_to_image"),
            )?,
            norm2: ln("layer_norm2")?,
            // The reference sizes this MLP's depth with `num_hidden_layers` (2: proj_in, proj_out).
            mlp: FeedForward::new(
                FeedForwardSpec {
                    input_dim: c,
                    hidden_dim: cfg.mlp_dim,
                    output_dim: c,
                    num_layers: cfg.num_hidden_layers,
                    activation: Activation::Relu,
                    sigmoid_output: false,
                },
                vb.pp("mlp"),
            )?,
            norm3: ln("layer_norm3")?,
            norm4: ln("layer_norm4")?,
            cross_image_to_token: Attention::new(
                c,
                heads,
                down,
                vb.pp("cross_attn_image_to_token"),
            )?,
            skip_first_layer_pe,
        })
    }

    fn set_bf16(&mut self, on: bool) -> candle_core::Result<()> {
        self.self_attn.set_bf16(on)?;
        self.cross_token_to_image.set_bf16(on)?;
        self.mlp.set_bf16(on)?;
        self.cross_image_to_token.set_bf16(on)?;
        Ok(())
    }

    /// `queries` `[N, T, C]`, `keys` `[N, HW, C]`, with their positional terms.
    fn forward(
        &self,
        queries: &Tensor,
        keys: &Tensor,
        query_pe: &Tensor,
        key_pe: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let queries = if self.skip_first_layer_pe {
            self.self_attn.forward(queries, queries, queries)?
        } else {
            let q = (queries + query_pe)?;
            (queries + self.self_attn.forward(&q, &q, queries)?)?
        };
        let queries = self.norm1.forward(&queries)?;

        let q = (&queries + query_pe)?;
        let k = crate::kernels::add(keys, key_pe)?;
        let attn = self.cross_token_to_image.forward(&q, &k, keys)?;
        let queries = self.norm2.forward(&(queries + attn)?)?;

        let mlp = self.mlp.forward(&queries)?;
        let queries = self.norm3.forward(&(queries + mlp)?)?;

        let q = (&queries + query_pe)?;
        let attn = self.cross_image_to_token.forward(&k, &q, &queries)?;
        let keys = self.norm4.forward(&crate::kernels::add(keys, &attn)?)?;
        Ok((queries, keys))
    }
}

/// The two-way transformer.
#[derive(Debug, Clone)]
pub struct TwoWayTransformer {
    layers: Vec<TwoWayBlock>,
    final_attn_token_to_image: Attention,
    norm_final: LayerNorm,
}

impl TwoWayTransformer {
    /// `vb` at `mask_decoder.transformer`.
    pub fn new(cfg: &MaskDecoderConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| TwoWayBlock::new(cfg, i == 0, vb.pp("layers").pp(i)))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            final_attn_token_to_image: Attention::new(
                cfg.hidden_size,
                cfg.num_attention_heads,
                cfg.attention_downsample_rate,
                vb.pp("final_attn_token_to_image"),
            )?,
            norm_final: LayerNorm::new(
                cfg.hidden_size,
                TORCH_LAYER_NORM_EPS,
                vb.pp("layer_norm_final_attn"),
            )?,
        })
    }

    /// Switches bf16 products on or off in every attention and MLP.
    pub(crate) fn set_bf16(&mut self, on: bool) -> candle_core::Result<()> {
        for layer in &mut self.layers {
            layer.set_bf16(on)?;
        }
        self.final_attn_token_to_image.set_bf16(on)?;
        Ok(())
    }

    /// `tokens` `[N, T, C]`; `image`, `image_pe` `[N, C, h, w]`.
    /// Returns the updated tokens `[N, T, C]` and image tokens `[N, hw, C]`.
    pub fn forward(
        &self,
        tokens: &Tensor,
        image: &Tensor,
        image_pe: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let mut keys = nchw_to_tokens(image)?;
        let key_pe = nchw_to_tokens(image_pe)?;
        let mut queries = tokens.clone();
        for layer in &self.layers {
            let (q, k) = layer.forward(&queries, &keys, tokens, &key_pe)?;
            queries = q;
            keys = k;
        }
        let q = (&queries + tokens)?;
        let k = crate::kernels::add(&keys, &key_pe)?;
        let attn = self.final_attn_token_to_image.forward(&q, &k, &keys)?;
        let queries = self.norm_final.forward(&(queries + attn)?)?;
        Ok((queries, keys))
    }
}
