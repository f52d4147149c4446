//! Model configuration, read from a transformers `config.json` (`EdgeTamVideoConfig`).
//!
//! Only the fields this implementation uses are parsed; each defaults to transformers' default so
//! a partial config behaves as it would in Python. Every tensor shape in the model derives from
//! these values (nothing is hard-coded to a 1024 input).

use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

/// Smallest model input side [`EdgeTamConfig::at_input_size`] accepts: one perceiver window per
/// memory-grid cell.
pub const MIN_INPUT_SIZE: usize = 256;
/// Largest model input side [`EdgeTamConfig::at_input_size`] accepts: 4x the released size's
/// pixels already makes each tracked frame's self-attention 16x as long.
pub const MAX_INPUT_SIZE: usize = 2048;

/// The whole EdgeTAM video model config.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct EdgeTamConfig {
    /// Side of the square model input (1024 for the released model).
    pub image_size: usize,
    /// Absent in a config file means transformers' default, a SAM 2 Hiera encoder: rejected.
    #[serde(default = "VisionConfig::unspecified")]
    pub vision_config: VisionConfig,
    pub prompt_encoder_config: PromptEncoderConfig,
    pub mask_decoder_config: MaskDecoderConfig,
    pub num_maskmem: usize,
    pub sigmoid_scale_for_mem_enc: f64,
    pub sigmoid_bias_for_mem_enc: f64,
    pub enable_occlusion_spatial_embedding: bool,
    pub enable_temporal_pos_encoding_for_object_pointers: bool,
    pub multimask_output_in_sam: bool,
    pub multimask_min_pt_num: usize,
    pub multimask_max_pt_num: usize,
    pub multimask_output_for_tracking: bool,
    pub max_object_pointers_in_encoder: usize,
    pub max_cond_frame_num: i64,
    pub memory_encoder_output_channels: usize,
    // --- Memory attention (conditions a tracked frame's features on the memory bank) ---
    /// Width of the memory-attention stream (the level-2 feature width, 256).
    pub memory_attention_hidden_size: usize,
    pub memory_attention_num_layers: usize,
    pub memory_attention_num_attention_heads: usize,
    /// Attention internal width is `hidden_size / downsample_rate`.
    pub memory_attention_downsample_rate: usize,
    pub memory_attention_mlp_hidden_size: usize,
    /// `"relu"` (EdgeTAM) or `"gelu"`.
    pub memory_attention_mlp_hidden_act: String,
    /// Query RoPE grid `[width, height]`: the level-2 feature grid (64x64 at 1024).
    pub memory_attention_rope_feat_sizes: [usize; 2],
    /// Key RoPE grid `[width, height]`: the perceiver's 2-D latents (16x16 at every image size).
    pub memory_attention_rope_k_sizes: [usize; 2],
    pub rope_parameters: RopeParameters,
    // --- Memory encoder + spatial perceiver (encode each frame's mask into memory tokens) ---
    /// Channels of the features the memory encoder fuses (the FPN width, 256).
    pub memory_encoder_hidden_size: usize,
    /// Output channels of the mask downsampler (added to the projected image features).
    pub mask_downsampler_embed_dim: usize,
    pub mask_downsampler_kernel_size: usize,
    pub mask_downsampler_stride: usize,
    pub mask_downsampler_padding: usize,
    /// Overall downsampling of the mask (image size / embedding size): 16.
    pub mask_downsampler_total_stride: usize,
    pub mask_downsampler_hidden_act: String,
    pub memory_fuser_num_layers: usize,
    pub memory_fuser_embed_dim: usize,
    pub memory_fuser_intermediate_dim: usize,
    pub memory_fuser_kernel_size: usize,
    pub memory_fuser_padding: usize,
    pub memory_fuser_hidden_act: String,
    pub perceiver_resampler_num_latents: usize,
    pub perceiver_resampler_num_latents_2d: usize,
    pub perceiver_resampler_hidden_size: usize,
    pub perceiver_resampler_mlp_intermediate_size: usize,
    pub perceiver_resampler_num_attention_heads: usize,
    pub perceiver_resampler_attention_head_dim: usize,
    pub perceiver_resampler_num_layers: usize,
}

/// `rope_parameters`: the memory attention's axial RoPE.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct RopeParameters {
    pub rope_theta: f64,
    /// Only `"axial"` exists for EdgeTAM.
    pub rope_type: String,
}

impl Default for RopeParameters {
    fn default() -> Self {
        Self {
            rope_theta: 10_000.0,
            rope_type: "axial".into(),
        }
    }
}

impl Default for EdgeTamConfig {
    fn default() -> Self {
        Self {
            image_size: 1024,
            vision_config: VisionConfig::default(),
            prompt_encoder_config: PromptEncoderConfig::default(),
            mask_decoder_config: MaskDecoderConfig::default(),
            num_maskmem: 7,
            sigmoid_scale_for_mem_enc: 20.0,
            sigmoid_bias_for_mem_enc: -10.0,
            // The released EdgeTAM turns both off (transformers' defaults turn them on).
            enable_occlusion_spatial_embedding: false,
            enable_temporal_pos_encoding_for_object_pointers: false,
            multimask_output_in_sam: true,
            multimask_min_pt_num: 0,
            multimask_max_pt_num: 1,
            multimask_output_for_tracking: true,
            max_object_pointers_in_encoder: 16,
            max_cond_frame_num: -1,
            memory_encoder_output_channels: 64,
            memory_attention_hidden_size: 256,
            memory_attention_num_layers: 2,
            memory_attention_num_attention_heads: 1,
            memory_attention_downsample_rate: 1,
            memory_attention_mlp_hidden_size: 2048,
            memory_attention_mlp_hidden_act: "relu".into(),
            memory_attention_rope_feat_sizes: [64, 64],
            memory_attention_rope_k_sizes: [16, 16],
            rope_parameters: RopeParameters::default(),
            memory_encoder_hidden_size: 256,
            mask_downsampler_embed_dim: 256,
            mask_downsampler_kernel_size: 3,
            mask_downsampler_stride: 2,
            mask_downsampler_padding: 1,
            mask_downsampler_total_stride: 16,
            mask_downsampler_hidden_act: "gelu".into(),
            memory_fuser_num_layers: 2,
            memory_fuser_embed_dim: 256,
            memory_fuser_intermediate_dim: 1024,
            memory_fuser_kernel_size: 7,
            memory_fuser_padding: 3,
            memory_fuser_hidden_act: "gelu".into(),
            perceiver_resampler_num_latents: 256,
            perceiver_resampler_num_latents_2d: 256,
            perceiver_resampler_hidden_size: 64,
            perceiver_resampler_mlp_intermediate_size: 256,
            perceiver_resampler_num_attention_heads: 1,
            perceiver_resampler_attention_head_dim: 64,
            perceiver_resampler_num_layers: 2,
        }
    }
}

/// `vision_config`: RepViT backbone (through timm) + FPN neck.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct VisionConfig {
    /// Absent in a config file means transformers' default timm config (a resnet50): rejected.
    #[serde(default = "BackboneConfig::unspecified")]
    pub backbone_config: BackboneConfig,
    /// Backbone channels from the deepest stage to the shallowest (384, 192, 96, 48).
    pub backbone_channel_list: Vec<usize>,
    /// Spatial sizes of the three FPN levels the model uses, high resolution first.
    pub backbone_feature_sizes: Vec<[usize; 2]>,
    pub fpn_hidden_size: usize,
    pub fpn_kernel_size: usize,
    pub fpn_stride: usize,
    pub fpn_padding: usize,
    pub fpn_top_down_levels: Vec<usize>,
    pub num_feature_levels: usize,
}

impl Default for VisionConfig {
    fn default() -> Self {
        Self {
            backbone_config: BackboneConfig::default(),
            backbone_channel_list: vec![384, 192, 96, 48],
            backbone_feature_sizes: vec![[256, 256], [128, 128], [64, 64]],
            fpn_hidden_size: 256,
            fpn_kernel_size: 1,
            fpn_stride: 1,
            fpn_padding: 0,
            fpn_top_down_levels: vec![2, 3],
            num_feature_levels: 3,
        }
    }
}

impl VisionConfig {
    fn unspecified() -> Self {
        Self {
            backbone_config: BackboneConfig::unspecified(),
            ..Self::default()
        }
    }
}

/// `vision_config.backbone_config`: a timm wrapper; only `repvit_m1` is implemented.
///
/// Fields missing from a file are `None` (transformers then builds its default, a resnet50).
#[derive(Debug, Clone, Deserialize)]
pub struct BackboneConfig {
    #[serde(default)]
    pub architecture: Option<String>,
    #[serde(default)]
    /// transformers' default vision config misspells the key ("archirecture") and so silently
    /// builds a resnet50; we read it only to report that trap clearly.
    pub archirecture: Option<String>,
    #[serde(default)]
    pub model_type: Option<String>,
}

impl BackboneConfig {
    fn unspecified() -> Self {
        Self {
            architecture: None,
            archirecture: None,
            model_type: None,
        }
    }
}

impl Default for BackboneConfig {
    fn default() -> Self {
        Self {
            architecture: Some("repvit_m1".into()),
            archirecture: None,
            model_type: Some("timm_wrapper".into()),
        }
    }
}

/// `prompt_encoder_config`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct PromptEncoderConfig {
    pub hidden_size: usize,
    pub image_size: usize,
    pub patch_size: usize,
    pub mask_input_channels: usize,
    pub num_point_embeddings: usize,
    pub layer_norm_eps: f64,
}

impl Default for PromptEncoderConfig {
    fn default() -> Self {
        Self {
            hidden_size: 256,
            image_size: 1024,
            patch_size: 16,
            mask_input_channels: 16,
            num_point_embeddings: 4,
            layer_norm_eps: 1e-6,
        }
    }
}

/// `mask_decoder_config`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct MaskDecoderConfig {
    pub hidden_size: usize,
    pub mlp_dim: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub attention_downsample_rate: usize,
    pub num_multimask_outputs: usize,
    pub iou_head_depth: usize,
    pub iou_head_hidden_dim: usize,
    pub dynamic_multimask_via_stability: bool,
    pub dynamic_multimask_stability_delta: f64,
    pub dynamic_multimask_stability_thresh: f64,
}

impl Default for MaskDecoderConfig {
    fn default() -> Self {
        Self {
            hidden_size: 256,
            mlp_dim: 2048,
            num_hidden_layers: 2,
            num_attention_heads: 8,
            attention_downsample_rate: 2,
            num_multimask_outputs: 3,
            iou_head_depth: 3,
            iou_head_hidden_dim: 256,
            dynamic_multimask_via_stability: true,
            dynamic_multimask_stability_delta: 0.05,
            dynamic_multimask_stability_thresh: 0.98,
        }
    }
}

impl EdgeTamConfig {
    /// Reads and validates a transformers `config.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        use std::io::Read;
        let path = path.as_ref();
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        crate::limits::check(
            || format!("the size in bytes of {}", path.display()),
            len,
            crate::limits::MAX_CONFIG_BYTES,
        )?;
        let mut text = String::new();
        file.take(crate::limits::MAX_CONFIG_BYTES as u64 + 1)
            .read_to_string(&mut text)
            .map_err(io)?;
        Self::from_json(&text).map_err(|e| match e {
            Error::Config { message, .. } => Error::Config {
                path: path.to_owned(),
                message,
            },
            Error::Limit(mut limit) => {
                limit.what = format!("{} {}", path.display(), limit.what);
                Error::Limit(limit)
            }
            other => other,
        })
    }

    /// Parses and validates config JSON text.
    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: Self = serde_json::from_str(text).map_err(|e| Error::Config {
            path: "<json>".into(),
            message: e.to_string(),
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The default (released EdgeTAM) config with every size derived from `image_size`.
    pub fn with_image_size(image_size: usize) -> Result<Self> {
        let mut cfg = Self::default();
        cfg.derive_sizes(image_size);
        cfg.validate()?;
        Ok(cfg)
    }

    /// This config at another model input size: the same weights (the checkpoint has no
    /// size-dependent parameter), with every size-derived value following `size`: the backbone's
    /// feature sizes, the prompt encoder's coordinate scale and the memory attention's RoPE grid.
    /// Position encodings and tables are computed from these when the model is built.
    ///
    /// `size` must be a multiple of [`Self::input_size_step`] (256 for EdgeTAM: the spatial
    /// perceiver pools its 16x16 grid of 2-D latents from windows of the `size/16` memory grid)
    /// between [`MIN_INPUT_SIZE`] and [`MAX_INPUT_SIZE`]; anything else is
    /// [`Error::InputSize`] naming the rule.
    pub fn at_input_size(&self, size: usize) -> Result<Self> {
        let step = self.input_size_step();
        if !(MIN_INPUT_SIZE..=MAX_INPUT_SIZE).contains(&size) || !size.is_multiple_of(step) {
            return Err(Error::InputSize {
                size,
                rule: format!(
                    "a multiple of {step} from {MIN_INPUT_SIZE} to {MAX_INPUT_SIZE} (the memory \
                     grid, size/{}, must split into the spatial perceiver's windows; the released \
                     model runs at 1024, faster at 768 or 512)",
                    self.prompt_encoder_config.patch_size
                ),
            });
        }
        let mut cfg = self.clone();
        cfg.derive_sizes(size);
        cfg.validate()?;
        cfg.check_tracking()?;
        Ok(cfg)
    }

    /// The granularity of input sizes that can track: the patch size (16) times the perceiver's
    /// 2-D latents per side (16), so 256 for EdgeTAM.
    pub fn input_size_step(&self) -> usize {
        let per_side = (self.perceiver_resampler_num_latents_2d as f64)
            .sqrt()
            .round() as usize;
        self.prompt_encoder_config.patch_size.max(1) * per_side.max(1)
    }

    /// Sets `image_size` and every size derived from it, as transformers' config does.
    fn derive_sizes(&mut self, s: usize) {
        self.image_size = s;
        self.prompt_encoder_config.image_size = s;
        self.vision_config.backbone_feature_sizes =
            vec![[s / 4, s / 4], [s / 8, s / 8], [s / 16, s / 16]];
        self.memory_attention_rope_feat_sizes = [s / 16, s / 16];
    }

    fn validate(&self) -> Result<()> {
        self.validate_limits()?;
        let bad = |message: String| {
            Err(Error::Config {
                path: "<json>".into(),
                message,
            })
        };
        let bb = &self.vision_config.backbone_config;
        match bb.architecture.as_deref() {
            Some("repvit_m1") => {}
            Some(other) => {
                return bad(format!(
                    "backbone architecture `{other}` is not supported (EdgeTAM uses `repvit_m1`)"
                ))
            }
            None if bb.archirecture.is_some() => {
                return bad(
                    "backbone config has the misspelled key `archirecture` and no `architecture`: \
                     transformers builds a resnet50 from it, not EdgeTAM's repvit_m1"
                        .into(),
                )
            }
            None => {
                return bad("backbone config names no `architecture` (expected `repvit_m1`)".into())
            }
        }
        let s = self.image_size;
        if s == 0 || !s.is_multiple_of(64) {
            return bad(format!("image_size {s} must be a positive multiple of 64"));
        }
        if self.prompt_encoder_config.image_size != s {
            return bad(format!(
                "prompt_encoder_config.image_size {} differs from image_size {s}",
                self.prompt_encoder_config.image_size
            ));
        }
        let v = &self.vision_config;
        let expected = [[s / 4, s / 4], [s / 8, s / 8], [s / 16, s / 16]];
        if v.backbone_feature_sizes.as_slice() != expected {
            return bad(format!(
                "backbone_feature_sizes {:?} do not match image_size {s} (expected {expected:?})",
                v.backbone_feature_sizes
            ));
        }
        if v.backbone_channel_list != [384, 192, 96, 48] {
            return bad(format!(
                "backbone_channel_list {:?} is not RepViT-M1's [384, 192, 96, 48]",
                v.backbone_channel_list
            ));
        }
        if v.num_feature_levels != 3
            || v.fpn_kernel_size != 1
            || v.fpn_stride != 1
            || v.fpn_padding != 0
        {
            return bad("only EdgeTAM's FPN (3 levels, 1x1 convs) is supported".into());
        }
        if self.prompt_encoder_config.patch_size != 16 {
            return bad(format!(
                "prompt_encoder_config.patch_size {} must be 16",
                self.prompt_encoder_config.patch_size
            ));
        }
        Ok(())
    }

    /// Bounds on every size and depth of the config (see [`crate::limits`]), checked before
    /// any other check and before anything is built from them: a `config.json` from anyone
    /// must never reach an allocation that aborts the process. Zero is refused where the
    /// model divides by a value or needs at least one of it.
    pub fn validate_limits(&self) -> Result<()> {
        use crate::limits::{
            MAX_CONFIG_COUNT, MAX_CONFIG_DEPTH, MAX_CONFIG_KERNEL, MAX_CONFIG_WIDTH, MAX_IMAGE_SIZE,
        };
        fn bounded(what: &str, value: usize, min: usize, max: usize) -> Result<()> {
            if value < min {
                return Err(Error::Config {
                    path: "<json>".into(),
                    message: format!("{what} is {value}, below the minimum of {min}"),
                });
            }
            crate::limits::check(|| what.to_string(), value, max)?;
            Ok(())
        }
        fn finite(what: &str, value: f64) -> Result<()> {
            if value.is_finite() {
                return Ok(());
            }
            Err(Error::Config {
                path: "<json>".into(),
                message: format!("{what} is {value}: must be a finite number"),
            })
        }
        let (w, d, k, n) = (
            MAX_CONFIG_WIDTH,
            MAX_CONFIG_DEPTH,
            MAX_CONFIG_KERNEL,
            MAX_CONFIG_COUNT,
        );
        bounded("image_size", self.image_size, 1, MAX_IMAGE_SIZE)?;
        let v = &self.vision_config;
        for (i, &c) in v.backbone_channel_list.iter().enumerate() {
            bounded(
                &format!("vision_config.backbone_channel_list[{i}]"),
                c,
                1,
                w,
            )?;
        }
        bounded(
            "vision_config.backbone_channel_list length",
            v.backbone_channel_list.len(),
            0,
            d,
        )?;
        bounded(
            "vision_config.backbone_feature_sizes length",
            v.backbone_feature_sizes.len(),
            0,
            d,
        )?;
        for (i, &[a, b]) in v.backbone_feature_sizes.iter().enumerate() {
            bounded(
                &format!("vision_config.backbone_feature_sizes[{i}][0]"),
                a,
                0,
                MAX_IMAGE_SIZE,
            )?;
            bounded(
                &format!("vision_config.backbone_feature_sizes[{i}][1]"),
                b,
                0,
                MAX_IMAGE_SIZE,
            )?;
        }
        bounded("vision_config.fpn_hidden_size", v.fpn_hidden_size, 1, w)?;
        bounded("vision_config.fpn_kernel_size", v.fpn_kernel_size, 1, k)?;
        bounded("vision_config.fpn_stride", v.fpn_stride, 1, k)?;
        bounded("vision_config.fpn_padding", v.fpn_padding, 0, k)?;
        bounded(
            "vision_config.num_feature_levels",
            v.num_feature_levels,
            1,
            d,
        )?;
        bounded(
            "vision_config.fpn_top_down_levels length",
            v.fpn_top_down_levels.len(),
            0,
            d,
        )?;
        for (i, &l) in v.fpn_top_down_levels.iter().enumerate() {
            bounded(&format!("vision_config.fpn_top_down_levels[{i}]"), l, 0, d)?;
        }
        let p = &self.prompt_encoder_config;
        bounded("prompt_encoder_config.hidden_size", p.hidden_size, 1, w)?;
        bounded(
            "prompt_encoder_config.image_size",
            p.image_size,
            1,
            MAX_IMAGE_SIZE,
        )?;
        bounded(
            "prompt_encoder_config.patch_size",
            p.patch_size,
            1,
            MAX_IMAGE_SIZE,
        )?;
        bounded(
            "prompt_encoder_config.mask_input_channels",
            p.mask_input_channels,
            1,
            w,
        )?;
        bounded(
            "prompt_encoder_config.num_point_embeddings",
            p.num_point_embeddings,
            1,
            n,
        )?;
        finite("prompt_encoder_config.layer_norm_eps", p.layer_norm_eps)?;
        let m = &self.mask_decoder_config;
        bounded("mask_decoder_config.hidden_size", m.hidden_size, 1, w)?;
        bounded("mask_decoder_config.mlp_dim", m.mlp_dim, 1, w)?;
        bounded(
            "mask_decoder_config.num_hidden_layers",
            m.num_hidden_layers,
            1,
            d,
        )?;
        bounded(
            "mask_decoder_config.num_attention_heads",
            m.num_attention_heads,
            1,
            d,
        )?;
        bounded(
            "mask_decoder_config.attention_downsample_rate",
            m.attention_downsample_rate,
            1,
            d,
        )?;
        bounded(
            "mask_decoder_config.num_multimask_outputs",
            m.num_multimask_outputs,
            1,
            d,
        )?;
        bounded("mask_decoder_config.iou_head_depth", m.iou_head_depth, 1, d)?;
        bounded(
            "mask_decoder_config.iou_head_hidden_dim",
            m.iou_head_hidden_dim,
            1,
            w,
        )?;
        finite(
            "mask_decoder_config.dynamic_multimask_stability_delta",
            m.dynamic_multimask_stability_delta,
        )?;
        finite(
            "mask_decoder_config.dynamic_multimask_stability_thresh",
            m.dynamic_multimask_stability_thresh,
        )?;
        bounded("num_maskmem", self.num_maskmem, 1, n)?;
        finite("sigmoid_scale_for_mem_enc", self.sigmoid_scale_for_mem_enc)?;
        finite("sigmoid_bias_for_mem_enc", self.sigmoid_bias_for_mem_enc)?;
        bounded("multimask_min_pt_num", self.multimask_min_pt_num, 0, n)?;
        bounded("multimask_max_pt_num", self.multimask_max_pt_num, 0, n)?;
        bounded(
            "max_object_pointers_in_encoder",
            self.max_object_pointers_in_encoder,
            1,
            n,
        )?;
        if self.max_cond_frame_num < -1 {
            return Err(Error::Config {
                path: "<json>".into(),
                message: format!(
                    "max_cond_frame_num is {}: -1 (all) or a count",
                    self.max_cond_frame_num
                ),
            });
        }
        crate::limits::check(
            || "max_cond_frame_num".into(),
            self.max_cond_frame_num.max(0) as u64,
            n,
        )?;
        bounded(
            "memory_encoder_output_channels",
            self.memory_encoder_output_channels,
            1,
            w,
        )?;
        bounded(
            "memory_attention_hidden_size",
            self.memory_attention_hidden_size,
            1,
            w,
        )?;
        bounded(
            "memory_attention_num_layers",
            self.memory_attention_num_layers,
            0,
            d,
        )?;
        bounded(
            "memory_attention_num_attention_heads",
            self.memory_attention_num_attention_heads,
            1,
            d,
        )?;
        bounded(
            "memory_attention_downsample_rate",
            self.memory_attention_downsample_rate,
            1,
            d,
        )?;
        bounded(
            "memory_attention_mlp_hidden_size",
            self.memory_attention_mlp_hidden_size,
            1,
            w,
        )?;
        for (i, &s) in self.memory_attention_rope_feat_sizes.iter().enumerate() {
            bounded(&format!("memory_attention_rope_feat_sizes[{i}]"), s, 1, n)?;
        }
        for (i, &s) in self.memory_attention_rope_k_sizes.iter().enumerate() {
            bounded(&format!("memory_attention_rope_k_sizes[{i}]"), s, 1, n)?;
        }
        finite(
            "rope_parameters.rope_theta",
            self.rope_parameters.rope_theta,
        )?;
        bounded(
            "memory_encoder_hidden_size",
            self.memory_encoder_hidden_size,
            1,
            w,
        )?;
        bounded(
            "mask_downsampler_embed_dim",
            self.mask_downsampler_embed_dim,
            1,
            w,
        )?;
        bounded(
            "mask_downsampler_kernel_size",
            self.mask_downsampler_kernel_size,
            1,
            k,
        )?;
        bounded(
            "mask_downsampler_stride",
            self.mask_downsampler_stride,
            1,
            k,
        )?;
        bounded(
            "mask_downsampler_padding",
            self.mask_downsampler_padding,
            0,
            k,
        )?;
        bounded(
            "mask_downsampler_total_stride",
            self.mask_downsampler_total_stride,
            1,
            MAX_IMAGE_SIZE,
        )?;
        bounded(
            "memory_fuser_num_layers",
            self.memory_fuser_num_layers,
            0,
            d,
        )?;
        bounded("memory_fuser_embed_dim", self.memory_fuser_embed_dim, 1, w)?;
        bounded(
            "memory_fuser_intermediate_dim",
            self.memory_fuser_intermediate_dim,
            1,
            w,
        )?;
        bounded(
            "memory_fuser_kernel_size",
            self.memory_fuser_kernel_size,
            1,
            k,
        )?;
        bounded("memory_fuser_padding", self.memory_fuser_padding, 0, k)?;
        bounded(
            "perceiver_resampler_num_latents",
            self.perceiver_resampler_num_latents,
            0,
            n,
        )?;
        bounded(
            "perceiver_resampler_num_latents_2d",
            self.perceiver_resampler_num_latents_2d,
            0,
            n,
        )?;
        bounded(
            "perceiver_resampler_hidden_size",
            self.perceiver_resampler_hidden_size,
            1,
            w,
        )?;
        bounded(
            "perceiver_resampler_mlp_intermediate_size",
            self.perceiver_resampler_mlp_intermediate_size,
            1,
            w,
        )?;
        bounded(
            "perceiver_resampler_num_attention_heads",
            self.perceiver_resampler_num_attention_heads,
            1,
            d,
        )?;
        bounded(
            "perceiver_resampler_attention_head_dim",
            self.perceiver_resampler_attention_head_dim,
            1,
            w,
        )?;
        bounded(
            "perceiver_resampler_num_layers",
            self.perceiver_resampler_num_layers,
            0,
            d,
        )?;
        Ok(())
    }

    /// Side of the image embedding (the stride-16 FPN level): 64 at 1024.
    pub fn embed_size(&self) -> usize {
        self.image_size / self.prompt_encoder_config.patch_size
    }

    /// Whether this configuration can track (not only segment single images): the spatial
    /// perceiver splits the memory grid (the embedding side) into `sqrt(num_latents_2d)` equal
    /// windows per side, so 1024 and 256 track but 128 does not.
    pub fn check_tracking(&self) -> Result<()> {
        let n2 = self.perceiver_resampler_num_latents_2d;
        let per_side = (n2 as f64).sqrt().round() as usize;
        let e = self.embed_size();
        if n2 > 0 && (per_side == 0 || e < per_side || !e.is_multiple_of(per_side)) {
            return Err(Error::Config {
                path: "<config>".into(),
                message: format!(
                    "image_size {} cannot track: its {e}x{e} memory grid does not split into the                      spatial perceiver's {per_side}x{per_side} windows (use a multiple of {})",
                    self.image_size,
                    per_side * self.prompt_encoder_config.patch_size
                ),
            });
        }
        Ok(())
    }

    /// Side of the low-resolution masks the decoder predicts (4 x the embedding): 256 at 1024.
    pub fn low_res_mask_size(&self) -> usize {
        4 * self.embed_size()
    }
}
