//! Image-path checks: preprocessing, backbone stages, FPN levels and their position encodings,
//! and the decoder's high-resolution projections.
//!
//! The encoder is fed the fixture's own pixels when the fixture stores them in full, so an error
//! in preprocessing does not hide or compound one in the encoder. The 1024 fixture stores pixels
//! subsampled; there our own preprocessed pixels are used, which the pixel check requires to be
//! exact.

use candle_core::{DType, Tensor};

use crate::checks::compare::compare;
use crate::checks::fixture::{subsample, Fixture};
use crate::checks::{CheckError, Result};
use crate::checks::{StageReport, STAGE_REL_L2};
use crate::frame::preprocess::preprocess;
use crate::model::image_encoder::ImageEncoder;
use crate::model::weights::Weights;

/// `t` subsampled like the fixture's `expected` (a no-op when the fixture stores it in full).
fn like(t: &Tensor, expected: &Tensor) -> Result<Tensor> {
    let grid = expected.dims().last().copied().unwrap_or(1);
    subsample(t, grid)
}

fn check(name: &str, ours: &Tensor, fx: &Fixture) -> Result<StageReport> {
    let expected = fx.get(name)?;
    let ours = like(ours, expected)?;
    Ok(StageReport::rel_l2(
        name,
        compare(&ours, expected)?,
        STAGE_REL_L2,
    ))
}

/// Runs every image-path stage against fixture `fx` with checkpoint `weights`.
pub fn run(fx: &Fixture, weights: &Weights) -> Result<Vec<StageReport>> {
    let rgb = fx.get("image.rgb_u8")?;
    let device = rgb.device().clone();
    let (h, w) = match rgb.dims() {
        [h, w, 3] => (*h, *w),
        dims => {
            return Err(CheckError::Fixture(format!(
                "fixture image.rgb_u8 must be [H, W, 3], got {dims:?}"
            )))
        }
    };
    let bytes = rgb.to_dtype(DType::U8)?.flatten_all()?.to_vec1::<u8>()?;
    let cfg = &fx.config;
    let ours_pixels = preprocess(&bytes, w, h, cfg.image_size, &device)?;

    let mut reports = vec![check("preprocess.pixel_values", &ours_pixels, fx)?];

    let pixels = if fx.is_full() {
        fx.get("preprocess.pixel_values")?.clone()
    } else {
        ours_pixels
    };
    let encoder =
        ImageEncoder::new(cfg, weights.var_builder(&device)).map_err(|e| weights.lift(e))?;
    let (features, neck) = encoder.forward_with_neck(&pixels)?;
    for (i, s) in neck.stages.iter().enumerate() {
        reports.push(check(&format!("backbone.stage{i}"), s, fx)?);
    }
    for (i, (f, p)) in neck.fpn.iter().zip(&neck.pos).enumerate() {
        reports.push(check(&format!("neck.fpn{i}"), f, fx)?);
        reports.push(check(&format!("neck.pos{i}"), p, fx)?);
    }
    reports.push(check("image.feat_s0", &features.feat_s0, fx)?);
    reports.push(check("image.feat_s1", &features.feat_s1, fx)?);
    Ok(reports)
}
