//! The memory encoder's mask input from upsampled mask logits, `unit(v) * scale + bias` with
//! `unit` a threshold (prompted frames) or a sigmoid (tracked frames), as one CPU pass beside
//! the tensor ops it must match bit for bit ([`mask_input_ops`]): those took three or four
//! full-size passes per object.

use candle_core::{CpuStorage, CustomOp1, DType, Layout, Result, Shape, Tensor};

use crate::kernels::{f32_slice, output_in_chunks};

/// How a logit becomes a value in `0..=1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnitMask {
    /// `logit > 0` as 0 / 1.
    Threshold,
    /// `sigmoid(logit)`.
    Sigmoid,
}

/// `unit(logits) * scale + bias` (two roundings, like torch's separate multiply and add): one
/// pass on the CPU, [`mask_input_ops`] elsewhere.
pub(crate) fn mask_input(logits: &Tensor, unit: UnitMask, scale: f64, bias: f64) -> Result<Tensor> {
    if logits.device().is_cpu() && logits.dtype() == DType::F32 {
        let op = MaskToInput {
            unit,
            scale: scale as f32,
            bias: bias as f32,
        };
        return logits.contiguous()?.apply_op1_no_bwd(&op);
    }
    mask_input_ops(logits, unit, scale, bias)
}

/// [`mask_input`] as tensor ops: candle's `gt(0)` or `sigmoid`, then two affine maps.
pub(crate) fn mask_input_ops(
    logits: &Tensor,
    unit: UnitMask,
    scale: f64,
    bias: f64,
) -> Result<Tensor> {
    let unit = match unit {
        UnitMask::Threshold => logits.gt(0.0)?.to_dtype(DType::F32)?,
        UnitMask::Sigmoid => candle_nn::ops::sigmoid(logits)?,
    };
    (unit.to_dtype(DType::F32)? * scale)? + bias
}

/// Same operations per value as candle's `sigmoid` (`1 / (exp(-v) + 1)`), `gt(0)` and affine
/// maps, so the result is bit-identical to [`mask_input_ops`].
struct MaskToInput {
    unit: UnitMask,
    scale: f32,
    bias: f32,
}

impl CustomOp1 for MaskToInput {
    fn name(&self) -> &'static str {
        "memory-mask-input"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = f32_slice(storage, layout, "upsampled mask logits")?;
        let (scale, bias) = (self.scale, self.bias);
        let out = output_in_chunks(x.len(), 1 << 16, |k, o| {
            let src = &x[k << 16..][..o.len()];
            for (o, &v) in o.iter_mut().zip(src) {
                let unit = match self.unit {
                    UnitMask::Threshold => f32::from(u8::from(v > 0.0)),
                    UnitMask::Sigmoid => ((-v).exp() + 1.0).recip(),
                };
                // candle's `affine(scale, 0)` then `affine(1, bias)`.
                *o = (unit * scale + 0.0) * 1.0 + bias;
            }
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// The CPU pass against the tensor ops, bit for bit, for both unit masks (values around 0
    /// and far out, where `exp` saturates), with the memory encoder's scale and bias.
    #[test]
    fn cpu_mask_input_is_bit_identical_to_tensor_ops() -> Result<()> {
        let mut v = Tensor::randn(0f32, 4.0, (2, 1, 256, 256), &Device::Cpu)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        v[..6].copy_from_slice(&[0.0, -0.0, 100.0, -100.0, -1024.0, 1e-30]);
        let high = Tensor::from_vec(v, (2, 1, 256, 256), &Device::Cpu)?;
        for unit in [UnitMask::Sigmoid, UnitMask::Threshold] {
            let fast = mask_input(&high, unit, 20.0, -10.0)?;
            let slow = mask_input_ops(&high, unit, 20.0, -10.0)?;
            assert!(crate::checks::compare::same_bits(&fast, &slow)?, "{unit:?}");
        }
        Ok(())
    }
}
