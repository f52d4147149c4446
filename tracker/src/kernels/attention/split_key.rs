//! Softmax attention over two groups of keys of different widths, `softmax([q k_rot^T, q_low
//! k_low^T] * scale) v`, as one fused CPU pass with an online softmax (exact f32, or bf16
//! products): the memory cross-attention once its projections are folded
//! (`crate::model::memory_attention::cross_attention`); beside the tensor-op form it must match
//! ([`split_key_attention_by_ops`]).

use candle_core::{DType, Result, Shape, Tensor};

use crate::kernels::attention::{online_softmax, TILE_K, TILE_Q};
use crate::kernels::gemm::{gemm_packed, PackedB};
use crate::kernels::{run_tasks_with, threads, CpuOp3, Op3, Operand};

/// `softmax([q k_rot^T, q_low k_low^T] * scale) v`.
///
/// * `q` `[Bq, Lq, D]`: the rotated queries; `q_low` `[Bq, Lq, E]`: the same queries against
///   the unrotated keys' inputs (`[Wk^T q, q . bk]`). `Bq` is `B` or 1 (shared by all).
/// * `k_rot` `[B, Lr, D]`: the rotated keys; `k_low` `[B, Lu, E]`: the unrotated keys' inputs
///   with a trailing 1.
/// * `v` `[B, Lr + Lu, Dv]`: the values of the rotated keys, then of the unrotated ones.
///
/// Returns `[B, Lq, Dv]`. CPU f32 runs one fused pass (no score matrix in memory); other devices
/// run the tensor ops.
pub fn split_key_attention(
    q: &Tensor,
    q_low: &Tensor,
    k_rot: &Tensor,
    k_low: &Tensor,
    v: &Tensor,
    scale: f64,
) -> Result<Tensor> {
    split_keys(q, q_low, k_rot, k_low, v, scale, false)
}

/// [`split_key_attention`] with bf16 products and f32 accumulation (the `bf16` fast mode, as
/// [`crate::kernels::attention::bf16`]: scores, softmax and output f32). Runs the exact f32 pass where
/// the CPU lacks AVX512-BF16 or the value width is not a multiple of 16.
pub fn split_key_attention_bf16(
    q: &Tensor,
    q_low: &Tensor,
    k_rot: &Tensor,
    k_low: &Tensor,
    v: &Tensor,
    scale: f64,
) -> Result<Tensor> {
    let dv = v.dims().last().copied().unwrap_or(0);
    let bf16 = crate::kernels::cpu::bf16() && dv > 0 && dv.is_multiple_of(16);
    split_keys(q, q_low, k_rot, k_low, v, scale, bf16)
}

fn split_keys(
    q: &Tensor,
    q_low: &Tensor,
    k_rot: &Tensor,
    k_low: &Tensor,
    v: &Tensor,
    scale: f64,
    bf16: bool,
) -> Result<Tensor> {
    let (bq, lq, d) = q.dims3()?;
    let (b, lr, kd) = k_rot.dims3()?;
    let (lb, lu, e) = k_low.dims3()?;
    let (vb, lk, dv) = v.dims3()?;
    if kd != d
        || q_low.dims() != [bq, lq, e]
        || lb != b
        || vb != b
        || lk != lr + lu
        || (bq != b && bq != 1)
    {
        candle_core::bail!(
            "split-key attention: q {:?}, q_low {:?}, k_rot {:?}, k_low {:?}, v {:?}",
            q.dims(),
            q_low.dims(),
            k_rot.dims(),
            k_low.dims(),
            v.dims()
        );
    }
    let all = [q, q_low, k_rot, k_low, v];
    if all
        .iter()
        .all(|t| t.device().is_cpu() && t.dtype() == DType::F32)
        && lk > 0
    {
        // Keys and values travel as one flat buffer per batch entry (a custom op has 3 inputs).
        let kv = Tensor::cat(
            &[
                k_rot.reshape((b, lr * d))?,
                k_low.reshape((b, lu * e))?,
                v.reshape((b, lk * dv))?,
            ],
            1,
        )?;
        let op = SplitKeyOp {
            lr,
            lu,
            e,
            dv,
            scale: scale as f32,
            bf16,
        };
        return q
            .contiguous()?
            .apply_op3_no_bwd(&q_low.contiguous()?, &kv, &Op3(op));
    }
    split_key_attention_by_ops(q, q_low, k_rot, k_low, v, scale)
}

/// [`split_key_attention`] as tensor ops: both score blocks, scale, one softmax, one product.
pub fn split_key_attention_by_ops(
    q: &Tensor,
    q_low: &Tensor,
    k_rot: &Tensor,
    k_low: &Tensor,
    v: &Tensor,
    scale: f64,
) -> Result<Tensor> {
    let b = v.dim(0)?;
    let expand = |t: &Tensor| -> Result<Tensor> {
        let (_, l, c) = t.dims3()?;
        t.broadcast_as((b, l, c))?.contiguous()
    };
    let scores = Tensor::cat(
        &[
            expand(q)?.matmul(&k_rot.t()?)?,
            expand(q_low)?.matmul(&k_low.t()?)?,
        ],
        2,
    )?;
    candle_nn::ops::softmax_last_dim(&(scores * scale)?)?.matmul(v)
}

struct SplitKeyOp {
    lr: usize,
    lu: usize,
    e: usize,
    dv: usize,
    scale: f32,
    /// bf16 products ([`crate::kernels::attention::bf16::attend_groups`]); checked supported.
    bf16: bool,
}

/// One batch entry's packed keys and values.
struct Packed {
    k_rot: PackedB,
    k_low: PackedB,
    v: PackedB,
}

impl CpuOp3 for SplitKeyOp {
    const NAME: &'static str = "split-key-attention";
    const OPERANDS: [&'static str; 3] = [
        "split-key attention queries",
        "split-key attention low-rank queries",
        "split-key attention keys and values",
    ];

    fn run(&self, [a1, a2, a3]: [Operand; 3]) -> Result<(Vec<f32>, Shape)> {
        let (q, ql, kv) = (a1.data, a2.data, a3.data);
        let (l1, l2, l3) = (a1.layout, a2.layout, a3.layout);
        let (bq, lq, d) = l1.shape().dims3()?;
        let (b, per_entry) = l3.shape().dims2()?;
        let Self { lr, lu, e, dv, .. } = *self;
        let lk = lr + lu;
        if per_entry != lr * d + lu * e + lk * dv || l2.shape().dims() != [bq, lq, e] {
            candle_core::bail!("split-key attention: inconsistent packed shapes");
        }
        let shape = Shape::from((b, lq, dv));
        let len = b * lq * dv;
        if len == 0 {
            return Ok((Vec::new(), shape));
        }
        if self.bf16 {
            return self.cpu_fwd_bf16(q, ql, kv, (bq, lq, d), b, per_entry);
        }
        let packed: Vec<Packed> = (0..b)
            .map(|i| {
                let x = &kv[i * per_entry..][..per_entry];
                let (kr, rest) = x.split_at(lr * d);
                let (kl, v) = rest.split_at(lu * e);
                Packed {
                    k_rot: PackedB::from_transposed(kr, lr, d, d),
                    k_low: PackedB::from_transposed(kl, lu, e, e),
                    v: PackedB::from_rows(v, lk, dv, dv),
                }
            })
            .collect();
        let scratch = || (vec![0f32; TILE_Q * TILE_K], vec![0f32; 2 * TILE_Q]);
        let tile = |(scores, stats): &mut (Vec<f32>, Vec<f32>),
                    entry: usize,
                    q0: usize,
                    out: &mut [f32]| {
            let rows = out.len() / dv;
            let qe = if bq == 1 { 0 } else { entry };
            let qt = &q[(qe * lq + q0) * d..][..rows * d];
            let qlt = &ql[(qe * lq + q0) * e..][..rows * e];
            self.attend_tile(qt, d, qlt, &packed[entry], out, scores, stats);
        };
        let tile_rows = TILE_Q.min(lq);
        if lq.is_multiple_of(tile_rows) {
            let out =
                crate::kernels::output_in_chunks_with(len, tile_rows * dv, scratch, |s, i, out| {
                    let (entry, q0) = (i * tile_rows / lq, i * tile_rows % lq);
                    tile(s, entry, q0, out);
                });
            return Ok((out, shape));
        }
        let mut out = crate::kernels::zeroed(len);
        let tasks = crate::kernels::row_tiles(&mut out, lq, dv, TILE_Q);
        run_tasks_with(tasks, threads(), scratch, |s, (entry, q0, out)| {
            tile(s, entry, q0, out)
        });
        Ok((out, shape))
    }
}

impl SplitKeyOp {
    /// The bf16 pass: each key group packed once per batch entry, then per query tile one
    /// online softmax over both groups.
    fn cpu_fwd_bf16(
        &self,
        q: &[f32],
        ql: &[f32],
        kv: &[f32],
        (bq, lq, d): (usize, usize, usize),
        b: usize,
        per_entry: usize,
    ) -> Result<(Vec<f32>, Shape)> {
        use crate::kernels::attention::bf16::{attend_groups, PackedKeys, Scratch};
        let Self { lr, lu, e, dv, .. } = *self;
        let packed: Vec<[PackedKeys; 2]> = (0..b)
            .map(|i| {
                let x = &kv[i * per_entry..][..per_entry];
                let (kr, rest) = x.split_at(lr * d);
                let (kl, v) = rest.split_at(lu * e);
                let (vr, vl) = v.split_at(lr * dv);
                [
                    PackedKeys::new(kr, vr, lr, d, dv),
                    PackedKeys::new(kl, vl, lu, e, dv),
                ]
            })
            .collect();
        let len = b * lq * dv;
        let mut out = crate::kernels::zeroed(len);
        let tasks = crate::kernels::row_tiles(&mut out, lq, dv, TILE_Q);
        let scale = self.scale;
        run_tasks_with(
            tasks,
            threads(),
            || Scratch::new(d.max(e)),
            |s, (entry, q0, out)| {
                let rows = out.len() / dv;
                let qe = if bq == 1 { 0 } else { entry };
                let qt = &q[(qe * lq + q0) * d..][..rows * d];
                let qlt = &ql[(qe * lq + q0) * e..][..rows * e];
                let [rot, low] = &packed[entry];
                // SAFETY: `bf16` is set only where `supported()`; the scratch fits the wider
                // key width, a tile has at most TILE_Q rows and both groups' value width `dv`.
                unsafe { attend_groups(&[(qt, rot), (qlt, low)], out, s, scale) };
            },
        );
        Ok((out, Shape::from((b, lq, dv))))
    }

    /// One query tile against both key groups: `q` `[rows, d]`, `ql` `[rows, e]`, `out`
    /// `[rows, dv]` (accumulator, then the result).
    #[allow(clippy::too_many_arguments)]
    fn attend_tile(
        &self,
        q: &[f32],
        d: usize,
        ql: &[f32],
        p: &Packed,
        out: &mut [f32],
        scores: &mut [f32],
        stats: &mut [f32],
    ) {
        let (dv, scale) = (self.dv, self.scale);
        let rows = out.len() / dv;
        let (max, sum) = stats.split_at_mut(TILE_Q);
        max[..rows].fill(f32::NEG_INFINITY);
        sum[..rows].fill(0.0);
        out.fill(0.0);
        // (queries, their width, packed keys, first value row)
        let groups = [(q, d, &p.k_rot, 0), (ql, self.e, &p.k_low, self.lr)];
        for (qg, width, keys, v0) in groups {
            for k0 in (0..keys.n()).step_by(TILE_K) {
                let cols = TILE_K.min(keys.n() - k0);
                let s = &mut scores[..rows * cols];
                gemm_packed(
                    rows,
                    qg,
                    width,
                    keys,
                    0..width,
                    k0..k0 + cols,
                    s,
                    cols,
                    false,
                );
                online_softmax(s, cols, scale, &mut max[..rows], &mut sum[..rows], out, dv);
                let vr = v0 + k0..v0 + k0 + cols;
                gemm_packed(rows, s, cols, &p.v, vr, 0..dv, out, dv, true);
            }
        }
        for r in 0..rows {
            let inv = sum[r];
            out[r * dv..(r + 1) * dv].iter_mut().for_each(|o| *o /= inv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The fused pass against the tensor ops: odd sizes, a query batch shared by 2 entries,
    /// an empty key group, and the memory attention's shapes.
    #[test]
    fn fused_matches_tensor_ops() -> crate::checks::Result<()> {
        let dev = Device::Cpu;
        let cases = [
            // (B, Bq, Lq, D, Lr, Lu, E, Dv)
            (
                1usize, 1usize, 37usize, 24usize, 19usize, 45usize, 9usize, 8usize,
            ),
            (2, 1, 130, 32, 300, 70, 17, 16),
            (2, 2, 64, 16, 0, 40, 5, 8),
            (1, 1, 128, 16, 50, 0, 5, 8),
            (2, 1, 150, 32, 37, 300, 17, 32),
            (2, 2, 70, 16, 64, 0, 9, 16),
            (1, 1, 256, 256, 1792, 1856, 65, 64),
        ];
        for (b, bq, lq, d, lr, lu, e, dv) in cases {
            let r = |dims: (usize, usize, usize), amp: f32| Tensor::randn(0f32, amp, dims, &dev);
            let q = r((bq, lq, d), 1.0)?;
            let ql = r((bq, lq, e), 1.0)?;
            let kr = r((b, lr, d), 1.0)?;
            let kl = r((b, lu, e), 1.0)?;
            let v = r((b, lr + lu, dv), 1.0)?;
            let scale = (d as f64).powf(-0.5);
            let fused = split_key_attention(&q, &ql, &kr, &kl, &v, scale)?;
            let ops = split_key_attention_by_ops(&q, &ql, &kr, &kl, &v, scale)?;
            assert_eq!(fused.dims(), &[b, lq, dv]);
            let err = crate::checks::compare::compare(&fused, &ops)?.rel_l2;
            assert!(err < 1e-5, "{b}x{lq}x{d}, keys {lr}+{lu}: rel_l2 {err}");
            // bf16 products: within bf16 rounding of the exact result (and not the f32 pass).
            let fast = split_key_attention_bf16(&q, &ql, &kr, &kl, &v, scale)?;
            assert_eq!(fast.dims(), &[b, lq, dv]);
            let err = crate::checks::compare::compare(&fast, &ops)?.rel_l2;
            let bf16 = crate::kernels::cpu::bf16() && dv % 16 == 0;
            if bf16 {
                assert!(err < 1e-2 && err > 1e-6, "bf16 {b}x{lq}x{d}: rel_l2 {err}");
            } else {
                assert!(err < 1e-5, "bf16 fallback {b}x{lq}x{d}: rel_l2 {err}");
            }
        }
        Ok(())
    }

    #[test]
    fn rejects_inconsistent_shapes() -> Result<()> {
        let dev = Device::Cpu;
        let z = |dims: (usize, usize, usize)| Tensor::zeros(dims, DType::F32, &dev);
        let (q, ql) = (z((1, 4, 8))?, z((1, 4, 3))?);
        let (kr, kl) = (z((1, 5, 8))?, z((1, 6, 3))?);
        assert!(split_key_attention(&q, &ql, &kr, &kl, &z((1, 10, 4))?, 1.0).is_err());
        assert!(split_key_attention(&q, &ql, &kr, &z((1, 6, 4))?, &z((1, 11, 4))?, 1.0).is_err());
        assert!(split_key_attention(&q, &ql, &kr, &kl, &z((1, 11, 4))?, 1.0).is_ok());
        Ok(())
    }
}
