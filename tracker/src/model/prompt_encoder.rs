//! Prompt encoder (`EdgeTamVideoPromptEncoder`) and the image-wide positional encoding
//! (`EdgeTamVideoModel.get_image_wide_positional_embeddings`).
//!
//! Points (boxes arrive as two points labelled 2 and 3) become sparse tokens: a random-Fourier
//! encoding of the position plus a learned embedding per label. A mask prompt becomes the dense
//! embedding through a small conv stack; without one, the learned `no_mask_embed` is broadcast.

use std::f64::consts::PI;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{conv2d, Conv2d, Conv2dConfig, VarBuilder};

use crate::error::{Error, Result};
use crate::model::config::EdgeTamConfig;
use crate::model::layers::{Activation, LayerNorm2d};

/// Label of a "not a point" token (the padding point, or the placeholder of an empty prompt).
pub const LABEL_NOT_A_POINT: i64 = -1;
/// Label transformers uses for batch padding: the token becomes all zeros.
pub const LABEL_IGNORE: i64 = -10;

/// Random-Fourier position encoding (`EdgeTamVideoPositionalEmbedding`): coordinates in
/// `[0, 1]^2` -> `[sin, cos]` of `2*pi * (2c - 1) @ G` for a fixed Gaussian matrix `G` `[2, C/2]`.
#[derive(Debug, Clone)]
pub struct FourierEmbedding {
    matrix: Tensor,
}

impl FourierEmbedding {
    /// Loads `positional_embedding` `[2, hidden/2]` from `vb`.
    pub fn new(hidden_size: usize, vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(Self {
            matrix: vb.get((2, hidden_size / 2), "positional_embedding")?,
        })
    }

    /// `coords`: `[..., 2]` (x, y) already mapped to `2c - 1` -> `[..., hidden]`.
    fn encode_centered(&self, coords: &Tensor) -> Result<Tensor> {
        let dims = coords.dims().to_vec();
        let rows = coords.elem_count() / 2;
        let proj = coords.reshape((rows, 2))?.matmul(&self.matrix)?;
        let proj = (proj * (2.0 * PI))?;
        let out = Tensor::cat(&[proj.sin()?, proj.cos()?], 1)?;
        let mut out_dims = dims;
        if let Some(last) = out_dims.last_mut() {
            *last = out.dim(1)?;
        }
        Ok(out.reshape(out_dims)?)
    }

    /// Encodes host-side normalised coordinates (`[0, 1]`) of shape `dims` (last dim 2).
    fn encode_normalised(&self, coords: &[f32], dims: &[usize], device: &Device) -> Result<Tensor> {
        // 2c - 1 in f32, as the reference computes it.
        let centered: Vec<f32> = coords.iter().map(|c| 2.0 * c - 1.0).collect();
        let t = Tensor::from_vec(centered, dims, device)?;
        self.encode_centered(&t)
    }
}

/// The top-level `shared_image_embedding`: encodes the centre of every embedding cell.
///
/// A different tensor from the prompt encoder's own `shared_embedding`, although both are the
/// same kind of encoding.
#[derive(Debug, Clone)]
pub struct ImagePositionalEmbedding {
    fourier: FourierEmbedding,
}

impl ImagePositionalEmbedding {
    /// `vb` at `shared_image_embedding`.
    pub fn new(cfg: &EdgeTamConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(Self {
            fourier: FourierEmbedding::new(cfg.prompt_encoder_config.hidden_size, vb)?,
        })
    }

    /// The dense positional encoding of the image embedding grid: `[1, C, e, e]`.
    pub fn image_wide(&self, embed_size: usize) -> Result<Tensor> {
        if embed_size == 0 {
            return Err(Error::InvalidImage(
                "embedding size must be positive".into(),
            ));
        }
        let e = embed_size;
        let mut coords = Vec::with_capacity(e * e * 2);
        for i in 0..e {
            for j in 0..e {
                // (cumsum - 0.5) / size: exact integers minus a half, one f32 division.
                coords.push((j as f32 + 1.0 - 0.5) / e as f32);
                coords.push((i as f32 + 1.0 - 0.5) / e as f32);
            }
        }
        let pe =
            self.fourier
                .encode_normalised(&coords, &[e, e, 2], self.fourier.matrix.device())?;
        Ok(pe.permute((2, 0, 1))?.unsqueeze(0)?.contiguous()?)
    }
}

/// Dense embedding of a mask prompt (`EdgeTamVideoMaskEmbedding`): two stride-2 convs with
/// channels-first LayerNorm + GELU, then a 1x1 conv to the hidden size (4e x 4e -> e x e).
#[derive(Debug, Clone)]
struct MaskEmbedding {
    conv1: Conv2d,
    norm1: LayerNorm2d,
    conv2: Conv2d,
    norm2: LayerNorm2d,
    conv3: Conv2d,
}

impl MaskEmbedding {
    fn new(cfg: &EdgeTamConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let pc = &cfg.prompt_encoder_config;
        let mid = pc.mask_input_channels / 4;
        let s2 = Conv2dConfig {
            stride: 2,
            ..Default::default()
        };
        Ok(Self {
            conv1: conv2d(1, mid, 2, s2, vb.pp("conv1"))?,
            norm1: LayerNorm2d::new(mid, pc.layer_norm_eps, vb.pp("layer_norm1"))?,
            conv2: conv2d(mid, pc.mask_input_channels, 2, s2, vb.pp("conv2"))?,
            norm2: LayerNorm2d::new(
                pc.mask_input_channels,
                pc.layer_norm_eps,
                vb.pp("layer_norm2"),
            )?,
            conv3: conv2d(
                pc.mask_input_channels,
                pc.hidden_size,
                1,
                Default::default(),
                vb.pp("conv3"),
            )?,
        })
    }

    fn forward(&self, masks: &Tensor) -> Result<Tensor> {
        let gelu = Activation::Gelu;
        let h = gelu.apply(&self.norm1.forward(&self.conv1.forward(masks)?)?)?;
        let h = gelu.apply(&self.norm2.forward(&self.conv2.forward(&h)?)?)?;
        Ok(self.conv3.forward(&h)?)
    }
}

/// The prompt encoder: sparse point tokens and the dense (mask) embedding.
#[derive(Debug, Clone)]
pub struct PromptEncoder {
    fourier: FourierEmbedding,
    mask_embed: MaskEmbedding,
    no_mask_embed: Tensor,
    point_embed: Tensor,
    not_a_point_embed: Tensor,
    hidden_size: usize,
    image_size: usize,
    embed_size: usize,
}

impl PromptEncoder {
    /// `vb` at `prompt_encoder`.
    pub fn new(cfg: &EdgeTamConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let pc = &cfg.prompt_encoder_config;
        let hidden = pc.hidden_size;
        Ok(Self {
            fourier: FourierEmbedding::new(hidden, vb.pp("shared_embedding"))?,
            mask_embed: MaskEmbedding::new(cfg, vb.pp("mask_embed"))?,
            no_mask_embed: vb.get((1, hidden), "no_mask_embed.weight")?,
            point_embed: vb.get((pc.num_point_embeddings, hidden), "point_embed.weight")?,
            not_a_point_embed: vb.get((1, hidden), "not_a_point_embed.weight")?,
            hidden_size: hidden,
            image_size: pc.image_size,
            embed_size: cfg.embed_size(),
        })
    }

    /// Embeds a prompt.
    ///
    /// * `points`: `[B, P, N, 2]` f32 coordinates in model-input pixels (x, y) and `[B, P, N]`
    ///   i64 labels (1 positive, 0 negative, 2/3 box corners, -1 not a point, -10 ignored). A
    ///   padding point (label -1) is appended, as the reference does when no separate box
    ///   tensor is given. `None`: a single "not a point" token, the reference's empty prompt.
    /// * `mask`: `[B, 1, 4e, 4e]` mask logits, or `None` for the learned no-mask embedding.
    ///
    /// Returns sparse `[B, P, N + 1, C]` and dense `[B, C, e, e]` embeddings.
    pub fn embed(
        &self,
        points: Option<(&Tensor, &Tensor)>,
        mask: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        let device = self.point_embed.device();
        let mask_batch = match mask {
            Some(m) => Some(self.check_mask(m)?),
            None => None,
        };
        let sparse = match points {
            Some((coords, labels)) => self.embed_points(coords, labels)?,
            None => {
                let b = mask_batch.unwrap_or(1);
                let coords = Tensor::zeros((b, 1, 1, 2), DType::F32, device)?;
                let labels = Tensor::full(LABEL_NOT_A_POINT, (b, 1, 1), device)?;
                self.embed_points(&coords, &labels)?
            }
        };
        let batch = sparse.dim(0)?;
        if let Some(mb) = mask_batch {
            if mb != batch {
                return Err(Error::InvalidPrompt(format!(
                    "mask prompt batch {mb} differs from point prompt batch {batch}"
                )));
            }
        }
        let dense = match mask {
            Some(m) => self.mask_embed.forward(&m.to_dtype(DType::F32)?)?,
            None => {
                let e = self.embed_size;
                self.no_mask_embed
                    .reshape((1, self.hidden_size, 1, 1))?
                    .broadcast_as((batch, self.hidden_size, e, e))?
            }
        };
        Ok((sparse, dense))
    }

    /// Validates a mask prompt and returns its batch size.
    fn check_mask(&self, mask: &Tensor) -> Result<usize> {
        let side = 4 * self.embed_size;
        match *mask.dims() {
            [b, 1, h, w] if h == side && w == side => Ok(b),
            _ => Err(Error::InvalidPrompt(format!(
                "mask prompt must be [B, 1, {side}, {side}], got {:?}",
                mask.dims()
            ))),
        }
    }

    /// `_embed_points(..., pad=True)`.
    fn embed_points(&self, coords: &Tensor, labels: &Tensor) -> Result<Tensor> {
        let (b, p, n, two) = coords.dims4().map_err(|_| {
            Error::InvalidPrompt(format!(
                "points must be [B, P, N, 2], got {:?}",
                coords.dims()
            ))
        })?;
        if two != 2 || labels.dims() != [b, p, n] {
            return Err(Error::InvalidPrompt(format!(
                "points {:?} and labels {:?} must be [B, P, N, 2] and [B, P, N]",
                coords.dims(),
                labels.dims()
            )));
        }
        let device = self.point_embed.device();
        let xy = coords
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let lab = labels
            .to_dtype(DType::I64)?
            .flatten_all()?
            .to_vec1::<i64>()?;
        let max_label = self.point_embed.dim(0)? as i64 - 1;
        if let Some(bad) = lab.iter().find(|&&l| l > max_label) {
            return Err(Error::InvalidPrompt(format!(
                "point label {bad} is out of range (at most {max_label})"
            )));
        }
        if xy.iter().any(|v| !v.is_finite()) {
            return Err(Error::InvalidPrompt(
                "point coordinates must be finite".into(),
            ));
        }

        // Append the padding point per (b, p) row: coordinates 0 (after the +0.5 shift), label -1.
        let n1 = n + 1;
        let size = self.image_size as f32;
        let mut norm = Vec::with_capacity(b * p * n1 * 2);
        let mut all_labels = Vec::with_capacity(b * p * n1);
        for row in 0..b * p {
            for k in 0..n {
                let i = row * n + k;
                norm.push((xy[2 * i] + 0.5) / size);
                norm.push((xy[2 * i + 1] + 0.5) / size);
                all_labels.push(lab[i]);
            }
            norm.extend([0.0, 0.0]);
            all_labels.push(LABEL_NOT_A_POINT);
        }
        let pe = self
            .fourier
            .encode_normalised(&norm, &[b, p, n1, 2], device)?;

        let shape = (b, p, n1, self.hidden_size);
        let flag = |pred: &dyn Fn(i64) -> bool| -> Result<Tensor> {
            let v: Vec<u8> = all_labels.iter().map(|&l| pred(l) as u8).collect();
            Ok(Tensor::from_vec(v, (b, p, n1, 1), device)?.broadcast_as(shape)?)
        };
        let nap = self
            .not_a_point_embed
            .reshape((1, 1, 1, self.hidden_size))?;
        let pe = flag(&|l| l == LABEL_NOT_A_POINT)?.where_cond(&nap.broadcast_as(shape)?, &pe)?;
        let pe = flag(&|l| l == LABEL_IGNORE)?.where_cond(&pe.zeros_like()?, &pe)?;

        // + point_embed[max(label, 0)] * (label >= 0)
        let idx: Vec<u32> = all_labels.iter().map(|&l| l.max(0) as u32).collect();
        let keep: Vec<f32> = all_labels.iter().map(|&l| (l >= 0) as u8 as f32).collect();
        let idx = Tensor::from_vec(idx, b * p * n1, device)?;
        let keep = Tensor::from_vec(keep, (b, p, n1, 1), device)?;
        let label_embed = self
            .point_embed
            .index_select(&idx, 0)?
            .reshape(shape)?
            .broadcast_mul(&keep)?;
        Ok((pe + label_embed)?)
    }
}
