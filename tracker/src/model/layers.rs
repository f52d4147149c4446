//! Building blocks shared by several EdgeTAM stages (prompt encoder, mask decoder, and later the
//! memory encoder and the object-pointer projection).
//!
//! Each block mirrors one transformers module exactly (same weight names under its
//! [`VarBuilder`] prefix, same order of floating-point operations where it matters), so stages can
//! be checked against the reference one by one.

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Module, Result, Shape, Tensor};
use candle_nn::{linear, Linear, VarBuilder};

use crate::kernels::linear_bf16::SwitchLinear;
use crate::kernels::{f32_slice, threads};
use crate::model::decoder::cross_attention::{FoldedHeads, FoldedQueries};

/// Activation between the layers of a [`FeedForward`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `max(x, 0)`: every `EdgeTamVideoFeedForward` in the decoder uses it.
    Relu,
    /// Exact (erf) GELU, as torch's `nn.GELU()` / transformers' `"gelu"`.
    Gelu,
}

impl Activation {
    pub fn apply(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Self::Relu => x.relu(),
            // The multi-threaded kernel with torch's vectorized erf formula (candle's `gelu_erf`
            // is scalar libm on one thread); other devices fall back to `gelu_erf`.
            Self::Gelu => crate::kernels::gelu::gelu(x),
        }
    }
}

/// LayerNorm over one dimension: two passes (mean, then centred variance), each a blocked sum.
///
/// candle's fused `layer_norm` kernel computes the variance as `E[x^2] - E[x]^2` with one
/// sequential f32 sum, which cancels when a token's mean is large against its spread, and a
/// sequential sum's rounding grows with the length. The decoder's attention (large logits on
/// these activations) amplifies such noise 10-100x, so the statistics need torch's accuracy
/// (its kernel uses cascaded moments); blocked sums get there with ordinary tensor ops on any
/// device.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
    /// Host copies of f32 CPU parameters, for [`Self::add_and_norm`]'s fused pass.
    host: Option<std::sync::Arc<HostNorm>>,
}

impl LayerNorm {
    /// Loads `weight`/`bias` of size `size` from `vb`.
    pub fn new(size: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        let weight = vb.get(size, "weight")?;
        let bias = vb.get(size, "bias")?;
        let cpu_f32 = |t: &Tensor| t.device().is_cpu() && t.dtype() == DType::F32;
        let host = if cpu_f32(&weight) && cpu_f32(&bias) {
            Some(std::sync::Arc::new(HostNorm {
                weight: weight.to_vec1::<f32>()?,
                bias: bias.to_vec1::<f32>()?,
                eps,
            }))
        } else {
            None
        };
        Ok(Self {
            weight,
            bias,
            eps,
            host,
        })
    }

    /// Normalises `x` over `dim` (whose size is the weight's); other dims are independent.
    pub fn forward_dim(&self, x: &Tensor, dim: usize) -> Result<Tensor> {
        let f32_cpu = |t: &Tensor| t.device().is_cpu() && t.dtype() == DType::F32;
        if f32_cpu(x) && f32_cpu(&self.weight) && f32_cpu(&self.bias) && dim < x.rank() {
            let op = NormOp { dim, eps: self.eps };
            return x.contiguous()?.apply_op3_no_bwd(
                &self.weight.contiguous()?,
                &self.bias.contiguous()?,
                &op,
            );
        }
        self.forward_dim_ops(x, dim)
    }

    /// The device-agnostic path: blocked f32 sums with ordinary tensor ops.
    fn forward_dim_ops(&self, x: &Tensor, dim: usize) -> Result<Tensor> {
        let mean = blocked_mean_keepdim(x, dim)?;
        let centred = x.broadcast_sub(&mean)?;
        let var = blocked_mean_keepdim(&centred.sqr()?, dim)?;
        let normed = centred.broadcast_div(&(var + self.eps)?.sqrt()?)?;
        // Weight and bias broadcast along `dim`: shape [size, 1, ..., 1].
        let mut shape = vec![1usize; x.rank() - dim];
        shape[0] = self.weight.dim(0)?;
        normed
            .broadcast_mul(&self.weight.reshape(shape.as_slice())?)?
            .broadcast_add(&self.bias.reshape(shape.as_slice())?)
    }
}

impl LayerNorm {
    /// A residual update and the pre-norm of what follows it: `(s, norm(s))` with `s = x + update`
    /// over the last dimension. On the CPU one pass per row block (the sum is normalised while
    /// in cache, instead of written by one op and read back by the next); the sum is the same
    /// f32 add and the norm the same arithmetic as [`Module::forward`], so both are
    /// bit-identical to the two ops.
    pub fn add_and_norm(&self, x: &Tensor, update: &Tensor) -> Result<(Tensor, Tensor)> {
        let f32_cpu = |t: &Tensor| t.device().is_cpu() && t.dtype() == DType::F32;
        let fused = f32_cpu(x) && f32_cpu(update) && x.dims() == update.dims() && x.rank() >= 1;
        let host = match &self.host {
            Some(h) if fused => h,
            _ => {
                let s = (x + update)?;
                let n = self.forward(&s)?;
                return Ok((s, n));
            }
        };
        let op = AddNormOp {
            norm: NormOp {
                dim: x.rank() - 1,
                eps: self.eps,
            },
            host,
        };
        let both = x
            .contiguous()?
            .apply_op2_no_bwd(&update.contiguous()?, &op)?;
        Ok((both.get(0)?, both.get(1)?))
    }
}

/// See [`LayerNorm::add_and_norm`]: output `[2, ..x's shape]` (the sum, then its norm).
struct AddNormOp<'a> {
    norm: NormOp,
    host: &'a HostNorm,
}

impl candle_core::CustomOp2 for AddNormOp<'_> {
    fn name(&self) -> &'static str {
        "add-layer-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(s1, l1, "residual stream")?;
        let u = f32_slice(s2, l2, "residual update")?;
        let (weight, bias) = (&self.host.weight, &self.host.bias);
        let c = weight.len();
        if c == 0 || x.len() != u.len() || l1.shape().dims().last() != Some(&c) {
            candle_core::bail!(
                "add + norm: {:?} + {:?} with {c} channels",
                l1.shape().dims(),
                l2.shape().dims()
            );
        }
        let n = x.len();
        let mut dims = vec![2];
        dims.extend_from_slice(l1.shape().dims());
        // Row blocks of 64 tokens: each task writes its rows of both halves.
        const ROWS: usize = 64;
        let mut out = crate::kernels::zeroed(2 * n);
        let (sums, normed) = out.split_at_mut(n);
        type Task<'a> = (usize, (&'a mut [f32], &'a mut [f32]));
        let tasks: Vec<Task> = sums
            .chunks_mut(ROWS * c)
            .zip(normed.chunks_mut(ROWS * c))
            .enumerate()
            .collect();
        crate::kernels::run_tasks_with(
            tasks,
            threads(),
            || (),
            |_, (i, (sb, nb))| {
                let at = i * ROWS * c;
                for (((srow, nrow), xr), ur) in sb
                    .chunks_exact_mut(c)
                    .zip(nb.chunks_exact_mut(c))
                    .zip(x[at..].chunks_exact(c))
                    .zip(u[at..].chunks_exact(c))
                {
                    for ((s, &a), &b) in srow.iter_mut().zip(xr).zip(ur) {
                        *s = a + b;
                    }
                    self.norm.row(srow, nrow, weight, bias);
                }
            },
        );
        Ok((CpuStorage::F32(out), Shape::from(dims)))
    }
}

impl Module for LayerNorm {
    /// Normalises over the last dimension (token LayerNorm).
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_dim(x, x.rank().saturating_sub(1))
    }
}

/// LayerNorm over one dimension of a contiguous f32 CPU tensor in a single multi-threaded pass
/// per slab: mean and centred variance accumulated in f64 (at least as accurate as the blocked
/// f32 sums of the tensor-op path, which took a dozen kernel launches and temporaries).
struct NormOp {
    dim: usize,
    eps: f64,
}

/// Sum of `f64::from(f(v))` over `xs` in 8 independent lanes (vectorizes; no long dependency
/// chain).
#[inline(always)]
fn sum_f64(xs: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = xs.chunks_exact(8);
    let rest = chunks.remainder();
    for ch in chunks {
        for (l, &v) in lanes.iter_mut().zip(ch) {
            *l += f(v);
        }
    }
    let mut total: f64 = lanes.iter().sum();
    for &v in rest {
        total += f(v);
    }
    total
}

impl NormOp {
    /// `sqrt(var + eps)` rounded to f32 from an f64 sum of squared deviations.
    fn denom(&self, sq_sum: f64, channels: usize) -> f32 {
        (sq_sum / channels as f64 + self.eps).sqrt() as f32
    }

    /// Normalises one contiguous row (last-dim norm). The worker threads are not compiled for
    /// AVX-512; its copy of the same loops (explicit f64 lanes, no contraction, so the same
    /// bits) runs 8 f64 lanes instead of SSE2's 2.
    fn row(&self, x: &[f32], out: &mut [f32], w: &[f32], b: &[f32]) {
        crate::kernels::wide(
            #[inline(always)]
            || {
                let n = x.len();
                // The mean is rounded to f32 and subtracted in f32, as the tensor-op path does.
                let mean = (sum_f64(x, f64::from) / n as f64) as f32;
                let denom = self.denom(
                    sum_f64(x, |v| {
                        let d = f64::from(v - mean);
                        d * d
                    }),
                    n,
                );
                for (((o, &v), &wc), &bc) in out.iter_mut().zip(x).zip(w).zip(b) {
                    *o = (v - mean) / denom * wc + bc;
                }
            },
        );
    }

    /// Mean and denominator of `n` adjacent columns of a `[channels, stride]` block starting at
    /// `x[0]` (channels-first norm): row-by-row f64 accumulation, which vectorizes over columns
    /// (AVX-512 where the CPU has it, as [`Self::row`]).
    fn columns(
        &self,
        x: &[f32],
        stride: usize,
        channels: usize,
        mean: &mut [f32],
        den: &mut [f32],
    ) {
        crate::kernels::wide(
            #[inline(always)]
            || {
                let n = mean.len();
                let mut acc = vec![0f64; n];
                for c in 0..channels {
                    for (a, &v) in acc.iter_mut().zip(&x[c * stride..c * stride + n]) {
                        *a += f64::from(v);
                    }
                }
                for (m, a) in mean.iter_mut().zip(&acc) {
                    *m = (a / channels as f64) as f32;
                }
                acc.iter_mut().for_each(|a| *a = 0.0);
                for c in 0..channels {
                    for ((a, &v), &m) in acc
                        .iter_mut()
                        .zip(&x[c * stride..c * stride + n])
                        .zip(&*mean)
                    {
                        let d = f64::from(v - m);
                        *a += d * d;
                    }
                }
                for (d, a) in den.iter_mut().zip(&acc) {
                    *d = self.denom(*a, channels);
                }
            },
        );
    }
}

impl CustomOp3 for NormOp {
    fn name(&self) -> &'static str {
        "layer-norm-f64-stats"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(s1, l1, "layer norm input")?;
        let w = f32_slice(s2, l2, "layer norm weight")?;
        let b = f32_slice(s3, l3, "layer norm bias")?;
        let dims = l1.shape().dims();
        let channels = dims.get(self.dim).copied().unwrap_or(0);
        if channels == 0 || w.len() != channels || b.len() != channels {
            candle_core::bail!(
                "layer norm over dim {} of {dims:?} with {} weights and {} biases",
                self.dim,
                w.len(),
                b.len()
            );
        }
        let inner: usize = dims[self.dim + 1..].iter().product();
        if inner == 0 || x.is_empty() {
            return Ok((CpuStorage::F32(vec![0f32; x.len()]), l1.shape().clone()));
        }
        let threads = threads();
        // Below ~32K elements per thread, spawning costs more than it saves.
        const GRAIN: usize = 1 << 15;
        if inner == 1 {
            let rows = x.len() / channels;
            let per = rows.div_ceil(threads).max(GRAIN.div_ceil(channels)) * channels;
            let out = crate::kernels::output_in_chunks(x.len(), per, |t, o| {
                let i = &x[t * per..][..o.len()];
                for (o, i) in o.chunks_mut(channels).zip(i.chunks(channels)) {
                    self.row(i, o, w, b);
                }
            });
            return Ok((CpuStorage::F32(out), l1.shape().clone()));
        }
        // Channels-first: statistics per column (split over threads by column), then the output
        // row by row (split by channel rows).
        let slab = channels * inner;
        let columns = x.len() / channels;
        let mut mean = vec![0f32; columns];
        let mut den = vec![0f32; columns];
        let per = columns
            .div_ceil(threads)
            .max(GRAIN.div_ceil(channels))
            .min(columns);
        // Column blocks small enough for their f64 accumulators to stay in L1.
        const BLOCK: usize = 512;
        std::thread::scope(|scope| {
            for (t, (m, d)) in mean.chunks_mut(per).zip(den.chunks_mut(per)).enumerate() {
                scope.spawn(move || {
                    let mut col = t * per;
                    let end = col + m.len();
                    while col < end {
                        let (s, j) = (col / inner, col % inner);
                        let n = BLOCK.min(inner - j).min(end - col);
                        let at = col - t * per;
                        self.columns(
                            &x[s * slab + j..],
                            inner,
                            channels,
                            &mut m[at..at + n],
                            &mut d[at..at + n],
                        );
                        col += n;
                    }
                });
            }
        });
        let rows_per = (x.len() / inner)
            .div_ceil(threads)
            .max(GRAIN.div_ceil(inner));
        let (mean, den) = (&mean, &den);
        let out = crate::kernels::output_in_chunks(x.len(), rows_per * inner, |t, o| {
            for (k, o) in o.chunks_mut(inner).enumerate() {
                let r = t * rows_per + k;
                let (s, c) = (r / channels, r % channels);
                let src = &x[r * inner..(r + 1) * inner];
                let stats = s * inner..(s + 1) * inner;
                normalize_row(o, src, &mean[stats.clone()], &den[stats], w[c], b[c]);
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

/// `out = (x - mean) / den * w + b` along one channel row of a channels-first norm (AVX-512
/// where the CPU has it; the same operations, so the same bits).
fn normalize_row(out: &mut [f32], x: &[f32], mean: &[f32], den: &[f32], w: f32, b: f32) {
    crate::kernels::wide(
        #[inline(always)]
        || {
            for (((o, &v), &m), &d) in out.iter_mut().zip(x).zip(mean).zip(den) {
                *o = (v - m) / d * w + b;
            }
        },
    );
}

/// [`normalize_row`] with `out` as its own input.
fn normalize_row_in_place(row: &mut [f32], mean: &[f32], den: &[f32], w: f32, b: f32) {
    crate::kernels::wide(
        #[inline(always)]
        || {
            for ((o, &m), &d) in row.iter_mut().zip(mean).zip(den) {
                *o = (*o - m) / d * w + b;
            }
        },
    );
}

/// A channels-first LayerNorm's parameters on the host ([`LayerNorm2d::host`]).
#[derive(Debug, Clone)]
pub(crate) struct HostNorm {
    pub(crate) weight: Vec<f32>,
    pub(crate) bias: Vec<f32>,
    pub(crate) eps: f64,
}

impl HostNorm {
    /// Normalises in place the first `n` columns of a channels-first block (channel rows
    /// `stride` floats apart): [`NormOp::columns`]' statistics, then its per-value formula, so
    /// the result is that of [`LayerNorm2d::forward`].
    pub(crate) fn normalize_columns(&self, block: &mut [f32], stride: usize, n: usize) {
        let channels = self.weight.len();
        let op = NormOp {
            dim: 1,
            eps: self.eps,
        };
        let (mut mean, mut den) = (vec![0f32; n], vec![0f32; n]);
        op.columns(block, stride, channels, &mut mean, &mut den);
        for (c, (&w, &b)) in self.weight.iter().zip(&self.bias).enumerate() {
            let row = &mut block[c * stride..c * stride + n];
            normalize_row_in_place(row, &mean, &den, w, b);
        }
    }
}

/// Mean over `dim` (kept, size 1) summed in blocks of about `sqrt(len)`: the rounding error of
/// the sum grows with `sqrt(len)`-long runs instead of `len`.
pub fn blocked_mean_keepdim(x: &Tensor, dim: usize) -> Result<Tensor> {
    let len = x.dim(dim)?;
    let block = (1..=len)
        .take_while(|b| b * b <= len)
        .filter(|b| len.is_multiple_of(*b))
        .last()
        .unwrap_or(1);
    if block <= 1 {
        return x.mean_keepdim(dim);
    }
    let mut shape = x.dims().to_vec();
    shape[dim] = len / block;
    shape.insert(dim + 1, block);
    let sum = x
        .reshape(shape)?
        .sum_keepdim(dim + 1)?
        .sum_keepdim(dim)?
        .squeeze(dim + 1)?;
    sum / len as f64
}

/// Channels-first LayerNorm (`EdgeTamVideoLayerNorm(data_format="channels_first")`): normalises
/// each pixel of an NCHW map over its channels.
///
/// The eps differs per use (1e-6 in the upscale norm, mask embedding and mask downsampler, while
/// the token LayerNorms use torch's default 1e-5), so callers pass it explicitly.
#[derive(Debug, Clone)]
pub struct LayerNorm2d {
    inner: LayerNorm,
}

impl LayerNorm2d {
    /// Loads `weight`/`bias` of size `channels` from `vb`.
    pub fn new(channels: usize, eps: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            inner: LayerNorm::new(channels, eps, vb)?,
        })
    }

    /// Host copies of the parameters, for CPU ops that fuse the norm into their output pass.
    pub(crate) fn host(&self) -> Result<HostNorm> {
        if let Some(h) = &self.inner.host {
            return Ok(HostNorm::clone(h));
        }
        let get = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
        Ok(HostNorm {
            weight: get(&self.inner.weight)?,
            bias: get(&self.inner.bias)?,
            eps: self.inner.eps,
        })
    }

    /// `x`: `[N, C, H, W]` -> `[N, C, H, W]`, normalised over `C` in place of the reference's
    /// permute / normalise / permute (same arithmetic, no copies).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.inner.forward_dim(x, 1)
    }
}

/// The reference's `EdgeTamVideoFeedForward`: `proj_in`, `num_layers - 2` hidden `layers.{i}`,
/// `proj_out`, an activation after every layer but the last, and an optional final sigmoid.
///
/// Used for the transformer MLP, the hypernetwork MLPs, the IoU head (sigmoid) and the
/// object-score head; later also for the object-pointer projection.
#[derive(Debug, Clone)]
pub struct FeedForward {
    proj_in: Linear,
    layers: Vec<Linear>,
    proj_out: Linear,
    activation: Activation,
    sigmoid_output: bool,
}

impl FeedForward {
    /// `num_layers` counts `proj_in` and `proj_out` (so it must be at least 2).
    pub fn new(
        input_dim: usize,
        hidden_dim: usize,
        output_dim: usize,
        num_layers: usize,
        activation: Activation,
        sigmoid_output: bool,
        vb: VarBuilder,
    ) -> Result<Self> {
        if num_layers < 2 {
            candle_core::bail!("FeedForward needs at least 2 layers, got {num_layers}");
        }
        let proj_in = linear(input_dim, hidden_dim, vb.pp("proj_in"))?;
        let layers = (0..num_layers - 2)
            .map(|i| linear(hidden_dim, hidden_dim, vb.pp("layers").pp(i)))
            .collect::<Result<Vec<_>>>()?;
        let proj_out = linear(hidden_dim, output_dim, vb.pp("proj_out"))?;
        Ok(Self {
            proj_in,
            layers,
            proj_out,
            activation,
            sigmoid_output,
        })
    }

    /// `x`: `[..., input_dim]` -> `[..., output_dim]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = self.activation.apply(&self.proj_in.forward(x)?)?;
        for layer in &self.layers {
            h = self.activation.apply(&layer.forward(&h)?)?;
        }
        let h = self.proj_out.forward(&h)?;
        if self.sigmoid_output {
            candle_nn::ops::sigmoid(&h)
        } else {
            Ok(h)
        }
    }
}

/// The four projections of a multi-head attention and the softmax attention between them.
///
/// Every attention of EdgeTAM (decoder, memory attention with RoPE, perceiver) is built from
/// this; they differ only in what they do to the split heads (RoPE, added positions) before
/// [`HeadProjections::attend`].
#[derive(Debug, Clone)]
pub struct HeadProjections {
    q_proj: SwitchLinear,
    k_proj: SwitchLinear,
    v_proj: SwitchLinear,
    o_proj: SwitchLinear,
    num_heads: usize,
    head_dim: usize,
    scaling: f64,
    /// bf16 products in the attention (the fast mode; see [`crate::Precision`]).
    pub(crate) bf16_products: bool,
}

impl HeadProjections {
    /// Queries from `q_in` channels, keys/values from `kv_in`, `num_heads` heads of `head_dim`;
    /// the output projection returns to `q_in` channels.
    pub fn new(
        q_in: usize,
        kv_in: usize,
        num_heads: usize,
        head_dim: usize,
        bias: bool,
        vb: VarBuilder,
    ) -> Result<Self> {
        let inner = num_heads * head_dim;
        let lin = |i: usize, o: usize, name: &str| {
            if bias {
                linear(i, o, vb.pp(name))
            } else {
                candle_nn::linear_no_bias(i, o, vb.pp(name))
            }
        };
        Ok(Self {
            q_proj: SwitchLinear::new(lin(q_in, inner, "q_proj")?),
            k_proj: SwitchLinear::new(lin(kv_in, inner, "k_proj")?),
            v_proj: SwitchLinear::new(lin(kv_in, inner, "v_proj")?),
            o_proj: SwitchLinear::new(lin(inner, q_in, "o_proj")?),
            num_heads,
            head_dim,
            scaling: (head_dim as f64).powf(-0.5),
            bf16_products: false,
        })
    }

    /// Switches bf16 products on or off for the projections and the attention (the fast mode,
    /// see [`crate::Precision`]).
    pub(crate) fn set_bf16(&mut self, on: bool) -> Result<()> {
        for p in [
            &mut self.q_proj,
            &mut self.k_proj,
            &mut self.v_proj,
            &mut self.o_proj,
        ] {
            p.set_bf16(on)?;
        }
        self.bf16_products = on;
        Ok(())
    }

    /// The exact key, value and output projections and the head count (for folding them into
    /// the attention: [`crate::model::memory_attention::cross_attention`], [`crate::model::decoder::cross_attention`]).
    pub(crate) fn kvo(
        &self,
    ) -> (
        &candle_nn::Linear,
        &candle_nn::Linear,
        &candle_nn::Linear,
        usize,
    ) {
        (
            self.k_proj.exact(),
            self.v_proj.exact(),
            self.o_proj.exact(),
            self.num_heads,
        )
    }

    /// The softmax scale `head_dim^-0.5`.
    /// The query projection's exact layer (for folds composed at load).
    pub(crate) fn q(&self) -> &candle_nn::Linear {
        self.q_proj.exact()
    }

    pub(crate) fn scaling(&self) -> f64 {
        self.scaling
    }

    /// Projected queries `[N, heads, L, head_dim]` (contiguous).
    pub fn queries(&self, x: &Tensor) -> Result<Tensor> {
        self.split_heads(&self.q_proj.forward(x)?)
    }

    /// Projected keys `[N, heads, L, head_dim]` (contiguous).
    pub fn keys(&self, x: &Tensor) -> Result<Tensor> {
        self.split_heads(&self.k_proj.forward(x)?)
    }

    /// Projected values `[N, heads, L, head_dim]` (contiguous).
    pub fn values(&self, x: &Tensor) -> Result<Tensor> {
        self.split_heads(&self.v_proj.forward(x)?)
    }

    /// `[N, L, heads * head_dim]` -> contiguous `[N, heads, L, head_dim]`.
    pub fn split_heads(&self, x: &Tensor) -> Result<Tensor> {
        let (n, l, _) = x.dims3()?;
        crate::kernels::swap_axes_1_2(&x.reshape((n, l, self.num_heads, self.head_dim))?)
    }

    /// Heads `[N, heads, L, head_dim]` merged and through the output projection:
    /// `[N, L, q_in]` (what [`Self::attend`] does after the attention).
    pub fn project_out(&self, heads: &Tensor) -> Result<Tensor> {
        let (n, _, l, _) = heads.dims4()?;
        let merged = crate::kernels::swap_axes_1_2(heads)?.reshape((
            n,
            l,
            self.num_heads * self.head_dim,
        ))?;
        self.o_proj.forward(&merged)
    }

    /// `softmax(q k^T * scale) v`, heads merged, output projection: `[N, Lq, q_in]`.
    pub fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        // Scale after the product, softmax in f32: the reference's (eager) order; on CPU f32 a
        // fused kernel that never materialises the `Lq x Lk` scores.
        let out = if self.bf16_products {
            crate::kernels::attention::bf16::scaled_dot_product_bf16(q, k, v, self.scaling)?
        } else {
            crate::kernels::attention::scaled_dot_product(q, k, v, self.scaling)?
        }; // [N, heads, Lq, head_dim]
        self.project_out(&out)
    }
}

/// Multi-head attention with an internal width of `hidden / downsample_rate`
/// (`EdgeTamVideoAttention` + `eager_attention_forward`): no mask, no RoPE.
///
/// The decoder's cross-attentions run at half width (downsample 2); its self-attention at full
/// width (downsample 1).
#[derive(Debug, Clone)]
pub struct Attention {
    proj: HeadProjections,
    /// The key and value projections per head, for the few-queries-to-an-image shape
    /// ([`crate::model::decoder::cross_attention`]).
    folded: FoldedHeads,
    /// The query and output projections per head, for the image-to-few-keys shape.
    folded_queries: FoldedQueries,
}

impl Attention {
    pub fn new(
        hidden_size: usize,
        num_heads: usize,
        downsample_rate: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        let internal = hidden_size / downsample_rate.max(1);
        if num_heads == 0 || !internal.is_multiple_of(num_heads) {
            candle_core::bail!("attention width {internal} is not divisible by {num_heads} heads");
        }
        let proj = HeadProjections::new(
            hidden_size,
            hidden_size,
            num_heads,
            internal / num_heads,
            true,
            vb,
        )?;
        let folded = FoldedHeads::new(&proj)?;
        let folded_queries = FoldedQueries::new(&proj)?;
        Ok(Self {
            proj,
            folded,
            folded_queries,
        })
    }

    /// `query`: `[N, Lq, C]`, `key`/`value`: `[N, Lk, C]` -> `[N, Lq, C]`.
    pub fn forward(&self, query: &Tensor, key: &Tensor, value: &Tensor) -> Result<Tensor> {
        let p = &self.proj;
        let cpu_f32 = [query, key, value]
            .iter()
            .all(|t| t.device().is_cpu() && t.dtype() == DType::F32);
        let (lq, lk) = (query.dim(1)?, key.dim(1)?);
        if cpu_f32 && !p.bf16_products && FoldedHeads::applies(lq, lk) {
            return self.folded.forward(p, query, key, value);
        }
        if cpu_f32 && !p.bf16_products && FoldedQueries::applies(lq, lk) {
            return self.folded_queries.forward(p, query, key, value);
        }
        self.forward_unfolded(query, key, value)
    }

    /// [`Self::forward`] with every projection applied (the reference's order of operations).
    pub fn forward_unfolded(&self, query: &Tensor, key: &Tensor, value: &Tensor) -> Result<Tensor> {
        let p = &self.proj;
        p.attend(&p.queries(query)?, &p.keys(key)?, &p.values(value)?)
    }
}

/// torch's default `nn.LayerNorm` eps, used by the two-way transformer's token norms.
pub const TORCH_LAYER_NORM_EPS: f64 = 1e-5;

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The fused residual add + norm against the add and the norm, bit for bit (rows not a
    /// multiple of the task block).
    #[test]
    fn add_and_norm_equals_add_then_norm() -> Result<()> {
        let dev = Device::Cpu;
        let vb = crate::model::weights::random_var_builder(3, &dev);
        let norm = LayerNorm::new(40, 1e-5, vb.pp("n"))?;
        let x = Tensor::randn(0f32, 2.0, (2, 130, 40), &dev)?;
        let u = Tensor::randn(1f32, 3.0, (2, 130, 40), &dev)?;
        let (s, n) = norm.add_and_norm(&x, &u)?;
        let want_s = (&x + &u)?;
        let want_n = norm.forward(&want_s)?;
        for (got, want) in [(s, want_s), (n, want_n)] {
            assert!(crate::checks::compare::same_bits(&got, &want)?);
        }
        Ok(())
    }

    /// Deterministic pseudo-random values with a large common offset (the case a one-pass
    /// variance gets wrong).
    fn data(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| 30.0 + ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * (1.0 + (i % 5) as f32))
            .collect()
    }

    #[test]
    fn cpu_kernel_matches_tensor_ops() -> Result<()> {
        let dev = Device::Cpu;
        let c = 24;
        let norm = LayerNorm {
            weight: Tensor::new(data(c).as_slice(), &dev)?.affine(0.1, -2.0)?,
            bias: Tensor::new(data(c).as_slice(), &dev)?.affine(0.05, -1.0)?,
            eps: 1e-6,
            host: None,
        };
        let norm64 = LayerNorm {
            weight: norm.weight.to_dtype(DType::F64)?,
            bias: norm.bias.to_dtype(DType::F64)?,
            eps: 1e-6,
            host: None,
        };
        for (shape, dim) in [(vec![3, 37, c], 2), (vec![2, c, 9, 70], 1), (vec![c, 5], 0)] {
            let x = Tensor::from_vec(data(shape.iter().product()), shape.as_slice(), &dev)?;
            let fast = norm.forward_dim(&x, dim)?;
            let ops = norm.forward_dim_ops(&x, dim)?;
            let exact = norm64.forward_dim_ops(&x.to_dtype(DType::F64)?, dim)?;
            let err = |t: Tensor| -> Result<f64> {
                (t.to_dtype(DType::F64)? - &exact)?
                    .abs()?
                    .flatten_all()?
                    .max(0)?
                    .to_scalar::<f64>()
            };
            let (fast, ops) = (err(fast)?, err(ops)?);
            // At least as accurate as the tensor-op path, against an f64 reference.
            assert!(
                fast <= ops.max(2e-6),
                "{shape:?} over {dim}: {fast} vs {ops}"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod speed {
    use candle_core::{Device, Module, Tensor};

    /// Time per call of the token LayerNorm (memory attention's 4096 x 256) and the
    /// channels-first one (the mask downsampler's first map):
    /// `cargo test --release -p edgetam-tracker --lib layers::speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn norms() -> candle_core::Result<()> {
        crate::instrument::allocator::keep_freed_memory();
        let dev = Device::Cpu;
        let vb = crate::model::weights::random_var_builder(3, &dev);
        let tokens = super::LayerNorm::new(256, 1e-5, vb.pp("t"))?;
        let channels = super::LayerNorm2d::new(4, 1e-6, vb.pp("c"))?;
        let x = Tensor::randn(0f32, 1.0, (1, 4096, 256), &dev)?;
        let m = Tensor::randn(0f32, 1.0, (1, 4, 512, 512), &dev)?;
        let time = |name: &str, f: &dyn Fn() -> candle_core::Result<Tensor>| {
            println!(
                "{name}: {:.3} ms",
                crate::instrument::timings::measure::mean_ms(50, f)?
            );
            candle_core::Result::Ok(())
        };
        time("tokens 4096 x 256", &|| tokens.forward(&x))?;
        time("channels-first 4 x 512 x 512", &|| channels.forward(&m))?;
        Ok(())
    }
}
