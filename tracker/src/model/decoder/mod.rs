//! SAM-style mask decoder (`EdgeTamVideoMaskDecoder`).
//!
//! Output tokens `[obj_score, iou, mask x (1 + num_multimask_outputs)]` are prepended to the
//! sparse prompt tokens and run through the two-way transformer with the image tokens. The image
//! tokens are upscaled x4 (mixing in the stride-8 and stride-4 features `feat_s1`, `feat_s0`), and
//! each mask token's hypernetwork MLP turns into per-pixel weights over the upscaled channels.
//!
//! `conv_s0`/`conv_s1` live under `mask_decoder.*` in the checkpoint but run once per frame, so
//! the image encoder loads them; this module takes their outputs.

pub(crate) mod attention;
pub(crate) mod cross_attention;
pub(crate) mod two_way_transformer;
pub(crate) mod upscale;

use candle_core::{DType, Tensor, D};
use candle_nn::VarBuilder;

use crate::error::{Error, Result};
use crate::kernels::norm::HostNorm;
use crate::model::config::{EdgeTamConfig, MaskDecoderConfig};
use crate::model::decoder::two_way_transformer::TwoWayTransformer;
use crate::model::decoder::upscale::{InputLayout, Upscale2x};
use crate::model::layers::{Activation, FeedForward, FeedForwardSpec, LayerNorm2d};

/// Eps of the upscale LayerNorm (`EdgeTamVideoLayerNorm` default), unlike the transformer's 1e-5.
const UPSCALE_NORM_EPS: f64 = 1e-6;

/// What the decoder predicts for each `[B, P]` prompt row (`M` masks: 3 with multimask output,
/// else 1).
#[derive(Debug, Clone)]
pub struct DecoderOutput {
    /// Low-resolution mask logits `[B, P, M, 4e, 4e]`.
    pub masks: Tensor,
    /// Predicted IoU per mask (after the head's sigmoid) `[B, P, M]`.
    pub iou: Tensor,
    /// The mask tokens the masks came from `[B, P, M, C]`; on the single-mask path always token
    /// 0, even when the dynamic rule picked a multimask output (the reference's behaviour, which
    /// the object pointer depends on).
    pub sam_tokens: Tensor,
    /// Object-presence logit `[B, P, 1]` (> 0: object visible).
    pub object_score: Tensor,
}

/// The mask decoder (everything under `mask_decoder.*` except `conv_s0`/`conv_s1`).
#[derive(Debug, Clone)]
pub struct MaskDecoder {
    output_tokens: Tensor,
    transformer: TwoWayTransformer,
    upscale_conv1: Upscale2x,
    upscale_norm: LayerNorm2d,
    /// The upscale norm's parameters on the host, for the fused CPU pass.
    upscale_norm_host: HostNorm,
    upscale_conv2: Upscale2x,
    hypernetworks: Vec<FeedForward>,
    iou_head: FeedForward,
    score_head: FeedForward,
    cfg: MaskDecoderConfig,
    hidden: usize,
    embed_size: usize,
}

/// What the mask decoder reads. A batch of 1 in the image-side tensors is shared by all `B`
/// prompt rows (several objects on one frame).
#[derive(Debug, Clone, Copy)]
pub struct DecoderInputs<'a> {
    /// `[B|1, C, e, e]`: level 2 + `no_memory_embedding`, or the memory-conditioned features.
    pub image_embed: &'a Tensor,
    /// `[B|1, C, e, e]`: the image-wide positional encoding.
    pub image_pe: &'a Tensor,
    /// `[B, P, T, C]`: sparse prompt tokens.
    pub sparse: &'a Tensor,
    /// `[B|1, C, e, e]`: the dense prompt embedding.
    pub dense: &'a Tensor,
    /// `[B|1, C/8, 4e, 4e]`: the stride-4 high-resolution features (`conv_s0`).
    pub feat_s0: &'a Tensor,
    /// `[B|1, C/4, 2e, 2e]`: the stride-8 high-resolution features (`conv_s1`).
    pub feat_s1: &'a Tensor,
}

impl MaskDecoder {
    /// `vb` at `mask_decoder`.
    pub fn new(cfg: &EdgeTamConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let dc = &cfg.mask_decoder_config;
        let c = dc.hidden_size;
        let num_mask_tokens = dc.num_multimask_outputs + 1;
        let output_tokens = Tensor::cat(
            &[
                vb.get((1, c), "obj_score_token.weight")?,
                vb.get((1, c), "iou_token.weight")?,
                vb.get((num_mask_tokens, c), "mask_tokens.weight")?,
            ],
            0,
        )?;
        let hypernetworks = (0..num_mask_tokens)
            .map(|i| {
                FeedForward::new(
                    FeedForwardSpec {
                        input_dim: c,
                        hidden_dim: c,
                        output_dim: c / 8,
                        num_layers: 3,
                        activation: Activation::Relu,
                        sigmoid_output: false,
                    },
                    vb.pp("output_hypernetworks_mlps").pp(i),
                )
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let upscale_norm = LayerNorm2d::new(c / 4, UPSCALE_NORM_EPS, vb.pp("upscale_layer_norm"))?;
        Ok(Self {
            output_tokens,
            transformer: TwoWayTransformer::new(dc, vb.pp("transformer"))?,
            upscale_conv1: Upscale2x::new(c, c / 4, vb.pp("upscale_conv1"))?,
            upscale_norm_host: upscale_norm.host()?,
            upscale_norm,
            upscale_conv2: Upscale2x::new(c / 4, c / 8, vb.pp("upscale_conv2"))?,
            hypernetworks,
            iou_head: FeedForward::new(
                FeedForwardSpec {
                    input_dim: c,
                    hidden_dim: dc.iou_head_hidden_dim,
                    output_dim: num_mask_tokens,
                    num_layers: dc.iou_head_depth,
                    activation: Activation::Relu,
                    sigmoid_output: true,
                },
                vb.pp("iou_prediction_head"),
            )?,
            score_head: FeedForward::new(
                FeedForwardSpec {
                    input_dim: c,
                    hidden_dim: c,
                    output_dim: 1,
                    num_layers: 3,
                    activation: Activation::Relu,
                    sigmoid_output: false,
                },
                vb.pp("pred_obj_score_head"),
            )?,
            cfg: dc.clone(),
            hidden: c,
            embed_size: cfg.embed_size(),
        })
    }

    /// Switches bf16 products on or off in the two-way transformer, the hypernetworks and the
    /// heads (the `mask_decoder` row of [`crate::model::bf16_policy::BF16_POLICY`]); the
    /// upscaling convolutions stay exact.
    pub(crate) fn set_bf16(&mut self, on: bool) -> candle_core::Result<()> {
        self.transformer.set_bf16(on)?;
        for mlp in &mut self.hypernetworks {
            mlp.set_bf16(on)?;
        }
        self.iou_head.set_bf16(on)?;
        self.score_head.set_bf16(on)?;
        Ok(())
    }

    /// Predicts masks for every prompt row of `inputs`. `multimask`: the 3 multimask outputs;
    /// otherwise one mask, chosen by the dynamic stability rule when the config enables it.
    pub fn forward(&self, inputs: &DecoderInputs, multimask: bool) -> Result<DecoderOutput> {
        let DecoderInputs {
            image_embed,
            image_pe,
            sparse,
            dense,
            feat_s0,
            feat_s1,
        } = *inputs;
        let c = self.hidden;
        let e = self.embed_size;
        let (b, p, t, sc) = sparse.dims4().map_err(|_| {
            Error::InvalidPrompt(format!(
                "sparse embeddings must be [B, P, T, C], got {:?}",
                sparse.dims()
            ))
        })?;
        if sc != c {
            return Err(Error::InvalidPrompt(format!(
                "sparse embeddings have {sc} channels, expected {c}"
            )));
        }
        let bp = b * p;
        let image = expand_rows(
            &crate::kernels::add(image_embed, dense)?,
            b,
            p,
            &[c, e, e],
            "image embedding + dense",
        )?;
        let image_pe = expand_rows(image_pe, b, p, &[c, e, e], "image positional encoding")?;
        // The fused upscale reads a shared (batch 1) map directly; others expand to one row
        // per prompt.
        let rows_of = |t: &Tensor, inner: &[usize], what: &str| -> Result<Tensor> {
            let shared = t.dim(0).ok() == Some(1) && t.dims()[1..] == *inner;
            if shared && t.device().is_cpu() {
                Ok(t.clone())
            } else {
                expand_rows(t, b, p, inner, what)
            }
        };
        let feat_s0 = rows_of(feat_s0, &[c / 8, 4 * e, 4 * e], "feat_s0")?;
        let feat_s1 = rows_of(feat_s1, &[c / 4, 2 * e, 2 * e], "feat_s1")?;

        let n_out = self.output_tokens.dim(0)?;
        let tokens = Tensor::cat(
            &[
                self.output_tokens
                    .unsqueeze(0)?
                    .broadcast_as((bp, n_out, c))?,
                sparse.reshape((bp, t, c))?,
            ],
            1,
        )?
        .contiguous()?;
        let (queries, keys) = self.transformer.forward(&tokens, &image, &image_pe)?;

        let num_masks = self.hypernetworks.len();
        let score_token = queries.narrow(1, 0, 1)?.squeeze(1)?;
        let iou_token = queries.narrow(1, 1, 1)?.squeeze(1)?;
        let mask_tokens = queries.narrow(1, 2, num_masks)?; // [BP, M, C]

        // Upscale the image tokens x4, mixing in the high-resolution features.
        let up = self.upscale(&keys, &feat_s1, &feat_s0)?;
        let (_, uc, uh, uw) = up.dims4()?;

        let hyper = self
            .hypernetworks
            .iter()
            .enumerate()
            .map(|(i, mlp)| mlp.forward(&mask_tokens.narrow(1, i, 1)?.squeeze(1)?))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let hyper = Tensor::stack(&hyper, 1)?; // [BP, M, C/8]
        let masks = hyper.matmul(&up.reshape((bp, uc, uh * uw))?)?; // [BP, M, HW]
        let masks = masks.reshape((bp, num_masks, uh, uw))?;

        let iou = self.iou_head.forward(&iou_token)?; // [BP, M]
        let object_score = self.score_head.forward(&score_token)?; // [BP, 1]

        let (masks, iou, sam_tokens) = if multimask {
            let m = num_masks - 1;
            (
                masks.narrow(1, 1, m)?,
                iou.narrow(1, 1, m)?,
                mask_tokens.narrow(1, 1, m)?,
            )
        } else {
            let tok0 = mask_tokens.narrow(1, 0, 1)?;
            if self.cfg.dynamic_multimask_via_stability {
                let (m, i) = self.dynamic_single_mask(&masks, &iou)?;
                (m, i, tok0)
            } else {
                (masks.narrow(1, 0, 1)?, iou.narrow(1, 0, 1)?, tok0)
            }
        };
        let m = masks.dim(1)?;
        Ok(DecoderOutput {
            masks: masks.reshape((b, p, m, uh, uw))?,
            iou: iou.reshape((b, p, m))?,
            sam_tokens: sam_tokens.contiguous()?.reshape((b, p, m, c))?,
            object_score: object_score.reshape((b, p, 1))?,
        })
    }

    /// `gelu(conv2(gelu(norm(conv1(keys) + feat_s1))) + feat_s0)`: the image tokens `[BP, e*e, C]`
    /// upscaled x4 to `[BP, C/8, 4e, 4e]`. `feat_s*` have batch `BP` or 1 (shared).
    fn upscale(&self, keys: &Tensor, feat_s1: &Tensor, feat_s0: &Tensor) -> Result<Tensor> {
        let e = self.embed_size;
        let fused = self.upscale_conv1.forward_fused(
            keys,
            InputLayout::Tokens,
            (e, e),
            feat_s1,
            Some(&self.upscale_norm_host),
        )?;
        if let Some(up) = fused {
            let fused = self.upscale_conv2.forward_fused(
                &up,
                InputLayout::Channels,
                (2 * e, 2 * e),
                feat_s0,
                None,
            )?;
            if let Some(up) = fused {
                return Ok(up);
            }
        }
        let gelu = Activation::Gelu;
        let up = self
            .upscale_conv1
            .forward(&keys.transpose(1, 2)?, e, e)?
            .broadcast_add(feat_s1)?;
        let up = gelu.apply(&self.upscale_norm.forward(&up)?)?;
        let up = self
            .upscale_conv2
            .forward(&up.flatten_from(2)?, 2 * e, 2 * e)?
            .broadcast_add(feat_s0)?;
        Ok(gelu.apply(&up)?)
    }

    /// The single-mask output: token 0's mask if it is stable, else the multimask output with
    /// the best predicted IoU (`_dynamic_multimask_via_stability`).
    fn dynamic_single_mask(&self, masks: &Tensor, iou: &Tensor) -> Result<(Tensor, Tensor)> {
        let (rows, m, h, w) = masks.dims4()?;
        let stability = stability_scores(
            &masks.narrow(1, 0, 1)?,
            self.cfg.dynamic_multimask_stability_delta,
        )?;
        let iou_host = iou.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let thresh = self.cfg.dynamic_multimask_stability_thresh;
        let picks: Vec<u32> = (0..rows)
            .map(|r| (r * m + select_single_mask(stability[r], &iou_host[r], thresh)) as u32)
            .collect();
        let picks = Tensor::from_vec(picks, rows, masks.device())?;
        let masks = masks
            .reshape((rows * m, h, w))?
            .index_select(&picks, 0)?
            .reshape((rows, 1, h, w))?;
        let iou = iou
            .reshape(rows * m)?
            .index_select(&picks, 0)?
            .reshape((rows, 1))?;
        Ok((masks, iou))
    }
}

/// Stability score of each mask (`_get_stability_scores`): the fraction of pixels with logit
/// `> -delta` that also have logit `> delta` (1 when none exceeds `-delta`).
///
/// `masks`: `[..., H, W]`; one score per leading index, in order.
pub fn stability_scores(masks: &Tensor, delta: f64) -> Result<Vec<f32>> {
    let flat = masks.flatten_from(D::Minus2)?;
    let count = |t: Tensor| -> Result<Vec<f32>> {
        Ok(t.to_dtype(DType::F32)?
            .sum(D::Minus1)?
            .flatten_all()?
            .to_vec1::<f32>()?)
    };
    let inner = count(flat.gt(delta)?)?;
    let outer = count(flat.gt(-delta)?)?;
    Ok(inner
        .iter()
        .zip(&outer)
        .map(|(&i, &u)| if u > 0.0 { i / u } else { 1.0 })
        .collect())
}

/// The dynamic multimask rule for one prompt row: index 0 (the single-mask token) when its
/// stability reaches `thresh`, else `1 + argmax(iou[1..])` (first maximum on ties, as torch).
///
/// `iou` holds all `1 + num_multimask_outputs` predictions.
pub fn select_single_mask(stability: f32, iou: &[f32], thresh: f64) -> usize {
    if stability >= thresh as f32 || iou.len() < 2 {
        return 0;
    }
    let mut best = 1;
    for (i, &v) in iou.iter().enumerate().skip(2) {
        if v > iou[best] {
            best = i;
        }
    }
    best
}

/// Brings an image-side tensor `[B|1, ...]` to one row per prompt `[B * P, ...]`
/// (`repeat_interleave(P)`, or a broadcast of a single image).
fn expand_rows(t: &Tensor, b: usize, p: usize, inner: &[usize], what: &str) -> Result<Tensor> {
    let dims = t.dims();
    if dims.len() != inner.len() + 1 || dims[1..] != *inner {
        return Err(Error::InvalidImage(format!(
            "{what} must be [B, {inner:?}], got {dims:?}"
        )));
    }
    let mut shape = vec![b * p];
    shape.extend_from_slice(inner);
    match dims[0] {
        n if n == b && p == 1 => Ok(t.clone()),
        1 => Ok(t.broadcast_as(shape)?),
        n if n == b => {
            let idx: Vec<u32> = (0..b * p).map(|r| (r / p) as u32).collect();
            let idx = Tensor::from_vec(idx, b * p, t.device())?;
            Ok(t.index_select(&idx, 0)?)
        }
        n => Err(Error::InvalidImage(format!(
            "{what} has batch {n}, expected {b} (one per prompt row) or 1 (shared)"
        ))),
    }
}
