//! Mask post-processing: low-resolution logits -> original image size -> binary mask.
//!
//! Matches `Sam2VideoProcessor.post_process_masks`: **one** bilinear resize straight to `H x W`
//! (`F.interpolate(mode="bilinear", align_corners=False)`, no antialias), then `> 0`. The same
//! resize upsamples low-res masks to the model input size for the memory encoder.

use candle_core::{DType, Tensor};

use crate::error::{Error, Result};
use crate::kernels::resize::bilinear;

/// Bilinearly resizes `[N, C, h, w]` logits to `[N, C, height, width]` exactly as torch's
/// `F.interpolate(..., mode="bilinear", align_corners=False)` (no antialias, also when
/// downscaling).
///
pub fn resize_logits(low_res: &Tensor, height: usize, width: usize) -> Result<Tensor> {
    let (_, _, h, w) = low_res.dims4().map_err(|_| {
        Error::InvalidImage(format!(
            "mask logits must be [N, C, h, w], got {:?}",
            low_res.dims()
        ))
    })?;
    if h == 0 || w == 0 || height == 0 || width == 0 {
        return Err(Error::InvalidImage(format!(
            "cannot resize {h}x{w} mask logits to {height}x{width}"
        )));
    }
    bilinear(&low_res.to_dtype(DType::F32)?, height, width)
}

/// Binary mask (`u8`, 1 where the logit is `> 0`).
pub fn binarize(logits: &Tensor) -> Result<Tensor> {
    Ok(logits.gt(0.0)?)
}
