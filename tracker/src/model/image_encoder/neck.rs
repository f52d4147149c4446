//! EdgeTAM's FPN neck (`EdgeTamVisionNeck`): 1x1 lateral convs to `fpn_hidden_size` channels,
//! a nearest x2 top-down path on the configured levels, and the sine position encoding.
//!
//! Trap kept from the reference: `convs[j]` belongs to backbone level `3 - j` (`convs.0` takes
//! the deepest, 384-channel map). With EdgeTAM's `fpn_top_down_levels = [2, 3]` only level 2
//! receives the upsampled level 3; levels 0 and 1 are lateral only and level 3 is dropped.

use candle_core::Tensor;
use candle_nn::VarBuilder;

use crate::kernels::conv::pointwise_bf16::Rounding;
use crate::model::config::VisionConfig;
use crate::model::conv::Pointwise;
use crate::model::position_encoding::sine_position_embedding;

/// The FPN neck: lateral convs, deepest first as in the checkpoint.
pub struct VisionNeck {
    convs: Vec<Pointwise>,
    top_down_levels: Vec<usize>,
    num_feature_levels: usize,
    /// Position encodings for the configured level sizes, computed once at load.
    pos: Vec<Tensor>,
}

impl VisionNeck {
    /// Switches the lateral convolutions' bf16 products on or off (the fast mode).
    pub(crate) fn set_rounding(&mut self, rounding: Option<Rounding>) {
        self.convs.iter_mut().for_each(|c| {
            c.set_rounding(rounding);
        });
    }

    /// Loads `convs.{j}` from `vb` positioned at `vision_encoder.neck`.
    pub fn new(cfg: &VisionConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let convs = cfg
            .backbone_channel_list
            .iter()
            .enumerate()
            .map(|(j, &c)| Pointwise::load(&vb.pp(format!("convs.{j}")), c, cfg.fpn_hidden_size))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let pos = cfg
            .backbone_feature_sizes
            .iter()
            .map(|&[h, w]| position(cfg.fpn_hidden_size, h, w, vb.device()))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self {
            convs,
            top_down_levels: cfg.fpn_top_down_levels.clone(),
            num_feature_levels: cfg.num_feature_levels,
            pos,
        })
    }

    /// Backbone stage outputs (shallowest first) to the kept FPN levels, high resolution first,
    /// and their sine position encodings (`[1, C, h, w]`; cached for the configured sizes).
    pub fn forward(&self, stages: &[Tensor]) -> candle_core::Result<(Vec<Tensor>, Vec<Tensor>)> {
        let fpn = self.features(stages)?;
        let pos = fpn
            .iter()
            .enumerate()
            .map(|(i, f)| self.level_position(i, f))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok((fpn, pos))
    }

    /// The position encoding of level `i` (the cached one when `level` has the configured size).
    fn level_position(&self, i: usize, level: &Tensor) -> candle_core::Result<Tensor> {
        let (_, c, h, w) = level.dims4()?;
        match self.pos.get(i) {
            Some(p) if p.dims() == [1, c, h, w] => Ok(p.clone()),
            _ => position(c, h, w, level.device()),
        }
    }

    fn features(&self, stages: &[Tensor]) -> candle_core::Result<Vec<Tensor>> {
        let n = self.check_levels(stages)?;
        // Keep the `num_feature_levels` shallowest levels (EdgeTAM drops the deepest).
        let mut levels = self.top_down(stages, 0)?;
        levels.truncate(self.num_feature_levels.min(n));
        Ok(levels)
    }

    fn check_levels(&self, stages: &[Tensor]) -> candle_core::Result<usize> {
        let n = self.convs.len();
        if stages.len() != n {
            candle_core::bail!("FPN neck expects {n} backbone levels, got {}", stages.len());
        }
        Ok(n)
    }

    /// FPN levels `lowest..n`, shallow first: the top-down path from the deepest level, exactly
    /// as the reference loops, stopped at `lowest` (levels below it are not computed).
    fn top_down(&self, stages: &[Tensor], lowest: usize) -> candle_core::Result<Vec<Tensor>> {
        let n = self.check_levels(stages)?;
        let mut levels: Vec<Tensor> = Vec::with_capacity(n);
        let mut prev: Option<Tensor> = None;
        for i in (lowest..n).rev() {
            let lateral = self.convs[n - 1 - i].forward(&stages[i])?;
            let feat = match &prev {
                Some(p) if !self.lateral_only(i) => {
                    let (_, _, h, w) = p.dims4()?;
                    (lateral + p.upsample_nearest2d(2 * h, 2 * w)?)?
                }
                _ => lateral,
            };
            prev = Some(feat.clone());
            levels.push(feat);
        }
        levels.reverse();
        Ok(levels)
    }

    /// Backbone index of the deepest kept level (the stride-16 image embedding in EdgeTAM).
    pub fn embedding_level(&self) -> usize {
        self.num_feature_levels
            .min(self.convs.len())
            .saturating_sub(1)
    }

    /// Level `embedding_level()` and its position encoding, computing only the top-down path
    /// that feeds it (EdgeTAM: the two deepest laterals), not the high-resolution levels.
    pub fn embedding(&self, stages: &[Tensor]) -> candle_core::Result<(Tensor, Tensor)> {
        let i = self.embedding_level();
        let level = self
            .top_down(stages, i)?
            .into_iter()
            .next()
            .ok_or_else(|| candle_core::Error::Msg("the FPN neck has no levels".into()))?;
        let pos = self.level_position(i, &level)?;
        Ok((level, pos))
    }

    /// Whether FPN level `i` (backbone index) is its lateral conv alone, with nothing from the
    /// top-down path: then a 1x1 conv applied to it composes with the lateral into one conv.
    pub fn lateral_only(&self, i: usize) -> bool {
        i + 1 >= self.convs.len() || !self.top_down_levels.contains(&i)
    }

    /// The lateral 1x1 conv of backbone level `i`.
    pub(crate) fn lateral(&self, i: usize) -> Option<&Pointwise> {
        let n = self.convs.len();
        (i < n).then(|| &self.convs[n - 1 - i])
    }
}

fn position(
    channels: usize,
    h: usize,
    w: usize,
    device: &candle_core::Device,
) -> candle_core::Result<Tensor> {
    sine_position_embedding(channels, h, w, device)
        .map_err(|e| candle_core::Error::Msg(e.to_string()))
}
