//! Checks of the prompt encoder, the image-wide positional encoding, the mask decoder and the
//! mask post-processing against a reference fixture.
//!
//! Every stage is fed the fixture's own inputs. Subsampled (1024) fixtures store the image-side
//! tensors on a 16x16 grid only, so there the decoder is skipped and dense outputs are compared
//! on the same grid.

use candle_core::{Tensor, D};

use super::{StageReport, STAGE_REL_L2};
use crate::checks::compare::{compare, mask_iou, Comparison};
use crate::checks::fixture::{subsample, Fixture};
use crate::checks::Result;
use crate::frame::postprocess::{binarize, resize_logits};
use crate::model::decoder::{DecoderInputs, MaskDecoder};
use crate::model::prompt_encoder::{ImagePositionalEmbedding, PromptEncoder};
use crate::model::weights::Weights;

/// Prompt cases the fixture generator writes (only some at 1024).
pub const CASES: [&str; 5] = ["point1", "points", "box", "box_points", "mask"];

/// Grid of the subsampled fixtures.
const SUBSAMPLE_GRID: usize = 16;
/// Bar for IoU and object-score heads (absolute).
const HEAD_MAX_ABS: f64 = 1e-3;
/// Bar for mask logits: max |diff| relative to the std of the reference logits.
const MASK_MAX_ABS_PER_STD: f64 = 1e-3;
/// Bar for the post-processed binary mask.
const POST_MASK_IOU: f64 = 0.999;

/// The decoder-side modules, built from `weights`.
pub struct DecoderModules {
    pub image_pe: ImagePositionalEmbedding,
    pub prompt_encoder: PromptEncoder,
    pub mask_decoder: MaskDecoder,
}

impl DecoderModules {
    /// Builds the modules for the fixture's config on the fixture's device.
    pub fn load(fx: &Fixture, weights: &Weights) -> Result<Self> {
        let device = fx.get("image.embed")?.device().clone();
        let cfg = &fx.config;
        let vb = weights.var_builder(&device);
        let lift = |e| weights.lift(e);
        Ok(Self {
            image_pe: ImagePositionalEmbedding::new(cfg, vb.pp("shared_image_embedding"))
                .map_err(lift)?,
            prompt_encoder: PromptEncoder::new(cfg, vb.pp("prompt_encoder")).map_err(lift)?,
            mask_decoder: MaskDecoder::new(cfg, vb.pp("mask_decoder")).map_err(lift)?,
        })
    }
}

/// Runs every check that the fixture's contents allow.
pub fn run(fx: &Fixture, weights: &Weights) -> Result<Vec<StageReport>> {
    let m = DecoderModules::load(fx, weights)?;
    let full = fx.is_full();
    let grid = |t: Tensor| -> Result<Tensor> {
        if full {
            Ok(t)
        } else {
            subsample(&t, SUBSAMPLE_GRID)
        }
    };
    let mut reports = Vec::new();

    let pe = grid(m.image_pe.image_wide(fx.config.embed_size())?)?;
    reports.push(StageReport::rel_l2(
        "image.dense_pe",
        compare(&pe, fx.get("image.dense_pe")?)?,
        STAGE_REL_L2,
    ));

    for case in CASES {
        let p = format!("prompt.{case}");
        if !fx.has(&format!("{p}.sparse")) {
            continue;
        }
        let points = fx.get(&format!("{p}.points"))?;
        let labels = fx.get(&format!("{p}.labels"))?;
        let mask_name = format!("{p}.mask_input");
        let mask = if fx.has(&mask_name) {
            Some(fx.get(&mask_name)?)
        } else {
            None
        };
        let (sparse, dense) = m.prompt_encoder.embed(Some((points, labels)), mask)?;
        reports.push(StageReport::rel_l2(
            format!("{p}.sparse"),
            compare(&sparse, fx.get(&format!("{p}.sparse"))?)?,
            STAGE_REL_L2,
        ));
        reports.push(StageReport::rel_l2(
            format!("{p}.dense"),
            compare(&grid(dense.contiguous()?)?, fx.get(&format!("{p}.dense"))?)?,
            STAGE_REL_L2,
        ));

        if full {
            reports.extend(decoder_case(fx, &m.mask_decoder, case)?);
        }
        reports.extend(post_case(fx, case)?);
    }
    Ok(reports)
}

/// Mask decoder with multimask on and off, fed the fixture's prompt embeddings.
fn decoder_case(fx: &Fixture, decoder: &MaskDecoder, case: &str) -> Result<Vec<StageReport>> {
    let mut reports = Vec::new();
    for mm in [true, false] {
        let inputs = DecoderInputs {
            image_embed: fx.get("image.embed")?,
            image_pe: fx.get("image.dense_pe")?,
            sparse: fx.get(&format!("prompt.{case}.sparse"))?,
            dense: fx.get(&format!("prompt.{case}.dense"))?,
            feat_s0: fx.get("image.feat_s0")?,
            feat_s1: fx.get("image.feat_s1")?,
        };
        let out = decoder.forward(&inputs, mm)?;
        let d = format!("decoder.{case}.mm{}", u8::from(mm));
        let masks_name = format!("{d}.masks");
        if fx.has(&masks_name) {
            reports.push(mask_logits_report(
                masks_name.clone(),
                compare(&out.masks, fx.get(&masks_name)?)?,
            ));
        }
        reports.push(StageReport::max_abs(
            format!("{d}.iou"),
            compare(&out.iou, fx.get(&format!("{d}.iou"))?)?,
            HEAD_MAX_ABS,
        ));
        reports.push(StageReport::max_abs(
            format!("{d}.object_score"),
            compare(&out.object_score, fx.get(&format!("{d}.object_score"))?)?,
            HEAD_MAX_ABS,
        ));
        reports.push(StageReport::rel_l2(
            format!("{d}.tokens"),
            compare(&out.sam_tokens, fx.get(&format!("{d}.tokens"))?)?,
            STAGE_REL_L2,
        ));
    }
    Ok(reports)
}

/// Mask logits must meet both the relative L2 bar and a max-abs bar scaled by the reference's
/// spread (logits reach +-100, so a pure max-abs bar would be meaningless).
pub fn mask_logits_report(name: impl Into<String>, c: Comparison) -> StageReport {
    let max_abs = MASK_MAX_ABS_PER_STD * c.expected_std;
    let passed = c.rel_l2 <= STAGE_REL_L2 && c.max_abs <= max_abs && c.rel_l2.is_finite();
    StageReport::custom(
        name,
        c,
        passed,
        format!(
            "rel_l2 <= {STAGE_REL_L2:e}, max_abs <= {MASK_MAX_ABS_PER_STD:e} x std = {max_abs:.2e}"
        ),
    )
}

/// Post-processing of the reference's own low-res masks to the original image size.
fn post_case(fx: &Fixture, case: &str) -> Result<Vec<StageReport>> {
    let mut reports = Vec::new();
    let low_res_name = format!("frame.{case}.low_res_masks");
    if !fx.has(&low_res_name) {
        return Ok(reports);
    }
    let (h, w, _) = fx.get("image.rgb_u8")?.dims3()?;
    let low_res = fx.get(&low_res_name)?;
    let (lh, lw) = (low_res.dim(D::Minus2)?, low_res.dim(D::Minus1)?);
    let low_res = low_res.reshape(((), 1, lh, lw))?;
    let logits = resize_logits(&low_res, h, w)?;
    let logits_name = format!("post.{case}.logits");
    if fx.has(&logits_name) {
        let expected = fx.get(&logits_name)?;
        reports.push(StageReport::rel_l2(
            logits_name.clone(),
            compare(&logits.reshape(expected.dims())?, expected)?,
            STAGE_REL_L2,
        ));
    }
    let mask_name = format!("post.{case}.mask");
    if fx.has(&mask_name) {
        let expected = fx.get(&mask_name)?;
        let ours = binarize(&logits)?.reshape(expected.dims())?;
        let iou = mask_iou(&ours, expected)?;
        reports.push(StageReport::custom(
            format!("{mask_name} (iou={iou:.6})"),
            compare(&ours, expected)?,
            iou >= POST_MASK_IOU,
            format!("iou >= {POST_MASK_IOU}"),
        ));
    }
    Ok(reports)
}
