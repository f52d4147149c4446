//! Error metrics used by the parity tests and `edgetam check`.

use candle_core::{DType, Tensor};

use crate::checks::{CheckError, Result};

/// How far `actual` is from `expected`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// ||actual - expected||_2 / ||expected||_2.
    pub rel_l2: f64,
    /// Cosine similarity of the flattened tensors.
    pub cosine: f64,
    /// max |actual - expected|.
    pub max_abs: f64,
    /// Standard deviation of `expected` (to express `max_abs` relative to the signal).
    pub expected_std: f64,
}

fn flat_f64(t: &Tensor) -> Result<Vec<f64>> {
    Ok(t.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?)
}

/// Whether two tensors have the same shape and the same f32 values bit for bit: the check of the
/// CPU ops that replace tensor-op paths with the same arithmetic.
pub fn same_bits(a: &Tensor, b: &Tensor) -> candle_core::Result<bool> {
    if a.dims() != b.dims() {
        return Ok(false);
    }
    let flat = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
    let (x, y) = (flat(a)?, flat(b)?);
    Ok(x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()))
}

/// Compares two tensors of the same shape (any float or integer dtype).
pub fn compare(actual: &Tensor, expected: &Tensor) -> Result<Comparison> {
    if actual.dims() != expected.dims() {
        return Err(CheckError::Fixture(format!(
            "shape mismatch: got {:?}, expected {:?}",
            actual.dims(),
            expected.dims()
        )));
    }
    let a = flat_f64(actual)?;
    let e = flat_f64(expected)?;
    let n = e.len().max(1) as f64;
    let (mut d2, mut e2, mut a2, mut dot, mut max_abs, mut sum) = (0.0, 0.0, 0.0, 0.0, 0.0f64, 0.0);
    for (x, y) in a.iter().zip(&e) {
        let d = x - y;
        d2 += d * d;
        e2 += y * y;
        a2 += x * x;
        dot += x * y;
        max_abs = max_abs.max(d.abs());
        sum += y;
    }
    let mean = sum / n;
    let var = e.iter().map(|y| (y - mean) * (y - mean)).sum::<f64>() / n;
    let rel_l2 = if e2 > 0.0 {
        (d2 / e2).sqrt()
    } else {
        d2.sqrt()
    };
    let cosine = if e2 > 0.0 && a2 > 0.0 {
        dot / (e2.sqrt() * a2.sqrt())
    } else if e2 == a2 {
        1.0
    } else {
        0.0
    };
    Ok(Comparison {
        rel_l2,
        cosine,
        max_abs,
        expected_std: var.sqrt(),
    })
}

/// Intersection over union of two binary masks (nonzero = inside). Two empty masks give 1.
pub fn mask_iou(a: &Tensor, b: &Tensor) -> Result<f64> {
    if a.dims() != b.dims() {
        return Err(CheckError::Fixture(format!(
            "mask shape mismatch: {:?} vs {:?}",
            a.dims(),
            b.dims()
        )));
    }
    let a = flat_f64(a)?;
    let b = flat_f64(b)?;
    let (mut inter, mut union) = (0usize, 0usize);
    for (x, y) in a.iter().zip(&b) {
        let (x, y) = (*x != 0.0, *y != 0.0);
        inter += (x && y) as usize;
        union += (x || y) as usize;
    }
    Ok(if union == 0 {
        1.0
    } else {
        inter as f64 / union as f64
    })
}
