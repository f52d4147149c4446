//! The memory encoder (`EdgeTamVideoMemoryEncoder`): one frame's image features + its predicted
//! mask -> a spatial memory `[B, 64, e, e]` and its sine position encoding.
//!
//! Pipeline, as transformers runs it (`EdgeTamVideoModel._encode_new_memory`):
//! 1. [`mask_for_memory`]: the decoder's low-res logits (replaced by -1024 where the object score
//!    is <= 0) are upsampled bilinearly to the model input size, binarised on prompted frames or
//!    passed through a sigmoid on tracked ones, then scaled `x * 20 - 10`.
//! 2. Mask downsampler: `log2(16)` x [3x3 stride-2 conv -> channels-first LayerNorm (eps 1e-6)
//!    -> GELU], then a 1x1 conv to 256 channels.
//! 3. `feature_projection` (1x1) of the **raw** stride-16 FPN level (without the
//!    `no_memory_embedding` the decoder adds), plus the downsampled mask.
//! 4. Memory fuser: ConvNeXt blocks (7x7 depthwise, LayerNorm, 1x1 MLP with GELU, layer scale,
//!    residual).
//! 5. `projection` (1x1) to `memory_encoder_output_channels`; the position encoding is the
//!    normalised sine encoding of that grid.

use candle_core::{DType, Tensor};
use candle_nn::{Conv2dConfig, VarBuilder};

use crate::error::{Error, Result};
use crate::frame::postprocess::resize_logits;
use crate::kernels::conv::depthwise::Depthwise;
use crate::kernels::conv::pointwise_bf16::Rounding;
use crate::kernels::gelu::gelu;
use crate::kernels::mask_input::{mask_input, UnitMask};
use crate::model::config::EdgeTamConfig;
use crate::model::conv::{Dense, Pointwise};
use crate::model::layers::LayerNorm2d;
use crate::model::position_encoding::sine_position_embedding;

/// LayerNorm eps of the mask downsampler and the fuser (transformers hard-codes 1e-6).
const CONV_LAYER_NORM_EPS: f64 = 1e-6;

/// The decoder's stand-in logit for "no object" (`NO_OBJ_SCORE`).
pub const NO_OBJ_SCORE: f64 = -1024.0;

/// Where the mask of a memory comes from: it decides how logits become the encoder's input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskSource {
    /// The frame had user prompts (points, box or mask): the mask is binarised (`logit > 0`),
    /// so the memory records the hard decision the user saw.
    Prompted,
    /// A propagated frame: `sigmoid(logit)`, keeping the decoder's uncertainty.
    Tracked,
}

/// Builds the memory encoder's mask input `[B, 1, S, S]` (S = image size) from the decoder's
/// low-res logits `[B, 1, h, w]` and object scores (`[B]` or `[B, 1]`), as transformers does.
///
/// An object with score <= 0 is occluded: its logits become [`NO_OBJ_SCORE`] first, so its
/// input is `bias` (-10) everywhere. The upsample is torch's bilinear, `align_corners=False`, no
/// antialias.
pub fn mask_for_memory(
    cfg: &EdgeTamConfig,
    low_res: &Tensor,
    object_score: &Tensor,
    source: MaskSource,
) -> Result<Tensor> {
    let (b, c, _, _) = low_res.dims4().map_err(|_| {
        Error::InvalidImage(format!(
            "low-res mask logits must be [B, 1, h, w], got {:?}",
            low_res.dims()
        ))
    })?;
    if c != 1 || object_score.elem_count() != b {
        return Err(Error::InvalidImage(format!(
            "mask logits {:?} need one channel and one object score per batch entry, got {:?}",
            low_res.dims(),
            object_score.dims()
        )));
    }
    let low_res = low_res.to_dtype(DType::F32)?;
    let present = object_score
        .to_dtype(DType::F32)?
        .reshape((b, 1, 1, 1))?
        .gt(0.0)?
        .broadcast_as(low_res.shape())?;
    let no_obj = Tensor::full(NO_OBJ_SCORE as f32, low_res.shape(), low_res.device())?;
    let low_res = present.where_cond(&low_res, &no_obj)?;
    let s = cfg.image_size;
    let high_res = resize_logits(&low_res, s, s)?;
    let unit = match source {
        MaskSource::Prompted => UnitMask::Threshold,
        MaskSource::Tracked => UnitMask::Sigmoid,
    };
    Ok(mask_input(
        &high_res,
        unit,
        cfg.sigmoid_scale_for_mem_enc,
        cfg.sigmoid_bias_for_mem_enc,
    )?)
}

/// `mask * sigmoid_scale_for_mem_enc + sigmoid_bias_for_mem_enc` (two roundings, like torch's
/// separate multiply and add). Exposed so callers holding a 0/1 mask get the exact input.
pub fn scale_mask(cfg: &EdgeTamConfig, unit_mask: &Tensor) -> Result<Tensor> {
    let scaled = (unit_mask.to_dtype(DType::F32)? * cfg.sigmoid_scale_for_mem_enc)?;
    Ok((scaled + cfg.sigmoid_bias_for_mem_enc)?)
}

/// One `EdgeTamVideoMaskDownSamplerLayer`: strided conv, channels-first LayerNorm, GELU.
struct DownLayer {
    conv: Dense,
    norm: LayerNorm2d,
    /// The norm's parameters on the host, for the conv's fused norm + GELU pass.
    host_norm: crate::kernels::norm::HostNorm,
}

/// One `EdgeTamVideoMemoryFuserCXBlock` (ConvNeXt block), computed in NCHW throughout: the
/// reference's channels-last linears are 1x1 convolutions here (same sums, no permutes).
struct FuserBlock {
    depthwise: Depthwise,
    norm: LayerNorm2d,
    pointwise1: Pointwise,
    pointwise2: Pointwise,
    /// Layer scale `[1, C, 1, 1]`.
    scale: Tensor,
    /// The layer scale on the host, for the fused CPU MLP.
    host_scale: Vec<f32>,
}

impl FuserBlock {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let h = self.norm.forward(&self.depthwise.forward(x)?)?;
        if let Some(y) =
            self.pointwise1
                .mlp_residual(&self.pointwise2, &h, x, Some(&self.host_scale))?
        {
            return Ok(y);
        }
        let h = gelu(&self.pointwise1.forward(&h)?)?;
        let h = self.pointwise2.forward(&h)?.broadcast_mul(&self.scale)?;
        x + h
    }
}

/// The last fuser block's MLP and the output projection `P` folded together:
/// `P (x + s (W2 g + b2)) + bp = P x + (P diag(s) W2) g + (P (s b2) + bp)`. The 1024-wide hidden
/// block then goes straight to the 64 output channels: 0.8 of the 6.3 GMAC per object at 1024
/// are not computed, and the 256-channel fuser output is never built.
struct ProjectedTail {
    /// `P diag(s) W2` `[out, inter]` with bias `P (s b2) + bp`.
    conv2: Pointwise,
    /// `P` without bias, applied to the block's input (the residual).
    residual: Pointwise,
}

/// The memory encoder; build once per model, run per frame and object (objects batched on B).
pub struct MemoryEncoder {
    down: Vec<DownLayer>,
    final_conv: Pointwise,
    feature_projection: Pointwise,
    fuser: Vec<FuserBlock>,
    projection: Pointwise,
    /// The last fuser block folded with `projection` (absent without fuser blocks).
    tail: Option<ProjectedTail>,
    hidden: usize,
    out_channels: usize,
    total_stride: usize,
    /// [`Self::position`]'s last grid and encoding.
    position_cache: std::sync::Mutex<Option<((usize, usize), Tensor)>>,
}

fn config_error(message: String) -> Error {
    Error::Config {
        path: "<config>".into(),
        message,
    }
}

impl MemoryEncoder {
    /// Sets the convolutions' product rounding (the fast mode; `None`: exact): the mask
    /// downsampler's strided convs and the 1x1 convs, the fuser's fused MLPs (and the folded
    /// tail) included.
    pub(crate) fn set_rounding(&mut self, rounding: Option<Rounding>) {
        for layer in &mut self.down {
            layer.conv.set_rounding(rounding);
        }
        self.final_conv.set_rounding(rounding);
        self.feature_projection.set_rounding(rounding);
        self.projection.set_rounding(rounding);
        for block in &mut self.fuser {
            block.pointwise1.set_rounding(rounding);
            block.pointwise2.set_rounding(rounding);
        }
        if let Some(tail) = &mut self.tail {
            tail.conv2.set_rounding(rounding);
            tail.residual.set_rounding(rounding);
        }
    }

    /// Loads `memory_encoder.*` (pass `vb.pp("memory_encoder")`).
    pub fn new(cfg: &EdgeTamConfig, vb: VarBuilder) -> Result<Self> {
        for (name, act) in [
            (
                "mask_downsampler_hidden_act",
                &cfg.mask_downsampler_hidden_act,
            ),
            ("memory_fuser_hidden_act", &cfg.memory_fuser_hidden_act),
        ] {
            if act != "gelu" {
                return Err(config_error(format!(
                    "{name} `{act}` is not supported (gelu only)"
                )));
            }
        }
        let hidden = cfg.memory_encoder_hidden_size;
        let stride = cfg.mask_downsampler_stride;
        let total = cfg.mask_downsampler_total_stride;
        // transformers: int(log2(total) // log2(stride)) layers; an exact power is required so
        // the mask lands on the feature grid.
        let mut num_layers = 0;
        let mut reach = 1usize;
        while stride > 1 && reach < total {
            reach *= stride;
            num_layers += 1;
        }
        if stride < 2 || reach != total {
            return Err(config_error(format!(
                "mask_downsampler_total_stride {total} is not a power of its stride {stride}"
            )));
        }
        if cfg.memory_fuser_embed_dim != hidden || cfg.mask_downsampler_embed_dim != hidden {
            return Err(config_error(format!(
                "memory fuser / mask downsampler widths ({}, {}) must equal \
                 memory_encoder_hidden_size {hidden}",
                cfg.memory_fuser_embed_dim, cfg.mask_downsampler_embed_dim
            )));
        }
        let conv_cfg = Conv2dConfig {
            padding: cfg.mask_downsampler_padding,
            stride,
            ..Default::default()
        };
        let k = cfg.mask_downsampler_kernel_size;
        let vb_ds = vb.pp("mask_downsampler");
        let mut down = Vec::with_capacity(num_layers);
        let mut in_ch = 1;
        for i in 0..num_layers {
            let out_ch = in_ch * stride * stride;
            let l = vb_ds.pp("layers").pp(i);
            // Our im2col + gemm conv (threaded, bias fused): candle's conv2d spends ~70 ms on
            // these four small layers at 1024.
            let c = l.pp("conv");
            let conv = Dense::new(
                &c.get((out_ch, in_ch, k, k), "weight")?,
                &c.get(out_ch, "bias")?,
                conv_cfg.stride,
                conv_cfg.padding,
            )?;
            let norm = LayerNorm2d::new(out_ch, CONV_LAYER_NORM_EPS, l.pp("layer_norm"))?;
            let host_norm = norm.host()?;
            down.push(DownLayer {
                conv,
                norm,
                host_norm,
            });
            in_ch = out_ch;
        }
        let final_conv = Pointwise::load(&vb_ds.pp("final_conv"), in_ch, hidden)?;
        let feature_projection = Pointwise::load(&vb.pp("feature_projection"), hidden, hidden)?;
        let inter = cfg.memory_fuser_intermediate_dim;
        let fk = cfg.memory_fuser_kernel_size;
        let vb_f = vb.pp("memory_fuser").pp("layers");
        let mut fuser = Vec::with_capacity(cfg.memory_fuser_num_layers);
        for i in 0..cfg.memory_fuser_num_layers {
            let l = vb_f.pp(i);
            let dw = l.pp("depthwise_conv");
            let depthwise = Depthwise::new(
                dw.get((hidden, 1, fk, fk), "weight")?,
                dw.get(hidden, "bias")?,
                1,
                cfg.memory_fuser_padding,
            )?;
            let linear = |name: &str, i: usize, o: usize| -> candle_core::Result<Pointwise> {
                let p = l.pp(name);
                Pointwise::new(&p.get((o, i), "weight")?, &p.get(o, "bias")?)
            };
            fuser.push(FuserBlock {
                depthwise,
                norm: LayerNorm2d::new(hidden, CONV_LAYER_NORM_EPS, l.pp("layer_norm"))?,
                pointwise1: linear("pointwise_conv1", hidden, inter)?,
                pointwise2: linear("pointwise_conv2", inter, hidden)?,
                scale: l.get(hidden, "scale")?.reshape((1, hidden, 1, 1))?,
                host_scale: l.get(hidden, "scale")?.to_dtype(DType::F32)?.to_vec1()?,
            });
        }
        let out_channels = cfg.memory_encoder_output_channels;
        let projection = Pointwise::load(&vb.pp("projection"), hidden, out_channels)?;
        let tail = fuser
            .last()
            .map(|last| -> candle_core::Result<ProjectedTail> {
                Ok(ProjectedTail {
                    conv2: last
                        .pointwise2
                        .scale_outputs(&last.host_scale)?
                        .then(&projection)?,
                    residual: projection.without_bias()?,
                })
            })
            .transpose()?;
        Ok(Self {
            down,
            final_conv,
            feature_projection,
            fuser,
            projection,
            tail,
            hidden,
            out_channels,
            total_stride: total,
            position_cache: std::sync::Mutex::new(None),
        })
    }

    /// `pix_feat` `[B, 256, e, e]` (raw stride-16 FPN level) and `mask_for_mem` `[B, 1, S, S]`
    /// (already scaled, see [`mask_for_memory`]) -> memory features and position encoding, both
    /// `[B, 64, e, e]`.
    pub fn forward(&self, pix_feat: &Tensor, mask_for_mem: &Tensor) -> Result<(Tensor, Tensor)> {
        self.check_inputs(pix_feat, mask_for_mem)?;
        let mask_features = self.downsample_mask(mask_for_mem)?;
        let features = self.fuse_and_project(pix_feat, &mask_features)?;
        let (b, _, h, w) = features.dims4()?;
        let pos = self
            .position(h, w, features.device())?
            .repeat((b, 1, 1, 1))?;
        Ok((features, pos))
    }

    /// [`Self::fuse`] then the projection's convolution, with the last fuser block folded into
    /// the projection ([`ProjectedTail`]) where the fused CPU MLP applies.
    pub(crate) fn fuse_and_project(
        &self,
        pix_feat: &Tensor,
        mask_features: &Tensor,
    ) -> Result<Tensor> {
        let mut x =
            crate::kernels::add(&self.feature_projection.forward(pix_feat)?, mask_features)?;
        let Some((last, rest)) = self.fuser.split_last() else {
            return Ok(self.projection.forward(&x)?);
        };
        for block in rest {
            x = block.forward(&x)?;
        }
        if let Some(tail) = &self.tail {
            let h = last.norm.forward(&last.depthwise.forward(&x)?)?;
            let r = tail.residual.forward(&x)?;
            if let Some(y) = last.pointwise1.mlp_residual(&tail.conv2, &h, &r, None)? {
                return Ok(y);
            }
        }
        Ok(self.projection.forward(&last.forward(&x)?)?)
    }

    /// Mask downsampler alone: `[B, 1, S, S]` -> `[B, 256, S/16, S/16]`.
    pub fn downsample_mask(&self, mask_for_mem: &Tensor) -> Result<Tensor> {
        let mut x = mask_for_mem.to_dtype(DType::F32)?;
        for l in &self.down {
            x = match l.conv.forward_norm_gelu(&x, &l.host_norm)? {
                Some(y) => y,
                None => gelu(&l.norm.forward(&l.conv.forward(&x)?)?)?,
            };
        }
        Ok(self.final_conv.forward(&x)?)
    }

    /// Projection of the image features + downsampled mask, then the fuser: `[B, 256, e, e]`.
    /// `pix_feat` may be one row for all `B` masks: it is projected once (the objects of a
    /// frame share it) and broadcast.
    #[cfg(any(test, feature = "checks"))]
    pub fn fuse(&self, pix_feat: &Tensor, mask_features: &Tensor) -> Result<Tensor> {
        let mut x =
            crate::kernels::add(&self.feature_projection.forward(pix_feat)?, mask_features)?;
        for block in &self.fuser {
            x = block.forward(&x)?;
        }
        Ok(x)
    }

    /// Final 1x1 projection and the position encoding of its grid.
    #[cfg(any(test, feature = "checks"))]
    pub fn project(&self, fused: &Tensor) -> Result<(Tensor, Tensor)> {
        let features = self.projection.forward(fused)?;
        let (b, _, h, w) = features.dims4()?;
        let pos = self
            .position(h, w, features.device())?
            .repeat((b, 1, 1, 1))?;
        Ok((features, pos))
    }

    /// [`MemoryEncoder::forward`]'s features with the last fuser block and the projection run
    /// one after the other, not folded: they differ from `forward`'s by float rounding only.
    #[cfg(test)]
    fn unfolded_features(&self, pix_feat: &Tensor, mask_for_mem: &Tensor) -> Result<Tensor> {
        self.check_inputs(pix_feat, mask_for_mem)?;
        let mask_features = self.downsample_mask(mask_for_mem)?;
        let fused = self.fuse(pix_feat, &mask_features)?;
        Ok(self.project(&fused)?.0)
    }

    fn check_inputs(&self, pix_feat: &Tensor, mask_for_mem: &Tensor) -> Result<()> {
        let (pb, c, h, w) = pix_feat.dims4().map_err(|_| {
            Error::InvalidImage(format!("pix_feat must be NCHW, got {:?}", pix_feat.dims()))
        })?;
        let mask_dims = mask_for_mem.dims();
        // One row of image features may serve a batch of masks (the objects of one frame).
        let b = mask_dims.first().copied().unwrap_or(0);
        let expected = [b, 1, h * self.total_stride, w * self.total_stride];
        if c != self.hidden || mask_dims != expected || (pb != b && pb != 1) {
            return Err(Error::InvalidImage(format!(
                "memory encoder needs pix_feat [B, {}, e, e] and mask [B, 1, {}e, {}e]: got {:?} \
                 and {mask_dims:?}",
                self.hidden,
                self.total_stride,
                self.total_stride,
                pix_feat.dims()
            )));
        }
        Ok(())
    }

    /// The sine position encoding of an `h x w` memory grid `[1, C, h, w]`, computed once (the
    /// grid is the model's, so every frame asks for the same one).
    fn position(&self, h: usize, w: usize, device: &candle_core::Device) -> Result<Tensor> {
        let mut cache = self
            .position_cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((size, pos)) = cache.as_ref() {
            if *size == (h, w) && pos.device().same_device(device) {
                return Ok(pos.clone());
            }
        }
        let pos = sine_position_embedding(self.out_channels, h, w, device)?;
        *cache = Some(((h, w), pos.clone()));
        Ok(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::weights::random_var_builder;
    use candle_core::Device;

    fn cfg(size: usize) -> EdgeTamConfig {
        EdgeTamConfig::with_image_size(size).unwrap()
    }

    #[test]
    fn occluded_object_gives_bias_everywhere() -> Result<()> {
        let cfg = cfg(256);
        let low = Tensor::randn(0f32, 3.0, (2, 1, 64, 64), &Device::Cpu)?;
        let score = Tensor::new(&[1.5f32, -0.5], &Device::Cpu)?;
        let m = mask_for_memory(&cfg, &low, &score, MaskSource::Tracked)?;
        assert_eq!(m.dims(), &[2, 1, 256, 256]);
        let occluded = m.get(1)?.flatten_all()?.to_vec1::<f32>()?;
        assert!(occluded.iter().all(|&v| v == -10.0));
        let present = m.get(0)?.flatten_all()?.to_vec1::<f32>()?;
        assert!(present.iter().any(|&v| v > 0.0) && present.iter().any(|&v| v < 0.0));
        Ok(())
    }

    /// The downsampler's fused conv + norm + GELU passes against the separate ops, bit for bit.
    #[test]
    fn fused_downsampler_layers_are_bit_identical() -> Result<()> {
        let cfg = cfg(256);
        let dev = Device::Cpu;
        let enc = MemoryEncoder::new(&cfg, random_var_builder(2, &dev))?;
        let mut x = Tensor::randn(0f32, 3.0, (2, 1, 256, 256), &dev)?;
        for (i, l) in enc.down.iter().enumerate() {
            let fused = l.conv.forward_norm_gelu(&x, &l.host_norm)?;
            let fused = fused.ok_or_else(|| Error::InvalidImage("no fused path".into()))?;
            let plain = gelu(&l.norm.forward(&l.conv.forward(&x)?)?)?;
            assert!(
                crate::checks::compare::same_bits(&fused, &plain)?,
                "layer {i}"
            );
            x = plain;
        }
        Ok(())
    }

    /// The folded tail (last fuser block + projection as one MLP) against the stages run one
    /// by one; a shared image row serving 2 masks.
    #[test]
    fn folded_projection_matches_the_stages() -> Result<()> {
        let cfg = cfg(256);
        let dev = Device::Cpu;
        let enc = MemoryEncoder::new(&cfg, random_var_builder(4, &dev))?;
        assert!(enc.tail.is_some());
        let pix = Tensor::randn(0f32, 1.0, (1, 256, 16, 16), &dev)?;
        let low = Tensor::randn(0f32, 3.0, (2, 1, 64, 64), &dev)?;
        let score = Tensor::new(&[1f32, 2.0], &dev)?;
        let mask = mask_for_memory(&cfg, &low, &score, MaskSource::Tracked)?;
        let (folded, _) = enc.forward(&pix, &mask)?;
        let unfolded = enc.unfolded_features(&pix, &mask)?;
        let err = (&folded - &unfolded)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        let scale = unfolded.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(
            err <= 1e-5 * scale,
            "folded tail differs by {err} (max {scale})"
        );
        Ok(())
    }

    #[test]
    fn rejects_mismatched_inputs() -> Result<()> {
        let cfg = cfg(256);
        let dev = Device::Cpu;
        let low = Tensor::zeros((2, 1, 64, 64), DType::F32, &dev)?;
        let one_score = Tensor::zeros(1, DType::F32, &dev)?;
        assert!(mask_for_memory(&cfg, &low, &one_score, MaskSource::Prompted).is_err());
        let enc = MemoryEncoder::new(&cfg, random_var_builder(1, &dev))?;
        let pix = Tensor::zeros((1, 256, 16, 16), DType::F32, &dev)?;
        let bad_mask = Tensor::zeros((1, 1, 128, 128), DType::F32, &dev)?;
        assert!(enc.forward(&pix, &bad_mask).is_err());
        let mut bad = cfg.clone();
        bad.mask_downsampler_total_stride = 12;
        assert!(MemoryEncoder::new(&bad, random_var_builder(1, &dev)).is_err());
        Ok(())
    }

    /// Objects batched on B are independent, at the released 1024 shapes (64x64 memory grid).
    #[test]
    fn batch_entries_are_independent_at_1024() -> Result<()> {
        let cfg = cfg(1024);
        let dev = Device::Cpu;
        let enc = MemoryEncoder::new(&cfg, random_var_builder(3, &dev))?;
        let pix = Tensor::randn(0f32, 1.0, (2, 256, 64, 64), &dev)?;
        let low = Tensor::randn(0f32, 3.0, (2, 1, 256, 256), &dev)?;
        let score = Tensor::new(&[1f32, 2.0], &dev)?;
        let mask = mask_for_memory(&cfg, &low, &score, MaskSource::Tracked)?;
        let (feats, pos) = enc.forward(&pix, &mask)?;
        assert_eq!(feats.dims(), &[2, 64, 64, 64]);
        assert_eq!(pos.dims(), &[2, 64, 64, 64]);
        let (one, _) = enc.forward(&pix.narrow(0, 1, 1)?, &mask.narrow(0, 1, 1)?)?;
        // Relative: batched and single matmuls block differently (float noise only).
        let diff = (feats.narrow(0, 1, 1)? - &one)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        let scale = one.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(
            diff <= 1e-5 * scale,
            "batch entry 1 differs alone by {diff} (max {scale})"
        );
        Ok(())
    }
}
