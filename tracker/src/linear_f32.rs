//! Exact f32 linear layers on the CPU with the weight packed once, at load.
//!
//! candle's `Linear` runs `x w^T` through the `gemm` crate, which re-packs the weight on every
//! call and runs its AVX2 kernel; the memory attention calls its projections and MLP on 4096
//! tokens per object per layer. [`PackedLinear`] keeps `w^T` in [`crate::gemm_f32`]'s panel
//! layout and starts each output row from the bias, so the product and the bias are one pass.
//! Exact f32 (fused multiply-adds, f32 accumulation): only the summation order differs from
//! candle's, which is float noise.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};
use candle_nn::Linear;

use crate::gemm_f32::{avx512, gemm_packed, PackedB};
use crate::kernels::{f32_slice, threads};

/// Rows per task: a task sweeps the whole packed weight once.
const ROWS_PER_TASK: usize = 128;

/// A linear layer's weight (`w^T`, packed) and bias.
#[derive(Debug)]
pub struct PackedLinear {
    weight: PackedB,
    bias: Vec<f32>,
}

impl PackedLinear {
    /// Packs `linear`'s `[out, in]` weight; `None` where the packed kernel would not run (no
    /// AVX-512F, or the weight is not an f32 CPU tensor), so the caller keeps candle's layer.
    pub fn new(linear: &Linear) -> candle_core::Result<Option<Self>> {
        let w = linear.weight();
        if !avx512() || !w.device().is_cpu() || w.dtype() != DType::F32 {
            return Ok(None);
        }
        let (outputs, inputs) = w.dims2()?;
        let host: Vec<f32> = w.flatten_all()?.to_vec1()?;
        let bias = match linear.bias() {
            Some(b) => b.to_dtype(DType::F32)?.to_vec1()?,
            None => vec![0.0; outputs],
        };
        Ok(Some(Self {
            weight: PackedB::from_transposed(&host, outputs, inputs, inputs),
            bias,
        }))
    }

    /// `bias + x w^T` for `x` `[.., in]`.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.contiguous()?.apply_op1_no_bwd(self)
    }
}

impl CustomOp1 for PackedLinear {
    fn name(&self) -> &'static str {
        "linear-f32-packed"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout, "linear input")?;
        let (inputs, outputs) = (self.weight.k(), self.weight.n());
        let dims = layout.shape().dims();
        if dims.last() != Some(&inputs) {
            candle_core::bail!("linear: input {dims:?} does not end in {inputs} channels");
        }
        let rows = x.len() / inputs.max(1);
        let mut out_dims = dims.to_vec();
        if let Some(last) = out_dims.last_mut() {
            *last = outputs;
        }
        let mut out = vec![0f32; rows * outputs];
        if rows > 0 && outputs > 0 {
            let tasks: Vec<(usize, &mut [f32])> = out
                .chunks_mut(ROWS_PER_TASK * outputs)
                .enumerate()
                .map(|(t, o)| (t * ROWS_PER_TASK, o))
                .collect();
            crate::kernels::run_tasks(tasks, threads(), |(r0, o)| {
                let n = o.len() / outputs;
                for row in o.chunks_mut(outputs) {
                    row.copy_from_slice(&self.bias);
                }
                let xs = &x[r0 * inputs..(r0 + n) * inputs];
                gemm_packed(
                    n,
                    xs,
                    inputs,
                    &self.weight,
                    0..inputs,
                    0..outputs,
                    o,
                    outputs,
                    true,
                );
            });
        }
        Ok((CpuStorage::F32(out), Shape::from(out_dims)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Module};

    #[test]
    fn matches_candle_linear() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        for (rows, inp, out, bias) in [
            (131usize, 256usize, 2048usize, true),
            (5, 64, 48, false),
            (300, 2048, 256, true),
            (1, 3, 1, true),
        ] {
            let w = Tensor::randn(0f32, 0.05, (out, inp), &dev)?;
            let b = Tensor::randn(0f32, 1.0, out, &dev)?;
            let exact = Linear::new(w, bias.then_some(b));
            let Some(packed) = PackedLinear::new(&exact)? else {
                eprintln!("skipped: this CPU has no AVX-512F");
                return Ok(());
            };
            let x = Tensor::randn(0f32, 1.0, (1, rows, inp), &dev)?;
            let want = exact.forward(&x)?;
            let got = packed.forward(&x)?;
            assert_eq!(got.dims(), want.dims());
            let err = (got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(err <= 2e-6 * scale.max(1.0), "{rows}x{inp}->{out}: {err}");
        }
        Ok(())
    }
}
