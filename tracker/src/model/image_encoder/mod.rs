//! The per-frame image encoder: RepViT-M1 backbone, FPN neck, and the mask decoder's
//! `conv_s0`/`conv_s1` projections of the two high-resolution levels (transformers applies those
//! in `get_image_features`, once per frame, so they belong here rather than per object).
//!
//! The tracker reads only three things of the neck: the stride-16 level (with its position) and
//! `conv_s0` / `conv_s1` of the stride-4 and stride-8 levels. Those two levels are lateral 1x1
//! convs alone (no top-down input in EdgeTAM), so each composes with its decoder conv into one
//! small 1x1 conv at load ([`Pointwise::then`]): the 256-channel stride-4 map (64 MiB at 1024)
//! is never built, and 1.8 of the image encoder's 19.4 GMAC go away. [`ImageEncoder::forward_with_neck`]
//! still runs the whole neck, for the golden checks.

pub(crate) mod neck;
pub(crate) mod repvit;

use candle_core::Tensor;
use candle_nn::VarBuilder;

use crate::error::{Error, Result};
use crate::instrument::layers::timed;
use crate::kernels::conv::pointwise_bf16::Rounding;
use crate::model::bf16_policy::{Bf16Policy, LayerGroup};
use crate::model::config::EdgeTamConfig;
use crate::model::conv::Pointwise;
use crate::model::image_encoder::neck::VisionNeck;
use crate::model::image_encoder::repvit::RepVit;

/// Everything the rest of the model needs from one frame.
#[derive(Debug, Clone)]
pub struct ImageFeatures {
    /// The raw stride-16 FPN level `[N, 256, S/16, S/16]`: the image embedding before
    /// `no_memory_embedding` / memory conditioning.
    pub level2: Tensor,
    /// Its sine position encoding `[1, 256, S/16, S/16]`.
    pub level2_pos: Tensor,
    /// `conv_s0(fpn[0])`: `[N, 32, S/4, S/4]`, the decoder's stride-4 skip.
    pub feat_s0: Tensor,
    /// `conv_s1(fpn[1])`: `[N, 64, S/8, S/8]`, the decoder's stride-8 skip.
    pub feat_s1: Tensor,
}

/// The intermediate outputs the tracker does not keep, for checks against the reference.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "checks"), allow(dead_code))]
pub struct EncoderInternals {
    /// The four backbone stage outputs, shallowest first.
    pub stages: Vec<Tensor>,
    /// All kept FPN levels, high resolution first, as the reference's `backbone_fpn`.
    pub fpn: Vec<Tensor>,
    /// Their sine position encodings.
    pub pos: Vec<Tensor>,
}

/// A decoder skip projection of one high-resolution FPN level.
enum HighRes {
    /// The lateral conv and the decoder conv composed into one 1x1 conv on the backbone stage.
    Composed(Pointwise),
    /// The decoder conv on the neck's level (when the level takes top-down input).
    OnLevel(Pointwise),
}

/// Backbone + neck + high-resolution projections, built for one image size.
pub struct ImageEncoder {
    backbone: RepVit,
    neck: VisionNeck,
    /// `conv_s0` (backbone level 0) and `conv_s1` (level 1).
    high_res: [HighRes; 2],
    image_size: usize,
}

impl HighRes {
    fn new(neck: &VisionNeck, level: usize, conv: Pointwise) -> candle_core::Result<Self> {
        match neck.lateral(level) {
            Some(lateral) if neck.lateral_only(level) => Ok(Self::Composed(lateral.then(&conv)?)),
            _ => Ok(Self::OnLevel(conv)),
        }
    }

    fn set_rounding(&mut self, rounding: Option<Rounding>) {
        match self {
            Self::Composed(c) | Self::OnLevel(c) => {
                c.set_rounding(rounding);
            }
        }
    }

    /// From the backbone stages, or from the FPN levels when the neck already ran.
    fn forward(
        &self,
        neck: &VisionNeck,
        stages: &[Tensor],
        fpn: Option<&[Tensor]>,
        level: usize,
    ) -> Result<Tensor> {
        let missing = || Error::InvalidImage(format!("no FPN level {level} for the decoder"));
        match self {
            Self::Composed(conv) => Ok(conv.forward(stages.get(level).ok_or_else(missing)?)?),
            Self::OnLevel(conv) => {
                let computed;
                let fpn = match fpn {
                    Some(f) => f,
                    None => {
                        computed = neck.forward(stages)?.0;
                        &computed
                    }
                };
                Ok(conv.forward(fpn.get(level).ok_or_else(missing)?)?)
            }
        }
    }
}

impl ImageEncoder {
    /// Loads from `vb` at the checkpoint root (`vision_encoder.*`, `mask_decoder.conv_s{0,1}`);
    /// tensors live on `vb`'s device.
    pub fn new(cfg: &EdgeTamConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let v = &cfg.vision_config;
        let backbone = RepVit::new(vb.pp("vision_encoder.backbone.timm_model"))?;
        let neck = VisionNeck::new(v, vb.pp("vision_encoder.neck"))?;
        let hidden = v.fpn_hidden_size;
        let dec = cfg.mask_decoder_config.hidden_size;
        let conv_s0 = Pointwise::load(&vb.pp("mask_decoder.conv_s0"), hidden, dec / 8)?;
        let conv_s1 = Pointwise::load(&vb.pp("mask_decoder.conv_s1"), hidden, dec / 4)?;
        let high_res = [
            HighRes::new(&neck, 0, conv_s0)?,
            HighRes::new(&neck, 1, conv_s1)?,
        ];
        Ok(Self {
            backbone,
            neck,
            high_res,
            image_size: cfg.image_size,
        })
    }

    /// The fast mode's products per layer group as `policy` sets them (see
    /// [`crate::model::bf16_policy`]; [`Bf16Policy::exact`] switches them off).
    pub(crate) fn set_policy(&mut self, policy: &Bf16Policy) {
        self.backbone
            .set_stem_rounding(policy.get(LayerGroup::Stem).rounding());
        for i in 0..4 {
            self.backbone
                .set_stage_rounding(i, policy.get(LayerGroup::Stage(i)).rounding());
        }
        self.neck
            .set_rounding(policy.get(LayerGroup::Fpn).rounding());
        let high_res = policy.get(LayerGroup::HighRes).rounding();
        self.high_res
            .iter_mut()
            .for_each(|h| h.set_rounding(high_res));
    }

    /// Encodes `[N, 3, S, S]` normalized pixels (see [`crate::frame::preprocess::preprocess`]).
    pub fn forward(&self, pixel_values: &Tensor) -> Result<ImageFeatures> {
        let stages = self.backbone_stages(pixel_values)?;
        let (level2, level2_pos) = timed(
            || "neck (stride-16 level)".into(),
            "fpn: 1x1 laterals + top-down",
            || self.neck.embedding(&stages),
        )?;
        self.features(level2, level2_pos, &stages, None)
    }

    /// As [`Self::forward`], also returning the backbone stages and the whole neck's output
    /// (for checks; the tracker never builds the high-resolution FPN levels).
    #[cfg_attr(not(feature = "checks"), allow(dead_code))]
    pub fn forward_with_neck(
        &self,
        pixel_values: &Tensor,
    ) -> Result<(ImageFeatures, EncoderInternals)> {
        let stages = self.backbone_stages(pixel_values)?;
        let (fpn, pos) = self.neck.forward(&stages)?;
        let last = |v: &[Tensor]| {
            v.last()
                .cloned()
                .ok_or_else(|| Error::InvalidImage("the FPN neck produced no levels".into()))
        };
        let features = self.features(last(&fpn)?, last(&pos)?, &stages, Some(&fpn))?;
        Ok((features, EncoderInternals { stages, fpn, pos }))
    }

    /// The backbone, for timing it apart (`crate::bench_support`).
    #[cfg(feature = "checks")]
    pub(crate) fn backbone(&self) -> &RepVit {
        &self.backbone
    }

    /// The FPN neck, for timing it apart (`crate::bench_support`).
    #[cfg(feature = "checks")]
    pub(crate) fn neck(&self) -> &VisionNeck {
        &self.neck
    }

    /// `conv_s0` and `conv_s1` from the backbone stages as the tracking path runs them (no
    /// high-resolution FPN levels), for timing them apart (`crate::bench_support`).
    #[cfg(feature = "checks")]
    pub(crate) fn high_res(&self, stages: &[Tensor]) -> Result<[Tensor; 2]> {
        let [s0, s1] = &self.high_res;
        Ok([
            s0.forward(&self.neck, stages, None, 0)?,
            s1.forward(&self.neck, stages, None, 1)?,
        ])
    }

    fn backbone_stages(&self, pixel_values: &Tensor) -> Result<Vec<Tensor>> {
        let s = self.image_size;
        match pixel_values.dims() {
            [_, 3, h, w] if *h == s && *w == s => Ok(self.backbone.forward(pixel_values)?),
            dims => Err(Error::InvalidImage(format!(
                "pixel values must be [N, 3, {s}, {s}] for this model, got {dims:?}"
            ))),
        }
    }

    fn features(
        &self,
        level2: Tensor,
        level2_pos: Tensor,
        stages: &[Tensor],
        fpn: Option<&[Tensor]>,
    ) -> Result<ImageFeatures> {
        let [s0, s1] = &self.high_res;
        let high_res = |conv: &HighRes, level: usize| {
            timed(
                || format!("conv_s{level} (with its FPN lateral)"),
                "1x1",
                || conv.forward(&self.neck, stages, fpn, level),
            )
        };
        Ok(ImageFeatures {
            level2,
            level2_pos,
            feat_s0: high_res(s0, 0)?,
            feat_s1: high_res(s1, 1)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Tensor};

    use super::{HighRes, ImageEncoder};
    use crate::checks::compare::same_bits;
    use crate::model::config::EdgeTamConfig;
    use crate::model::conv::Pointwise;
    use crate::model::weights::random_var_builder;

    /// The tracking path (stride-16 level only, composed high-resolution convs) against the
    /// whole neck + `conv_s0` / `conv_s1` run one after the other.
    #[test]
    fn tracking_path_matches_the_whole_neck() -> crate::error::Result<()> {
        let dev = Device::Cpu;
        let cfg = EdgeTamConfig::with_image_size(256)?;
        let vb = random_var_builder(3, &dev);
        let enc = ImageEncoder::new(&cfg, vb.clone())?;
        let x = Tensor::randn(0f32, 1.0, (1, 3, 256, 256), &dev)?;
        let ours = enc.forward(&x)?;
        let (checked, neck) = enc.forward_with_neck(&x)?;
        // The stride-16 level runs the same ops either way.
        assert!(same_bits(&ours.level2, &checked.level2)?);
        assert!(same_bits(&ours.level2, &neck.fpn[2])?);
        assert!(same_bits(&ours.level2_pos, &neck.pos[2])?);
        assert!(same_bits(&ours.feat_s0, &checked.feat_s0)?);
        // Composed convs against the two convs in sequence: float rounding only.
        let dec = cfg.mask_decoder_config.hidden_size;
        for (level, name, out, composed) in [
            (0, "conv_s0", dec / 8, &ours.feat_s0),
            (1, "conv_s1", dec / 4, &ours.feat_s1),
        ] {
            assert!(matches!(enc.high_res[level], HighRes::Composed(_)));
            let conv = Pointwise::load(&vb.pp("mask_decoder").pp(name), 256, out)?;
            let two_convs = conv.forward(&neck.fpn[level])?;
            let err = (&two_convs - composed)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            let scale = two_convs.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(err <= 1e-5 * scale, "{name}: {err} of {scale}");
        }
        Ok(())
    }
}
