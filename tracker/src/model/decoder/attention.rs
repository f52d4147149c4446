//! The mask decoder's multi-head attention (`EdgeTamVideoAttention`): the projections of
//! `model/layers.rs`, with the folds of `cross_attention.rs` where the shape pays for them.

use candle_core::{DType, Result, Tensor};
use candle_nn::VarBuilder;

use crate::model::decoder::cross_attention::{FoldedHeads, FoldedQueries};
use crate::model::layers::HeadProjections;

/// Multi-head attention with an internal width of `hidden / downsample_rate`
/// (`EdgeTamVideoAttention` + `eager_attention_forward`): no mask, no RoPE.
///
/// The decoder's cross-attentions run at half width (downsample 2); its self-attention at full
/// width (downsample 1).
#[derive(Debug, Clone)]
pub struct Attention {
    proj: HeadProjections,
    /// The key and value projections per head, for the few-queries-to-an-image shape
    /// ([`crate::model::decoder::cross_attention`]).
    folded: FoldedHeads,
    /// The query and output projections per head, for the image-to-few-keys shape.
    folded_queries: FoldedQueries,
}

impl Attention {
    pub fn new(
        hidden_size: usize,
        num_heads: usize,
        downsample_rate: usize,
        vb: VarBuilder,
    ) -> Result<Self> {
        let internal = hidden_size / downsample_rate.max(1);
        if num_heads == 0 || !internal.is_multiple_of(num_heads) {
            candle_core::bail!("attention width {internal} is not divisible by {num_heads} heads");
        }
        let proj = HeadProjections::new(
            hidden_size,
            hidden_size,
            num_heads,
            internal / num_heads,
            true,
            vb,
        )?;
        let folded = FoldedHeads::new(&proj)?;
        let folded_queries = FoldedQueries::new(&proj)?;
        Ok(Self {
            proj,
            folded,
            folded_queries,
        })
    }

    /// Switches bf16 products on or off (projections and attention; the folds are exact f32
    /// only, so bf16 runs the unfolded form).
    pub(crate) fn set_bf16(&mut self, on: bool) -> Result<()> {
        self.proj.set_bf16(on)
    }

    /// `query`: `[N, Lq, C]`, `key`/`value`: `[N, Lk, C]` -> `[N, Lq, C]`.
    pub fn forward(&self, query: &Tensor, key: &Tensor, value: &Tensor) -> Result<Tensor> {
        let p = &self.proj;
        let cpu_f32 = [query, key, value]
            .iter()
            .all(|t| t.device().is_cpu() && t.dtype() == DType::F32);
        let (lq, lk) = (query.dim(1)?, key.dim(1)?);
        if cpu_f32 && !p.bf16_products && FoldedHeads::applies(lq, lk) {
            return self.folded.forward(p, query, key, value);
        }
        if cpu_f32 && !p.bf16_products && FoldedQueries::applies(lq, lk) {
            return self.folded_queries.forward(p, query, key, value);
        }
        self.forward_unfolded(query, key, value)
    }

    /// [`Self::forward`] with every projection applied (the reference's order of operations).
    pub fn forward_unfolded(&self, query: &Tensor, key: &Tensor, value: &Tensor) -> Result<Tensor> {
        let p = &self.proj;
        p.attend(&p.queries(query)?, &p.keys(key)?, &p.values(value)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::weights::random_var_builder;
    use candle_core::Device;

    /// The folded attention against the unfolded one (the decoder's: 8 heads, half width), with
    /// a batch of 2.
    #[test]
    fn folded_matches_unfolded() -> crate::checks::Result<()> {
        let dev = Device::Cpu;
        let attn = Attention::new(256, 8, 2, random_var_builder(9, &dev))?;
        let tokens = Tensor::randn(0f32, 1.0, (2, 7, 256), &dev)?;
        let image = Tensor::randn(0f32, 1.0, (2, 300, 256), &dev)?;
        let image_v = Tensor::randn(0f32, 1.0, (2, 300, 256), &dev)?;
        let folded = attn.forward(&tokens, &image, &image_v)?;
        let unfolded = attn.forward_unfolded(&tokens, &image, &image_v)?;
        let err = crate::checks::compare::compare(&folded, &unfolded)?.rel_l2;
        assert!(err < 1e-5, "rel_l2 {err}");
        // Many queries against few keys: the query and output projections folded instead.
        let back = attn.forward(&image, &tokens, &image_v.narrow(1, 0, 7)?)?;
        let back_unfolded = attn.forward_unfolded(&image, &tokens, &image_v.narrow(1, 0, 7)?)?;
        assert_eq!(back.dims(), back_unfolded.dims());
        let err = crate::checks::compare::compare(&back, &back_unfolded)?.rel_l2;
        assert!(err < 1e-5, "image-to-token rel_l2 {err}");
        // Too few queries for either fold: the same op.
        let few = image.narrow(1, 0, 100)?;
        assert!(crate::checks::compare::same_bits(
            &attn.forward(&few, &tokens, &tokens)?,
            &attn.forward_unfolded(&few, &tokens, &tokens)?
        )?);
        Ok(())
    }
}
