//! RepViT-M1, EdgeTAM's image backbone (timm `repvit_m1`, `legacy=True`), inference only.
//!
//! Weights come from `vision_encoder.backbone.timm_model.*`. At load time every BatchNorm is
//! folded into its convolution, and each token mixer (`RepVggDw`: 3x3 depthwise + 1x1 depthwise +
//! identity, each branch summed) is re-parameterized into one 3x3 depthwise convolution, as timm's
//! `fuse()` does: the three branches are linear in the input, so their kernels add.
//!
//! Layout: stem (two 3x3 stride-2 convs, GELU between) then 4 stages of 48/96/192/384 channels,
//! depths 2/2/14/2; stages 1..3 open with a downsample; blocks alternate squeeze-excite on/off.

use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

use crate::instrument::layers::{timed, timed_if};
use crate::kernels::conv::depthwise::Depthwise;
use crate::kernels::conv::pointwise_bf16::Rounding;
use crate::model::conv::{conv_norm, Dense, Pointwise};

/// RepViT-M1 stage widths.
pub const DIMS: [usize; 4] = [48, 96, 192, 384];
/// RepViT-M1 blocks per stage (not counting the downsample's pre-block).
pub const DEPTHS: [usize; 4] = [2, 2, 14, 2];
/// Hidden width of every channel mixer, relative to its input.
const MLP_RATIO: usize = 2;

/// The RepViT-M1 backbone; [`RepVit::forward`] returns the four stage outputs (NCHW).
pub struct RepVit {
    stem: [Dense; 2],
    stages: Vec<Stage>,
}

struct Stage {
    downsample: Option<Downsample>,
    blocks: Vec<Block>,
}

/// `RepVitDownsample`: pre-block, 3x3 depthwise stride 2, 1x1 to the new width, residual FFN.
struct Downsample {
    /// The checkpoint path (`stages_1.downsample`), for the per-layer profile.
    name: String,
    pre_block: Block,
    spatial: Depthwise,
    channel: Pointwise,
    ffn: Mlp,
}

/// `RepViTBlock`: token mixer, optional squeeze-excite, residual channel mixer.
struct Block {
    /// The checkpoint path (`stages_2.blocks.3`), for the per-layer profile.
    name: String,
    /// Whether a block without squeeze-excite computes its token mixer inside the channel
    /// mixer's pass (bit-identical either way). Off: the two passes one after the other
    /// measured faster (the layer-by-layer round against OpenVINO in BENCHMARKS.md); the
    /// criterion group `repvit` times both, for other CPUs.
    fused_token_mixer: bool,
    token_mixer: Depthwise,
    se: Option<SqueezeExcite>,
    mlp: Mlp,
}

/// `RepVitMlp`: 1x1 expand, GELU (exact erf form, as `nn.GELU()`), 1x1 project.
struct Mlp {
    conv1: Pointwise,
    conv2: Pointwise,
}

/// timm `SEModule`: global mean, 1x1 reduce, ReLU, 1x1 expand, sigmoid gate.
struct SqueezeExcite {
    fc1: Pointwise,
    fc2: Pointwise,
}

/// timm `make_divisible(v, 8, round_limit=0)`: the SE bottleneck width.
fn se_channels(channels: usize) -> usize {
    let v = channels as f64 * 0.25;
    (((v + 4.0) as usize) / 8 * 8).max(8)
}

impl Mlp {
    fn load(vb: &VarBuilder, dim: usize) -> candle_core::Result<Self> {
        Ok(Self {
            conv1: Pointwise::conv_norm(&vb.pp("conv1"), dim, dim * MLP_RATIO)?,
            conv2: Pointwise::conv_norm(&vb.pp("conv2"), dim * MLP_RATIO, dim)?,
        })
    }

    /// `x + mlp(x)`, the residual and biases fused into the 1x1 convs.
    fn set_rounding(&mut self, rounding: Option<Rounding>) {
        self.conv1.set_rounding(rounding);
        self.conv2.set_rounding(rounding);
    }

    fn forward_residual(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if let Some(y) = self.conv1.channel_mixer(&self.conv2, x)? {
            return Ok(y);
        }
        self.conv2.forward_add(&self.conv1.forward_gelu(x)?, x)
    }

    /// [`Self::forward_residual`] of `x * gate` (`gate` `[n, c, 1, 1]`, squeeze-excite's):
    /// on the CPU the product is formed per pixel block inside the mixer's pass (the same
    /// products), so the gated map is never written out and read back.
    fn forward_residual_gated(&self, x: &Tensor, gate: &Tensor) -> candle_core::Result<Tensor> {
        if gate.device().is_cpu() && gate.dtype() == DType::F32 {
            let host = gate.flatten_all()?.to_vec1::<f32>()?;
            if let Some(y) = self.conv1.channel_mixer_gated(&self.conv2, x, &host)? {
                return Ok(y);
            }
        }
        self.forward_residual(&x.broadcast_mul(gate)?)
    }
}

impl SqueezeExcite {
    fn load(vb: &VarBuilder, dim: usize) -> candle_core::Result<Self> {
        let rd = se_channels(dim);
        Ok(Self {
            fc1: Pointwise::load(&vb.pp("fc1"), dim, rd)?,
            fc2: Pointwise::load(&vb.pp("fc2"), rd, dim)?,
        })
    }

    /// The per-channel gate `[n, c, 1, 1]` (the module's output is `x * gate`, which the
    /// block forms inside its channel mixer's pass).
    fn gate(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (n, c, h, w) = x.dims4()?;
        let pooled = x.reshape((n, c, h * w))?.mean_keepdim(2)?.unsqueeze(3)?;
        let s = self.fc1.forward(&pooled)?.relu()?;
        candle_nn::ops::sigmoid(&self.fc2.forward(&s)?)
    }
}

/// Loads a legacy `RepVggDw` and folds its three branches into one depthwise conv.
fn token_mixer(vb: &VarBuilder, dim: usize) -> candle_core::Result<Depthwise> {
    let (w3, b3) = conv_norm(&vb.pp("conv"), dim, 1, 3)?;
    let (w1, b1) = conv_norm(&vb.pp("conv1"), dim, 1, 1)?;
    // 1x1 branch + identity sit at the centre tap of the 3x3 kernel.
    let centre = (w1 + 1.0)?
        .pad_with_zeros(2, 1, 1)?
        .pad_with_zeros(3, 1, 1)?;
    let w = (w3 + centre)?.to_dtype(DType::F32)?;
    let b = (b3 + b1)?.to_dtype(DType::F32)?;
    Depthwise::new(w, b, 1, 1)
}

/// A folded depthwise `ConvNorm` 3x3 with the given stride.
fn depthwise_conv_norm(
    vb: &VarBuilder,
    dim: usize,
    stride: usize,
) -> candle_core::Result<Depthwise> {
    let (w, b) = conv_norm(vb, dim, 1, 3)?;
    Depthwise::new(w.to_dtype(DType::F32)?, b.to_dtype(DType::F32)?, stride, 1)
}

impl Block {
    fn load(vb: &VarBuilder, name: String, dim: usize, use_se: bool) -> candle_core::Result<Self> {
        Ok(Self {
            name,
            fused_token_mixer: false,
            token_mixer: token_mixer(&vb.pp("token_mixer"), dim)?,
            se: if use_se {
                Some(SqueezeExcite::load(&vb.pp("se"), dim)?)
            } else {
                None
            },
            mlp: Mlp::load(&vb.pp("channel_mixer"), dim)?,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if self.fused_token_mixer && self.se.is_none() {
            // Token and channel mixer in one pass per pixel block.
            let m = &self.mlp;
            let fused = timed_if(
                || self.name.clone(),
                "dw 3x3 + mlp, one pass",
                || m.conv1.channel_mixer_after(&m.conv2, &self.token_mixer, x),
                |y| matches!(y, Ok(Some(_))),
            )?;
            if let Some(y) = fused {
                return Ok(y);
            }
        }
        let name = |part: &str| format!("{}.{part}", self.name);
        let x = timed(
            || name("token_mixer"),
            "dw 3x3",
            || self.token_mixer.forward(x),
        )?;
        match &self.se {
            Some(se) => {
                let gate = timed(|| name("se"), "squeeze-excite gate", || se.gate(&x))?;
                timed(
                    || name("channel_mixer"),
                    "gate + mlp (1x1, gelu, 1x1, residual)",
                    || self.mlp.forward_residual_gated(&x, &gate),
                )
            }
            None => timed(
                || name("channel_mixer"),
                "mlp (1x1, gelu, 1x1, residual)",
                || self.mlp.forward_residual(&x),
            ),
        }
    }
}

impl Downsample {
    fn load(
        vb: &VarBuilder,
        name: String,
        in_dim: usize,
        out_dim: usize,
    ) -> candle_core::Result<Self> {
        Ok(Self {
            pre_block: Block::load(
                &vb.pp("pre_block"),
                format!("{name}.pre_block"),
                in_dim,
                false,
            )?,
            spatial: depthwise_conv_norm(&vb.pp("spatial_downsample"), in_dim, 2)?,
            channel: Pointwise::conv_norm(&vb.pp("channel_downsample"), in_dim, out_dim)?,
            ffn: Mlp::load(&vb.pp("ffn"), out_dim)?,
            name,
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let name = |part: &str| format!("{}.{part}", self.name);
        let x = self.pre_block.forward(x)?;
        let x = timed(
            || name("spatial_downsample"),
            "dw 3x3 stride 2",
            || self.spatial.forward(&x),
        )?;
        // The 1x1 inside the FFN's pass (per pixel block, the same sums) where both run exact.
        let ffn = &self.ffn;
        let fused = timed_if(
            || name("ffn"),
            "1x1 + mlp (1x1, gelu, 1x1, residual), one pass",
            || {
                ffn.conv1
                    .channel_mixer_after_projection(&ffn.conv2, &self.channel, &x)
            },
            |y| matches!(y, Ok(Some(_))),
        )?;
        if let Some(y) = fused {
            return Ok(y);
        }
        let x = timed(
            || name("channel_downsample"),
            "1x1",
            || self.channel.forward(&x),
        )?;
        timed(
            || name("ffn"),
            "mlp (1x1, gelu, 1x1, residual)",
            || self.ffn.forward_residual(&x),
        )
    }
}

impl RepVit {
    /// Loads RepViT-M1 from `vb` positioned at `vision_encoder.backbone.timm_model`.
    pub fn new(vb: VarBuilder) -> candle_core::Result<Self> {
        let stem_vb = vb.pp("stem");
        let stem = [
            Dense::conv_norm(&stem_vb.pp("conv1"), 3, DIMS[0] / 2, 3, 2)?,
            Dense::conv_norm(&stem_vb.pp("conv2"), DIMS[0] / 2, DIMS[0], 3, 2)?,
        ];
        let mut stages = Vec::with_capacity(DIMS.len());
        let mut in_dim = DIMS[0];
        for (i, (&dim, &depth)) in DIMS.iter().zip(&DEPTHS).enumerate() {
            let svb = vb.pp(format!("stages_{i}"));
            let downsample = if i > 0 {
                let name = format!("stages_{i}.downsample");
                Some(Downsample::load(&svb.pp("downsample"), name, in_dim, dim)?)
            } else {
                None
            };
            let blocks = (0..depth)
                .map(|j| {
                    let name = format!("stages_{i}.blocks.{j}");
                    Block::load(&svb.pp(format!("blocks.{j}")), name, dim, j % 2 == 0)
                })
                .collect::<candle_core::Result<Vec<_>>>()?;
            stages.push(Stage { downsample, blocks });
            in_dim = dim;
        }
        Ok(Self { stem, stages })
    }

    /// Runs the backbone on `[N, 3, S, S]` pixels; returns the outputs of the four stages,
    /// strides 4, 8, 16, 32.
    /// Sets the products' rounding of the convolutions of stages `first..` (and of the stem's
    /// second conv when `first` is 0); earlier ones stay exact.
    #[cfg_attr(not(any(test, feature = "checks")), allow(dead_code))]
    pub(crate) fn set_rounding_from(&mut self, rounding: Option<Rounding>, first: usize) {
        self.set_stem_rounding(rounding.filter(|_| first == 0));
        for i in 0..self.stages.len() {
            self.set_stage_rounding(i, rounding.filter(|_| i >= first));
        }
    }

    /// Sets the products' rounding of the stem's second conv (its first, with 3 input
    /// channels, stays exact).
    pub(crate) fn set_stem_rounding(&mut self, rounding: Option<Rounding>) {
        self.stem[1].set_rounding(rounding);
    }

    /// Sets the products' rounding of stage `i`'s convolutions (none past the last stage).
    pub(crate) fn set_stage_rounding(&mut self, i: usize, rounding: Option<Rounding>) {
        let Some(stage) = self.stages.get_mut(i) else {
            return;
        };
        if let Some(d) = &mut stage.downsample {
            d.pre_block.mlp.set_rounding(rounding);
            d.channel.set_rounding(rounding);
            d.ffn.set_rounding(rounding);
        }
        for b in &mut stage.blocks {
            b.mlp.set_rounding(rounding);
        }
    }

    /// Every block without squeeze-excite (downsamples' pre-blocks included) to compute its
    /// token mixer inside the channel mixer's pass, or not (the default). For the criterion
    /// group that times both (`bench_support`).
    #[cfg(feature = "checks")]
    pub(crate) fn set_fused_token_mixer(&mut self, on: bool) {
        for stage in &mut self.stages {
            let pre = stage.downsample.iter_mut().map(|d| &mut d.pre_block);
            for b in pre.chain(stage.blocks.iter_mut()) {
                b.fused_token_mixer = on;
            }
        }
    }

    pub fn forward(&self, pixel_values: &Tensor) -> candle_core::Result<Vec<Tensor>> {
        let mut x = timed(
            || "stem.conv1".into(),
            "dense 3x3 stride 2 + gelu",
            || self.stem[0].forward_gelu(pixel_values),
        )?;
        x = timed(
            || "stem.conv2".into(),
            "dense 3x3 stride 2",
            || self.stem[1].forward(&x),
        )?;
        let mut outs = Vec::with_capacity(self.stages.len());
        for stage in &self.stages {
            if let Some(d) = &stage.downsample {
                x = d.forward(&x)?;
            }
            for b in &stage.blocks {
                x = b.forward(&x)?;
            }
            outs.push(x.clone());
        }
        Ok(outs)
    }
}

#[cfg(test)]
mod tests {
    use super::se_channels;

    #[test]
    fn se_widths_match_timm() {
        assert_eq!(
            [48, 96, 192, 384].map(se_channels),
            [16, 24, 48, 96],
            "make_divisible(c/4, 8)"
        );
    }
}
