//! Multi-head attention of a few tokens to a whole image, with the projections on the image
//! side folded into the attention (exact algebra, float rounding aside): the mask decoder's
//! token-to-image cross-attentions.
//!
//! With `q_h = Wq_h x + bq_h` (head `h`, `hd` channels) and likewise for keys and values:
//! - **few queries, many keys** (7 tokens against 4096 image tokens): `q_h . (Wk_h y + bk_h) =
//!   (Wk_h^T q_h) . y + q_h . bk_h`, and the last term is the same for every key of the row, so
//!   the softmax drops it; values: softmax rows sum to 1, so `sum_j a_j (Wv_h y_j + bv_h) =
//!   Wv_h (sum_j a_j y_j) + bv_h`. The image is never projected: two `(heads * Lq) x C x Lk`
//!   products replace the `Lk x C x C/2` key and value projections.
//!
//! The opposite shape (image-to-token: the queries' projection folded into the 7 keys, the
//! output projection into the values) computes less as well, but ran slower through candle's
//! products than the packed projections (12.4 vs 9.4 ms per call), so it stays unfolded.
//!
//! At 1024 this is 0.4 of the decoder's 1.8 GMAC per object not computed (3 calls).

use candle_core::{DType, Result, Tensor};

use crate::layers::HeadProjections;

/// Up to this many queries against at least [`MIN_LONG`] keys the fold pays.
const MAX_SHORT: usize = 32;
const MIN_LONG: usize = 256;

/// The projections split per head, laid out for the folded products (f32, built at load).
#[derive(Debug, Clone)]
pub struct FoldedHeads {
    /// `[h, hd, C]`: `Wk_h`.
    wk: Tensor,
    /// `[h, C, hd]`: `Wv_h^T`.
    wv_t: Tensor,
    /// `[h, 1, hd]`: `bv_h`.
    bv: Tensor,
    heads: usize,
}

impl FoldedHeads {
    /// From the key and value projections.
    pub fn new(proj: &HeadProjections) -> Result<Self> {
        let (k, v, _, heads) = proj.kvo();
        let (inner, c) = k.weight().dims2()?;
        let head_dim = inner / heads.max(1);
        let f32_of = |t: &Tensor| t.to_dtype(DType::F32);
        let per_head = |w: &Tensor| -> Result<Tensor> {
            f32_of(w)?.reshape((heads, head_dim, c))?.contiguous()
        };
        let bv = match v.bias() {
            Some(b) => f32_of(b)?,
            None => Tensor::zeros(inner, DType::F32, v.weight().device())?,
        };
        Ok(Self {
            wk: per_head(k.weight())?,
            wv_t: per_head(v.weight())?.transpose(1, 2)?.contiguous()?,
            bv: bv.reshape((heads, 1, head_dim))?,
            heads,
        })
    }

    /// Whether `lq` queries against `lk` keys take the folded path.
    pub fn applies(lq: usize, lk: usize) -> bool {
        lq <= MAX_SHORT && lk >= MIN_LONG
    }

    /// The whole attention, output projection included: `query` `[N, Lq, C]`, `key`/`value`
    /// `[N, Lk, C]` -> `[N, Lq, out]`. The image keys and values are used unprojected.
    pub fn forward(
        &self,
        proj: &HeadProjections,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
    ) -> Result<Tensor> {
        let (n, lq, _) = query.dims3()?;
        let h = self.heads;
        let q = proj.queries(query)?; // [N, h, Lq, hd]
        let c = self.wk.dim(2)?;
        // Wk_h^T q_h for every head and query: [N, h, Lq, C] -> [N, h * Lq, C]
        let qk = q.broadcast_matmul(&self.wk)?.reshape((n, h * lq, c))?;
        let scores = (qk.matmul(&key.t()?)? * proj.scaling())?; // [N, h * Lq, Lk]
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        let averaged = weights.matmul(&value.contiguous()?)?; // [N, h * Lq, C]
        let heads = averaged
            .reshape((n, h, lq, c))?
            .broadcast_matmul(&self.wv_t)?
            .broadcast_add(&self.bv)?; // [N, h, Lq, hd]
        proj.project_out(&heads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::Attention;
    use crate::weights::random_var_builder;
    use candle_core::Device;

    /// The folded attention against the unfolded one (the decoder's: 8 heads, half width), with
    /// a batch of 2.
    #[test]
    fn folded_matches_unfolded() -> crate::error::Result<()> {
        let dev = Device::Cpu;
        let attn = Attention::new(256, 8, 2, random_var_builder(9, &dev))?;
        let tokens = Tensor::randn(0f32, 1.0, (2, 7, 256), &dev)?;
        let image = Tensor::randn(0f32, 1.0, (2, 300, 256), &dev)?;
        let image_v = Tensor::randn(0f32, 1.0, (2, 300, 256), &dev)?;
        let folded = attn.forward(&tokens, &image, &image_v)?;
        let unfolded = attn.forward_unfolded(&tokens, &image, &image_v)?;
        let err = crate::compare::compare(&folded, &unfolded)?.rel_l2;
        assert!(err < 1e-5, "rel_l2 {err}");
        // Many queries against few keys stays unfolded (the same op).
        let back = attn.forward(&image, &tokens, &tokens)?;
        assert!(crate::compare::same_bits(
            &back,
            &attn.forward_unfolded(&image, &tokens, &tokens)?
        )?);
        Ok(())
    }

    /// Folded vs unfolded wall time at the decoder's shapes (1024 input):
    /// `cargo test --release -p edgetam-tracker --lib folded_attention::tests::speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn speed() -> Result<()> {
        let dev = Device::Cpu;
        let attn = Attention::new(256, 8, 2, random_var_builder(9, &dev))?;
        let tokens = Tensor::randn(0f32, 1.0, (1, 7, 256), &dev)?;
        let image = Tensor::randn(0f32, 1.0, (1, 4096, 256), &dev)?;
        let time = |f: &dyn Fn() -> Result<Tensor>| -> Result<f64> {
            let mut t = Vec::new();
            for _ in 0..21 {
                let t0 = std::time::Instant::now();
                f()?;
                t.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            t.sort_by(|a, b| a.total_cmp(b));
            Ok(t[10])
        };
        let folded = time(&|| attn.forward(&tokens, &image, &image))?;
        let unfolded = time(&|| attn.forward_unfolded(&tokens, &image, &image))?;
        println!("token->image: folded {folded:.2} ms, unfolded {unfolded:.2} ms");
        Ok(())
    }
}
