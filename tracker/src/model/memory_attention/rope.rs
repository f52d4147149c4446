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

use candle_core::{DType, Device, Result, Tensor};

use crate::kernels::rope::{rotate, rotate_memory_keys, RopeTables};

/// Cos/sin tables of one grid: `[W * H, head_dim]` each, ready to broadcast over
/// `[..., W * H, head_dim]`.
#[derive(Debug, Clone)]
pub struct AxialRope {
    cos: Tensor,
    sin: Tensor,
    grid: [usize; 2],
    /// Host copies of the tables for the fused CPU op (CPU models only).
    host: Option<std::sync::Arc<RopeTables>>,
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
            std::sync::Arc::new(RopeTables {
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
        rotate(&x, &self.cos, &self.sin, self.host.as_deref())
    }
}

impl AxialRope {
    /// The cross-attention keys' rotation (`k` `[B, heads, Lk, D]`): in each of the first
    /// `memories * per_memory` tokens' memories, tokens `first .. first + self.len()` rotate
    /// with the grid, the others pass through ([`rotate_memory_keys`]; bit-identical to
    /// [`Self::apply`] on those tokens). `None` off the CPU f32 path.
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
        rotate_memory_keys(k, host, memories, per_memory, first, self.len())
    }
}

/// The fast CPU path of `kernels/rope.rs` against its plain form (the test lives here, above both).
#[cfg(test)]
mod kernel_tests {
    use super::*;
    use crate::kernels::rope::*;
    use crate::model::memory_attention::rope::AxialRope;
    use candle_core::Device;

    #[test]
    fn fused_cpu_rotation_is_bit_identical_to_the_tensor_ops() -> Result<()> {
        let dev = Device::Cpu;
        let rope = AxialRope::new(64, 10000.0, [16, 16], &dev)?;
        for shape in [vec![2usize, 3, 256, 64], vec![256, 64], vec![1, 1, 256, 64]] {
            let x = Tensor::randn(0f32, 1.0, shape.as_slice(), &dev)?;
            let want = rotate_ops(&x, rope.cos(), rope.sin())?;
            let got = rope.apply(&x)?;
            let diff = (&got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert_eq!(diff, 0.0, "{shape:?}");
        }
        // A large grid: the rows split into several tasks.
        let rope = AxialRope::new(256, 10000.0, [64, 64], &dev)?;
        let x = Tensor::randn(0f32, 1.0, (1, 1, 4096, 256), &dev)?;
        let want = rotate_ops(&x, rope.cos(), rope.sin())?;
        let diff = (&rope.apply(&x)? - &want)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert_eq!(diff, 0.0);
        Ok(())
    }
}
