//! Rotary position embedding on the CPU: a rotation of channel pairs by per-position angles as
//! one pass, and the memory cross-attention keys' rotation (only the tokens on the grid turn),
//! beside the tensor-op form both must match bit for bit ([`rotate_ops`]).

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Result, Shape, Tensor, D};

use crate::kernels::{f32_slice, output_in_chunks};

/// Cos/sin tables on the host, `[positions, head_dim]` row-major each.
#[derive(Debug)]
pub(crate) struct RopeTables {
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
}

impl RopeTables {
    /// Rotates `src` into `out` with the tables from value `at` on. Per channel pair `(a, b)`:
    /// `a * cos + (-b) * sin` and `b * cos + a * sin`, each product rounded then summed (no fused
    /// multiply-add), the reference's order.
    fn rotate(&self, src: &[f32], at: usize, out: &mut [f32]) {
        let cos = &self.cos[at..at + out.len()];
        let sin = &self.sin[at..at + out.len()];
        for (((o, x), c), s) in out
            .chunks_exact_mut(2)
            .zip(src.chunks_exact(2))
            .zip(cos.chunks_exact(2))
            .zip(sin.chunks_exact(2))
        {
            let (a, b) = (x[0], x[1]);
            o[0] = a * c[0] + (-b) * s[0];
            o[1] = b * c[1] + a * s[1];
        }
    }
}

/// `x * cos + rotate_pairwise(x) * sin` for `x` `[..., positions, head_dim]` (f32): one CPU pass
/// with `tables`, the tensor ops elsewhere (`cos`, `sin` `[positions, head_dim]`).
pub(crate) fn rotate(
    x: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    tables: Option<&RopeTables>,
) -> Result<Tensor> {
    if let (Some(tables), true) = (tables, x.device().is_cpu() && x.dtype() == DType::F32) {
        return x.contiguous()?.apply_op1_no_bwd(&RotateOp { tables });
    }
    rotate_ops(x, cos, sin)
}

/// [`rotate`] as tensor ops, in the reference's order of operations.
pub(crate) fn rotate_ops(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    x.broadcast_mul(cos)?
        .broadcast_add(&rotate_pairwise(x)?.broadcast_mul(sin)?)
}

/// The cross-attention keys' rotation (`k` `[B, heads, Lk, D]`, f32 CPU): in each of the first
/// `memories * per_memory` tokens' memories, tokens `first .. first + spatial` rotate with the
/// tables, all others (the 1-D latents and the trailing object pointers) pass through. One pass
/// instead of narrows, a rotation and two concatenations (candle's strided copies). Same
/// arithmetic as [`rotate`], so the result is bit-identical. `None` off the CPU f32 path.
pub(crate) fn rotate_memory_keys(
    k: &Tensor,
    tables: &RopeTables,
    memories: usize,
    per_memory: usize,
    first: usize,
    spatial: usize,
) -> Result<Option<Tensor>> {
    if !k.device().is_cpu() || k.dtype() != DType::F32 {
        return Ok(None);
    }
    let op = RotateMemoryKeysOp {
        tables,
        memories,
        per_memory,
        first,
        spatial,
    };
    Ok(Some(k.contiguous()?.apply_op1_no_bwd(&op)?))
}

/// See [`rotate_memory_keys`].
struct RotateMemoryKeysOp<'a> {
    tables: &'a RopeTables,
    memories: usize,
    per_memory: usize,
    first: usize,
    spatial: usize,
}

impl CustomOp1 for RotateMemoryKeysOp<'_> {
    fn name(&self) -> &'static str {
        "axial-rope-memory-keys"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout, "memory keys")?;
        let (_, _, lk, d) = layout.shape().dims4()?;
        let rotated = self.memories * self.per_memory;
        if self.first + self.spatial > self.per_memory
            || rotated > lk
            || self.tables.cos.len() != self.spatial * d
        {
            candle_core::bail!(
                "memory keys {:?}: {} memories of {} tokens with {} rotated from {}",
                layout.shape().dims(),
                self.memories,
                self.per_memory,
                self.spatial,
                self.first
            );
        }
        const ROWS: usize = 256;
        let out = output_in_chunks(x.len(), ROWS * d.max(1), |i, o| {
            for (j, (o, src)) in o
                .chunks_exact_mut(d)
                .zip(x[i * ROWS * d..].chunks_exact(d))
                .enumerate()
            {
                let r = (i * ROWS + j) % lk;
                let t = r % self.per_memory;
                if r >= rotated || t < self.first || t >= self.first + self.spatial {
                    o.copy_from_slice(src);
                    continue;
                }
                let at = (t - self.first) * d;
                self.tables.rotate(src, at, o);
            }
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// [`rotate`]'s CPU pass (candle's path is six: two narrows, a negation, a
/// concatenation, two broadcast products and a sum, each over the whole tensor). Per channel
/// pair `(a, b)`: `(a * cos - ... )` written as the reference computes it, `a * cos + (-b) * sin`
/// and `b * cos + a * sin`, each product rounded then summed (no fused multiply-add), so the
/// result is bit-identical to the tensor-op path.
struct RotateOp<'a> {
    tables: &'a RopeTables,
}

impl CustomOp1 for RotateOp<'_> {
    fn name(&self) -> &'static str {
        "axial-rope"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout, "RoPE input")?;
        let table = self.tables.cos.len();
        if table == 0 || !x.len().is_multiple_of(table) {
            candle_core::bail!(
                "RoPE tables of {table} values do not tile an input of {} values",
                x.len()
            );
        }
        // Tasks of at most 32 Ki values that divide the table (and keep channel pairs whole),
        // so one grid's rows spread over the threads.
        let mut chunk = table;
        while chunk > 32 * 1024 && chunk.is_multiple_of(4) {
            chunk /= 2;
        }
        let out = output_in_chunks(x.len(), chunk, |i, o| {
            let start = i * chunk;
            let src = &x[start..start + o.len()];
            self.tables.rotate(src, start % table, o);
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// Pairwise rotation by 90 degrees of the last dimension: `(a, b) -> (-b, a)` for every channel
/// pair `(2i, 2i + 1)` (not Llama's half-split rotation).
pub fn rotate_pairwise(x: &Tensor) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let last = dims.len().checked_sub(1).map(|i| dims[i]).unwrap_or(0);
    if last == 0 || !last.is_multiple_of(2) {
        candle_core::bail!("rotate_pairwise needs an even last dimension, got shape {dims:?}");
    }
    let mut pairs = dims.clone();
    pairs.pop();
    pairs.extend([last / 2, 2]);
    let x = x.reshape(pairs)?;
    let a = x.narrow(D::Minus1, 0, 1)?;
    let b = x.narrow(D::Minus1, 1, 1)?;
    Tensor::cat(&[&b.neg()?, &a], D::Minus1)?.reshape(dims)
}
