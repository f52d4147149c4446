//! The memory cross-attention with its key, value and output projections folded into the
//! attention (exact algebra, float rounding aside).
//!
//! The memory has 64 channels and the attention 256, and RoPE rotates only the 2-D latents'
//! keys. So, for one head (EdgeTAM's memory attention has one):
//! - **values**: `v_j = Wv m_j + bv`. Softmax rows sum to 1, so `sum_j a_ij v_j = Wv (sum_j a_ij
//!   m_j) + bv`: the attention averages the 64-channel memory, and the value and output
//!   projections compose into one `64 -> 256` projection (`Wo Wv`, `Wo bv + bo`).
//! - **keys RoPE leaves alone** (the 1-D latents and the object pointers, about half): `q_i .
//!   (Wk x_j + bk) = [Wk^T q_i, q_i . bk] . [x_j, 1]`, a 65-wide product instead of 256.
//! - the rotated keys keep the 256-wide product.
//!
//! Both key groups meet in one softmax ([`crate::kernels::attention::split_key`]), so the result
//! is the softmax over all keys; the key order does not matter to it, and the values follow
//! their keys. The multiply-adds this saves are counted in `instrument::macs`.

use candle_core::{DType, Module, Result, Tensor};
use candle_nn::Linear;

use crate::kernels::linear_bf16::SwitchLinear;
use crate::model::layers::HeadProjections;

/// The projections [`crate::kernels::attention::split_key::split_key_attention`] works with, composed from a one-head attention's at
/// load (in f64, stored f32).
#[derive(Debug, Clone)]
pub struct FoldedProjections {
    /// `D -> kv_in + 1`, no bias: `[Wk^T q, q . bk]`, the queries against the unrotated keys'
    /// inputs.
    q_low: SwitchLinear,
    /// `kv_in -> out`: `Wo Wv` with bias `Wo bv + bo`, from the attention-averaged memory to the
    /// output.
    value_out: SwitchLinear,
}

impl FoldedProjections {
    /// `None` for more than one head (the fold needs one softmax per query).
    pub fn new(proj: &HeadProjections) -> Result<Option<Self>> {
        let (k, v, o, heads) = proj.kvo();
        if heads != 1 {
            return Ok(None);
        }
        let f64_of = |t: &Tensor| t.to_dtype(DType::F64);
        let bias = |l: &Linear| -> Result<Tensor> {
            match l.bias() {
                Some(b) => f64_of(b),
                None => Tensor::zeros(l.weight().dim(0)?, DType::F64, l.weight().device()),
            }
        };
        let (wk, bk) = (f64_of(k.weight())?, bias(k)?); // [D, kv], [D]
        let (wv, bv) = (f64_of(v.weight())?, bias(v)?); // [D, kv], [D]
        let (wo, bo) = (f64_of(o.weight())?, bias(o)?); // [out, D], [out]
        let q_low = Tensor::cat(&[wk.t()?, bk.unsqueeze(0)?], 0)?; // [kv + 1, D]
        let vo_w = wo.matmul(&wv)?; // [out, kv]
        let vo_b = (wo.matmul(&bv.unsqueeze(1)?)?.squeeze(1)? + bo)?;
        let f32_of = |t: Tensor| t.to_dtype(DType::F32);
        Ok(Some(Self {
            q_low: SwitchLinear::new(Linear::new(f32_of(q_low)?, None)),
            value_out: SwitchLinear::new(Linear::new(f32_of(vo_w)?, Some(f32_of(vo_b)?))),
        }))
    }

    /// `[Wk^T q, q . bk]` for rotated queries `[Bq, Lq, D]`.
    pub fn low_queries(&self, q: &Tensor) -> Result<Tensor> {
        self.q_low.forward(q)
    }

    /// The attention output `[B, Lq, kv_in]` to the layer's output `[B, Lq, out]`.
    pub fn output(&self, averaged_memory: &Tensor) -> Result<Tensor> {
        self.value_out.forward(averaged_memory)
    }
}
