//! The mask decoder's image-to-token attention with its query and output projections folded
//! into the few keys and values (`crate::model::decoder::cross_attention` builds them): per block
//! of image rows, scores against every head's keys, a softmax per head and the value-output
//! product, in one CPU pass; beside the tensor-op form it must match ([`image_to_tokens_ops`]).

use candle_core::{Result, Shape, Tensor};

use crate::kernels::gemm::{gemm_packed, PackedB};
use crate::kernels::{row_tiles, run_tasks_with, threads, zeroed, CpuOp3, Op3, Operand};

/// Query rows per task.
const ROWS_PER_TASK: usize = 64;

/// `softmax_per_head(x m + m0) p + p0`: `x` `[N, Lq, C]`, `m` `[N, C + 1, heads * keys]` (the
/// folded keys with the score bias row `m0` last), `p` `[N, heads * keys + 1, out]` (the folded
/// values with the output bias row `p0` last) -> `[N, Lq, out]`; f32 on the CPU.
pub(crate) fn image_to_tokens(
    x: &Tensor,
    m: &Tensor,
    p: &Tensor,
    heads: usize,
    keys: usize,
) -> Result<Tensor> {
    x.contiguous()?.apply_op3_no_bwd(
        &m.contiguous()?,
        &p.contiguous()?,
        &Op3(ImageToTokens { heads, keys }),
    )
}

/// [`image_to_tokens`] as tensor ops.
#[cfg(test)]
pub(crate) fn image_to_tokens_ops(
    x: &Tensor,
    m: &Tensor,
    p: &Tensor,
    heads: usize,
    keys: usize,
) -> Result<Tensor> {
    let (n, lq, c) = x.dims3()?;
    let g = heads * keys;
    let scores = x
        .matmul(&m.narrow(1, 0, c)?)?
        .broadcast_add(&m.narrow(1, c, 1)?)?
        .reshape((n, lq, heads, keys))?;
    let a = candle_nn::ops::softmax_last_dim(&scores)?.reshape((n, lq, g))?;
    a.matmul(&p.narrow(1, 0, g)?)?
        .broadcast_add(&p.narrow(1, g, 1)?)
}

/// The folded image-to-token pass: per block of query rows, scores against every head's keys,
/// a softmax per head, and the value-output product.
struct ImageToTokens {
    heads: usize,
    keys: usize,
}

impl CpuOp3 for ImageToTokens {
    const NAME: &'static str = "folded-image-to-token-attention";
    const OPERANDS: [&'static str; 3] = [
        "image-to-token queries",
        "image-to-token folded keys",
        "image-to-token folded values",
    ];

    fn run(&self, [a1, a2, a3]: [Operand; 3]) -> Result<(Vec<f32>, Shape)> {
        let (x, m, p) = (a1.data, a2.data, a3.data);
        let (l1, l2, l3) = (a1.layout, a2.layout, a3.layout);
        let (n, lq, c) = l1.shape().dims3()?;
        let g = self.heads * self.keys;
        let (_, _, out_ch) = l3.shape().dims3()?;
        if l2.shape().dims() != [n, c + 1, g] || l3.shape().dims() != [n, g + 1, out_ch] {
            candle_core::bail!(
                "image-to-token attention: queries {:?}, keys {:?}, values {:?}",
                l1.shape().dims(),
                l2.shape().dims(),
                l3.shape().dims()
            );
        }
        let shape = Shape::from((n, lq, out_ch));
        let mut out = zeroed(n * lq * out_ch);
        if out.is_empty() || g == 0 {
            return Ok((out, shape));
        }
        let packed: Vec<(PackedB, PackedB)> = (0..n)
            .map(|b| {
                let mb = &m[b * (c + 1) * g..];
                let pb = &p[b * (g + 1) * out_ch..];
                (
                    PackedB::from_rows(mb, c, g, g),
                    PackedB::from_rows(pb, g, out_ch, out_ch),
                )
            })
            .collect();
        let tasks = row_tiles(&mut out, lq, out_ch, ROWS_PER_TASK);
        let t = self.keys;
        run_tasks_with(
            tasks,
            threads(),
            || vec![0f32; ROWS_PER_TASK * g],
            |scores, (b, r0, o)| {
                let rows = o.len() / out_ch;
                let (mk, pv) = &packed[b];
                let score_bias = &m[(b * (c + 1) + c) * g..][..g];
                let out_bias = &p[(b * (g + 1) + g) * out_ch..][..out_ch];
                let s = &mut scores[..rows * g];
                for row in s.chunks_mut(g) {
                    row.copy_from_slice(score_bias);
                }
                let xs = &x[(b * lq + r0) * c..][..rows * c];
                gemm_packed(rows, xs, c, mk, 0..c, 0..g, s, g, true);
                // Softmax over each head's keys.
                for head in s.chunks_mut(t) {
                    let max = head.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
                    let mut sum = 0f32;
                    for v in head.iter_mut() {
                        *v = (*v - max).exp();
                        sum += *v;
                    }
                    head.iter_mut().for_each(|v| *v /= sum);
                }
                for row in o.chunks_mut(out_ch) {
                    row.copy_from_slice(out_bias);
                }
                gemm_packed(rows, s, g, pv, 0..g, 0..out_ch, o, out_ch, true);
            },
        );
        Ok((out, shape))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The CPU pass against the tensor ops (the decoder's 8 heads of 7 tokens; rows not a
    /// multiple of the task size; a batch of 2).
    #[test]
    fn cpu_pass_matches_tensor_ops() -> Result<()> {
        let dev = Device::Cpu;
        let (n, lq, c, heads, keys, out) = (2, 150, 32, 8, 7, 24);
        let x = Tensor::randn(0f32, 1.0, (n, lq, c), &dev)?;
        let m = Tensor::randn(0f32, 0.3, (n, c + 1, heads * keys), &dev)?;
        let p = Tensor::randn(0f32, 1.0, (n, heads * keys + 1, out), &dev)?;
        let fast = image_to_tokens(&x, &m, &p, heads, keys)?;
        let ops = image_to_tokens_ops(&x, &m, &p, heads, keys)?;
        let err = crate::checks::compare::compare(&fast, &ops)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?
            .rel_l2;
        assert!(err < 1e-6, "rel_l2 {err}");
        Ok(())
    }
}
