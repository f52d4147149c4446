//! The per-frame image encoder: RepViT-M1 backbone, FPN neck, and the mask decoder's
//! `conv_s0`/`conv_s1` projections of the two high-resolution levels (transformers applies those
//! in `get_image_features`, once per frame, so they belong here rather than per object).

use candle_core::Tensor;
use candle_nn::VarBuilder;

use crate::config::EdgeTamConfig;
use crate::error::{Error, Result};
use crate::repvit::{Pointwise, RepVit};
use crate::vision_neck::VisionNeck;

/// Everything the rest of the model needs from one frame.
#[derive(Debug, Clone)]
pub struct ImageFeatures {
    /// The 3 raw FPN levels `[N, 256, S/4..S/16, ..]`, high resolution first. Level 2 is the
    /// image embedding before `no_memory_embedding` / memory conditioning.
    pub fpn: Vec<Tensor>,
    /// Sine position encodings of those levels, `[1, 256, h, w]`.
    pub pos: Vec<Tensor>,
    /// `conv_s0(fpn[0])`: `[N, 32, S/4, S/4]`, the decoder's stride-4 skip.
    pub feat_s0: Tensor,
    /// `conv_s1(fpn[1])`: `[N, 64, S/8, S/8]`, the decoder's stride-8 skip.
    pub feat_s1: Tensor,
}

/// Backbone + neck + high-resolution projections, built for one image size.
pub struct ImageEncoder {
    backbone: RepVit,
    neck: VisionNeck,
    conv_s0: Pointwise,
    conv_s1: Pointwise,
    image_size: usize,
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
        Ok(Self {
            backbone,
            neck,
            conv_s0,
            conv_s1,
            image_size: cfg.image_size,
        })
    }

    /// Switches the 1x1 convolutions' bf16 products on or off (the fast mode).
    pub(crate) fn set_bf16(&mut self, on: bool) {
        self.backbone.set_bf16(on);
        self.neck.set_bf16(on);
        self.conv_s0.set_bf16(on);
        self.conv_s1.set_bf16(on);
    }

    /// Encodes `[N, 3, S, S]` normalized pixels (see [`crate::preprocess::preprocess`]).
    pub fn forward(&self, pixel_values: &Tensor) -> Result<ImageFeatures> {
        Ok(self.forward_with_stages(pixel_values)?.0)
    }

    /// As [`Self::forward`], also returning the four backbone stage outputs (for checks).
    pub fn forward_with_stages(
        &self,
        pixel_values: &Tensor,
    ) -> Result<(ImageFeatures, Vec<Tensor>)> {
        let s = self.image_size;
        match pixel_values.dims() {
            [_, 3, h, w] if *h == s && *w == s => {}
            dims => {
                return Err(Error::InvalidImage(format!(
                    "pixel values must be [N, 3, {s}, {s}] for this model, got {dims:?}"
                )))
            }
        }
        let stages = self.backbone.forward(pixel_values)?;
        let (fpn, pos) = self.neck.forward(&stages)?;
        if fpn.len() < 2 {
            return Err(Error::InvalidImage(format!(
                "the neck produced {} levels; the decoder needs 2 high-resolution ones",
                fpn.len()
            )));
        }
        let feat_s0 = self.conv_s0.forward(&fpn[0])?;
        let feat_s1 = self.conv_s1.forward(&fpn[1])?;
        let features = ImageFeatures {
            fpn,
            pos,
            feat_s0,
            feat_s1,
        };
        Ok((features, stages))
    }
}
