//! LayerNorm as one multi-threaded CPU pass, beside the device-agnostic tensor-op form it must
//! match ([`layer_norm_ops`]).
//!
//! candle's fused `layer_norm` kernel computes the variance as `E[x^2] - E[x]^2` with one
//! sequential f32 sum, which cancels when a token's mean is large against its spread, and a
//! sequential sum's rounding grows with the length. The decoder's attention (large logits on
//! these activations) amplifies such noise 10-100x, so the statistics need torch's accuracy (its
//! kernel uses cascaded moments): the tensor-op form uses blocked sums, the CPU pass f64 sums.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Result, Shape, Tensor};

use crate::kernels::{
    f32_slice, output_in_chunks, run_tasks_with, threads, wide, zeroed, CpuOp3, Op3, Operand,
};

fn f32_cpu(t: &Tensor) -> bool {
    t.device().is_cpu() && t.dtype() == DType::F32
}

/// LayerNorm of `x` over `dim` with `weight` / `bias` of that dim's size (other dims are
/// independent): the CPU pass for f32 CPU tensors, [`layer_norm_ops`] elsewhere.
pub(crate) fn layer_norm(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    dim: usize,
    eps: f64,
) -> Result<Tensor> {
    if f32_cpu(x) && f32_cpu(weight) && f32_cpu(bias) && dim < x.rank() {
        let op = NormOp { dim, eps };
        return x.contiguous()?.apply_op3_no_bwd(
            &weight.contiguous()?,
            &bias.contiguous()?,
            &Op3(op),
        );
    }
    layer_norm_ops(x, weight, bias, dim, eps)
}

/// The device-agnostic LayerNorm: two passes (mean, then centred variance), each a blocked f32
/// sum, with ordinary tensor ops.
pub(crate) fn layer_norm_ops(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    dim: usize,
    eps: f64,
) -> Result<Tensor> {
    let mean = blocked_mean_keepdim(x, dim)?;
    let centred = x.broadcast_sub(&mean)?;
    let var = blocked_mean_keepdim(&centred.sqr()?, dim)?;
    let normed = centred.broadcast_div(&(var + eps)?.sqrt()?)?;
    // Weight and bias broadcast along `dim`: shape [size, 1, ..., 1].
    let mut shape = vec![1usize; x.rank() - dim];
    shape[0] = weight.dim(0)?;
    normed
        .broadcast_mul(&weight.reshape(shape.as_slice())?)?
        .broadcast_add(&bias.reshape(shape.as_slice())?)
}

/// A residual update and the pre-norm of what follows it, `(s, norm(s))` with `s = x + update`
/// over the last dimension, for f32 CPU tensors of one shape: one pass per row block (the sum
/// is normalised while in cache). The sum is the same f32 add and the norm the same arithmetic
/// as [`layer_norm`], so both are bit-identical to the two ops. `None` for other tensors.
pub(crate) fn add_and_norm(
    x: &Tensor,
    update: &Tensor,
    host: &HostNorm,
) -> Result<Option<(Tensor, Tensor)>> {
    if !(f32_cpu(x) && f32_cpu(update) && x.dims() == update.dims() && x.rank() >= 1) {
        return Ok(None);
    }
    let op = AddNormOp {
        norm: NormOp {
            dim: x.rank() - 1,
            eps: host.eps,
        },
        host,
    };
    let both = x
        .contiguous()?
        .apply_op2_no_bwd(&update.contiguous()?, &op)?;
    Ok(Some((both.get(0)?, both.get(1)?)))
}

/// See [`add_and_norm`]: output `[2, ..x's shape]` (the sum, then its norm).
struct AddNormOp<'a> {
    norm: NormOp,
    host: &'a HostNorm,
}

impl CustomOp2 for AddNormOp<'_> {
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
        let mut out = zeroed(2 * n);
        let (sums, normed) = out.split_at_mut(n);
        type Task<'a> = (usize, (&'a mut [f32], &'a mut [f32]));
        let tasks: Vec<Task> = sums
            .chunks_mut(ROWS * c)
            .zip(normed.chunks_mut(ROWS * c))
            .enumerate()
            .collect();
        run_tasks_with(
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
        wide(
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
    /// (AVX-512 where the CPU has it, as [`Self::row`]). `acc` is the caller's buffer, reused:
    /// with one malloc arena, an allocation per call made the workers of a many-task op (the
    /// memory encoder's first mask conv: 256 tasks) wait on each other's heap lock.
    fn columns(
        &self,
        x: &[f32],
        stride: usize,
        channels: usize,
        mean: &mut [f32],
        den: &mut [f32],
        acc: &mut Vec<f64>,
    ) {
        wide(
            #[inline(always)]
            || {
                let n = mean.len();
                acc.clear();
                acc.resize(n, 0.0);
                for c in 0..channels {
                    for (a, &v) in acc.iter_mut().zip(&x[c * stride..c * stride + n]) {
                        *a += f64::from(v);
                    }
                }
                for (m, a) in mean.iter_mut().zip(acc.iter()) {
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
                for (d, a) in den.iter_mut().zip(acc.iter()) {
                    *d = self.denom(*a, channels);
                }
            },
        );
    }
}

impl CpuOp3 for NormOp {
    const NAME: &'static str = "layer-norm-f64-stats";
    const OPERANDS: [&'static str; 3] =
        ["layer norm input", "layer norm weight", "layer norm bias"];

    fn run(&self, [a1, a2, a3]: [Operand; 3]) -> Result<(Vec<f32>, Shape)> {
        let (x, w, b) = (a1.data, a2.data, a3.data);
        let (l1, _l2, _l3) = (a1.layout, a2.layout, a3.layout);
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
            return Ok((vec![0f32; x.len()], l1.shape().clone()));
        }
        let threads = threads();
        // Below ~32K elements per thread, spawning costs more than it saves.
        const GRAIN: usize = 1 << 15;
        if inner == 1 {
            let rows = x.len() / channels;
            // Several row blocks per worker (handed out one by one): with one per worker, a
            // worker that started late held the other idle for most of the op.
            let blocks = threads * crate::kernels::threads::TASKS_PER_WORKER;
            let per = rows.div_ceil(blocks).max(GRAIN.div_ceil(channels)) * channels;
            let out = output_in_chunks(x.len(), per, |t, o| {
                let i = &x[t * per..][..o.len()];
                for (o, i) in o.chunks_mut(channels).zip(i.chunks(channels)) {
                    self.row(i, o, w, b);
                }
            });
            return Ok((out, l1.shape().clone()));
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
        let tasks: Vec<_> = mean
            .chunks_mut(per)
            .zip(den.chunks_mut(per))
            .enumerate()
            .collect();
        run_tasks_with(tasks, threads, Vec::new, |acc, (t, (m, d))| {
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
                    acc,
                );
                col += n;
            }
        });
        let rows_per = (x.len() / inner)
            .div_ceil(threads)
            .max(GRAIN.div_ceil(inner));
        let (mean, den) = (&mean, &den);
        let out = output_in_chunks(x.len(), rows_per * inner, |t, o| {
            for (k, o) in o.chunks_mut(inner).enumerate() {
                let r = t * rows_per + k;
                let (s, c) = (r / channels, r % channels);
                let src = &x[r * inner..(r + 1) * inner];
                let stats = s * inner..(s + 1) * inner;
                normalize_row(o, src, &mean[stats.clone()], &den[stats], w[c], b[c]);
            }
        });
        Ok((out, l1.shape().clone()))
    }
}

/// `out = (x - mean) / den * w + b` along one channel row of a channels-first norm (AVX-512
/// where the CPU has it; the same operations, so the same bits).
fn normalize_row(out: &mut [f32], x: &[f32], mean: &[f32], den: &[f32], w: f32, b: f32) {
    wide(
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
    wide(
        #[inline(always)]
        || {
            for ((o, &m), &d) in row.iter_mut().zip(mean).zip(den) {
                *o = (*o - m) / d * w + b;
            }
        },
    );
}

/// A LayerNorm's parameters on the host, for CPU ops that fuse the norm into their own pass
/// (`LayerNorm2d::host` in the model).
#[derive(Debug, Clone)]
pub(crate) struct HostNorm {
    pub(crate) weight: Vec<f32>,
    pub(crate) bias: Vec<f32>,
    pub(crate) eps: f64,
}

impl HostNorm {
    /// Normalises in place the first `n` columns of a channels-first block (channel rows
    /// `stride` floats apart): [`NormOp::columns`]' statistics, then its per-value formula, so
    /// the result is that of [`layer_norm`] over the channels.
    /// `scratch` holds the statistics, reused across a worker's calls.
    pub(crate) fn normalize_columns(
        &self,
        block: &mut [f32],
        stride: usize,
        n: usize,
        scratch: &mut ColumnScratch,
    ) {
        let channels = self.weight.len();
        let op = NormOp {
            dim: 1,
            eps: self.eps,
        };
        let ColumnScratch { acc, mean, den } = scratch;
        for v in [&mut *mean, &mut *den] {
            v.clear();
            v.resize(n, 0.0);
        }
        op.columns(block, stride, channels, mean, den, acc);
        for (c, (&w, &b)) in self.weight.iter().zip(&self.bias).enumerate() {
            let row = &mut block[c * stride..c * stride + n];
            normalize_row_in_place(row, mean, den, w, b);
        }
    }
}

/// A worker's buffers for [`HostNorm::normalize_columns`] (see [`NormOp::columns`] for why
/// they are reused).
#[derive(Debug, Default)]
pub(crate) struct ColumnScratch {
    acc: Vec<f64>,
    mean: Vec<f32>,
    den: Vec<f32>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn params(c: usize, eps: f64, dev: &Device) -> Result<(Tensor, Tensor, HostNorm)> {
        let weight = Tensor::new(data(c).as_slice(), dev)?.affine(0.1, -2.0)?;
        let bias = Tensor::new(data(c).as_slice(), dev)?.affine(0.05, -1.0)?;
        let host = HostNorm {
            weight: weight.to_vec1()?,
            bias: bias.to_vec1()?,
            eps,
        };
        Ok((weight, bias, host))
    }

    /// The fused residual add + norm against the add and the norm, bit for bit (rows not a
    /// multiple of the task block).
    #[test]
    fn add_and_norm_equals_add_then_norm() -> Result<()> {
        let dev = Device::Cpu;
        let (w, b, host) = params(40, 1e-5, &dev)?;
        let x = Tensor::randn(0f32, 2.0, (2, 130, 40), &dev)?;
        let u = Tensor::randn(1f32, 3.0, (2, 130, 40), &dev)?;
        let (s, n) = add_and_norm(&x, &u, &host)?.expect("f32 CPU operands take the fused pass");
        let want_s = (&x + &u)?;
        let want_n = layer_norm(&want_s, &w, &b, 2, 1e-5)?;
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
        let eps = 1e-6;
        let (w, b, _) = params(c, eps, &dev)?;
        let (w64, b64) = (w.to_dtype(DType::F64)?, b.to_dtype(DType::F64)?);
        for (shape, dim) in [(vec![3, 37, c], 2), (vec![2, c, 9, 70], 1), (vec![c, 5], 0)] {
            let x = Tensor::from_vec(data(shape.iter().product()), shape.as_slice(), &dev)?;
            let fast = layer_norm(&x, &w, &b, dim, eps)?;
            let ops = layer_norm_ops(&x, &w, &b, dim, eps)?;
            let exact = layer_norm_ops(&x.to_dtype(DType::F64)?, &w64, &b64, dim, eps)?;
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
