//! Axial 2-D rotary position embedding of the memory attention
//! (`EdgeTamVideoVisionRotaryEmbedding` + `rotate_pairwise` in transformers).
//!
//! A head of width `D` is rotated in `D / 2` channel pairs `(2i, 2i + 1)`: the first `D / 4`
//! pairs by `x * f_j`, the last `D / 4` by `y * f_j`, with `f_j = theta^(-4j / D)` and `(x, y)`
//! the token's column and row in its grid. Token `t` of a `W x H` grid sits at `x = t % W`,
//! `y = t / W` (row-major, as the reference's `meshgrid(..., indexing="ij")`). Positions are
//! integers, never rescaled to the grid size.
//!
//! The tables are computed once per grid, in f64 on the host (the reference computes them in
//! f32; f64 is closer to the exact value both approximate), then stored as f32 on the device.

use candle_core::{DType, Device, Result, Tensor, D};

/// Cos/sin tables of one grid: `[W * H, head_dim]` each, ready to broadcast over
/// `[..., W * H, head_dim]`.
#[derive(Debug, Clone)]
pub struct AxialRope {
    cos: Tensor,
    sin: Tensor,
    grid: [usize; 2],
    /// Host copies of the tables for the fused CPU op (CPU models only).
    host: Option<std::sync::Arc<HostTables>>,
}

#[derive(Debug)]
struct HostTables {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl HostTables {
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

impl AxialRope {
    /// Tables for a `grid = [width, height]` grid (transformers' `rope_feat_sizes` order) and
    /// heads of `head_dim` channels (a multiple of 4: two axes, pairs of channels).
    pub fn new(head_dim: usize, theta: f64, grid: [usize; 2], device: &Device) -> Result<Self> {
        if head_dim == 0 || !head_dim.is_multiple_of(4) {
            candle_core::bail!("axial RoPE needs a head width divisible by 4, got {head_dim}");
        }
        if !(theta.is_finite() && theta > 0.0) {
            candle_core::bail!("RoPE theta must be positive and finite, got {theta}");
        }
        let [w, h] = grid;
        let spatial_dim = head_dim / 2;
        // `1 / theta^(arange(0, spatial_dim, 2) / spatial_dim)`: head_dim / 4 frequencies.
        let inv_freq: Vec<f64> = (0..spatial_dim)
            .step_by(2)
            .map(|i| 1.0 / theta.powf(i as f64 / spatial_dim as f64))
            .collect();
        let len = w * h;
        let mut cos = Vec::with_capacity(len * head_dim);
        let mut sin = Vec::with_capacity(len * head_dim);
        for t in 0..len {
            let (x, y) = ((t % w) as f64, (t / w) as f64);
            // [x * f, y * f], each angle used by one channel pair (repeat_interleave(2)).
            for pos in [x, y] {
                for f in &inv_freq {
                    let angle = pos * f;
                    let (s, c) = angle.sin_cos();
                    cos.extend([c as f32, c as f32]);
                    sin.extend([s as f32, s as f32]);
                }
            }
        }
        let host = device.is_cpu().then(|| {
            std::sync::Arc::new(HostTables {
                cos: cos.clone(),
                sin: sin.clone(),
            })
        });
        Ok(Self {
            cos: Tensor::from_vec(cos, (len, head_dim), device)?,
            sin: Tensor::from_vec(sin, (len, head_dim), device)?,
            grid,
            host,
        })
    }

    /// Number of grid positions (`W * H`): the sequence length the tables apply to.
    pub fn len(&self) -> usize {
        self.grid[0] * self.grid[1]
    }

    /// Whether the grid is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The grid, `[width, height]`.
    pub fn grid(&self) -> [usize; 2] {
        self.grid
    }

    /// `[W * H, head_dim]` cosines.
    pub fn cos(&self) -> &Tensor {
        &self.cos
    }

    /// `[W * H, head_dim]` sines.
    pub fn sin(&self) -> &Tensor {
        &self.sin
    }

    /// Rotates `x`: `[..., W * H, head_dim]` (f32) -> same shape, `x * cos + rotate_pairwise(x)
    /// * sin` in the reference's order of operations.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims();
        let rank = dims.len();
        if rank < 2 || dims[rank - 2..] != *self.cos.dims() {
            candle_core::bail!(
                "RoPE tables of shape {:?} do not fit a tensor of shape {dims:?}",
                self.cos.dims()
            );
        }
        let x = x.to_dtype(DType::F32)?;
        if let (Some(host), true) = (&self.host, x.device().is_cpu()) {
            return x.contiguous()?.apply_op1_no_bwd(&RotateOp { tables: host });
        }
        x.broadcast_mul(&self.cos)?
            .broadcast_add(&rotate_pairwise(&x)?.broadcast_mul(&self.sin)?)
    }
}

impl AxialRope {
    /// The cross-attention keys' rotation (`k` `[B, heads, Lk, D]`, f32 CPU): in each of the
    /// first `memories * per_memory` tokens' memories, tokens `first .. first + self.len()`
    /// rotate with the grid, all others (the 1-D latents and the trailing object pointers) pass
    /// through. One pass instead of narrows, a rotation and two concatenations (candle's
    /// strided copies, ~3 ns per value: ~8 ms per object and frame at 1024). Same arithmetic as
    /// [`Self::apply`], so the result is bit-identical. `None` off the CPU path.
    pub(crate) fn apply_to_memory_keys(
        &self,
        k: &Tensor,
        memories: usize,
        per_memory: usize,
        first: usize,
    ) -> Result<Option<Tensor>> {
        let Some(host) = &self.host else {
            return Ok(None);
        };
        if !k.device().is_cpu() || k.dtype() != DType::F32 {
            return Ok(None);
        }
        let op = RotateMemoryKeysOp {
            tables: host,
            memories,
            per_memory,
            first,
            spatial: self.len(),
        };
        Ok(Some(k.contiguous()?.apply_op1_no_bwd(&op)?))
    }
}

/// See [`AxialRope::apply_to_memory_keys`].
struct RotateMemoryKeysOp<'a> {
    tables: &'a HostTables,
    memories: usize,
    per_memory: usize,
    first: usize,
    spatial: usize,
}

impl candle_core::CustomOp1 for RotateMemoryKeysOp<'_> {
    fn name(&self) -> &'static str {
        "axial-rope-memory-keys"
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let x = crate::kernels::f32_slice(storage, layout, "memory keys")?;
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
        let out = crate::kernels::output_in_chunks(x.len(), ROWS * d.max(1), |i, o| {
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
        Ok((candle_core::CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// [`AxialRope::apply`] as one CPU pass (candle's path is six: two narrows, a negation, a
/// concatenation, two broadcast products and a sum, each over the whole tensor). Per channel
/// pair `(a, b)`: `(a * cos - ... )` written as the reference computes it, `a * cos + (-b) * sin`
/// and `b * cos + a * sin`, each product rounded then summed (no fused multiply-add), so the
/// result is bit-identical to the tensor-op path.
struct RotateOp<'a> {
    tables: &'a HostTables,
}

impl candle_core::CustomOp1 for RotateOp<'_> {
    fn name(&self) -> &'static str {
        "axial-rope"
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let x = crate::kernels::f32_slice(storage, layout, "RoPE input")?;
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
        let out = crate::kernels::output_in_chunks(x.len(), chunk, |i, o| {
            let start = i * chunk;
            let src = &x[start..start + o.len()];
            self.tables.rotate(src, start % table, o);
        });
        Ok((candle_core::CpuStorage::F32(out), layout.shape().clone()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_cpu_rotation_is_bit_identical_to_the_tensor_ops() -> Result<()> {
        let dev = Device::Cpu;
        let rope = AxialRope::new(64, 10000.0, [16, 16], &dev)?;
        for shape in [vec![2usize, 3, 256, 64], vec![256, 64], vec![1, 1, 256, 64]] {
            let x = Tensor::randn(0f32, 1.0, shape.as_slice(), &dev)?;
            let want = x
                .broadcast_mul(rope.cos())?
                .broadcast_add(&rotate_pairwise(&x)?.broadcast_mul(rope.sin())?)?;
            let got = rope.apply(&x)?;
            let diff = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert_eq!(diff, 0.0, "{shape:?}");
        }
        // A large grid: the rows split into several tasks.
        let rope = AxialRope::new(256, 10000.0, [64, 64], &dev)?;
        let x = Tensor::randn(0f32, 1.0, (1, 1, 4096, 256), &dev)?;
        let want = x
            .broadcast_mul(rope.cos())?
            .broadcast_add(&rotate_pairwise(&x)?.broadcast_mul(rope.sin())?)?;
        let diff = (&rope.apply(&x)? - &want)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert_eq!(diff, 0.0);
        Ok(())
    }
}
