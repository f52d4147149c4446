//! End-to-end single-frame checks: raw image + user prompt in, masks out, against the reference.
//!
//! Unlike the per-stage checks, nothing here is fed reference intermediates: errors of every
//! stage compound, as they do for a user.

use candle_core::{DType, Tensor};

use super::{StageReport, STAGE_REL_L2};
use crate::checks::compare::{compare, mask_iou};
use crate::checks::fixture::Fixture;
use crate::checks::Result;
use crate::model::edgetam::{EdgeTam, MultimaskMode};
use crate::model::prompt::{Point, PointLabel, Prompt};
use crate::model::weights::Weights;

/// Prompt cases the generator writes, in its order.
pub const CASES: &[&str] = &["point1", "points", "box", "box_points"];

/// Rebuilds the user's prompt of a fixture case from its raw (original-pixel) values.
pub fn fixture_prompt(fx: &Fixture, case: &str) -> Result<Prompt> {
    let mut prompt = Prompt::default();
    let key = |s: &str| format!("prompt.{case}.{s}");
    if fx.has(&key("raw_box")) {
        let b = fx.get(&key("raw_box"))?.to_vec1::<f32>()?;
        if let [x0, y0, x1, y1] = b[..] {
            prompt.bbox = Some([x0, y0, x1, y1]);
        }
    }
    if fx.has(&key("raw_points")) {
        let pts = fx.get(&key("raw_points"))?.to_vec2::<f32>()?;
        let labels = fx.get(&key("raw_labels"))?.to_vec1::<i64>()?;
        for (p, l) in pts.iter().zip(labels) {
            prompt.points.push(Point {
                x: p[0],
                y: p[1],
                label: if l == 1 {
                    PointLabel::Positive
                } else {
                    PointLabel::Negative
                },
            });
        }
    }
    Ok(prompt)
}

/// Decoder-logit bar of the issue: rel L2 <= 1e-4 and max |diff| <= 1e-3 x the reference's std.
pub fn logits_report(name: String, ours: &Tensor, reference: &Tensor) -> Result<StageReport> {
    let c = compare(ours, reference)?;
    let passed =
        c.rel_l2 <= STAGE_REL_L2 && c.max_abs <= 1e-3 * c.expected_std.max(f64::MIN_POSITIVE);
    Ok(StageReport::custom(
        name,
        c,
        passed,
        "rel_l2 <= 1e-4, max_abs <= 1e-3*std",
    ))
}

/// Binary-mask bar: IoU >= 0.999 (reported in the `cosine` column as the IoU).
pub fn mask_report(name: String, ours: &Tensor, reference: &Tensor) -> Result<StageReport> {
    let mut c = compare(
        &ours.to_dtype(DType::F32)?,
        &reference.to_dtype(DType::F32)?,
    )?;
    let iou = mask_iou(ours, reference)?;
    c.cosine = iou;
    Ok(StageReport::custom(
        name,
        c,
        iou >= 0.999,
        "IoU >= 0.999 (cos column = IoU)",
    ))
}

/// Runs the single-frame model on the fixture's raw image and prompts.
pub fn run(fx: &Fixture, weights: &Weights) -> Result<Vec<StageReport>> {
    let device = fx.get("image.rgb_u8")?.device().clone();
    let model = EdgeTam::from_weights(fx.config.clone(), weights, &device)?;
    run_with_model(fx, &model)
}

/// As [`run`], with a model already built from the fixture's config.
pub fn run_with_model(fx: &Fixture, model: &EdgeTam) -> Result<Vec<StageReport>> {
    let image = fx.get("image.rgb_u8")?;
    let (h, w, _) = image.dims3()?;
    let rgb = image.flatten_all()?.to_vec1::<u8>()?;
    let emb = model.encode_image(&rgb, w, h)?;
    let mut reports = Vec::new();
    for case in CASES {
        let f = |s: &str| format!("frame.{case}.{s}");
        if !fx.has(&f("low_res_masks")) {
            continue;
        }
        let prompt = fixture_prompt(fx, case)?;
        let (coords, _) =
            prompt.to_model_inputs(w, h, model.config().image_size, model.device())?;
        reports.push(StageReport::max_abs(
            format!("prompt.{case}.coords"),
            compare(&coords, fx.get(&format!("prompt.{case}.points"))?)?,
            1e-6,
        ));
        let seg = model.segment(&emb, &prompt, MultimaskMode::Auto)?;
        let want_mm = fx
            .get(&f("multimask"))?
            .to_vec1::<u8>()?
            .first()
            .copied()
            .unwrap_or(0)
            != 0;
        let mm_cmp = compare(
            &Tensor::new(&[seg.multimask as u8 as f32], model.device())?,
            &Tensor::new(&[want_mm as u8 as f32], model.device())?,
        )?;
        reports.push(StageReport::max_abs(
            format!("frame.{case}.multimask_rule"),
            mm_cmp,
            0.0,
        ));
        let low = fx.get(&f("low_res_masks"))?;
        reports.push(logits_report(
            format!("frame.{case}.low_res_masks"),
            &seg.low_res_logits,
            low,
        )?);
        reports.push(mask_report(
            format!("frame.{case}.low_res_binary"),
            &seg.low_res_logits.gt(0.0)?,
            &low.gt(0.0)?,
        )?);
        // Chosen mask's IoU prediction (the reference's `iou_scores` hold all candidates).
        let iou = Tensor::new(seg.iou_scores.as_slice(), model.device())?;
        reports.push(StageReport::max_abs(
            format!("frame.{case}.iou"),
            compare(&iou, &fx.get(&f("iou"))?.flatten_all()?)?,
            1e-3,
        ));
        let score = Tensor::new(&[seg.object_score], model.device())?;
        reports.push(StageReport::max_abs(
            format!("frame.{case}.object_score"),
            compare(&score, &fx.get(&f("object_score"))?.flatten_all()?)?,
            1e-3,
        ));
        reports.push(StageReport::rel_l2(
            format!("frame.{case}.object_pointer"),
            compare(
                &seg.object_pointer.flatten_all()?,
                &fx.get(&f("object_pointer"))?.flatten_all()?,
            )?,
            STAGE_REL_L2,
        ));
        let (logits, mask) = model.mask_at_original(&emb, &seg)?;
        let post_logits = format!("post.{case}.logits");
        if fx.has(&post_logits) {
            let reference = fx.get(&post_logits)?;
            reports.push(logits_report(
                post_logits,
                &logits.reshape(reference.shape())?,
                reference,
            )?);
        }
        let reference = fx.get(&format!("post.{case}.mask"))?;
        reports.push(mask_report(
            format!("post.{case}.mask"),
            &mask.reshape(reference.shape())?,
            reference,
        )?);
    }
    Ok(reports)
}
