//! The mask decoder's stride-2 transposed convolutions (`ConvTranspose2d(kernel_size=2,
//! stride=2)`); on the CPU each runs fused with the residual, norm and GELU that follow it
//! ([`crate::kernels::conv::upscale`]).

use candle_core::{DType, Tensor};
use candle_nn::VarBuilder;

pub(crate) use crate::kernels::conv::upscale::InputLayout;
use crate::kernels::conv::upscale::{upscale_2x, upscale_2x_reference, UpscaleWeights};
use crate::kernels::norm::HostNorm;

/// `ConvTranspose2d(C_in, C_out, kernel_size=2, stride=2)` with bias.
#[derive(Debug, Clone)]
pub struct Upscale2x {
    /// `weight [C_in, C_out, 2, 2]` as `[C_out * 4, C_in]` (row `4c + 2ki + kj`).
    weight_t: Tensor,
    bias: Tensor,
    host_weight: Vec<f32>,
    host_bias: Vec<f32>,
}

impl Upscale2x {
    pub fn new(
        in_channels: usize,
        out_channels: usize,
        vb: VarBuilder,
    ) -> candle_core::Result<Self> {
        let weight = vb.get((in_channels, out_channels, 2, 2), "weight")?;
        let bias = vb.get(out_channels, "bias")?;
        let weight_t = weight
            .reshape((in_channels, out_channels * 4))?
            .t()?
            .contiguous()?;
        let host = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
        Ok(Self {
            host_weight: host(&weight_t)?,
            host_bias: host(&bias)?,
            weight_t,
            bias,
        })
    }

    /// `x` (`[N, C_in, h * w]`, any strides) -> `[N, C_out, 2h, 2w]` with the bias (the plain
    /// tensor-op form; [`Self::forward_fused`] is the CPU path).
    pub fn forward(&self, x: &Tensor, h: usize, w: usize) -> candle_core::Result<Tensor> {
        upscale_2x_reference(x, &self.weight_t, &self.bias, h, w)
    }

    /// `gelu(norm(up(x) + residual))` (the norm optional) on the CPU in one pass per block of
    /// input rows; `None` off the CPU f32 path. `x` is `[N, C_in, h, w]` ([`InputLayout::Channels`])
    /// or `[N, h * w, C_in]` ([`InputLayout::Tokens`]), contiguous; `residual` is
    /// `[N | 1, C_out, 2h, 2w]` (a batch of 1 is shared by all rows).
    pub(crate) fn forward_fused(
        &self,
        x: &Tensor,
        layout: InputLayout,
        (h, w): (usize, usize),
        residual: &Tensor,
        norm: Option<&HostNorm>,
    ) -> candle_core::Result<Option<Tensor>> {
        let weights = UpscaleWeights {
            weight: &self.host_weight,
            bias: &self.host_bias,
        };
        upscale_2x(x, layout, (h, w), residual, norm, weights)
    }
}

/// The fast CPU path of `kernels/conv/upscale.rs` against its plain form (the test lives here, above both).
#[cfg(test)]
mod kernel_tests {
    use super::*;
    use crate::kernels::conv::upscale::*;
    use crate::model::decoder::upscale::Upscale2x;
    use crate::model::layers::LayerNorm2d;
    use crate::model::weights::random_var_builder;
    use candle_core::Device;

    fn max_abs(t: &Tensor) -> candle_core::Result<f32> {
        t.abs()?.max_all()?.to_scalar::<f32>()
    }

    /// The fused pass against the tensor ops, for both input layouts, shared and per-row
    /// residuals, with and without the norm; odd sizes leave a partial last row block.
    #[test]
    fn fused_matches_tensor_ops() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let vb = random_var_builder(7, &dev);
        let (c_in, c_out, h, w) = (24usize, 8usize, 13usize, 21usize);
        let up = Upscale2x::new(c_in, c_out, vb.pp("up"))?;
        let norm = LayerNorm2d::new(c_out, 1e-6, vb.pp("norm"))?;
        let host = norm.host()?;
        let gelu = crate::model::layers::Activation::Gelu;
        for (n, rn) in [(1usize, 1usize), (3, 1), (2, 2)] {
            let tokens = Tensor::randn(0f32, 1.0, (n, h * w, c_in), &dev)?;
            let res = Tensor::randn(0f32, 1.0, (rn, c_out, 2 * h, 2 * w), &dev)?;
            let plain = up
                .forward(&tokens.transpose(1, 2)?, h, w)?
                .broadcast_add(&res)?;
            for with_norm in [true, false] {
                let want = if with_norm {
                    gelu.apply(&norm.forward(&plain)?)?
                } else {
                    gelu.apply(&plain)?
                };
                let got = up
                    .forward_fused(
                        &tokens,
                        InputLayout::Tokens,
                        (h, w),
                        &res,
                        with_norm.then_some(&host),
                    )?
                    .ok_or_else(|| candle_core::Error::Msg("no fused path".into()))?;
                let err = max_abs(&(&got - &want)?)?;
                assert!(
                    err <= 1e-5 * max_abs(&want)?.max(1.0),
                    "tokens n {n} rn {rn}: {err}"
                );
            }
            // Channels-first input (the second upscale).
            let chans = tokens
                .transpose(1, 2)?
                .contiguous()?
                .reshape((n, c_in, h, w))?;
            let got = up
                .forward_fused(&chans, InputLayout::Channels, (h, w), &res, None)?
                .ok_or_else(|| candle_core::Error::Msg("no fused path".into()))?;
            let want = gelu.apply(&plain)?;
            let err = max_abs(&(&got - &want)?)?;
            assert!(
                err <= 1e-5 * max_abs(&want)?.max(1.0),
                "channels n {n}: {err}"
            );
        }
        Ok(())
    }

    #[test]
    fn rejects_mismatched_residuals() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        let up = Upscale2x::new(8, 4, random_var_builder(1, &dev).pp("up"))?;
        let x = Tensor::zeros((2, 8, 5, 5), DType::F32, &dev)?;
        let bad = Tensor::zeros((2, 4, 10, 9), DType::F32, &dev)?;
        assert!(up
            .forward_fused(&x, InputLayout::Channels, (5, 5), &bad, None)
            .is_err());
        let bad_batch = Tensor::zeros((3, 4, 10, 10), DType::F32, &dev)?;
        assert!(up
            .forward_fused(&x, InputLayout::Channels, (5, 5), &bad_batch, None)
            .is_err());
        Ok(())
    }
}
