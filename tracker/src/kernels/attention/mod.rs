//! Fused softmax attention for the CPU (flash-attention style, exact fp32).
//!
//! `softmax(q k^T * scale) v` through candle materialises the whole `Lq x Lk` score matrix: for
//! the memory attention's self-attention over a 64x64 grid that is 4096 x 4096 floats (64 MiB)
//! per object, written by one matmul, read and rewritten by the softmax and read again by the
//! second matmul, all far outside the caches. This kernel walks tiles of queries x keys instead:
//! per key tile it computes the scores with `gemm`, updates a running row maximum and sum
//! (online softmax) and accumulates `P v` into a rescaled output tile, so the scores stay in
//! cache. The order of operations follows the reference where it matters (the scale multiplies
//! the product, the softmax runs in f32); only the rounding of the exponentials' rescaling
//! differs, which is float noise (see the tests).

pub(crate) mod bf16;
pub(crate) mod image_to_tokens;
pub(crate) mod split_key;

use candle_core::{DType, Result, Shape, Tensor, D};

use crate::kernels::gemm::{gemm_packed, PackedB};
use crate::kernels::{run_tasks_with, threads, CpuOp3, Op3, Operand};

/// `e^x` for `x <= 0` (Cephes `expf`: round to a power of two, degree-6 polynomial on the rest);
/// relative error ~1e-7. Rounding uses the 1.5 * 2^23 trick so it needs no libm call.
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    const ROUND: f32 = 12_582_912.0;
    let x = x.max(-87.0);
    let n = x.mul_add(std::f32::consts::LOG2_E, ROUND) - ROUND;
    let r = (-n).mul_add(-2.121_944_4e-4, (-n).mul_add(0.693_359_4, x));
    let p = 1.987_569_1e-4f32;
    let p = p.mul_add(r, 1.398_199_9e-3);
    let p = p.mul_add(r, 8.333_452e-3);
    let p = p.mul_add(r, 4.166_579_6e-2);
    let p = p.mul_add(r, 1.666_666_5e-1);
    let p = p.mul_add(r, 0.5);
    let p = (p * r).mul_add(r, r + 1.0);
    // 2^n without a float->int cast (which does not vectorize): `n + 127` lands in the low
    // mantissa bits of `ROUND + n + 127` (n is integral in [-126, 0]).
    let biased = (n + (ROUND + 127.0))
        .to_bits()
        .wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(biased << 23);
    p * scale
}

/// Query rows per task: a task is one (batch * head, query tile).
pub(crate) const TILE_Q: usize = 128;
/// Keys per inner step: the score tile `TILE_Q x TILE_K` stays in L2.
pub(crate) const TILE_K: usize = 256;

/// `softmax(q k^T * scale) v` for `q` `[N, H, Lq, D]`, `k`/`v` `[N, H, Lk, D]` ->
/// `[N, H, Lq, D]`.
///
/// CPU f32 runs the fused kernel; other devices and dtypes run candle's matmul + softmax (the
/// same operations in the same order, with the full score matrix).
pub fn scaled_dot_product(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let fused = [q, k, v]
        .iter()
        .all(|t| t.device().is_cpu() && t.dtype() == DType::F32)
        && !(1..=SMALL_LK).contains(&k.dim(D::Minus2)?);
    if fused {
        return q.contiguous()?.apply_op3_no_bwd(
            &k.contiguous()?,
            &v.contiguous()?,
            &Op3(FusedAttention {
                scale: scale as f32,
            }),
        );
    }
    scaled_dot_product_unfused(q, k, v, scale)
}

/// The plain tensor-op path: scale after the product, softmax in f32 (the reference's eager
/// order). The matmul reads the transposed keys in place (no copy).
pub fn scaled_dot_product_unfused(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    scale: f64,
) -> Result<Tensor> {
    let logits = (q.matmul(&k.t()?)? * scale)?;
    let weights = candle_nn::ops::softmax_last_dim(&logits)?;
    weights.matmul(v)
}

struct FusedAttention {
    scale: f32,
}

/// Shapes of one attention call.
#[derive(Clone, Copy)]
struct Dims {
    lk: usize,
    d: usize,
    scale: f32,
}

impl CpuOp3 for FusedAttention {
    const NAME: &'static str = "fused-attention";
    const OPERANDS: [&'static str; 3] = ["attention queries", "attention keys", "attention values"];

    fn run(&self, [a1, a2, a3]: [Operand; 3]) -> Result<(Vec<f32>, Shape)> {
        let (q, k, v) = (a1.data, a2.data, a3.data);
        let (l1, l2, l3) = (a1.layout, a2.layout, a3.layout);
        let (n, h, lq, d) = l1.shape().dims4()?;
        let (kn, kh, lk, kd) = l2.shape().dims4()?;
        if (kn, kh, kd) != (n, h, d) || l3.shape().dims() != l2.shape().dims() {
            candle_core::bail!(
                "fused attention: queries {:?}, keys {:?}, values {:?}",
                l1.shape().dims(),
                l2.shape().dims(),
                l3.shape().dims()
            );
        }
        let shape = Shape::from((n, h, lq, d));
        let len = n * h * lq * d;
        if len == 0 || lk == 0 {
            // No keys: the unfused path's product over an empty axis is zero as well.
            return Ok((vec![0f32; len], shape));
        }
        let dims = Dims {
            lk,
            d,
            scale: self.scale,
        };
        // The keys (transposed) and values of every batch x head, packed once for all query
        // tiles (the `gemm` crate re-packed them per tile).
        // Keys and values packed side by side on the compute workers.
        let packed: [std::sync::Mutex<Vec<PackedB>>; 2] = Default::default();
        run_tasks_with(
            vec![0usize, 1],
            threads(),
            || (),
            |_, which| {
                let out = (0..n * h)
                    .map(|bh| {
                        let at = &[k, v][which][bh * lk * d..][..lk * d];
                        if which == 0 {
                            PackedB::from_transposed(at, lk, d, d)
                        } else {
                            PackedB::from_rows(at, lk, d, d)
                        }
                    })
                    .collect();
                if let Ok(mut slot) = packed[which].lock() {
                    *slot = out;
                }
            },
        );
        let [keys, values] = packed.map(|m| {
            m.into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        });
        let scratch = || (vec![0f32; TILE_Q * TILE_K], vec![0f32; 2 * TILE_Q]);
        let tiles = n * h * lq.div_ceil(TILE_Q);
        let workers = threads();
        if tiles < workers && lk >= 2 * TILE_K {
            // Fewer query tiles than workers (the decoder's 7 tokens x 8 heads against the
            // image): split the keys as well, then merge the partial softmaxes.
            let parts = (workers / tiles).clamp(2, lk.div_ceil(TILE_K));
            let out = attend_split_keys(q, &keys, &values, (n * h, lq), parts, dims)?;
            return Ok((out, shape));
        }
        // Tasks: disjoint output tiles of `tile_rows` queries, handed out dynamically (the
        // machine is shared). When the tiles divide every batch x head block, each is zeroed
        // by its worker right before use (no separate zeroing pass over the output).
        let tile_rows = TILE_Q.min(lq);
        if lq.is_multiple_of(tile_rows) {
            let out = crate::kernels::output_in_chunks_with(
                len,
                tile_rows * d,
                scratch,
                |(scores, stats), i, tile| {
                    let (bh, q0) = (i * tile_rows / lq, i * tile_rows % lq);
                    let qt = &q[(bh * lq + q0) * d..][..tile.len()];
                    attend_tile(qt, &keys[bh], &values[bh], tile, scores, stats, dims);
                },
            );
            return Ok((out, shape));
        }
        let mut out = crate::kernels::zeroed(len);
        let tasks = crate::kernels::row_tiles(&mut out, lq, d, TILE_Q);
        run_tasks_with(
            tasks,
            threads(),
            scratch,
            |(scores, stats), (bh, q0, tile)| {
                let rows = tile.len() / d;
                let qt = &q[(bh * lq + q0) * d..][..rows * d];
                attend_tile(qt, &keys[bh], &values[bh], tile, scores, stats, dims);
            },
        );
        Ok((out, shape))
    }
}

/// Up to this many keys the plain matmul + softmax path runs instead of the tiled kernel: the
/// score matrix is small then, and the tiles (256 keys, 32-column panels) would be mostly
/// padding (timed by `cargo bench --bench stages -- attention_shapes`; BENCHMARKS.md, "Kernel
/// notes").
const SMALL_LK: usize = 32;

/// One query tile against all keys: `q` `[rows, D]`, `k` the packed `K^T` (`D x Lk`), `v` the
/// packed `V` (`Lk x D`), `out` `[rows, D]` (the accumulator, then the result); `scores` and
/// `stats` are per-worker scratch.
fn attend_tile(
    q: &[f32],
    k: &PackedB,
    v: &PackedB,
    out: &mut [f32],
    scores: &mut [f32],
    stats: &mut [f32],
    dims: Dims,
) {
    let d = dims.d;
    attend_keys(q, k, v, 0..dims.lk, out, scores, stats, dims);
    let rows = out.len() / d;
    for r in 0..rows {
        let inv = stats[TILE_Q + r];
        out[r * d..(r + 1) * d].iter_mut().for_each(|o| *o /= inv);
    }
}

/// [`attend_tile`] over the keys `keys` (starting at a multiple of [`TILE_K`]) without the
/// final division: `out` holds `sum_j exp(s_j - max) v_j`, `stats` the running maximum
/// (first [`TILE_Q`] values) and sum (next [`TILE_Q`]) per row.
#[allow(clippy::too_many_arguments)]
fn attend_keys(
    q: &[f32],
    k: &PackedB,
    v: &PackedB,
    keys: std::ops::Range<usize>,
    out: &mut [f32],
    scores: &mut [f32],
    stats: &mut [f32],
    dims: Dims,
) {
    let Dims { d, scale, .. } = dims;
    let rows = out.len() / d;
    let (max, sum) = stats.split_at_mut(TILE_Q);
    max[..rows].fill(f32::NEG_INFINITY);
    sum[..rows].fill(0.0);
    out.fill(0.0);
    for k0 in keys.clone().step_by(TILE_K) {
        let cols = TILE_K.min(keys.end - k0);
        let s = &mut scores[..rows * cols];
        gemm_packed(rows, q, d, k, 0..d, k0..k0 + cols, s, cols, false);
        online_softmax(s, cols, scale, &mut max[..rows], &mut sum[..rows], out, d);
        gemm_packed(rows, s, cols, v, k0..k0 + cols, 0..d, out, d, true);
    }
}

/// The attention with each query tile's keys split in `parts` ranges (tasks of their own),
/// then merged: `out = sum_p e^(m_p - M) out_p / sum_p e^(m_p - M) sum_p`, `M` the largest
/// partial maximum. `q` is `entries x lq x d`; returns `entries x lq x d`.
fn attend_split_keys(
    q: &[f32],
    keys: &[PackedB],
    values: &[PackedB],
    (entries, lq): (usize, usize),
    parts: usize,
    dims: Dims,
) -> Result<Vec<f32>> {
    let Dims { lk, d, .. } = dims;
    let per_tile = lq.div_ceil(TILE_Q);
    let span = lk.div_ceil(parts).next_multiple_of(TILE_K);
    let ranges: Vec<_> = (0..lk)
        .step_by(span)
        .map(|k0| k0..(k0 + span).min(lk))
        .collect();
    // Per (tile, key range): the unnormalised rows, then their maxima and sums.
    let tasks: Vec<(usize, usize)> = (0..entries * per_tile)
        .flat_map(|t| (0..ranges.len()).map(move |p| (t, p)))
        .collect();
    let partial: Vec<std::sync::Mutex<(Vec<f32>, Vec<f32>)>> =
        tasks.iter().map(|_| Default::default()).collect();
    run_tasks_with(
        (0..tasks.len()).collect(),
        threads(),
        || (vec![0f32; TILE_Q * TILE_K], vec![0f32; 2 * TILE_Q]),
        |(scores, stats), i| {
            let (t, p) = tasks[i];
            let (e, q0) = (t / per_tile, (t % per_tile) * TILE_Q);
            let rows = TILE_Q.min(lq - q0);
            let qt = &q[(e * lq + q0) * d..][..rows * d];
            let mut out = vec![0f32; rows * d];
            let (k, v) = (&keys[e], &values[e]);
            attend_keys(qt, k, v, ranges[p].clone(), &mut out, scores, stats, dims);
            let mut stats_out = stats[..rows].to_vec();
            stats_out.extend_from_slice(&stats[TILE_Q..TILE_Q + rows]);
            if let Ok(mut slot) = partial[i].lock() {
                *slot = (out, stats_out);
            }
        },
    );
    let mut result = vec![0f32; entries * lq * d];
    let parts_of: Vec<(Vec<f32>, Vec<f32>)> = partial
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_default())
        .collect();
    for (t, group) in parts_of.chunks(ranges.len()).enumerate() {
        let (e, q0) = (t / per_tile, (t % per_tile) * TILE_Q);
        let rows = TILE_Q.min(lq - q0);
        if group
            .iter()
            .any(|(o, s)| o.len() != rows * d || s.len() != 2 * rows)
        {
            candle_core::bail!("attention: a key-range task did not run");
        }
        for r in 0..rows {
            let top = group
                .iter()
                .map(|(_, s)| s[r])
                .fold(f32::NEG_INFINITY, f32::max);
            let dst = &mut result[(e * lq + q0 + r) * d..][..d];
            let mut total = 0f32;
            for (o, s) in group {
                let w = exp_neg(s[r] - top);
                total += w * s[rows + r];
                for (x, y) in dst.iter_mut().zip(&o[r * d..(r + 1) * d]) {
                    *x += w * y;
                }
            }
            dst.iter_mut().for_each(|x| *x /= total);
        }
    }
    Ok(result)
}

/// Online-softmax step over a score tile `s` (`rows x cols`): scales the scores, replaces them
/// by `exp(score - running max)`, and rescales the running sums and the output rows `out`
/// (`rows x d`) where the maximum grew. Runs on the widest vectors in effect ([`crate::kernels::wide`]:
/// only the vector width changes, and `exp_neg`'s fused multiply-adds are single instructions
/// there).
pub(crate) fn online_softmax(
    s: &mut [f32],
    cols: usize,
    scale: f32,
    max: &mut [f32],
    sum: &mut [f32],
    out: &mut [f32],
    d: usize,
) {
    crate::kernels::wide(
        #[inline(always)]
        || online_softmax_body(s, cols, scale, max, sum, out, d),
    );
}

/// Lanes of the explicit partial maxima / sums (so the reductions vectorize).
const LANES: usize = 16;

#[inline(always)]
fn online_softmax_body(
    s: &mut [f32],
    cols: usize,
    scale: f32,
    max: &mut [f32],
    sum: &mut [f32],
    out: &mut [f32],
    d: usize,
) {
    for (r, row) in s.chunks_exact_mut(cols).enumerate() {
        // The reference scales the product (`(q @ k^T) * scale`), then softmaxes.
        let mut lanes = [f32::NEG_INFINITY; LANES];
        let mut chunks = row.chunks_exact_mut(LANES);
        for c in &mut chunks {
            for (l, x) in lanes.iter_mut().zip(c.iter_mut()) {
                *x *= scale;
                *l = l.max(*x);
            }
        }
        let mut m = max[r];
        for x in chunks.into_remainder() {
            *x *= scale;
            m = m.max(*x);
        }
        m = lanes.iter().fold(m, |a, &b| a.max(b));
        let mut lanes = [0f32; LANES];
        let mut chunks = row.chunks_exact_mut(LANES);
        for c in &mut chunks {
            for (l, x) in lanes.iter_mut().zip(c.iter_mut()) {
                *x = exp_neg(*x - m);
                *l += *x;
            }
        }
        let mut total = 0f32;
        for x in chunks.into_remainder() {
            *x = exp_neg(*x - m);
            total += *x;
        }
        total += lanes.iter().sum::<f32>();
        fold_tile_into_row(
            m,
            total,
            &mut max[r],
            &mut sum[r],
            &mut out[r * d..(r + 1) * d],
        );
    }
}

/// The end of one row's online softmax step: with the tile's maximum `m` (at least the old
/// one) and its sum of exponentials `total`, rescale what the row accumulated under the
/// previous maximum (0 on the first tile), then add the tile's sum.
#[inline(always)]
pub(crate) fn fold_tile_into_row(
    m: f32,
    total: f32,
    max: &mut f32,
    sum: &mut f32,
    out: &mut [f32],
) {
    let old = *max;
    if m > old {
        let alpha = exp_neg(old - m);
        *sum *= alpha;
        out.iter_mut().for_each(|o| *o *= alpha);
        *max = m;
    }
    *sum += total;
}

#[cfg(test)]
mod tests {
    #[test]
    fn exp_matches_std() {
        for i in 0..2000 {
            let x = -(i as f32) * 0.05;
            let e = (x as f64).exp();
            let ours = super::exp_neg(x) as f64;
            assert!((ours - e).abs() <= 3e-7 * e + 1e-37, "{x}: {ours} vs {e}");
        }
    }

    use super::*;
    use candle_core::Device;

    /// Deterministic pseudo-random values in about [-amp, amp].
    fn data(n: usize, seed: u64, amp: f32) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * amp
            })
            .collect()
    }

    fn tensor(dims: (usize, usize, usize, usize), seed: u64, amp: f32) -> Result<Tensor> {
        let (a, b, c, e) = dims;
        Tensor::from_vec(data(a * b * c * e, seed, amp), dims, &Device::Cpu)
    }

    fn rel_l2(a: &Tensor, b: &Tensor) -> Result<f32> {
        let diff = (a - b)?.sqr()?.sum_all()?.to_scalar::<f32>()?;
        let norm = b.sqr()?.sum_all()?.to_scalar::<f32>()?;
        Ok((diff / norm.max(f32::MIN_POSITIVE)).sqrt())
    }

    /// The tiled kernel itself, whatever [`scaled_dot_product`] would pick for the shape.
    fn tiled(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
        let op = FusedAttention {
            scale: scale as f32,
        };
        q.apply_op3_no_bwd(k, v, &Op3(op))
    }

    fn check(n: usize, h: usize, lq: usize, lk: usize, d: usize, amp: f32) -> Result<()> {
        let q = tensor((n, h, lq, d), 1 + lq as u64, amp)?;
        let k = tensor((n, h, lk, d), 2 + lk as u64, amp)?;
        let v = tensor((n, h, lk, d), 3 + d as u64, 1.0)?;
        let scale = (d as f64).powf(-0.5);
        let fused = tiled(&q, &k, &v, scale)?;
        let plain = scaled_dot_product_unfused(&q, &k, &v, scale)?;
        assert_eq!(fused.dims(), plain.dims());
        let err = rel_l2(&fused, &plain)?;
        assert!(
            err <= 1e-6,
            "[{n},{h},{lq},{lk},{d}] amp {amp}: rel L2 {err:e}"
        );
        Ok(())
    }

    #[test]
    fn fused_matches_unfused_small_and_odd() -> Result<()> {
        check(1, 1, 1, 1, 1, 1.0)?;
        check(2, 8, 7, 4096, 16, 2.0)?; // decoder token -> image
        check(2, 8, 4096, 7, 16, 2.0)?; // decoder image -> token
        check(1, 1, 65, 257, 33, 3.0)?; // tiles with remainders
        check(3, 2, 129, 513, 64, 4.0)?;
        check(2, 1, 256, 1000, 64, 1.0)?; // perceiver-like
        Ok(())
    }

    #[test]
    fn fused_matches_unfused_memory_attention_shapes() -> Result<()> {
        // Memory attention: self-attention and cross-attention to ~7 memories + 16 pointers.
        check(1, 1, 4096, 4096, 256, 1.0)?;
        check(2, 1, 4096, 3648, 256, 1.0)?;
        check(1, 1, 1000, 3653, 256, 0.5)?;
        Ok(())
    }

    /// Keys split into ranges and merged (what runs when query tiles are fewer than workers):
    /// the decoder's folded token-to-image shape, ranges that end mid-tile, several tiles.
    #[test]
    fn split_keys_match_unfused() -> Result<()> {
        for (n, h, lq, lk, d, parts) in [
            (1usize, 1usize, 56usize, 4096usize, 256usize, 2usize),
            (1, 1, 56, 4096, 256, 5),
            (2, 1, 130, 1000, 32, 3),
            (1, 2, 7, 600, 16, 2),
        ] {
            let q = tensor((n, h, lq, d), 11, 2.0)?;
            let k = tensor((n, h, lk, d), 12, 2.0)?;
            let v = tensor((n, h, lk, d), 13, 1.0)?;
            let scale = (d as f64).powf(-0.5);
            let plain = scaled_dot_product_unfused(&q, &k, &v, scale)?;
            let (qs, ks, vs) = (
                q.flatten_all()?.to_vec1::<f32>()?,
                k.flatten_all()?.to_vec1::<f32>()?,
                v.flatten_all()?.to_vec1::<f32>()?,
            );
            let packed_k: Vec<_> = (0..n * h)
                .map(|e| PackedB::from_transposed(&ks[e * lk * d..][..lk * d], lk, d, d))
                .collect();
            let packed_v: Vec<_> = (0..n * h)
                .map(|e| PackedB::from_rows(&vs[e * lk * d..][..lk * d], lk, d, d))
                .collect();
            let dims = Dims {
                lk,
                d,
                scale: scale as f32,
            };
            let out = attend_split_keys(&qs, &packed_k, &packed_v, (n * h, lq), parts, dims)?;
            let out = Tensor::from_vec(out, (n, h, lq, d), &Device::Cpu)?;
            let err = rel_l2(&out, &plain)?;
            assert!(
                err <= 1e-6,
                "[{n},{h},{lq},{lk},{d}] {parts} parts: {err:e}"
            );
        }
        Ok(())
    }

    #[test]
    fn no_keys_gives_zeros() -> Result<()> {
        let q = tensor((1, 2, 5, 8), 1, 1.0)?;
        let k = Tensor::zeros((1, 2, 0, 8), DType::F32, &Device::Cpu)?;
        for out in [
            tiled(&q, &k, &k, 0.5)?,
            scaled_dot_product(&q, &k, &k, 0.5)?,
        ] {
            assert_eq!(out.dims(), &[1, 2, 5, 8]);
            assert_eq!(out.abs()?.sum_all()?.to_scalar::<f32>()?, 0.0);
        }
        Ok(())
    }
}
