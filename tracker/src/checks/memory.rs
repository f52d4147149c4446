//! Memory encoder + spatial perceiver checks against `fixtures/memory_256`
//! (`tools/reference/generate_memory_fixtures.py`).
//!
//! Three cases of `_encode_new_memory`: a prompted frame (binarised mask), a tracked frame
//! (sigmoid of the same logits) and an occluded object (score <= 0). Each stage is fed the
//! reference's own inputs; the prompted frame's 0/1 mask is taken from the fixture, since float
//! noise in the upsample could flip pixels at the threshold. A batched run (all three cases as
//! B = 3) checks that objects batch independently.

use candle_core::{DType, Tensor};

use super::frame::mask_report;
use super::{StageReport, STAGE_REL_L2};
use crate::checks::compare::compare;
use crate::checks::fixture::Fixture;
use crate::checks::Result;
use crate::model::memory_encoder::{mask_for_memory, scale_mask, MaskSource, MemoryEncoder};
use crate::model::perceiver::SpatialPerceiver;
use crate::model::weights::Weights;

/// Cases the generator writes, in its order (also the batch order of the batched check).
pub const CASES: &[&str] = &["prompted", "tracked", "occluded"];

/// Side of the generator's `window_input()` grid.
const WINDOW_GRID: usize = 32;

/// The generator's `window_input()`: `2 sin(0.7c + 1.3y + 0.9x + 0.05cy)` in f64, rounded to f32,
/// `[1, c, n, n]`.
fn window_input(n: usize, c: usize, device: &candle_core::Device) -> Result<Tensor> {
    let mut data = Vec::with_capacity(c * n * n);
    for ci in 0..c {
        for y in 0..n {
            for x in 0..n {
                let (ci, y, x) = (ci as f64, y as f64, x as f64);
                data.push((2.0 * (0.7 * ci + 1.3 * y + 0.9 * x + 0.05 * ci * y).sin()) as f32);
            }
        }
    }
    Ok(Tensor::from_vec(data, (1, c, n, n), device)?)
}

fn rel(name: String, ours: &Tensor, reference: &Tensor) -> Result<StageReport> {
    Ok(StageReport::rel_l2(
        name,
        compare(ours, reference)?,
        STAGE_REL_L2,
    ))
}

/// Builds both stages from `weights` and runs every memory check of the fixture.
pub fn run(fx: &Fixture, weights: &Weights) -> Result<Vec<StageReport>> {
    let pix_feat = fx.get("memory.pix_feat")?;
    let device = pix_feat.device().clone();
    let cfg = &fx.config;
    let vb = weights.var_builder(&device);
    let encoder = MemoryEncoder::new(cfg, vb.pp("memory_encoder")).map_err(|e| match e {
        crate::Error::Tensor(e) => weights.lift(e),
        other => other,
    })?;
    let perceiver =
        SpatialPerceiver::new(cfg, vb.pp("spatial_perceiver")).map_err(|e| match e {
            crate::Error::Tensor(e) => weights.lift(e),
            other => other,
        })?;

    let mut reports = Vec::new();
    let low_res = fx.get("memory.low_res_masks")?;
    let score = fx.get("memory.object_score")?;

    // Mask inputs from the decoder's low-res logits, as `_encode_new_memory` builds them.
    let binary = fx.get("memory.prompted.mask_binary")?;
    let prompted = mask_for_memory(cfg, low_res, score, MaskSource::Prompted)?;
    reports.push(mask_report(
        "memory.prompted.mask_for_mem".into(),
        &prompted.gt(0.0)?,
        binary,
    )?);
    let tracked_ref = fx.get("memory.tracked.mask_for_mem")?;
    let tracked = mask_for_memory(cfg, low_res, score, MaskSource::Tracked)?;
    reports.push(rel(
        "memory.tracked.mask_for_mem".into(),
        &tracked,
        tracked_ref,
    )?);
    let occluded = mask_for_memory(cfg, low_res, &score.neg()?, MaskSource::Tracked)?;
    let occluded_ref = Tensor::full(
        cfg.sigmoid_bias_for_mem_enc as f32,
        tracked_ref.shape(),
        &device,
    )?;
    reports.push(StageReport::max_abs(
        "memory.occluded.mask_for_mem",
        compare(&occluded, &occluded_ref)?,
        0.0,
    ));
    let occluded_pts = mask_for_memory(cfg, low_res, &score.neg()?, MaskSource::Prompted)?;
    reports.push(StageReport::max_abs(
        "memory.occluded.mask_for_mem_prompted",
        compare(&occluded_pts, &occluded_ref)?,
        0.0,
    ));

    // The exact inputs the reference used, per case.
    let inputs = [
        scale_mask(cfg, &binary.to_dtype(DType::F32)?)?,
        tracked_ref.clone(),
        occluded_ref,
    ];

    // Tracked frame: every stage on the reference's own inputs.
    let t = |s: &str| format!("memory.tracked.{s}");
    let ds = encoder.downsample_mask(tracked_ref)?;
    reports.push(rel(
        t("mask_downsampler"),
        &ds,
        fx.get(&t("mask_downsampler"))?,
    )?);
    let fused = encoder.fuse(pix_feat, fx.get(&t("mask_downsampler"))?)?;
    reports.push(rel(t("fuser"), &fused, fx.get(&t("fuser"))?)?);
    let (features, pos) = encoder.project(fx.get(&t("fuser"))?)?;
    reports.push(rel(t("features"), &features, fx.get(&t("features"))?)?);
    reports.push(rel(
        "memory.pos_enc".into(),
        &pos,
        fx.get("memory.pos_enc")?,
    )?);

    let pos_ref = fx.get("memory.pos_enc")?;
    let perceiver_pos_ref = fx.get("memory.perceiver_pos")?;
    for (case, mask) in CASES.iter().zip(&inputs) {
        let f = |s: &str| format!("memory.{case}.{s}");
        // Whole encoder from its inputs (for the tracked case: compounding of the stages above).
        let (features, pos) = encoder.forward(pix_feat, mask)?;
        reports.push(rel(f("encoder"), &features, fx.get(&f("features"))?)?);
        if *case == "tracked" {
            reports.push(rel(f("encoder_pos"), &pos, pos_ref)?);
        }
        // Perceiver on the reference's memory features.
        let (memory, mem_pos) = perceiver.forward(fx.get(&f("features"))?, pos_ref)?;
        reports.push(rel(f("perceiver"), &memory, fx.get(&f("memory"))?)?);
        reports.push(rel(f("perceiver_pos"), &mem_pos, perceiver_pos_ref)?);
    }

    // End to end: low-res logits -> memory, the tracked path (errors of every stage compound).
    let (features, pos) = encoder.forward(pix_feat, &tracked)?;
    let (memory, _) = perceiver.forward(&features, &pos)?;
    reports.push(rel(
        "memory.tracked.end_to_end".into(),
        &memory,
        fx.get("memory.tracked.memory")?,
    )?);

    // The 2-D path with 2x2 windows (at 256 they are 1x1): a 32x32 input rebuilt from the
    // generator's formula.
    let grid = WINDOW_GRID;
    let c = cfg.perceiver_resampler_hidden_size;
    let win = window_input(grid, c, &device)?;
    let win_pos = crate::model::position_encoding::sine_position_embedding(c, grid, grid, &device)?;
    let (memory, _) = perceiver.forward(&win, &win_pos)?;
    let n1 = cfg.perceiver_resampler_num_latents;
    let n2 = cfg.perceiver_resampler_num_latents_2d;
    reports.push(rel(
        "memory.window2.perceiver_2d".into(),
        &memory.narrow(1, n1, n2)?,
        fx.get("memory.window2.memory_2d")?,
    )?);

    // Batched: the three cases as B = 3 give each case's result.
    let b = CASES.len();
    let masks = Tensor::cat(&inputs, 0)?;
    let pix = pix_feat.repeat((b, 1, 1, 1))?;
    let (features, pos) = encoder.forward(&pix, &masks)?;
    let feats_ref = CASES
        .iter()
        .map(|c| fx.get(&format!("memory.{c}.features")).cloned())
        .collect::<Result<Vec<_>>>()?;
    let feats_ref = Tensor::cat(&feats_ref, 0)?;
    reports.push(rel("memory.batch3.encoder".into(), &features, &feats_ref)?);
    reports.push(rel(
        "memory.batch3.encoder_pos".into(),
        &pos,
        &pos_ref.repeat((b, 1, 1, 1))?,
    )?);
    let (memory, mem_pos) = perceiver.forward(&feats_ref, &pos_ref.repeat((b, 1, 1, 1))?)?;
    let memory_ref = CASES
        .iter()
        .map(|c| fx.get(&format!("memory.{c}.memory")).cloned())
        .collect::<Result<Vec<_>>>()?;
    reports.push(rel(
        "memory.batch3.perceiver".into(),
        &memory,
        &Tensor::cat(&memory_ref, 0)?,
    )?);
    reports.push(rel(
        "memory.batch3.perceiver_pos".into(),
        &mem_pos,
        &perceiver_pos_ref.repeat((b, 1, 1))?,
    )?);
    Ok(reports)
}
