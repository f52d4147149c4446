//! The spatial perceiver (`EdgeTamVideoPerceiverResampler`): compresses one memory
//! `[B, 64, e, e]` into `num_latents + num_latents_2d` tokens (512 for EdgeTAM), which is what
//! makes EdgeTAM's memory attention cheap.
//!
//! Two paths run the **same** encoder layers (one set of weights):
//! - 1-D: `latents_1d` cross-attend to all `e * e` memory tokens; the memory's sine position is
//!   added to the projected keys **and** values. Output position: zeros.
//! - 2-D: the grid is cut into `sqrt(n2) x sqrt(n2)` windows and latent `i` of `latents_2d`
//!   attends only to window `i` (no position). Output position: the sine encoding of the
//!   `sqrt(n2) x sqrt(n2)` window grid.
//!
//! Outputs are concatenated along tokens, 1-D first; a final LayerNorm closes each path.

use candle_core::{DType, Module, Tensor};
use candle_nn::{linear_no_bias, VarBuilder};

use crate::error::{Error, Result};
use crate::kernels::gelu::gelu;
use crate::kernels::linear_bf16::SwitchLinear;
use crate::model::config::EdgeTamConfig;
use crate::model::layers::{HeadProjections, LayerNorm, TORCH_LAYER_NORM_EPS};
use crate::model::position_encoding::sine_position_embedding;

/// `EdgeTamVideoPerceiverAttention`: bias-free projections, optional position added to k and v
/// after projection (per head), softmax in f32.
struct PerceiverAttention {
    proj: HeadProjections,
}

impl PerceiverAttention {
    fn new(hidden: usize, num_heads: usize, head_dim: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            proj: HeadProjections::new(hidden, hidden, num_heads, head_dim, false, vb)?,
        })
    }

    /// `query` `[N, Lq, C]`, `kv` `[N, Lk, C]` (self-attention: no position).
    fn forward(&self, query: &Tensor, kv: &Tensor) -> Result<Tensor> {
        let p = &self.proj;
        self.attend(query, &p.keys(kv)?, &p.values(kv)?)
    }

    /// `query` `[N, Lq, C]` against keys and values already projected, `[N, heads, Lk, hd]`.
    fn attend(&self, query: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let p = &self.proj;
        Ok(p.attend(&p.queries(query)?, k, v)?)
    }

    /// Self-attention of a single token: the softmax over one score is exactly 1, so the output
    /// is the output projection of its value (bit-identical, without the q/k projections and
    /// the attention call). The 2-D path's windows each hold one latent.
    fn forward_single_token(&self, x: &Tensor) -> Result<Tensor> {
        let p = &self.proj;
        Ok(p.project_out(&p.values(x)?)?)
    }
}

/// `EdgeTamVideoPerceiverMLP`: pre-LayerNorm, bias-free up/down projections, exact GELU.
struct PerceiverMlp {
    norm: LayerNorm,
    up: SwitchLinear,
    down: SwitchLinear,
}

impl PerceiverMlp {
    fn new(hidden: usize, inter: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            norm: LayerNorm::new(hidden, TORCH_LAYER_NORM_EPS, vb.pp("layer_norm"))?,
            up: SwitchLinear::new(linear_no_bias(hidden, inter, vb.pp("up_proj"))?),
            down: SwitchLinear::new(linear_no_bias(inter, hidden, vb.pp("down_proj"))?),
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.up.forward(&self.norm.forward(x)?)?;
        Ok(self.down.forward(&gelu(&h)?)?)
    }
}

/// `EdgeTamVideoPerceiverEncoderLayer`: cross-attention + MLP, then self-attention + MLP, each
/// residual.
struct EncoderLayer {
    cross_attention: PerceiverAttention,
    mlp: PerceiverMlp,
    self_attention: PerceiverAttention,
    self_mlp: PerceiverMlp,
    norm_input: LayerNorm,
    norm_latents: LayerNorm,
    norm_self: LayerNorm,
}

impl EncoderLayer {
    fn new(cfg: &EdgeTamConfig, vb: VarBuilder) -> Result<Self> {
        let c = cfg.perceiver_resampler_hidden_size;
        let heads = cfg.perceiver_resampler_num_attention_heads;
        let hd = cfg.perceiver_resampler_attention_head_dim;
        let inter = cfg.perceiver_resampler_mlp_intermediate_size;
        let ln = |name: &str| LayerNorm::new(c, TORCH_LAYER_NORM_EPS, vb.pp(name));
        Ok(Self {
            cross_attention: PerceiverAttention::new(c, heads, hd, vb.pp("cross_attention"))?,
            mlp: PerceiverMlp::new(c, inter, vb.pp("mlp"))?,
            self_attention: PerceiverAttention::new(c, heads, hd, vb.pp("self_attention"))?,
            self_mlp: PerceiverMlp::new(c, inter, vb.pp("self_mlp"))?,
            norm_input: ln("layer_norm_input")?,
            norm_latents: ln("layer_norm_latents")?,
            norm_self: ln("layer_norm_self")?,
        })
    }

    /// The memory tokens `[N, L, C]` normed and projected to the cross-attention's keys and
    /// values `[N, heads, L, hd]` (before any position): the same for both paths.
    fn project_input(&self, input: &Tensor) -> Result<(Tensor, Tensor)> {
        let kv = self.norm_input.forward(input)?;
        let p = &self.cross_attention.proj;
        Ok((p.keys(&kv)?, p.values(&kv)?))
    }

    /// The layer on `latents` `[N, Lq, C]` given the cross-attention's keys and values.
    fn forward(&self, latents: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let q = self.norm_latents.forward(latents)?;
        let latents = (latents + self.cross_attention.attend(&q, k, v)?)?;
        let latents = (&latents + self.mlp.forward(&latents)?)?;
        let s = self.norm_self.forward(&latents)?;
        let attn = if s.dim(1)? == 1 {
            self.self_attention.forward_single_token(&s)?
        } else {
            self.self_attention.forward(&s, &s)?
        };
        let latents = (&latents + attn)?;
        Ok((&latents + self.self_mlp.forward(&latents)?)?)
    }
}

/// The spatial perceiver; build once per model.
pub struct SpatialPerceiver {
    /// `[n1, C]`, absent when `perceiver_resampler_num_latents` is 0.
    latents_1d: Option<Tensor>,
    /// `[n2, C]`, absent when `perceiver_resampler_num_latents_2d` is 0.
    latents_2d: Option<Tensor>,
    layers: Vec<EncoderLayer>,
    norm: LayerNorm,
    hidden: usize,
    /// Windows per side of the 2-D path (`sqrt(n2)`).
    windows_per_side: usize,
    /// The 2-D path's output position `[1, n2, C]` (the sine encoding of the window grid; the
    /// same for every call, so built at load).
    position_2d: Option<Tensor>,
    /// The 1-D path's key position (the input position in token order, split into heads) for
    /// the last position tensor seen: the memory encoder hands over the same cached encoding
    /// on every call, so this is computed once per grid size.
    heads_pos_cache: std::sync::Mutex<Option<(candle_core::TensorId, Tensor)>>,
}

fn config_error(message: String) -> Error {
    Error::Config {
        path: "<config>".into(),
        message,
    }
}

impl SpatialPerceiver {
    /// Loads `spatial_perceiver.*` (pass `vb.pp("spatial_perceiver")`).
    pub fn new(cfg: &EdgeTamConfig, vb: VarBuilder) -> Result<Self> {
        let c = cfg.perceiver_resampler_hidden_size;
        let inner = cfg.perceiver_resampler_num_attention_heads
            * cfg.perceiver_resampler_attention_head_dim;
        // The 1-D path adds the memory's position (C channels) to the projected keys.
        if inner != c || c != cfg.memory_encoder_output_channels {
            return Err(config_error(format!(
                "perceiver width {c}, attention width {inner} and memory channels {} must agree",
                cfg.memory_encoder_output_channels
            )));
        }
        let n1 = cfg.perceiver_resampler_num_latents;
        let n2 = cfg.perceiver_resampler_num_latents_2d;
        let windows_per_side = (n2 as f64).sqrt().round() as usize;
        if windows_per_side * windows_per_side != n2 {
            return Err(config_error(format!(
                "perceiver_resampler_num_latents_2d {n2} is not a square"
            )));
        }
        let latents_1d = (n1 > 0)
            .then(|| vb.get((n1, c), "latents_1d"))
            .transpose()?;
        let latents_2d = (n2 > 0)
            .then(|| vb.get((n2, c), "latents_2d"))
            .transpose()?;
        let position_2d = (n2 > 0)
            .then(|| -> Result<Tensor> {
                let n = windows_per_side;
                Ok(sine_position_embedding(c, n, n, vb.device())?
                    .reshape((1, c, n * n))?
                    .transpose(1, 2)?
                    .contiguous()?)
            })
            .transpose()?;
        let layers = (0..cfg.perceiver_resampler_num_layers)
            .map(|i| EncoderLayer::new(cfg, vb.pp("layers").pp(i)))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            latents_1d,
            latents_2d,
            layers,
            norm: LayerNorm::new(c, TORCH_LAYER_NORM_EPS, vb.pp("layer_norm"))?,
            hidden: c,
            windows_per_side,
            position_2d,
            heads_pos_cache: std::sync::Mutex::new(None),
        })
    }

    /// `feats`, `pos`: `[B, C, e, e]` from the memory encoder -> memory `[B, n1 + n2, C]` and
    /// its position `[B, n1 + n2, C]`.
    pub fn forward(&self, feats: &Tensor, pos: &Tensor) -> Result<(Tensor, Tensor)> {
        let (_, c, _, _) = feats.dims4().map_err(|_| {
            Error::InvalidImage(format!(
                "perceiver input must be NCHW, got {:?}",
                feats.dims()
            ))
        })?;
        if c != self.hidden || pos.dims() != feats.dims() {
            return Err(Error::InvalidImage(format!(
                "perceiver needs memory and position [B, {}, h, w], got {:?} and {:?}",
                self.hidden,
                feats.dims(),
                pos.dims()
            )));
        }
        let feats = feats.to_dtype(DType::F32)?;
        let (b, _, h, w) = feats.dims4()?;
        let (n1, n2) = (self.latents_1d.as_ref(), self.latents_2d.as_ref());
        if n1.is_none() && n2.is_none() {
            return Err(config_error("the perceiver has no latents".into()));
        }
        // Tokens in window order (window-major, row-major inside a window): each 2-D window is
        // then a contiguous run of tokens, and the 1-D path, which attends to all tokens, does
        // not depend on their order. Both paths run the same layers on the same tokens, so the
        // normed input and its key/value projections are computed once per layer for both.
        let n = self.windows_per_side;
        let ws = if n2.is_some() { h / n.max(1) } else { 0 };
        if n2.is_some() && (ws == 0 || h != n * ws || w != n * ws) {
            // transformers: window = h / n, and its view of the latents needs n x n windows.
            return Err(Error::InvalidImage(format!(
                "the perceiver's 2-D path needs a square memory grid divisible into {n}x{n} \
                 windows, got {h}x{w}"
            )));
        }
        let order = |x: &Tensor| -> candle_core::Result<Tensor> {
            if n2.is_some() {
                window_major_tokens(x, n, ws)
            } else {
                to_tokens(x)
            }
        };
        let tokens = order(&feats)?;
        // The 1-D path's position, split into heads like the keys it is added to (every layer
        // has the same head layout; without layers it is never used).
        let heads_pos = match (n1, self.layers.first()) {
            (Some(_), Some(layer)) => {
                // A poisoned lock only means another call panicked mid-update: recompute.
                let mut cache = self
                    .heads_pos_cache
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                match &*cache {
                    Some((id, t)) if *id == pos.id() => Some(t.clone()),
                    _ => {
                        let ordered = order(&pos.to_dtype(DType::F32)?)?;
                        let t = layer.cross_attention.proj.split_heads(&ordered)?;
                        *cache = Some((pos.id(), t.clone()));
                        Some(t)
                    }
                }
            }
            _ => None,
        };
        let mut lat1 = n1.map(|l| l.unsqueeze(0)?.repeat((b, 1, 1))).transpose()?;
        let mut lat2 = n2
            .map(|l| {
                l.unsqueeze(0)?
                    .repeat((b, 1, 1))?
                    .reshape((b * n * n, 1, self.hidden))
            })
            .transpose()?;
        for layer in &self.layers {
            let (k, v) = layer.project_input(&tokens)?;
            if let (Some(lat), Some(pos)) = (&lat1, &heads_pos) {
                // 1-D: the memory position on the projected keys and values.
                lat1 = Some(layer.forward(
                    lat,
                    &crate::kernels::add(&k, pos)?,
                    &crate::kernels::add(&v, pos)?,
                )?);
            }
            if let Some(lat) = &lat2 {
                lat2 =
                    Some(layer.forward(lat, &per_window(&k, n * n)?, &per_window(&v, n * n)?)?);
            }
        }
        let mut memory = Vec::new();
        let mut positions = Vec::new();
        let c = self.hidden;
        if let Some(lat) = lat1 {
            let lat = self.norm.forward(&lat)?;
            positions.push(Tensor::zeros(lat.dims(), DType::F32, feats.device())?);
            memory.push(lat);
        }
        if let Some(lat) = lat2 {
            memory.push(self.norm.forward(&lat.reshape((b, n * n, c))?)?);
            let pos = match &self.position_2d {
                Some(p) => p.clone(),
                None => return Err(config_error("the perceiver has no 2-D position".into())),
            };
            positions.push(pos.repeat((b, 1, 1))?.contiguous()?);
        }
        Ok((Tensor::cat(&memory, 1)?, Tensor::cat(&positions, 1)?))
    }
}

/// `[B, C, n*ws, n*ws]` -> `[B, n*n*ws*ws, C]`: tokens grouped by `ws x ws` window (windows
/// row-major, tokens row-major inside each).
///
/// Row-major tokens first (a tiled transpose), then whole token rows gathered into window order:
/// candle's strided copy of the 6-D permute moves one element at a time (BENCHMARKS.md, "Kernel notes").
fn window_major_tokens(x: &Tensor, n: usize, ws: usize) -> candle_core::Result<Tensor> {
    let side = n * ws;
    let mut order = Vec::with_capacity(side * side);
    for wy in 0..n {
        for wx in 0..n {
            for y in wy * ws..(wy + 1) * ws {
                let row = (y * side + wx * ws) as u32;
                order.extend(row..row + ws as u32);
            }
        }
    }
    let order = Tensor::from_vec(order, side * side, x.device())?;
    crate::kernels::nchw_to_tokens(x)?.index_select(&order, 1)
}

/// Window-major keys or values `[B, heads, windows * t, hd]` -> `[B * windows, heads, t, hd]`.
fn per_window(x: &Tensor, windows: usize) -> candle_core::Result<Tensor> {
    let (b, heads, l, hd) = x.dims4()?;
    let t = l / windows;
    if heads == 1 {
        return x.reshape((b * windows, 1, t, hd));
    }
    x.reshape((b, heads, windows, t, hd))?
        .permute((0, 2, 1, 3, 4))?
        .contiguous()?
        .reshape((b * windows, heads, t, hd))
}

/// `[B, C, h, w]` -> `[B, h*w, C]` (row-major tokens, as `permute(0,2,3,1).flatten(1,2)`).
fn to_tokens(x: &Tensor) -> candle_core::Result<Tensor> {
    let (b, c, h, w) = x.dims4()?;
    x.reshape((b, c, h * w))?.transpose(1, 2)?.contiguous()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::weights::random_var_builder;
    use candle_core::Device;

    /// The gather equals the 6-D permute it replaces (a batch of 2, windows of 1 and 3).
    #[test]
    fn window_major_tokens_is_the_permute() -> Result<()> {
        let dev = Device::Cpu;
        for (n, ws) in [(4usize, 4usize), (3, 1), (2, 3)] {
            let x = Tensor::randn(0f32, 1.0, (2, 5, n * ws, n * ws), &dev)?;
            let want = x
                .reshape((2, 5, n, ws, n, ws))?
                .permute((0, 2, 4, 3, 5, 1))?
                .contiguous()?
                .reshape((2, n * n * ws * ws, 5))?;
            let got = window_major_tokens(&x, n, ws)?;
            assert!(
                crate::checks::compare::same_bits(&got, &want)?,
                "n {n} ws {ws}"
            );
        }
        Ok(())
    }

    /// At 1024 the memory grid is 64x64: 256 windows of 4x4; objects batch independently.
    #[test]
    fn shapes_and_batch_independence_at_1024() -> Result<()> {
        let cfg = EdgeTamConfig::with_image_size(1024)?;
        let dev = Device::Cpu;
        let p = SpatialPerceiver::new(&cfg, random_var_builder(5, &dev))?;
        let feats = Tensor::randn(0f32, 1.0, (2, 64, 64, 64), &dev)?;
        let pos = sine_position_embedding(64, 64, 64, &dev)?.repeat((2, 1, 1, 1))?;
        let (mem, mem_pos) = p.forward(&feats, &pos)?;
        assert_eq!(mem.dims(), &[2, 512, 64]);
        assert_eq!(mem_pos.dims(), &[2, 512, 64]);
        let first_half = mem_pos
            .narrow(1, 0, 256)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert_eq!(first_half, 0.0);
        let (one, _) = p.forward(&feats.narrow(0, 1, 1)?, &pos.narrow(0, 1, 1)?)?;
        // Relative: batched and single matmuls block differently (float noise only).
        let diff = (mem.narrow(0, 1, 1)? - &one)?
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

    /// A config without perceiver layers still runs (latents normed only), without a panic.
    #[test]
    fn no_layers_runs() -> Result<()> {
        let mut cfg = EdgeTamConfig::with_image_size(256)?;
        cfg.perceiver_resampler_num_layers = 0;
        let dev = Device::Cpu;
        let p = SpatialPerceiver::new(&cfg, random_var_builder(5, &dev))?;
        let feats = Tensor::randn(0f32, 1.0, (1, 64, 16, 16), &dev)?;
        let (mem, pos) = p.forward(&feats, &feats)?;
        assert_eq!(mem.dims(), &[1, 512, 64]);
        assert_eq!(pos.dims(), &[1, 512, 64]);
        Ok(())
    }

    #[test]
    fn rejects_bad_grids_and_configs() -> Result<()> {
        let cfg = EdgeTamConfig::with_image_size(256)?;
        let dev = Device::Cpu;
        let p = SpatialPerceiver::new(&cfg, random_var_builder(5, &dev))?;
        // 20x20 does not split into 16x16 windows (transformers fails there too).
        let feats = Tensor::zeros((1, 64, 20, 20), DType::F32, &dev)?;
        assert!(p.forward(&feats, &feats).is_err());
        let mut bad = cfg.clone();
        bad.perceiver_resampler_num_latents_2d = 200;
        assert!(SpatialPerceiver::new(&bad, random_var_builder(5, &dev)).is_err());
        Ok(())
    }
}
