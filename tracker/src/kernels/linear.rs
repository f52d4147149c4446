//! Exact f32 linear layers on the CPU with the weight packed once, at load.
//!
//! candle's `Linear` runs `x w^T` through the `gemm` crate, which re-packs the weight on every
//! call and runs its AVX2 kernel; the memory attention calls its projections and MLP on 4096
//! tokens per object per layer. [`PackedLinear`] keeps `w^T` in [`crate::kernels::gemm`]'s panel
//! layout and starts each output row from the bias, so the product and the bias are one pass.
//! Exact f32 (fused multiply-adds, f32 accumulation): only the summation order differs from
//! candle's, which is float noise.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Shape, Tensor};
use candle_nn::Linear;

use crate::kernels::gemm::{gemm_packed, PackedB, NR};
use crate::kernels::threads::MIN_TASK_MACS;
use crate::kernels::{
    f32_slice, last_axis_map, output_in_chunks, output_in_chunks_with, run_tasks_with,
    spread_row_stride, threads,
};

/// Rows per task at most: a task sweeps the whole packed weight once.
const ROWS_PER_TASK: usize = 128;
/// Fewer rows per task come in multiples of this: whole register tiles (12 rows on AVX-512,
/// 6 elsewhere).
const ROW_QUANTUM: usize = 12;

/// A linear layer's weight (`w^T`, packed) and bias.
#[derive(Debug)]
pub struct PackedLinear {
    weight: PackedB,
    bias: Vec<f32>,
}

impl PackedLinear {
    /// Packs `linear`'s `[out, in]` weight; `None` where the packed kernel would not run (the
    /// weight is not an f32 CPU tensor), so the caller keeps candle's layer.
    pub fn new(linear: &Linear) -> candle_core::Result<Option<Self>> {
        let w = linear.weight();
        if !w.device().is_cpu() || w.dtype() != DType::F32 {
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

    /// `rows x out` outputs of the `rows x in` input `x`, tasks of whole rows.
    fn forward_by_rows(&self, x: &[f32], rows: usize) -> Vec<f32> {
        let (inputs, outputs) = (self.weight.k(), self.weight.n());
        if rows == 0 || outputs == 0 {
            return Vec::new();
        }
        // The 512 input's 1024-token projections made 8 tasks of 128 rows: cut finer.
        let per =
            crate::kernels::units_per_task(rows, ROWS_PER_TASK, ROW_QUANTUM, inputs * outputs);
        output_in_chunks(rows * outputs, per * outputs, |t, o| {
            let r0 = t * per;
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
        })
    }

    /// [`Self::forward_by_rows`] with the columns cut into `groups` tasks instead: a few rows
    /// (the decoder's 1-8 tokens) make one row task, which left the other cores idle while one
    /// streamed the whole weight. Each output sums the same terms in the same order: the same
    /// bits as by rows.
    fn forward_by_columns(&self, x: &[f32], rows: usize, groups: usize) -> Vec<f32> {
        let (inputs, outputs) = (self.weight.k(), self.weight.n());
        let per = outputs.div_ceil(NR).div_ceil(groups.max(1)) * NR;
        let mut blocks: Vec<(usize, Vec<f32>)> = (0..outputs)
            .step_by(per)
            .map(|c0| (c0, Vec::new()))
            .collect();
        let tasks: Vec<&mut (usize, Vec<f32>)> = blocks.iter_mut().collect();
        run_tasks_with(
            tasks,
            threads(),
            || (),
            |_, (c0, block)| {
                let cols = per.min(outputs - *c0);
                block.reserve_exact(rows * cols);
                for _ in 0..rows {
                    block.extend_from_slice(&self.bias[*c0..*c0 + cols]);
                }
                gemm_packed(
                    rows,
                    x,
                    inputs,
                    &self.weight,
                    0..inputs,
                    *c0..*c0 + cols,
                    block,
                    cols,
                    true,
                );
            },
        );
        let mut out = Vec::with_capacity(rows * outputs);
        for r in 0..rows {
            for (c0, block) in &blocks {
                let cols = per.min(outputs - c0);
                out.extend_from_slice(&block[r * cols..(r + 1) * cols]);
            }
        }
        out
    }
}

/// Column tasks for a product of `rows x inputs` by `inputs x outputs`: more than one where
/// the rows fit one register tile (so they would make a single row task) and each column
/// group still gets [`MIN_TASK_MACS`] of work.
fn column_groups(rows: usize, inputs: usize, outputs: usize) -> usize {
    if rows == 0 || rows > ROW_QUANTUM {
        return 1;
    }
    let by_work = (rows * inputs * outputs) / MIN_TASK_MACS;
    threads().min(by_work).min(outputs.div_ceil(NR)).max(1)
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
        let (rows, out_shape) = last_axis_map(layout, inputs, outputs, "linear")?;
        let groups = column_groups(rows, inputs, outputs);
        let out = if groups > 1 {
            self.forward_by_columns(x, rows, groups)
        } else {
            self.forward_by_rows(x, rows)
        };
        Ok((CpuStorage::F32(out), out_shape))
    }
}

/// `down(relu(up(x)))` in one pass per block of rows: the hidden activations (the memory
/// attention's 2048-wide MLP on 4096 tokens: 32 MiB per call) stay a per-worker L2 buffer
/// instead of two full tensors, and the ReLU runs on them while they are hot.
pub struct FusedReluMlp<'a> {
    pub up: &'a PackedLinear,
    pub down: &'a PackedLinear,
}

/// Rows per task of the fused MLPs: `64 x 2048` hidden floats (512 KiB) fit L2.
pub(crate) const MLP_ROWS_PER_TASK: usize = 64;

/// The layer widths of a fused two-layer MLP.
pub(crate) struct MlpWidths {
    pub inputs: usize,
    pub hidden: usize,
    /// The second layer's input width (must equal `hidden`).
    pub down_inputs: usize,
    pub outputs: usize,
}

/// The frame of a fused MLP op (f32 here, bf16 in [`crate::kernels::linear_bf16`]): checks the widths,
/// maps the rows, and runs `block(scratch, input_rows, output_rows)` per block of
/// [`MLP_ROWS_PER_TASK`] rows on the compute threads.
pub(crate) fn mlp_op<S>(
    storage: &CpuStorage,
    layout: &Layout,
    w: MlpWidths,
    scratch: impl Fn() -> S + Sync,
    block: impl Fn(&mut S, &[f32], &mut [f32]) + Sync,
) -> candle_core::Result<(CpuStorage, Shape)> {
    let x = f32_slice(storage, layout, "MLP input")?;
    if w.down_inputs != w.hidden {
        candle_core::bail!(
            "MLP: layers {}->{} and {}->{}",
            w.inputs,
            w.hidden,
            w.down_inputs,
            w.outputs
        );
    }
    let (rows, out_shape) = last_axis_map(layout, w.inputs, w.outputs, "MLP")?;
    let mut out = Vec::new();
    if rows > 0 && w.outputs > 0 {
        out = output_in_chunks_with(
            rows * w.outputs,
            MLP_ROWS_PER_TASK * w.outputs,
            scratch,
            |s, t, o| {
                let r0 = t * MLP_ROWS_PER_TASK;
                let n = o.len() / w.outputs;
                block(s, &x[r0 * w.inputs..(r0 + n) * w.inputs], o);
            },
        );
    }
    Ok((CpuStorage::F32(out), out_shape))
}

impl FusedReluMlp<'_> {
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.contiguous()?.apply_op1_no_bwd(self)
    }
}

impl CustomOp1 for FusedReluMlp<'_> {
    fn name(&self) -> &'static str {
        "mlp-relu-f32-packed"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (inputs, hidden) = (self.up.weight.k(), self.up.weight.n());
        let widths = MlpWidths {
            inputs,
            hidden,
            down_inputs: self.down.weight.k(),
            outputs: self.down.weight.n(),
        };
        let outputs = widths.outputs;
        // The second product broadcasts from 12 hidden rows at a time (`spread_row_stride`).
        let ld_h = spread_row_stride(hidden);
        mlp_op(
            storage,
            layout,
            widths,
            || vec![0f32; MLP_ROWS_PER_TASK * ld_h],
            |h, xs, o| {
                let n = o.len() / outputs;
                let h = &mut h[..n * ld_h];
                for row in h.chunks_mut(ld_h) {
                    row[..hidden].copy_from_slice(&self.up.bias);
                }
                gemm_packed(
                    n,
                    xs,
                    inputs,
                    &self.up.weight,
                    0..inputs,
                    0..hidden,
                    h,
                    ld_h,
                    true,
                );
                h.iter_mut().for_each(|v| *v = v.max(0.0));
                for row in o.chunks_mut(outputs) {
                    row.copy_from_slice(&self.down.bias);
                }
                gemm_packed(
                    n,
                    h,
                    ld_h,
                    &self.down.weight,
                    0..hidden,
                    0..outputs,
                    o,
                    outputs,
                    true,
                );
            },
        )
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

    /// Cutting a few rows' product by columns changes no bit: each output sums the same terms
    /// in the same order (`column_groups` picks it for 1-8 decoder tokens).
    #[test]
    fn columns_equal_rows_bit_for_bit() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        for (rows, inp, out) in [
            (8usize, 256usize, 2048usize),
            (1, 256, 256),
            (5, 2048, 96),
            (12, 64, 40),
        ] {
            let w = Tensor::randn(0f32, 0.05, (out, inp), &dev)?;
            let b = Tensor::randn(0f32, 1.0, out, &dev)?;
            // f32 weights on the CPU always pack: a `None` here would skip the comparison.
            let packed = PackedLinear::new(&Linear::new(w, Some(b)))?
                .ok_or_else(|| candle_core::Error::Msg("an f32 CPU weight did not pack".into()))?;
            let x: Vec<f32> = Tensor::randn(0f32, 1.0, rows * inp, &dev)?.to_vec1()?;
            let by_rows = packed.forward_by_rows(&x, rows);
            for groups in [2, 3, 7] {
                let by_columns = packed.forward_by_columns(&x, rows, groups);
                let same = by_rows.len() == by_columns.len()
                    && by_rows
                        .iter()
                        .zip(&by_columns)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{rows}x{inp}->{out} in {groups} column groups");
            }
        }
        Ok(())
    }

    #[test]
    fn fused_relu_mlp_matches_candle() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let lin = |i: usize, o: usize| -> candle_core::Result<Linear> {
            Ok(Linear::new(
                Tensor::randn(0f32, 0.05, (o, i), &dev)?,
                Some(Tensor::randn(0f32, 1.0, o, &dev)?),
            ))
        };
        let (up, down) = (lin(256, 2048)?, lin(2048, 256)?);
        let (Some(pu), Some(pd)) = (PackedLinear::new(&up)?, PackedLinear::new(&down)?) else {
            eprintln!("skipped: this CPU has no AVX-512F");
            return Ok(());
        };
        let x = Tensor::randn(0f32, 1.0, (1, 131, 256), &dev)?;
        let want = down.forward(&up.forward(&x)?.relu()?)?;
        let got = FusedReluMlp { up: &pu, down: &pd }.forward(&x)?;
        let err = (got - &want)?.abs()?.max_all()?.to_scalar::<f32>()?;
        let scale = want.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(err <= 4e-6 * scale.max(1.0), "{err}");
        Ok(())
    }
}
