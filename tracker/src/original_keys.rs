//! The one key map between Meta's original EdgeTAM checkpoint (`edgetam.pt`, sam2 key names such
//! as `image_encoder.trunk...`) and transformers' `EdgeTamVideoModel` names used everywhere else.

use std::path::Path;

use candle_core::Tensor;

use crate::error::{Error, Result};

/// Renames (and where needed reshapes) the tensors of an original checkpoint to transformers keys.
pub fn to_transformers(raw: Vec<(String, Tensor)>, path: &Path) -> Result<Vec<(String, Tensor)>> {
    let _ = raw;
    Err(Error::WeightFile {
        path: path.to_owned(),
        message: "loading the original edgetam.pt layout is not implemented yet; \
                  use the transformers layout (config.json + model.safetensors)"
            .into(),
    })
}
