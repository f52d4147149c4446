//! Single-frame EdgeTAM: image encoder, prompt encoder and mask decoder on one prompted frame.
//!
//! This is exactly the path transformers' `EdgeTamVideoModel` takes on a frame where an object
//! gets its first prompt (an "initial conditioning frame"): the stride-16 features plus
//! `no_memory_embedding` (no memory is read), the multimask rule of `_use_multimask`, the
//! no-object substitution and the object pointer. The video path reuses these pieces.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;

use crate::error::{Error, Result};
use crate::frame::postprocess;
use crate::frame::preprocess;
use crate::frame::Frame;
use crate::model::bf16_policy::Bf16Policy;
use crate::model::config::EdgeTamConfig;
use crate::model::decoder::{DecoderInputs, MaskDecoder};
use crate::model::image_encoder::{ImageEncoder, ImageFeatures};
use crate::model::layers::{Activation, FeedForward, FeedForwardSpec};
use crate::model::memory_attention::MemoryAttention;
use crate::model::memory_encoder::MemoryEncoder;
use crate::model::perceiver::SpatialPerceiver;
use crate::model::prompt::Prompt;
use crate::model::prompt_encoder::{ImagePositionalEmbedding, PromptEncoder};
use crate::model::weights::Weights;

/// Score the reference writes into every mask pixel of an object it judges absent.
pub const NO_OBJECT_SCORE: f32 = -1024.0;

/// Tensors the reference holds but never reads (transformers keeps `no_memory_positional_encoding`
/// for checkpoint compatibility). Anything else unread is an error.
const UNUSED_PREFIXES: &[&str] = &["no_memory_positional_encoding"];

/// Image features of one frame, shared by every object prompted on it.
pub struct ImageEmbedding {
    pub(crate) features: ImageFeatures,
    /// Stride-16 features + `no_memory_embedding`: what the decoder sees on a prompted frame.
    pub(crate) embed: Tensor,
    /// Original image `(width, height)`.
    pub original_size: (usize, usize),
    /// Time spent preprocessing the frame (zero when it came preprocessed).
    pub preprocess_time: std::time::Duration,
    /// Time spent in the image encoder.
    pub encoder_time: std::time::Duration,
}

impl ImageEmbedding {
    /// The raw stride-16 FPN level `[1, C, e, e]` (what memory attention and the memory encoder
    /// read).
    pub fn level2(&self) -> Result<&Tensor> {
        Ok(&self.features.level2)
    }

    /// The sine position encoding of [`Self::level2`].
    pub fn level2_pos(&self) -> Result<&Tensor> {
        Ok(&self.features.level2_pos)
    }
}

/// The decoder's answer for one prompt.
pub struct Segmentation {
    /// Chosen low-resolution mask logits `[1,1,h,w]` (all `NO_OBJECT_SCORE` when absent).
    pub low_res_logits: Tensor,
    /// Predicted IoU of every mask the decoder returned (3 with multimask, else 1).
    pub iou_scores: Vec<f32>,
    /// Index of the chosen mask within `iou_scores`.
    pub chosen: usize,
    /// Object-score logit; the object is present when it is > 0.
    pub object_score: f32,
    /// 256-d object pointer (the no-object pointer when absent), used by the memory path.
    pub object_pointer: Tensor,
    /// Whether the decoder ran in multimask mode.
    pub multimask: bool,
}

impl Segmentation {
    /// Whether the model judges the object present.
    pub fn is_present(&self) -> bool {
        self.object_score > 0.0
    }

    /// The chosen mask's predicted IoU.
    pub fn iou(&self) -> f32 {
        // A mask prompt has one dummy IoU whatever token made its pointer.
        match self.iou_scores.as_slice() {
            [only] => *only,
            all => all.get(self.chosen).copied().unwrap_or(0.0),
        }
    }
}

/// How many masks to ask the decoder for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MultimaskMode {
    /// The reference's rule: multimask for 0 or 1 prompt points (a box counts as two).
    #[default]
    Auto,
    /// Always three candidate masks; the one with the best predicted IoU is kept.
    On,
    /// One mask (with the dynamic stability fallback).
    Off,
}

/// How to load a model ([`EdgeTam::load_with`]); the default loads the checkpoint as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Side of the square model input, overriding the checkpoint's `image_size` (1024 for the
    /// released EdgeTAM) without touching its `config.json`: the weights do not depend on it,
    /// every size-derived shape and table follows it. A multiple of 256 from 256 to 2048
    /// ([`EdgeTamConfig::at_input_size`]); smaller is faster and less accurate.
    pub input_size: Option<usize>,
}

impl LoadOptions {
    /// Runs the model at `size` instead of the checkpoint's own input size.
    pub fn input_size(mut self, size: usize) -> Self {
        self.input_size = Some(size);
        self
    }

    /// The checkpoint's config with these options applied.
    pub fn apply(&self, config: EdgeTamConfig) -> Result<EdgeTamConfig> {
        match self.input_size {
            Some(size) => config.at_input_size(size),
            None => Ok(config),
        }
    }
}

/// The EdgeTAM model for single-frame segmentation.
pub struct EdgeTam {
    config: EdgeTamConfig,
    device: Device,
    pub(crate) image_encoder: ImageEncoder,
    prompt_encoder: PromptEncoder,
    #[cfg_attr(not(feature = "checks"), allow(dead_code))]
    image_pe: ImagePositionalEmbedding,
    mask_decoder: MaskDecoder,
    no_memory_embedding: Tensor,
    object_pointer_proj: FeedForward,
    no_object_pointer: Tensor,
    /// Image-wide positional encoding of the decoder, computed once.
    dense_pe: Tensor,
    pub(crate) video: VideoModules,
    precision: crate::Precision,
}

/// The parts only tracked frames use: memory encoder, perceiver, memory attention and the
/// learned temporal encodings.
pub(crate) struct VideoModules {
    pub(crate) memory_encoder: MemoryEncoder,
    pub(crate) spatial_perceiver: SpatialPerceiver,
    pub(crate) memory_attention: MemoryAttention,
    /// `memory_temporal_positional_encoding` as `[num_maskmem, mem_dim]`.
    pub(crate) temporal_encoding: Tensor,
    /// `temporal_positional_encoding_projection_layer` (only with
    /// `enable_temporal_pos_encoding_for_object_pointers`).
    pub(crate) pointer_temporal_projection: Option<candle_nn::Linear>,
    /// `occlusion_spatial_embedding_parameter` `[1, mem_dim]` (only with
    /// `enable_occlusion_spatial_embedding`).
    pub(crate) occlusion_embedding: Option<Tensor>,
    /// `mask_downsample`: 4x4 stride-4 conv turning a mask prompt into a decoder mask input.
    pub(crate) mask_downsample: candle_nn::Conv2d,
}

impl EdgeTam {
    /// Loads a model from a directory with `config.json` + `model.safetensors` (transformers
    /// layout), or from an original `edgetam.pt` (its `config.json`, if one lies beside it, is
    /// used; otherwise the released EdgeTAM config). For a Hugging Face hub repository id, get
    /// the path from [`ModelSource`](crate::ModelSource) (or
    /// [`resolve_model`](crate::resolve_model)) first.
    pub fn load(path: impl AsRef<Path>, device: &Device) -> Result<Self> {
        Self::load_with(path, device, &LoadOptions::default())
    }

    /// [`Self::load`] with options, e.g. another model input size:
    ///
    /// ```no_run
    /// # fn main() -> edgetam_tracker::Result<()> {
    /// use edgetam_tracker::{EdgeTam, LoadOptions};
    /// let options = LoadOptions::default().input_size(512);
    /// let model = EdgeTam::load_with("/models/edgetam", &candle_core::Device::Cpu, &options)?;
    /// assert_eq!(model.config().image_size, 512);
    /// # Ok(()) }
    /// ```
    ///
    /// The size is checked before the weights are read.
    pub fn load_with(
        path: impl AsRef<Path>,
        device: &Device,
        options: &LoadOptions,
    ) -> Result<Self> {
        let path = path.as_ref();
        let (config_path, weights_path) = resolve_model_paths(path)?;
        let config = match config_path {
            Some(p) => EdgeTamConfig::from_file(p)?,
            None => EdgeTamConfig::default(),
        };
        let config = options.apply(config)?;
        let weights = Weights::load(&weights_path, device)?;
        Self::from_weights(config, &weights, device)
    }

    /// Builds the model from loaded weights, checking that nothing is missing, mis-shaped or
    /// left over.
    pub fn from_weights(config: EdgeTamConfig, weights: &Weights, device: &Device) -> Result<Self> {
        let vb = weights.var_builder(device);
        let model = Self::build(config, vb, device).map_err(|e| match e {
            Error::Tensor(e) => weights.lift(e),
            other => other,
        })?;
        weights.check_all_used_except(UNUSED_PREFIXES)?;
        Ok(model)
    }

    /// A model with deterministic random weights: runs end to end, but its masks are
    /// meaningless. For trying the tool and benchmarking without a checkpoint.
    pub fn random(config: EdgeTamConfig, seed: u64, device: &Device) -> Result<Self> {
        let vb = crate::model::weights::random_var_builder(seed, device);
        Self::build(config, vb, device)
    }

    fn build(config: EdgeTamConfig, vb: VarBuilder, device: &Device) -> Result<Self> {
        // A wrong `EDGETAM_ISA` is the user's to fix: say so before the kernels quietly run
        // another path than the one asked for.
        crate::kernels::cpu::isa()?;
        let hidden = config.vision_config.fpn_hidden_size;
        let image_encoder = ImageEncoder::new(&config, vb.clone())?;
        let prompt_encoder = PromptEncoder::new(&config, vb.pp("prompt_encoder"))?;
        let image_pe = ImagePositionalEmbedding::new(&config, vb.pp("shared_image_embedding"))?;
        let mask_decoder = MaskDecoder::new(&config, vb.pp("mask_decoder"))?;
        let no_memory_embedding = vb.get((1, 1, hidden), "no_memory_embedding")?;
        let object_pointer_proj = FeedForward::new(
            FeedForwardSpec {
                input_dim: hidden,
                hidden_dim: hidden,
                output_dim: hidden,
                num_layers: 3,
                activation: Activation::Relu,
                sigmoid_output: false,
            },
            vb.pp("object_pointer_proj"),
        )?;
        let no_object_pointer = vb.get((1, hidden), "no_object_pointer")?;
        let dense_pe = image_pe.image_wide(config.embed_size())?;
        let video = VideoModules::new(&config, &vb)?;
        // On CUDA the weights were copied on this thread's stream (candle uses the per-thread
        // default stream), and other threads' streams do not wait for it: finish here so a
        // model built on one thread can be used on any.
        device.synchronize()?;
        Ok(Self {
            config,
            device: device.clone(),
            image_encoder,
            prompt_encoder,
            image_pe,
            mask_decoder,
            no_memory_embedding,
            object_pointer_proj,
            no_object_pointer,
            dense_pe,
            video,
            precision: crate::Precision::F32,
        })
    }

    /// Waits until the work queued on the model's device is done (a no-op on the CPU, where
    /// every op completes before it returns): for timing GPU work.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.device.synchronize()?)
    }

    /// Selects the precision of the heaviest products (see [`crate::Precision`]) and returns
    /// the one in effect: [`crate::Precision::Bf16`] needs the CPU (AVX512-BF16); elsewhere
    /// the model stays exact f32 and says so in a warning.
    ///
    /// Kept for callers that want that fallback; front ends use [`Self::try_set_precision`] (or
    /// load through [`ModelSpec`](crate::ModelSpec)), which refuses instead, so a user asking
    /// for bf16 never silently gets f32.
    pub fn set_precision(&mut self, precision: crate::Precision) -> crate::Precision {
        let effective = match precision.available_on(&self.device) {
            Ok(()) => precision,
            Err(e) => {
                tracing::warn!("{e}: running exact f32");
                crate::Precision::F32
            }
        };
        match self.switch_precision(effective) {
            Ok(()) => effective,
            Err(e) => {
                tracing::warn!("cannot switch to {effective} ({e}): running exact f32");
                crate::Precision::F32
            }
        }
    }

    /// Selects the precision of the heaviest products (see [`crate::Precision`]), or fails with
    /// [`Error::PrecisionUnavailable`] where it cannot run here (bf16 off the CPU, without
    /// AVX512-BF16, or under an `EDGETAM_ISA` cap below avx512) and leaves the model as it was.
    /// A failure to pack the bf16 weights (out of memory) is an error too, with the model left
    /// exact f32.
    pub fn try_set_precision(&mut self, precision: crate::Precision) -> Result<()> {
        precision.available_on(&self.device)?;
        self.switch_precision(precision)
    }

    /// Switches every stage to `precision`, which the caller checked can run here: for bf16,
    /// each layer group as [`BF16_POLICY`](crate::model::bf16_policy::BF16_POLICY) (with
    /// `EDGETAM_BF16_POLICY`'s overrides) sets it. On a failure (a malformed override, packing
    /// the bf16 weights) every stage is back on exact f32.
    fn switch_precision(&mut self, precision: crate::Precision) -> Result<()> {
        let policy = match precision {
            crate::Precision::Bf16 => Bf16Policy::from_env(),
            crate::Precision::F32 => Ok(Bf16Policy::exact()),
        };
        self.switch_with_policy(precision, policy)
    }

    /// The fast mode with `overrides` of its per-group table (`group=precision,...`, as
    /// `EDGETAM_BF16_POLICY` takes them; `""`: the table), whatever that variable says: for
    /// the sensitivity tool's checks and tests. Fails as [`Self::try_set_precision`] does, and
    /// on a malformed override.
    #[doc(hidden)]
    pub fn try_set_bf16_policy(&mut self, overrides: &str) -> Result<()> {
        crate::Precision::Bf16.available_on(&self.device)?;
        self.switch_with_policy(crate::Precision::Bf16, overrides.parse())
    }

    fn switch_with_policy(
        &mut self,
        precision: crate::Precision,
        policy: std::result::Result<Bf16Policy, crate::model::bf16_policy::PolicyError>,
    ) -> Result<()> {
        let applied = policy
            .map_err(Error::from)
            .and_then(|p| self.apply_policy(&p).map_err(Error::from));
        if let Err(e) = applied {
            // Stay exact rather than half switched.
            let _ = self.apply_policy(&Bf16Policy::exact());
            self.precision = crate::Precision::F32;
            return Err(e);
        }
        self.precision = precision;
        Ok(())
    }

    fn apply_policy(&mut self, policy: &Bf16Policy) -> candle_core::Result<()> {
        use crate::model::bf16_policy::{GroupPrecision, LayerGroup};
        let bf16 = |g| policy.get(g) == GroupPrecision::Bf16;
        self.image_encoder.set_policy(policy);
        self.video
            .memory_encoder
            .set_rounding(policy.get(LayerGroup::MemoryEncoder).rounding());
        let decoder = bf16(LayerGroup::Decoder);
        self.mask_decoder.set_bf16(decoder)?;
        self.object_pointer_proj.set_bf16(decoder)?;
        self.video.memory_attention.set_bf16_parts(
            bf16(LayerGroup::SelfAttention),
            bf16(LayerGroup::CrossAttention),
            bf16(LayerGroup::Mlp),
        )
    }

    /// The precision in effect (see [`Self::set_precision`]).
    pub fn precision(&self) -> crate::Precision {
        self.precision
    }

    pub fn config(&self) -> &EdgeTamConfig {
        &self.config
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub(crate) fn prompt_encoder(&self) -> &PromptEncoder {
        &self.prompt_encoder
    }

    #[cfg_attr(not(feature = "checks"), allow(dead_code))]
    pub(crate) fn image_positional_embedding(&self) -> &ImagePositionalEmbedding {
        &self.image_pe
    }

    #[cfg_attr(not(feature = "checks"), allow(dead_code))]
    pub(crate) fn mask_decoder(&self) -> &MaskDecoder {
        &self.mask_decoder
    }

    /// Preprocesses an RGB8 image (`width * height * 3` bytes, row-major) for the encoder.
    pub fn preprocess(&self, rgb: &[u8], width: usize, height: usize) -> Result<Tensor> {
        preprocess::preprocess(rgb, width, height, self.config.image_size, &self.device)
    }

    /// Runs preprocessing and the image encoder on an RGB8 image.
    pub fn encode_image(&self, rgb: &[u8], width: usize, height: usize) -> Result<ImageEmbedding> {
        self.preprocess_and_encode((width, height), || self.preprocess(rgb, width, height))
    }

    /// Runs preprocessing and the image encoder on a frame in any [`crate::PixelFormat`] (on CUDA
    /// the frame's bytes go to the device as they are; see [`preprocess::preprocess_frame`]).
    pub fn encode_frame(&self, frame: &Frame) -> Result<ImageEmbedding> {
        self.preprocess_and_encode((frame.width(), frame.height()), || {
            preprocess::preprocess_frame(frame, self.config.image_size, &self.device)
        })
    }

    /// As [`Self::encode_frame`] on each frame, with the image encoder run once on the batch
    /// `[N, 3, S, S]` (frames of any sizes: each is resized to the model's input first). Each
    /// embedding holds the same bytes as [`Self::encode_frame`] on its frame alone (the kernels
    /// compute each image of a batch as they compute a lone one; `model/batch_encoder_tests.rs`
    /// holds it). The batch's preprocessing and encoder times are on every embedding.
    pub fn encode_frames(&self, frames: &[&Frame]) -> Result<Vec<ImageEmbedding>> {
        if let [frame] = frames {
            return Ok(vec![self.encode_frame(frame)?]);
        }
        if frames.is_empty() {
            return Ok(Vec::new());
        }
        crate::kernels::threads::on_compute_pool(|| {
            let start = std::time::Instant::now();
            let pixels = frames
                .iter()
                .map(|f| preprocess::preprocess_frame(f, self.config.image_size, &self.device))
                .collect::<Result<Vec<_>>>()?;
            let pixels = Tensor::cat(&pixels, 0)?;
            let preprocess_time = start.elapsed();
            let start = std::time::Instant::now();
            let batch = self.image_encoder.forward(&pixels)?;
            let no_mem = self.no_memory_embedding.reshape((1, (), 1, 1))?;
            // Each image's tensors in storage of their own, as a lone call leaves them.
            let one = |t: &Tensor, i: usize| t.narrow(0, i, 1)?.force_contiguous();
            let mut out = Vec::with_capacity(frames.len());
            for (i, frame) in frames.iter().enumerate() {
                let features = ImageFeatures {
                    level2: one(&batch.level2, i)?,
                    level2_pos: batch.level2_pos.clone(),
                    feat_s0: one(&batch.feat_s0, i)?,
                    feat_s1: one(&batch.feat_s1, i)?,
                };
                let embed = crate::kernels::add(&features.level2, &no_mem)?;
                out.push(ImageEmbedding {
                    features,
                    embed,
                    original_size: (frame.width(), frame.height()),
                    preprocess_time,
                    encoder_time: std::time::Duration::ZERO,
                });
            }
            let encoder_time = start.elapsed();
            out.iter_mut().for_each(|e| e.encoder_time = encoder_time);
            Ok(out)
        })
    }

    /// `preprocess`, then the image encoder, both on the compute pool, with the preprocessing
    /// time on the embedding.
    fn preprocess_and_encode(
        &self,
        original_size: (usize, usize),
        preprocess: impl FnOnce() -> Result<Tensor> + Send,
    ) -> Result<ImageEmbedding> {
        crate::kernels::threads::on_compute_pool(|| {
            let start = std::time::Instant::now();
            let pixels = preprocess()?;
            let preprocess_time = start.elapsed();
            let mut image = self.encode_pixels(&pixels, original_size)?;
            image.preprocess_time = preprocess_time;
            Ok(image)
        })
    }

    /// Runs the image encoder on already preprocessed pixels `[1,3,S,S]`.
    pub fn encode_pixels(
        &self,
        pixels: &Tensor,
        original_size: (usize, usize),
    ) -> Result<ImageEmbedding> {
        crate::kernels::threads::on_compute_pool(|| {
            let start = std::time::Instant::now();
            let features = self.image_encoder.forward(pixels)?;
            let level2 = &features.level2;
            let no_mem = self.no_memory_embedding.reshape((1, (), 1, 1))?;
            let embed = crate::kernels::add(level2, &no_mem)?;
            Ok(ImageEmbedding {
                features,
                embed,
                original_size,
                preprocess_time: std::time::Duration::ZERO,
                encoder_time: start.elapsed(),
            })
        })
    }

    /// Segments one object from a prompt on an encoded image.
    pub fn segment(
        &self,
        image: &ImageEmbedding,
        prompt: &Prompt,
        mode: MultimaskMode,
    ) -> Result<Segmentation> {
        crate::kernels::threads::on_compute_pool(|| {
            let (w, h) = image.original_size;
            let (coords, labels) =
                prompt.to_model_inputs(w, h, self.config.image_size, &self.device)?;
            let multimask = match mode {
                MultimaskMode::Auto => self.use_multimask(prompt.num_points()),
                MultimaskMode::On => true,
                MultimaskMode::Off => false,
            };
            self.segment_model_inputs(image, &coords, &labels, multimask)
        })
    }

    /// The reference's `_use_multimask` on a prompted frame.
    pub fn use_multimask(&self, num_points: usize) -> bool {
        let c = &self.config;
        c.multimask_output_in_sam
            && (c.multimask_min_pt_num..=c.multimask_max_pt_num).contains(&num_points)
    }

    /// `_single_frame_forward` for one object given model-input points `[1,1,N,2]` and labels.
    pub(crate) fn segment_model_inputs(
        &self,
        image: &ImageEmbedding,
        coords: &Tensor,
        labels: &Tensor,
        multimask: bool,
    ) -> Result<Segmentation> {
        let (sparse, dense) = self.prompt_encoder.embed(Some((coords, labels)), None)?;
        self.decode_rows(image, &image.embed, &sparse, &dense, multimask)?
            .pop()
            .ok_or_else(|| Error::InvalidPrompt("decoder returned no mask".into()))
    }

    /// The mask decoder on `pix_feat` `[B|1, C, e, e]` for `B` prompt rows (`sparse`
    /// `[B, 1, T, C]`), then per row what `_single_frame_forward` derives: the chosen mask
    /// (argmax IoU with multimask), the no-object substitution and the object pointer.
    pub(crate) fn decode_rows(
        &self,
        image: &ImageEmbedding,
        pix_feat: &Tensor,
        sparse: &Tensor,
        dense: &Tensor,
        multimask: bool,
    ) -> Result<Vec<Segmentation>> {
        let inputs = DecoderInputs {
            image_embed: pix_feat,
            image_pe: &self.dense_pe,
            sparse,
            dense,
            feat_s0: &image.features.feat_s0,
            feat_s1: &image.features.feat_s1,
        };
        let out = self.mask_decoder.forward(&inputs, multimask)?;
        let rows = out.masks.dim(0)?;
        // Mid-frame device -> host reads (a few floats): the candidate choice and the object
        // score drive control flow on the host.
        crate::instrument::transfer::note_download(&out.object_score);
        crate::instrument::transfer::note_download(&out.iou);
        let scores = out.object_score.flatten_all()?.to_vec1::<f32>()?;
        let ious = out.iou.flatten_all()?.to_vec1::<f32>()?;
        let k = ious.len() / rows.max(1);
        // The object pointers of all rows in one projection.
        let tokens = out.sam_tokens.i((.., 0))?;
        let mut result = Vec::with_capacity(rows);
        let mut chosen_tokens = Vec::with_capacity(rows);
        for r in 0..rows {
            let object_score = scores.get(r).copied().unwrap_or(f32::NEG_INFINITY);
            let iou_scores = ious[r * k..(r + 1) * k].to_vec();
            // Argmax of the predicted IoU picks among the candidates (first maximum, as torch).
            let chosen = if multimask {
                iou_scores
                    .iter()
                    .enumerate()
                    .fold((0usize, f32::NEG_INFINITY), |best, (i, &v)| {
                        if v > best.1 {
                            (i, v)
                        } else {
                            best
                        }
                    })
                    .0
            } else {
                0
            };
            // Without multimask the pointer comes from token 0 even when the stability fallback
            // picked another mask (the decoder returns only token 0 then).
            let token_index = if multimask { chosen } else { 0 };
            chosen_tokens.push(tokens.i((r, token_index))?.unsqueeze(0)?);
            let masks = out
                .masks
                .i((r..r + 1, .., chosen..chosen + 1))?
                .squeeze(2)?;
            let low_res_logits = if object_score > 0.0 {
                masks
            } else {
                Tensor::full(NO_OBJECT_SCORE, masks.shape(), masks.device())?
            };
            result.push(Segmentation {
                low_res_logits,
                iou_scores,
                chosen,
                object_score,
                object_pointer: self.no_object_pointer.clone(),
                multimask,
            });
        }
        let pointers = self
            .object_pointer_proj
            .forward(&Tensor::cat(&chosen_tokens, 0)?)?;
        for (r, seg) in result.iter_mut().enumerate() {
            if seg.object_score > 0.0 {
                seg.object_pointer = pointers.i(r..r + 1)?;
            }
        }
        Ok(result)
    }

    /// `object_pointer_proj` of decoder output tokens `[N, C]`: the pointers of present objects.
    #[cfg_attr(not(feature = "checks"), allow(dead_code))]
    pub(crate) fn object_pointer(&self, tokens: &Tensor) -> Result<Tensor> {
        Ok(self.object_pointer_proj.forward(tokens)?)
    }

    /// `no_object_pointer` `[1, C]`: the pointer of an absent object.
    pub(crate) fn no_object_pointer(&self) -> &Tensor {
        &self.no_object_pointer
    }

    /// The binary mask at the original image resolution on the host (`H x W` bytes, 1 inside):
    /// [`Self::mask_at_original`]'s mask, on the CPU in one pass from the low-res logits.
    pub(crate) fn mask_bytes_at_original(
        &self,
        image: &ImageEmbedding,
        seg: &Segmentation,
    ) -> Result<Vec<u8>> {
        let (w, h) = image.original_size;
        let logits = &seg.low_res_logits;
        match logits.dims4() {
            Ok((1, 1, lh, lw))
                if logits.device().is_cpu() && lh > 0 && lw > 0 && w > 0 && h > 0 =>
            {
                let plane = logits
                    .flatten_all()?
                    .to_dtype(DType::F32)?
                    .to_vec1::<f32>()?;
                Ok(crate::kernels::resize::bilinear_mask(
                    &plane,
                    (lh, lw),
                    (h, w),
                ))
            }
            _ => {
                let (_, mask) = self.mask_at_original(image, seg)?;
                let mask = mask.flatten_all()?.to_dtype(DType::U8)?;
                crate::instrument::transfer::note_download(&mask);
                Ok(mask.to_vec1::<u8>()?)
            }
        }
    }

    /// Mask logits at the original image resolution `[1,1,H,W]` and the binary mask `[H,W]` (u8).
    pub fn mask_at_original(
        &self,
        image: &ImageEmbedding,
        seg: &Segmentation,
    ) -> Result<(Tensor, Tensor)> {
        let (w, h) = image.original_size;
        let logits = postprocess::resize_logits(&seg.low_res_logits, h, w)?;
        let mask = postprocess::binarize(&logits)?.reshape((h, w))?;
        Ok((logits, mask))
    }
}

/// Binary mask statistics: pixel area and tight bounding box `[x0, y0, x1, y1]` (inclusive).
pub fn mask_area_and_box(mask: &Tensor) -> Result<(usize, Option<[usize; 4]>)> {
    let (h, w) = mask.dims2()?;
    let data = mask.to_dtype(DType::U8)?.flatten_all()?.to_vec1::<u8>()?;
    Ok(mask_area_and_box_host(&data, w, h))
}

/// [`mask_area_and_box`] of a mask already on the host (`h` rows of `w`, nonzero = inside).
pub fn mask_area_and_box_host(data: &[u8], w: usize, h: usize) -> (usize, Option<[usize; 4]>) {
    let mut area = 0;
    let (mut x0, mut y0, mut x1, mut y1) = (usize::MAX, usize::MAX, 0, 0);
    for (y, row) in data.chunks(w.max(1)).take(h).enumerate() {
        // Per row: the count (a vectorised sum) and the first and last inside pixel.
        let (Some(first), Some(last)) = (
            row.iter().position(|&v| v != 0),
            row.iter().rposition(|&v| v != 0),
        ) else {
            continue;
        };
        area += row[first..=last].iter().filter(|&&v| v != 0).count();
        x0 = x0.min(first);
        x1 = x1.max(last);
        y0 = y0.min(y);
        y1 = y;
    }
    (area, (area > 0).then_some([x0, y0, x1, y1]))
}

/// `(config.json if any, weight file)` for a model path (directory or checkpoint file).
fn resolve_model_paths(path: &Path) -> Result<(Option<PathBuf>, PathBuf)> {
    let not_found = |what: &str| Error::Io {
        path: path.to_owned(),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, what.to_string()),
    };
    if path.is_dir() {
        let config = path.join("config.json");
        if !config.is_file() {
            return Err(not_found("model directory has no config.json"));
        }
        for name in ["model.safetensors", "edgetam.pt"] {
            let w = path.join(name);
            if w.is_file() {
                return Ok((Some(config), w));
            }
        }
        return Err(not_found(
            "model directory has neither model.safetensors nor edgetam.pt",
        ));
    }
    if path.is_file() {
        let config = path
            .parent()
            .map(|p| p.join("config.json"))
            .filter(|p| p.is_file());
        return Ok((config, path.to_owned()));
    }
    Err(not_found("no such model file or directory"))
}

impl VideoModules {
    fn new(config: &EdgeTamConfig, vb: &VarBuilder) -> Result<Self> {
        let hidden = config.vision_config.fpn_hidden_size;
        let mem_dim = config.memory_encoder_output_channels;
        let temporal_encoding = vb
            .get(
                (config.num_maskmem, 1, 1, mem_dim),
                "memory_temporal_positional_encoding",
            )?
            .reshape((config.num_maskmem, mem_dim))?;
        let pointer_temporal_projection = if config.enable_temporal_pos_encoding_for_object_pointers
        {
            Some(candle_nn::linear(
                hidden,
                mem_dim,
                vb.pp("temporal_positional_encoding_projection_layer"),
            )?)
        } else {
            None
        };
        let occlusion_embedding = if config.enable_occlusion_spatial_embedding {
            Some(vb.get((1, mem_dim), "occlusion_spatial_embedding_parameter")?)
        } else {
            None
        };
        let mask_downsample = candle_nn::conv2d(
            1,
            1,
            4,
            candle_nn::Conv2dConfig {
                stride: 4,
                ..Default::default()
            },
            vb.pp("mask_downsample"),
        )?;
        Ok(Self {
            memory_encoder: MemoryEncoder::new(config, vb.pp("memory_encoder"))?,
            spatial_perceiver: SpatialPerceiver::new(config, vb.pp("spatial_perceiver"))?,
            memory_attention: MemoryAttention::new(config, vb.pp("memory_attention"))?,
            temporal_encoding,
            pointer_temporal_projection,
            occlusion_embedding,
            mask_downsample,
        })
    }
}

#[cfg(test)]
mod mask_stats_tests {
    use super::mask_area_and_box_host;

    /// Area and box against a pixel-by-pixel count, on empty, one-pixel, edge and random masks
    /// (values other than 1 count as inside too).
    #[test]
    fn area_and_box_match_a_pixel_count() {
        let naive = |data: &[u8], w: usize, h: usize| {
            let mut area = 0;
            let mut b = [usize::MAX, usize::MAX, 0, 0];
            for y in 0..h {
                for x in 0..w {
                    if data[y * w + x] != 0 {
                        area += 1;
                        b = [b[0].min(x), b[1].min(y), b[2].max(x), b[3].max(y)];
                    }
                }
            }
            (area, (area > 0).then_some(b))
        };
        let mut state = 12345u32;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        for (w, h) in [(1usize, 1usize), (7, 3), (64, 33), (640, 360)] {
            let mut cases = vec![vec![0u8; w * h], vec![255u8; w * h]];
            let mut one = vec![0u8; w * h];
            one[w * h - 1] = 1;
            cases.push(one);
            for density in [2u32, 50, 97] {
                cases.push(
                    (0..w * h)
                        .map(|_| u8::from(next() % 100 < density))
                        .collect(),
                );
            }
            for data in cases {
                assert_eq!(
                    mask_area_and_box_host(&data, w, h),
                    naive(&data, w, h),
                    "{w}x{h}"
                );
            }
        }
    }
}
