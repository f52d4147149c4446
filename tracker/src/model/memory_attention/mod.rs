//! Memory attention (`EdgeTamVideoMemoryAttention`): conditions a tracked frame's level-2
//! features on the object's memory bank before the mask decoder sees them.
//!
//! Layout of one object's memory, in tokens of `memory_encoder_output_channels` (64):
//! `num_spatial_memory_tokens` spatial memories of equal length (512 in EdgeTAM: the perceiver's
//! 256 1-D latents, then its 16x16 2-D latents), then `num_object_pointer_tokens` pointer tokens
//! (each 256-d pointer split into 4 tokens). Only the 2-D latents get the key RoPE; every memory
//! reuses the same 16x16 key grid.
//!
//! Each layer is pre-norm: RoPE self-attention over the frame's grid, RoPE cross-attention to the
//! memory (keys `memory + memory_pos`, values `memory`), a ReLU MLP, each added to the residual;
//! a final LayerNorm closes the stack. The API is batch first (`[B, tokens, channels]`); the
//! reference takes sequence-first tensors and transposes them itself.

pub(crate) mod cross_attention;
pub(crate) mod rope;

use candle_core::{DType, Module, Tensor};
use candle_nn::{linear, VarBuilder};

use crate::error::{Error, Result};
use crate::kernels::attention::split_key::{split_key_attention, split_key_attention_bf16};
use crate::kernels::linear::FusedReluMlp;
use crate::kernels::linear_bf16::FusedReluMlpBf16;
use crate::kernels::linear_bf16::SwitchLinear;
use crate::model::config::EdgeTamConfig;
use crate::model::layers::{Activation, HeadProjections, LayerNorm, TORCH_LAYER_NORM_EPS};
use crate::model::memory_attention::cross_attention::FoldedProjections;
use crate::model::memory_attention::rope::AxialRope;

/// An invalid argument to the memory attention (shapes or memory layout), as a tensor error.
fn invalid(message: String) -> Error {
    Error::Tensor(candle_core::Error::Msg(format!(
        "memory attention: {message}"
    )))
}

/// How the keys of a cross-attention are laid out for RoPE (see the module docs).
#[derive(Debug, Clone, Copy)]
struct KeyLayout {
    /// Trailing tokens left unrotated (object pointers).
    num_excluded: usize,
    /// Number of equal-length memories the rotated part is made of.
    num_memories: usize,
}

/// `EdgeTamVideoRoPESelfAttention` / `EdgeTamVideoRoPECrossAttention`: projections, RoPE on
/// queries and keys, softmax attention, output projection.
#[derive(Debug, Clone)]
struct RopeAttention {
    proj: HeadProjections,
    /// The cross-attention's projections folded into its attention (one head; see
    /// [`crate::model::memory_attention::cross_attention`]); `None` for the self-attention.
    folded: Option<FoldedProjections>,
}

impl RopeAttention {
    fn new(
        hidden: usize,
        kv_in: usize,
        internal: usize,
        num_heads: usize,
        vb: VarBuilder,
    ) -> candle_core::Result<Self> {
        Ok(Self {
            proj: HeadProjections::new(hidden, kv_in, num_heads, internal / num_heads, true, vb)?,
            folded: None,
        })
    }

    /// As a cross-attention to the memory: its projections folded where one head allows.
    fn folding_projections(mut self) -> candle_core::Result<Self> {
        self.folded = FoldedProjections::new(&self.proj)?;
        Ok(self)
    }

    /// `query`: `[B, Lq, C]`, `key`/`value`: `[B, Lk, Ckv]` -> `[B, Lq, C]`. Queries are rotated
    /// with `q_rope`; keys with `q_rope` too (self-attention, `k_layout` None) or, per
    /// `k_layout`, with `k_rope` on the 2-D part of each memory.
    fn forward(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        q_rope: &AxialRope,
        k_rope: &AxialRope,
        k_layout: Option<KeyLayout>,
    ) -> Result<Tensor> {
        let p = &self.proj;
        if let (Some(folded), Some(layout)) = (&self.folded, k_layout) {
            let cpu_f32 = [query, key, value]
                .iter()
                .all(|t| t.device().is_cpu() && t.dtype() == DType::F32);
            // Also in the bf16 mode (then with bf16 products in the attention).
            if cpu_f32 && key.dim(1)? > 0 {
                return self.forward_folded(folded, query, key, value, q_rope, k_rope, layout);
            }
        }
        let q = q_rope.apply(&p.queries(query)?)?;
        let k = p.keys(key)?;
        let k = match k_layout {
            None => q_rope.apply(&k)?,
            Some(layout) => rotate_memory_keys(&k, k_rope, layout)?,
        };
        // A query batch of 1 (an input shared by all objects) meets every object's keys.
        let (kb, qb) = (k.dim(0)?, q.dim(0)?);
        let q = if qb == 1 && kb > 1 {
            let (_, h, l, d) = q.dims4()?;
            q.broadcast_as((kb, h, l, d))?
        } else {
            q
        };
        Ok(p.attend(&q, &k, &p.values(value)?)?)
    }
}

impl RopeAttention {
    /// The cross-attention with its key, value and output projections folded in
    /// ([`crate::model::memory_attention::cross_attention`]): only the rotated keys (the memories' 2-D latents) are
    /// projected to the attention width; the other keys and all values stay in the memory's
    /// 64 channels.
    #[allow(clippy::too_many_arguments)]
    fn forward_folded(
        &self,
        folded: &FoldedProjections,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        q_rope: &AxialRope,
        k_rope: &AxialRope,
        layout: KeyLayout,
    ) -> Result<Tensor> {
        let p = &self.proj;
        let (b, lk, _) = key.dims3()?;
        let (rotated, unrotated) = layout.split(lk, k_rope.len())?;
        let dev = key.device();
        let index = |i: &[u32]| Tensor::from_slice(i, i.len(), dev);
        let (rot_idx, low_idx) = (index(&rotated)?, index(&unrotated)?);
        // Rotated keys: projected, then RoPE on each memory's key grid.
        let k_rot = rotate_memory_keys(
            &p.keys(&key.index_select(&rot_idx, 1)?)?,
            k_rope,
            KeyLayout {
                num_excluded: 0,
                num_memories: layout.num_memories,
            },
        )?
        .squeeze(1)?;
        // The others: their 64-channel inputs with a trailing 1 (the key bias).
        let ones = Tensor::ones((b, unrotated.len(), 1), DType::F32, dev)?;
        let k_low = Tensor::cat(&[key.index_select(&low_idx, 1)?, ones], 2)?;
        let order = index(&[rotated, unrotated].concat())?;
        let values = value.index_select(&order, 1)?;
        let q = q_rope.apply(&p.queries(query)?)?.squeeze(1)?.contiguous()?;
        let q_low = folded.low_queries(&q)?;
        let attend = if p.bf16_products {
            split_key_attention_bf16
        } else {
            split_key_attention
        };
        let averaged = attend(&q, &q_low, &k_rot, &k_low, &values, p.scaling())?;
        Ok(folded.output(&averaged)?)
    }
}

impl KeyLayout {
    /// Token indices of the keys RoPE rotates (each memory's trailing `spatial` tokens, the
    /// 2-D latents) and of the others (each memory's leading 1-D latents, then the pointers).
    fn split(&self, lk: usize, spatial: usize) -> Result<(Vec<u32>, Vec<u32>)> {
        let rotated_len = lk.checked_sub(self.num_excluded).ok_or_else(|| {
            invalid(format!(
                "{} pointer tokens > {lk} memory tokens",
                self.num_excluded
            ))
        })?;
        let mut rotated = Vec::with_capacity(rotated_len);
        let mut unrotated = Vec::with_capacity(lk);
        if rotated_len > 0 {
            if self.num_memories == 0 || !rotated_len.is_multiple_of(self.num_memories) {
                return Err(invalid(format!(
                    "{rotated_len} spatial memory tokens do not split into {} memories",
                    self.num_memories
                )));
            }
            let per_memory = rotated_len / self.num_memories;
            let latent_1d = per_memory.checked_sub(spatial).ok_or_else(|| {
                invalid(format!(
                    "a memory of {per_memory} tokens cannot hold the {spatial} tokens of the key grid"
                ))
            })?;
            for m in 0..self.num_memories {
                let start = (m * per_memory) as u32;
                unrotated.extend(start..start + latent_1d as u32);
                rotated.extend(start + latent_1d as u32..start + per_memory as u32);
            }
        }
        unrotated.extend(rotated_len as u32..lk as u32);
        Ok((rotated, unrotated))
    }
}

/// `apply_rotary_pos_emb_2d_cross_attn` for the keys: `k` `[B, heads, Lk, D]`; the last
/// `num_excluded` tokens and the leading (1-D) tokens of each memory stay as they are, the
/// trailing `k_rope.len()` tokens of each memory are rotated with the key grid.
fn rotate_memory_keys(k: &Tensor, k_rope: &AxialRope, layout: KeyLayout) -> Result<Tensor> {
    let (_, _, lk, _) = k.dims4()?;
    let KeyLayout {
        num_excluded,
        num_memories,
    } = layout;
    let rotated_len = lk.checked_sub(num_excluded).ok_or_else(|| {
        invalid(format!(
            "{num_excluded} pointer tokens > {lk} memory tokens"
        ))
    })?;
    if rotated_len == 0 {
        return Ok(k.clone());
    }
    if num_memories == 0 || !rotated_len.is_multiple_of(num_memories) {
        return Err(invalid(format!(
            "{rotated_len} spatial memory tokens do not split into {num_memories} memories"
        )));
    }
    let per_memory = rotated_len / num_memories;
    let spatial = k_rope.len();
    let Some(latent_1d) = per_memory.checked_sub(spatial) else {
        return Err(invalid(format!(
            "a memory of {per_memory} tokens cannot hold the {spatial} tokens of the key grid"
        )));
    };
    if let Some(out) = k_rope.apply_to_memory_keys(k, num_memories, per_memory, latent_1d)? {
        return Ok(out);
    }
    rotate_memory_keys_by_ops(k, k_rope, layout, per_memory, latent_1d)
}

/// [`rotate_memory_keys`] as tensor ops (other devices; the CPU op's reference in tests), for
/// memories of `per_memory` tokens whose first `latent_1d` stay unrotated.
fn rotate_memory_keys_by_ops(
    k: &Tensor,
    k_rope: &AxialRope,
    layout: KeyLayout,
    per_memory: usize,
    latent_1d: usize,
) -> Result<Tensor> {
    let (b, heads, lk, d) = k.dims4()?;
    let KeyLayout {
        num_excluded,
        num_memories,
    } = layout;
    let rotated_len = lk - num_excluded;
    let spatial = k_rope.len();
    let grouped = k
        .narrow(2, 0, rotated_len)?
        .reshape((b, heads, num_memories, per_memory, d))?;
    let rotated = k_rope.apply(&grouped.narrow(3, latent_1d, spatial)?)?;
    let memories = Tensor::cat(&[&grouped.narrow(3, 0, latent_1d)?, &rotated], 3)?.reshape((
        b,
        heads,
        rotated_len,
        d,
    ))?;
    if num_excluded == 0 {
        return Ok(memories);
    }
    Ok(Tensor::cat(
        &[&memories, &k.narrow(2, rotated_len, num_excluded)?],
        2,
    )?)
}

/// `EdgeTamVideoMemoryAttentionMLP`: `down_proj(act(up_proj(x)))`.
#[derive(Debug, Clone)]
struct Mlp {
    up_proj: SwitchLinear,
    down_proj: SwitchLinear,
    activation: Activation,
}

impl Mlp {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if let (Activation::Relu, Some(up), Some(down), true) = (
            &self.activation,
            self.up_proj.bf16(),
            self.down_proj.bf16(),
            x.device().is_cpu() && x.dtype() == DType::F32,
        ) {
            return FusedReluMlpBf16 { up, down }.forward(x);
        }
        if let (Activation::Relu, Some(up), Some(down), true) = (
            &self.activation,
            self.up_proj.packed_f32(),
            self.down_proj.packed_f32(),
            x.device().is_cpu() && x.dtype() == DType::F32,
        ) {
            return FusedReluMlp { up, down }.forward(x);
        }
        self.down_proj
            .forward(&self.activation.apply(&self.up_proj.forward(x)?)?)
    }
}

/// One pre-norm layer (`EdgeTamVideoMemoryAttentionLayer`).
#[derive(Debug, Clone)]
struct MemoryAttentionLayer {
    self_attn: RopeAttention,
    cross_attn_image: RopeAttention,
    mlp: Mlp,
    layer_norm1: LayerNorm,
    layer_norm2: LayerNorm,
    layer_norm3: LayerNorm,
}

impl MemoryAttentionLayer {
    fn forward(
        &self,
        x: &Tensor,
        memory_key: &Tensor,
        memory: &Tensor,
        rope: (&AxialRope, &AxialRope),
        layout: KeyLayout,
    ) -> Result<Tensor> {
        let update = self.self_attn_update(x, rope.0)?;
        self.forward_from_update(x, &update, memory_key, memory, rope, layout)
    }

    /// `self_attn(norm1(x))`, the self-attention's residual update.
    fn self_attn_update(&self, x: &Tensor, q_rope: &AxialRope) -> Result<Tensor> {
        let q = self.layer_norm1.forward(x)?;
        self.self_attn.forward(&q, &q, &q, q_rope, q_rope, None)
    }

    /// The whole layer from the self-attention's update onwards (`x` the layer input): the
    /// residual adds fused with the next pre-norms.
    fn forward_from_update(
        &self,
        x: &Tensor,
        update: &Tensor,
        memory_key: &Tensor,
        memory: &Tensor,
        rope: (&AxialRope, &AxialRope),
        layout: KeyLayout,
    ) -> Result<Tensor> {
        let (q_rope, k_rope) = rope;
        // With a shared input (batch 1 against `B` objects' memories) the sum, its norm and the
        // cross-attention's query projection run once, then broadcast.
        let (x, q) = self.layer_norm2.add_and_norm(x, update)?;
        let update =
            self.cross_attn_image
                .forward(&q, memory_key, memory, q_rope, k_rope, Some(layout))?;
        let x = x.broadcast_as(update.shape())?;
        let (x, q) = self.layer_norm3.add_and_norm(&x, &update)?;
        Ok((&x + self.mlp.forward(&q)?)?)
    }
}

/// The memory attention stack, with its RoPE tables built once.
#[derive(Debug, Clone)]
pub struct MemoryAttention {
    layers: Vec<MemoryAttentionLayer>,
    layer_norm: LayerNorm,
    query_rope: AxialRope,
    key_rope: AxialRope,
    hidden: usize,
    memory_dim: usize,
}

/// The memory attention's result with every layer's output (for the stage checks).
#[derive(Debug, Clone)]
pub struct MemoryAttentionTrace {
    /// `[B, HW, hidden]` after each layer (before the final LayerNorm).
    pub layers: Vec<Tensor>,
    /// `[B, HW, hidden]`: the final output.
    pub output: Tensor,
}

impl MemoryAttention {
    /// Builds the stack from `vb` (prefix `memory_attention`); the RoPE tables live on `vb`'s
    /// device.
    pub fn new(cfg: &EdgeTamConfig, vb: VarBuilder) -> Result<Self> {
        let config_error = |message: String| Error::Config {
            path: "<config>".into(),
            message,
        };
        let hidden = cfg.memory_attention_hidden_size;
        let heads = cfg.memory_attention_num_attention_heads;
        let internal = hidden / cfg.memory_attention_downsample_rate.max(1);
        if heads == 0 || !internal.is_multiple_of(heads) {
            return Err(config_error(format!(
                "memory attention width {internal} is not divisible by {heads} heads"
            )));
        }
        let head_dim = internal / heads;
        let activation = match cfg.memory_attention_mlp_hidden_act.as_str() {
            "relu" => Activation::Relu,
            "gelu" => Activation::Gelu,
            other => {
                return Err(config_error(format!(
                    "memory_attention_mlp_hidden_act `{other}` is not supported (relu, gelu)"
                )))
            }
        };
        if cfg.rope_parameters.rope_type != "axial" {
            return Err(config_error(format!(
                "rope_type `{}` is not supported (only `axial`)",
                cfg.rope_parameters.rope_type
            )));
        }
        let embed = cfg.embed_size();
        if cfg.memory_attention_rope_feat_sizes != [embed, embed] {
            return Err(config_error(format!(
                "memory_attention_rope_feat_sizes {:?} do not match the {embed}x{embed} feature grid \
                 of image_size {}",
                cfg.memory_attention_rope_feat_sizes, cfg.image_size
            )));
        }
        let device = vb.device().clone();
        let theta = cfg.rope_parameters.rope_theta;
        let rope_err = |e: candle_core::Error| config_error(e.to_string());
        let query_rope = AxialRope::new(
            head_dim,
            theta,
            cfg.memory_attention_rope_feat_sizes,
            &device,
        )
        .map_err(rope_err)?;
        let key_rope = AxialRope::new(head_dim, theta, cfg.memory_attention_rope_k_sizes, &device)
            .map_err(rope_err)?;
        let memory_dim = cfg.memory_encoder_output_channels;
        let mlp_dim = cfg.memory_attention_mlp_hidden_size;
        let layers = (0..cfg.memory_attention_num_layers)
            .map(|i| {
                let vb = vb.pp("layers").pp(i);
                let norm = |name: &str| LayerNorm::new(hidden, TORCH_LAYER_NORM_EPS, vb.pp(name));
                Ok(MemoryAttentionLayer {
                    self_attn: RopeAttention::new(
                        hidden,
                        hidden,
                        internal,
                        heads,
                        vb.pp("self_attn"),
                    )?,
                    cross_attn_image: RopeAttention::new(
                        hidden,
                        memory_dim,
                        internal,
                        heads,
                        vb.pp("cross_attn_image"),
                    )?
                    .folding_projections()?,
                    mlp: Mlp {
                        up_proj: SwitchLinear::new(linear(
                            hidden,
                            mlp_dim,
                            vb.pp("mlp").pp("up_proj"),
                        )?),
                        down_proj: SwitchLinear::new(linear(
                            mlp_dim,
                            hidden,
                            vb.pp("mlp").pp("down_proj"),
                        )?),
                        activation,
                    },
                    layer_norm1: norm("layer_norm1")?,
                    layer_norm2: norm("layer_norm2")?,
                    layer_norm3: norm("layer_norm3")?,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self {
            layers,
            layer_norm: LayerNorm::new(hidden, TORCH_LAYER_NORM_EPS, vb.pp("layer_norm"))?,
            query_rope,
            key_rope,
            hidden,
            memory_dim,
        })
    }

    /// Runs the attention products in bf16 (`true`) or exact f32 (`false`, the default).
    #[cfg_attr(not(any(test, feature = "checks")), allow(dead_code))]
    pub(crate) fn set_bf16_products(&mut self, on: bool) -> candle_core::Result<()> {
        self.set_bf16_parts(on, on, on)
    }

    /// As [`Self::set_bf16_products`], part by part (diagnosis of the bf16 mode).
    pub(crate) fn set_bf16_parts(
        &mut self,
        self_attn: bool,
        cross_attn: bool,
        mlp: bool,
    ) -> candle_core::Result<()> {
        for layer in &mut self.layers {
            layer.self_attn.proj.set_bf16(self_attn)?;
            layer.cross_attn_image.proj.set_bf16(cross_attn)?;
            layer.mlp.up_proj.set_bf16(mlp)?;
            layer.mlp.down_proj.set_bf16(mlp)?;
        }
        Ok(())
    }

    /// Conditions `current` on `memory`.
    ///
    /// * `current`, `current_pos`: `[B, HW, hidden]`, the frame's level-2 features and their sine
    ///   position encoding (HW = the query RoPE grid).
    /// * `memory`, `memory_pos`: `[B, M, memory_dim]` in the layout of the module docs;
    ///   `memory_pos` already includes the temporal encodings.
    /// * `num_object_pointer_tokens`: trailing pointer tokens of `memory` (no RoPE).
    /// * `num_spatial_memory_tokens`: how many spatial memories precede them (transformers'
    ///   name; it counts memories, not tokens).
    ///
    /// Returns `[B, HW, hidden]`. Objects in the batch are independent.
    pub fn forward(
        &self,
        current: &Tensor,
        current_pos: &Tensor,
        memory: &Tensor,
        memory_pos: &Tensor,
        num_object_pointer_tokens: usize,
        num_spatial_memory_tokens: usize,
    ) -> Result<Tensor> {
        self.run(
            current,
            current_pos,
            (memory, memory_pos),
            KeyLayout {
                num_excluded: num_object_pointer_tokens,
                num_memories: num_spatial_memory_tokens,
            },
            None,
            false,
        )
    }

    /// As [`Self::forward`] for a batch of objects tracked on the same frame: `current` and
    /// `current_pos` are one row `[1, HW, hidden]` shared by every object of `memory`
    /// (`[B, M, memory_dim]`). Returns `[B, HW, hidden]`.
    ///
    /// The first layer's self-attention only sees the frame's features, so it is the same for
    /// every object: it runs once and its result is broadcast (exact, it saves a 4096 x 4096
    /// attention and its projections per extra object).
    pub fn forward_shared_current(
        &self,
        current: &Tensor,
        current_pos: &Tensor,
        memory: &Tensor,
        memory_pos: &Tensor,
        num_object_pointer_tokens: usize,
        num_spatial_memory_tokens: usize,
    ) -> Result<Tensor> {
        let layout = KeyLayout {
            num_excluded: num_object_pointer_tokens,
            num_memories: num_spatial_memory_tokens,
        };
        self.run(
            current,
            current_pos,
            (memory, memory_pos),
            layout,
            None,
            true,
        )
    }

    /// As [`Self::forward`], also returning every layer's output.
    pub fn forward_traced(
        &self,
        current: &Tensor,
        current_pos: &Tensor,
        memory: &Tensor,
        memory_pos: &Tensor,
        num_object_pointer_tokens: usize,
        num_spatial_memory_tokens: usize,
    ) -> Result<MemoryAttentionTrace> {
        let mut layers = Vec::with_capacity(self.layers.len());
        let output = self.run(
            current,
            current_pos,
            (memory, memory_pos),
            KeyLayout {
                num_excluded: num_object_pointer_tokens,
                num_memories: num_spatial_memory_tokens,
            },
            Some(&mut layers),
            false,
        )?;
        Ok(MemoryAttentionTrace { layers, output })
    }

    fn run(
        &self,
        current: &Tensor,
        current_pos: &Tensor,
        (memory, memory_pos): (&Tensor, &Tensor),
        layout: KeyLayout,
        mut trace: Option<&mut Vec<Tensor>>,
        shared_current: bool,
    ) -> Result<Tensor> {
        let (cb, hw, c) = current.dims3()?;
        // With `shared_current`, one row of features serves every object of the memory batch.
        let b = if shared_current { memory.dim(0)? } else { cb };
        if shared_current && cb != 1 {
            return Err(invalid(format!(
                "shared current features {:?} are not one row",
                current.dims()
            )));
        }
        if c != self.hidden || hw != self.query_rope.len() {
            return Err(invalid(format!(
                "current features {:?} are not [B, {}, {}] (the {:?} query grid)",
                current.dims(),
                self.query_rope.len(),
                self.hidden,
                self.query_rope.grid()
            )));
        }
        if current_pos.dims() != current.dims() {
            return Err(invalid(format!(
                "current position {:?} differs from the features {:?}",
                current_pos.dims(),
                current.dims()
            )));
        }
        let (mb, m, mc) = memory.dims3()?;
        if mb != b || mc != self.memory_dim || memory_pos.dims() != memory.dims() {
            return Err(invalid(format!(
                "memory {:?} / position {:?} are not [{b}, M, {}]",
                memory.dims(),
                memory_pos.dims(),
                self.memory_dim
            )));
        }
        if layout.num_excluded > m {
            return Err(invalid(format!(
                "{} pointer tokens > {m} memory tokens",
                layout.num_excluded
            )));
        }
        let mut x = (current + (current_pos * 0.1)?)?;
        let memory_key = (memory + memory_pos)?;
        let rope = (&self.query_rope, &self.key_rope);
        for (i, layer) in self.layers.iter().enumerate() {
            x = if shared_current && i == 0 {
                // Same input for every object: self-attend once (and everything up to the
                // cross-attention's queries), then broadcast.
                let update = layer.self_attn_update(&x, rope.0)?;
                layer.forward_from_update(&x, &update, &memory_key, memory, rope, layout)?
            } else {
                layer.forward(&x, &memory_key, memory, rope, layout)?
            };
            if let Some(trace) = trace.as_deref_mut() {
                trace.push(x.clone());
            }
        }
        if x.dim(0)? != b {
            // A stack without layers never broadcast the shared row.
            x = x.broadcast_as((b, hw, c))?.contiguous()?;
        }
        Ok(self.layer_norm.forward(&x)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    /// The one-pass CPU rotation of the cross-attention keys against the tensor ops, bit for
    /// bit: 3 memories of 20 tokens (4 latents + a 4x4 grid), 5 pointer tokens, 2 x 2 heads.
    #[test]
    fn memory_key_rotation_matches_tensor_ops() -> Result<()> {
        let dev = Device::Cpu;
        let rope = AxialRope::new(8, 10000.0, [4, 4], &dev)?;
        let layout = KeyLayout {
            num_excluded: 5,
            num_memories: 3,
        };
        let k = Tensor::randn(0f32, 1.0, (2, 2, 3 * 20 + 5, 8), &dev)?;
        let fast = rotate_memory_keys(&k, &rope, layout)?;
        let slow = rotate_memory_keys_by_ops(&k, &rope, layout, 20, 4)?;
        assert!(crate::checks::compare::same_bits(&fast, &slow)?);
        Ok(())
    }

    /// The folded cross-attention against the projections run in full, for memories with and
    /// without pointers, pointers alone, and a batch of 2.
    #[test]
    fn folded_cross_attention_matches_unfolded() -> crate::checks::Result<()> {
        let dev = Device::Cpu;
        let cfg = EdgeTamConfig::with_image_size(256)?;
        let vb = crate::model::weights::random_var_builder(3, &dev);
        let attention = MemoryAttention::new(&cfg, vb.pp("memory_attention"))?;
        let a = &attention.layers[0].cross_attn_image;
        let folded = a
            .folded
            .as_ref()
            .ok_or_else(|| invalid("EdgeTAM's one-head cross-attention should fold".into()))?;
        let (q_rope, k_rope) = (&attention.query_rope, &attention.key_rope);
        let per_memory = 512;
        for (n_mem, n_ptr) in [(2usize, 8usize), (0, 8), (3, 0), (1, 4)] {
            let m = n_mem * per_memory + n_ptr;
            let r = |d: (usize, usize, usize)| Tensor::randn(0f32, 1.0, d, &dev);
            let q = r((2, q_rope.len(), attention.hidden))?;
            let key = r((2, m, attention.memory_dim))?;
            let value = r((2, m, attention.memory_dim))?;
            let layout = KeyLayout {
                num_excluded: n_ptr,
                num_memories: n_mem,
            };
            let fast = a.forward_folded(folded, &q, &key, &value, q_rope, k_rope, layout)?;
            let p = &a.proj;
            let k = rotate_memory_keys(&p.keys(&key)?, k_rope, layout)?;
            let full = p.attend(&q_rope.apply(&p.queries(&q)?)?, &k, &p.values(&value)?)?;
            let err = crate::checks::compare::compare(&fast, &full)?.rel_l2;
            assert!(
                err < 1e-5,
                "{n_mem} memories, {n_ptr} pointer tokens: rel_l2 {err}"
            );
        }
        Ok(())
    }

    /// Sharing layer 0's self-attention across objects gives what the broadcast batch gives.
    #[test]
    fn shared_current_matches_broadcast_batch() -> Result<()> {
        let dev = Device::Cpu;
        let cfg = EdgeTamConfig::default();
        let vb = crate::model::weights::random_var_builder(7, &dev);
        let attention = MemoryAttention::new(&cfg, vb.pp("memory_attention"))?;
        let (hw, c) = (attention.query_rope.len(), attention.hidden);
        let (b, n_mem, n_ptr) = (3, 2, 16);
        let m = n_mem * 512 + n_ptr;
        let current = Tensor::randn(0f32, 1.0, (1, hw, c), &dev)?;
        let current_pos = Tensor::randn(0f32, 1.0, (1, hw, c), &dev)?;
        let memory = Tensor::randn(0f32, 1.0, (b, m, attention.memory_dim), &dev)?;
        let memory_pos = Tensor::randn(0f32, 1.0, (b, m, attention.memory_dim), &dev)?;
        let shared = attention.forward_shared_current(
            &current,
            &current_pos,
            &memory,
            &memory_pos,
            n_ptr,
            n_mem,
        )?;
        let expand = |t: &Tensor| t.broadcast_as((b, hw, c))?.contiguous();
        let batch = attention.forward(
            &expand(&current)?,
            &expand(&current_pos)?,
            &memory,
            &memory_pos,
            n_ptr,
            n_mem,
        )?;
        assert_eq!(shared.dims(), batch.dims());
        let diff = (&shared - &batch)?.sqr()?.sum_all()?.to_dtype(DType::F64)?;
        let norm = batch.sqr()?.sum_all()?.to_dtype(DType::F64)?;
        let rel = (diff.to_scalar::<f64>()? / norm.to_scalar::<f64>()?).sqrt();
        assert!(rel <= 1e-6, "rel L2 {rel:e}");
        Ok(())
    }
}
