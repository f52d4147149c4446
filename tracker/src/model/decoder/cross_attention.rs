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
//! - **many queries, few keys** (4096 image tokens against 7 tokens, [`FoldedQueries`]):
//!   `(Wq_h x + bq_h) . k_hj = x . (Wq_h^T k_hj) + bq_h . k_hj`, so the query projection folds
//!   into the few keys (`C x heads * T`, built per call), and `Wo (sum_hj a_hj v_hj) + bo =
//!   sum_hj a_hj (Wo_h v_hj) + bo` folds the output projection into the values (`heads * T x
//!   C`). The image then takes two `Lq x C x heads * T` products instead of two `Lq x C x C/2`
//!   projections, in one pass per block of rows with the grouped softmax in between (our packed
//!   products: through candle's the fold was slower than the packed projections).
//!
//! At 1024 this is 0.7 of the decoder's 1.8 GMAC per object not computed (5 calls).

use candle_core::{DType, Result, Tensor};

use crate::kernels::attention::image_to_tokens::image_to_tokens;
use crate::model::layers::HeadProjections;

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
        let qk = q.broadcast_matmul(&self.wk)?.reshape((n, 1, h * lq, c))?;
        // One attention of all heads' folded queries over the unprojected image: on the CPU
        // the fused kernel, its keys split over the workers (56 query rows are one tile).
        let lk = key.dim(1)?;
        let averaged = crate::kernels::attention::scaled_dot_product(
            &qk,
            &key.reshape((n, 1, lk, c))?,
            &value.reshape((n, 1, lk, c))?,
            proj.scaling(),
        )?
        .reshape((n, h * lq, c))?; // [N, h * Lq, C]
        let heads = averaged
            .reshape((n, h, lq, c))?
            .broadcast_matmul(&self.wv_t)?
            .broadcast_add(&self.bv)?; // [N, h, Lq, hd]
        proj.project_out(&heads)
    }
}

/// The query and output projections split per head (f32, built at load), for many queries
/// against a few keys (see the module docs).
#[derive(Debug, Clone)]
pub struct FoldedQueries {
    /// `[h, C, hd]`: `Wq_h^T`.
    wq_t: Tensor,
    /// `[h, 1, hd]`: `bq_h`.
    bq: Tensor,
    /// `[h, hd, out]`: `Wo_h^T` (the columns of `Wo` that read head `h`).
    wo_t: Tensor,
    /// `[1, out]`: `bo`.
    bo: Tensor,
}

impl FoldedQueries {
    /// From the query and output projections.
    pub fn new(proj: &HeadProjections) -> Result<Self> {
        let (_, _, o, heads) = proj.kvo();
        let q = proj.q();
        let (inner, c) = q.weight().dims2()?;
        let out = o.weight().dim(0)?;
        let hd = inner / heads.max(1);
        let f32_of = |t: &Tensor| t.to_dtype(DType::F32);
        let bias = |l: &candle_nn::Linear, n: usize| -> Result<Tensor> {
            match l.bias() {
                Some(b) => f32_of(b),
                None => Tensor::zeros(n, DType::F32, l.weight().device()),
            }
        };
        Ok(Self {
            wq_t: f32_of(q.weight())?
                .reshape((heads, hd, c))?
                .transpose(1, 2)?
                .contiguous()?,
            bq: bias(q, inner)?.reshape((heads, 1, hd))?,
            wo_t: f32_of(o.weight())?
                .reshape((out, heads, hd))?
                .permute((1, 2, 0))?
                .contiguous()?,
            bo: bias(o, out)?.reshape((1, out))?,
        })
    }

    /// Whether `lq` queries against `lk` keys take the folded path.
    pub fn applies(lq: usize, lk: usize) -> bool {
        lk <= MAX_SHORT && lq >= MIN_LONG
    }

    /// The whole attention, output projection included: `query` `[N, Lq, C]` (the image, used
    /// unprojected), `key`/`value` `[N, Lk, C]` -> `[N, Lq, out]`.
    pub fn forward(
        &self,
        proj: &HeadProjections,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
    ) -> Result<Tensor> {
        let (n, lk, _) = key.dims3()?;
        let h = self.wq_t.dim(0)?;
        let c = self.wq_t.dim(1)?;
        let scale = proj.scaling();
        // Keys `[N, h, hd, T]`; scores `x . m + m0`: `m` [N, C, h * T] with the bias row `m0`
        // appended.
        let k_t = proj.keys(key)?.transpose(2, 3)?;
        let m = (self.wq_t.broadcast_matmul(&k_t)? * scale)? // [N, h, C, T]
            .permute((0, 2, 1, 3))?
            .reshape((n, c, h * lk))?;
        let m0 = (self.bq.broadcast_matmul(&k_t)? * scale)?.reshape((n, 1, h * lk))?;
        let m = Tensor::cat(&[m, m0], 1)?.contiguous()?;
        // Values through the output projection: `p` [N, h * T, out] with `bo` appended.
        let p = proj.values(value)?.broadcast_matmul(&self.wo_t)?.reshape((
            n,
            h * lk,
            self.bo.dim(1)?,
        ))?;
        let p = Tensor::cat(
            &[
                p,
                self.bo
                    .unsqueeze(0)?
                    .broadcast_as((n, 1, self.bo.dim(1)?))?,
            ],
            1,
        )?
        .contiguous()?;
        image_to_tokens(query, &m, &p, h, lk)
    }
}
