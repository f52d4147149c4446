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
