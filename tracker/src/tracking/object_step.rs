//! One object's step on one frame, as transformers' `_run_single_frame_inference` computes it:
//! memory conditioning (`_prepare_memory_conditioned_features`), the mask decoder on tracked
//! frames, the mask-prompt path (`_use_mask_as_output`) and the new memory
//! (`_encode_new_memory`). Objects that read the same amount of memory run as one batch.

use candle_core::{DType, Tensor};
use edgetam_memory_bank::{ObjectMemory, Selection};

use crate::error::{Error, Result};
use crate::kernels::nchw_to_tokens;
use crate::kernels::resize::resize_antialiased;
use crate::model::edgetam::{EdgeTam, ImageEmbedding, Segmentation};
use crate::model::memory_encoder::{mask_for_memory, scale_mask, MaskSource};

/// How a step's memory-encoder input is made from its result.
#[derive(Debug, Clone)]
pub enum MemoryInput {
    /// Prompted (points or box): the upsampled logits binarised, `(hr > 0)`.
    Binarized,
    /// Tracked: `sigmoid(hr)`.
    Sigmoid,
    /// A mask prompt: the prompt itself `[1, 1, S, S]` (0/1).
    Mask(Tensor),
}

/// The memory an object reads on one frame, assembled for the memory attention.
pub struct GatheredMemory {
    /// `[M, mem_dim]`: spatial memories then pointer tokens.
    pub memory: Tensor,
    /// `[M, mem_dim]`, temporal encodings included.
    pub memory_pos: Tensor,
    pub num_spatial_memories: usize,
    pub num_pointer_tokens: usize,
}

impl EdgeTam {
    /// Assembles what `bank` lets frame `t` read: memories with their temporal encoding
    /// (`memory_temporal_positional_encoding[offset - 1]`, conditioning frames the last entry),
    /// then each 256-d pointer split into `256 / mem_dim` tokens, with zero position or, when the
    /// config enables it, a projected 1-D sine encoding of `offset / (max_pointers - 1)`.
    pub(crate) fn gather_memory(
        &self,
        bank: &ObjectMemory,
        sel: &Selection,
    ) -> Result<GatheredMemory> {
        let cfg = self.config();
        let v = &self.video;
        let dev = self.device();
        let mem_dim = cfg.memory_encoder_output_channels;
        let hidden = cfg.vision_config.fpn_hidden_size;
        let (mems, poss) = bank
            .gather_memories(sel)?
            .ok_or_else(|| Error::InvalidPrompt("object has no memory to track from".into()))?;
        let n = sel.memories.len();
        let last = cfg.num_maskmem - 1;
        let tidx: Vec<u32> = sel
            .memories
            .iter()
            .map(|&(_, off)| if off == 0 { last } else { off - 1 } as u32)
            .collect();
        let tenc = v
            .temporal_encoding
            .index_select(&Tensor::from_vec(tidx, n, dev)?, 0)?
            .unsqueeze(1)?;
        let poss = poss.broadcast_add(&tenc)?;
        let tokens = mems.dim(1)?;
        let mut memory = vec![mems.reshape((n * tokens, mem_dim))?];
        let mut memory_pos = vec![poss.reshape((n * tokens, mem_dim))?];
        let mut num_pointer_tokens = 0;
        if let Some(ptrs) = bank.gather_pointers(sel)? {
            let p = ptrs.dim(0)?;
            let splits = hidden / mem_dim;
            memory.push(ptrs.reshape((p * splits, mem_dim))?);
            let pos = match &v.pointer_temporal_projection {
                Some(proj) => {
                    let max_diff = (cfg.max_object_pointers_in_encoder.max(2) - 1) as f32;
                    let diffs: Vec<f32> = sel
                        .pointers
                        .iter()
                        .map(|&(_, off)| off as f32 / max_diff)
                        .collect();
                    let pe = sine_1d(&diffs, hidden, dev)?;
                    let pe = candle_nn::Module::forward(proj, &pe)?;
                    pe.unsqueeze(1)?
                        .broadcast_as((p, splits, mem_dim))?
                        .reshape((p * splits, mem_dim))?
                }
                None => Tensor::zeros((p * splits, mem_dim), DType::F32, dev)?,
            };
            memory_pos.push(pos);
            num_pointer_tokens = p * splits;
        }
        Ok(GatheredMemory {
            memory: Tensor::cat(&memory, 0)?,
            memory_pos: Tensor::cat(&memory_pos, 0)?,
            num_spatial_memories: n,
            num_pointer_tokens,
        })
    }

    /// Memory-conditioned features `[B, C, e, e]` for objects whose gathered memories have the
    /// same layout (same number of memories and pointer tokens).
    pub(crate) fn condition_on_memory(
        &self,
        image: &ImageEmbedding,
        gathered: &[GatheredMemory],
    ) -> Result<Tensor> {
        let first = gathered
            .first()
            .ok_or_else(|| Error::InvalidPrompt("no object to condition".into()))?;
        if gathered.iter().any(|g| {
            g.num_spatial_memories != first.num_spatial_memories
                || g.num_pointer_tokens != first.num_pointer_tokens
        }) {
            return Err(Error::InvalidPrompt(
                "objects batched through memory attention must read the same memory layout".into(),
            ));
        }
        let b = gathered.len();
        let level2 = image.level2()?;
        let pos2 = image.level2_pos()?;
        let (_, c, h, w) = level2.dims4()?;
        // Tiled transposes on the kernels' workers: 0.6 ms per 256 x 64 x 64 map against 2.1 ms
        // for candle's strided copy (2 threads).
        let current = nchw_to_tokens(level2)?;
        let current_pos = nchw_to_tokens(pos2)?;
        let memory = Tensor::stack(&gathered.iter().map(|g| &g.memory).collect::<Vec<_>>(), 0)?;
        let memory_pos = Tensor::stack(
            &gathered.iter().map(|g| &g.memory_pos).collect::<Vec<_>>(),
            0,
        )?;
        // One frame's features shared by every object: what depends only on them (layer 0's
        // self-attention) is computed once.
        let out = self.video.memory_attention.forward_shared_current(
            &current,
            &current_pos,
            &memory,
            &memory_pos,
            first.num_pointer_tokens,
            first.num_spatial_memories,
        )?;
        Ok(out.transpose(1, 2)?.reshape((b, c, h, w))?)
    }

    /// The multimask rule of `_use_multimask` for a frame that is (`initial`) or is not an
    /// initial conditioning frame, given the number of prompt points (a box counts two).
    pub(crate) fn use_multimask_for(&self, initial: bool, num_points: usize) -> bool {
        let c = self.config();
        c.multimask_output_in_sam
            && (initial || c.multimask_output_for_tracking)
            && (c.multimask_min_pt_num..=c.multimask_max_pt_num).contains(&num_points)
    }

    /// Decoder on memory-conditioned features for tracked objects without prompts
    /// (`pix_feat` `[B, C, e, e]`), one [`Segmentation`] per row.
    pub(crate) fn decode_tracked(
        &self,
        image: &ImageEmbedding,
        pix_feat: &Tensor,
    ) -> Result<Vec<Segmentation>> {
        let b = pix_feat.dim(0)?;
        let (sparse, dense) = self.prompt_encoder().embed(None, None)?;
        let sparse = sparse.repeat((b, 1, 1, 1))?;
        self.decode_rows(
            image,
            pix_feat,
            &sparse,
            &dense,
            self.use_multimask_for(false, 0),
        )
    }

    /// `_use_mask_as_output`: a mask prompt `[1, 1, S, S]` (0/1) is the output itself
    /// (logits `mask * 20 - 10`, shrunk with antialiasing); the decoder only supplies the object
    /// pointer, from the mask fed as a dense prompt.
    pub(crate) fn segment_mask(
        &self,
        image: &ImageEmbedding,
        mask: &Tensor,
    ) -> Result<Segmentation> {
        let s = self.config().image_size;
        let low = s / 4;
        let mask = mask.to_dtype(DType::F32)?;
        let high_res = ((&mask * 20.0)? - 10.0)?;
        let plane = high_res.flatten_all()?.to_vec1::<f32>()?;
        let low_res = resize_antialiased(&plane, s, s, low, low)?;
        let low_res = Tensor::from_vec(low_res, (1, 1, low, low), self.device())?;
        let dense_input = candle_nn::Module::forward(&self.video.mask_downsample, &mask)?;
        let (sparse, dense) = self.prompt_encoder().embed(None, Some(&dense_input))?;
        let level2 = image.level2()?;
        let mut seg = self
            .decode_rows(image, level2, &sparse, &dense, true)?
            .pop()
            .ok_or_else(|| Error::InvalidPrompt("decoder returned nothing".into()))?;
        let appearing = mask
            .max_keepdim(3)?
            .max_keepdim(2)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let appearing = appearing.first().copied().unwrap_or(0.0) > 0.0;
        if !appearing {
            seg.object_pointer = self.no_object_pointer().clone();
        }
        seg.low_res_logits = low_res;
        // The output is the mask itself (a dummy IoU of 1); `multimask` and `chosen` keep the
        // decoder's choice, which only made the object pointer.
        seg.iou_scores = vec![1.0];
        seg.object_score = if appearing { 10.0 } else { -10.0 };
        Ok(seg)
    }

    /// `_encode_new_memory` for a batch of steps: memory-encoder input per step, the encoder on
    /// the raw stride-16 features, the occlusion embedding where the object is absent (if the
    /// config has one), then the perceiver. Returns memory and position `[B, tokens, mem_dim]`.
    pub(crate) fn encode_memories(
        &self,
        image: &ImageEmbedding,
        steps: &[(&Segmentation, &MemoryInput)],
    ) -> Result<(Tensor, Tensor)> {
        let cfg = self.config();
        let b = steps.len();
        let mut inputs = Vec::with_capacity(b);
        for (seg, how) in steps {
            let score = Tensor::new(&[seg.object_score], self.device())?;
            inputs.push(match how {
                MemoryInput::Binarized => {
                    mask_for_memory(cfg, &seg.low_res_logits, &score, MaskSource::Prompted)?
                }
                MemoryInput::Sigmoid => {
                    mask_for_memory(cfg, &seg.low_res_logits, &score, MaskSource::Tracked)?
                }
                MemoryInput::Mask(mask) => scale_mask(cfg, mask)?,
            });
        }
        self.encode_memory_inputs(
            image,
            &Tensor::cat(&inputs, 0)?,
            steps.iter().map(|(s, _)| s.object_score),
        )
    }

    /// As [`Self::encode_memories`] from ready memory-encoder inputs `[B, 1, S, S]` and the
    /// objects' scores.
    pub(crate) fn encode_memory_inputs(
        &self,
        image: &ImageEmbedding,
        inputs: &Tensor,
        scores: impl Iterator<Item = f32>,
    ) -> Result<(Tensor, Tensor)> {
        let b = inputs.dim(0)?;
        let level2 = image.level2()?;
        let (_, _, h, w) = level2.dims4()?;
        // One row of frame features for every object: the encoder projects it once.
        let (mut feats, pos) = self.video.memory_encoder.forward(level2, inputs)?;
        if let Some(occ) = &self.video.occlusion_embedding {
            let absent: Vec<f32> = scores.map(|s| if s > 0.0 { 0.0 } else { 1.0 }).collect();
            let absent = Tensor::from_vec(absent, (b, 1, 1, 1), self.device())?;
            let mem_dim = occ.dim(1)?;
            let occ = occ.reshape((1, mem_dim, 1, 1))?;
            feats = (feats
                + absent
                    .broadcast_mul(&occ)?
                    .broadcast_as((b, mem_dim, h, w))?)?;
        }
        self.video.spatial_perceiver.forward(&feats, &pos)
    }
}

/// `get_1d_sine_pe(pos, dim)`: `[sin(pos / 10000^(2*floor(i/2)/(dim/2))), cos(...)]`, f32.
fn sine_1d(pos: &[f32], dim: usize, dev: &candle_core::Device) -> Result<Tensor> {
    let half = dim / 2;
    let mut out = Vec::with_capacity(pos.len() * dim);
    for &p in pos {
        let angles: Vec<f32> = (0..half)
            .map(|i| {
                let e = 2.0 * ((i / 2) as f32) / half as f32;
                p / 10000f32.powf(e)
            })
            .collect();
        out.extend(angles.iter().map(|a| a.sin()));
        out.extend(angles.iter().map(|a| a.cos()));
    }
    Ok(Tensor::from_vec(out, (pos.len(), dim), dev)?)
}
