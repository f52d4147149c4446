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

use crate::config::EdgeTamConfig;
use crate::error::{Error, Result};
use crate::layers::{HeadProjections, LayerNorm, TORCH_LAYER_NORM_EPS};
use crate::linear_bf16::SwitchLinear;
use crate::position_encoding::sine_position_embedding;
use crate::repvit::gelu;

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

    /// `query` `[N, Lq, C]`, `kv` `[N, Lk, C]`, `pos` `[N, Lk, heads * head_dim]`.
    fn forward(&self, query: &Tensor, kv: &Tensor, pos: Option<&Tensor>) -> Result<Tensor> {
        let p = &self.proj;
        let mut k = p.keys(kv)?;
        let mut v = p.values(kv)?;
        if let Some(pos) = pos {
            let pos = p.split_heads(pos)?;
            k = (k + &pos)?;
            v = (v + &pos)?;
        }
        Ok(p.attend(&p.queries(query)?, &k, &v)?)
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

    fn forward(&self, latents: &Tensor, input: &Tensor, pos: Option<&Tensor>) -> Result<Tensor> {
        let q = self.norm_latents.forward(latents)?;
        let kv = self.norm_input.forward(input)?;
        let latents = (latents + self.cross_attention.forward(&q, &kv, pos)?)?;
        let latents = (&latents + self.mlp.forward(&latents)?)?;
        let s = self.norm_self.forward(&latents)?;
        let attn = if s.dim(1)? == 1 {
            self.self_attention.forward_single_token(&s)?
        } else {
            self.self_attention.forward(&s, &s, None)?
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
        let mut memory = Vec::new();
        let mut positions = Vec::new();
        if let Some(lat) = &self.latents_1d {
            let (m, p) = self.forward_1d(lat, &feats, &pos.to_dtype(DType::F32)?)?;
            memory.push(m);
            positions.push(p);
        }
        if let Some(lat) = &self.latents_2d {
            let (m, p) = self.forward_2d(lat, &feats)?;
            memory.push(m);
            positions.push(p);
        }
        if memory.is_empty() {
            return Err(config_error("the perceiver has no latents".into()));
        }
        Ok((Tensor::cat(&memory, 1)?, Tensor::cat(&positions, 1)?))
    }

    /// All latents attend to all tokens, with the memory position on keys and values.
    fn forward_1d(&self, lat: &Tensor, feats: &Tensor, pos: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, c, _, _) = feats.dims4()?;
        let tokens = to_tokens(feats)?;
        let pos = to_tokens(pos)?;
        let mut latents = lat.unsqueeze(0)?.repeat((b, 1, 1))?;
        for layer in &self.layers {
            latents = layer.forward(&latents, &tokens, Some(&pos))?;
        }
        let latents = self.norm.forward(&latents)?;
        let n = latents.dim(1)?;
        let zeros = Tensor::zeros((b, n, c), DType::F32, feats.device())?;
        Ok((latents, zeros))
    }

    /// Latent `i` attends to window `i` (row-major over the window grid), no position.
    fn forward_2d(&self, lat: &Tensor, feats: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, c, h, w) = feats.dims4()?;
        let n = self.windows_per_side;
        // transformers: window = h / n, and its view of the latents needs exactly n x n windows.
        let ws = h / n;
        if ws == 0 || h != n * ws || w != n * ws {
            return Err(Error::InvalidImage(format!(
                "the perceiver's 2-D path needs a square memory grid divisible into {n}x{n} \
                 windows, got {h}x{w}"
            )));
        }
        // [B, C, n, ws, n, ws] -> [B, n, n, ws, ws, C] -> [B*n*n, ws*ws, C]
        let windows = feats
            .reshape((b, c, n, ws, n, ws))?
            .permute((0, 2, 4, 3, 5, 1))?
            .contiguous()?
            .reshape((b * n * n, ws * ws, c))?;
        let mut latents = lat
            .unsqueeze(0)?
            .repeat((b, 1, 1))?
            .reshape((b * n * n, 1, c))?;
        for layer in &self.layers {
            latents = layer.forward(&latents, &windows, None)?;
        }
        let latents = self.norm.forward(&latents.reshape((b, n * n, c))?)?;
        let pos = sine_position_embedding(c, n, n, feats.device())?
            .reshape((1, c, n * n))?
            .transpose(1, 2)?
            .repeat((b, 1, 1))?
            .contiguous()?;
        Ok((latents, pos))
    }
}

/// `[B, C, h, w]` -> `[B, h*w, C]` (row-major tokens, as `permute(0,2,3,1).flatten(1,2)`).
fn to_tokens(x: &Tensor) -> candle_core::Result<Tensor> {
    let (b, c, h, w) = x.dims4()?;
    x.reshape((b, c, h * w))?.transpose(1, 2)?.contiguous()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::random_var_builder;
    use candle_core::Device;

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

#[cfg(test)]
mod profile {
    use super::*;
    use crate::weights::random_var_builder;
    use candle_core::Device;

    /// Wall time of one object's perceiver call at 1024 (64x64 memory), for `perf record`:
    /// `cargo test --release -p edgetam-tracker --lib spatial_perceiver::profile -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn one_object() -> Result<()> {
        crate::allocator::keep_freed_memory();
        let cfg = EdgeTamConfig::with_image_size(1024)?;
        let dev = Device::Cpu;
        let p = SpatialPerceiver::new(&cfg, random_var_builder(5, &dev))?;
        let feats = Tensor::randn(0f32, 1.0, (1, 64, 64, 64), &dev)?;
        let pos = sine_position_embedding(64, 64, 64, &dev)?;
        let mut times = Vec::new();
        for _ in 0..40 {
            let t0 = std::time::Instant::now();
            p.forward(&feats, &pos)?;
            times.push(t0.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(|a, b| a.total_cmp(b));
        println!("perceiver: median {:.1} ms", times[20]);
        let median = |f: &dyn Fn() -> Result<(Tensor, Tensor)>| -> Result<f64> {
            let mut t = Vec::new();
            for _ in 0..40 {
                let t0 = std::time::Instant::now();
                f()?;
                t.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            t.sort_by(|a, b| a.total_cmp(b));
            Ok(t[20])
        };
        let (l1, l2) = (p.latents_1d.as_ref(), p.latents_2d.as_ref());
        if let (Some(l1), Some(l2)) = (l1, l2) {
            let d1 = median(&|| p.forward_1d(l1, &feats, &pos))?;
            let d2 = median(&|| p.forward_2d(l2, &feats))?;
            println!("1-D path {d1:.1} ms, 2-D path {d2:.1} ms");
        }
        Ok(())
    }
}
