//! Upper bounds on every size that comes from a file or a caller, checked before anything is
//! allocated for it.
//!
//! A config, checkpoint, frame, mask or prompt beyond one of these is refused with a
//! [`LimitError`] that names the value and the bound (inside [`crate::Error::Limit`] or, for
//! frames, [`crate::FrameError::OverLimit`]), instead of reaching an allocation that aborts the
//! process. The bounds are generous for real use: the released model is 1024 wide, 2 layers
//! deep and 13.9 M parameters, and cameras deliver at most 8K.

/// A size beyond one of the bounds of this module: what it is, its value and the bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} is {value}, above the limit of {limit}")]
pub struct LimitError {
    /// What the value is (a config key, a tensor, a frame side), with its file where known.
    pub what: String,
    /// The value (`u64::MAX` for anything larger, e.g. an element count that overflows).
    pub value: u64,
    pub limit: u64,
}

impl LimitError {
    pub fn new(
        what: impl Into<String>,
        value: impl TryInto<u128>,
        limit: impl TryInto<u128>,
    ) -> Self {
        Self {
            what: what.into(),
            value: saturate(value.try_into().unwrap_or(u128::MAX)),
            limit: saturate(limit.try_into().unwrap_or(u128::MAX)),
        }
    }
}

/// `Err` when `value > limit`.
pub fn check(
    what: impl FnOnce() -> String,
    value: impl TryInto<u128>,
    limit: impl TryInto<u128>,
) -> Result<(), LimitError> {
    let value = value.try_into().unwrap_or(u128::MAX);
    let limit = limit.try_into().unwrap_or(u128::MAX);
    if value > limit {
        return Err(LimitError {
            what: what(),
            value: saturate(value),
            limit: saturate(limit),
        });
    }
    Ok(())
}

fn saturate(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

// --- config.json (see `EdgeTamConfig::validate_limits`) ---

/// Largest `config.json` read (the released model's is 4 KB).
pub const MAX_CONFIG_BYTES: usize = 1 << 20;

/// Largest model input side (`image_size`): 4x the released model's 1024.
pub const MAX_IMAGE_SIZE: usize = 4096;
/// Largest width of any layer in a config (hidden sizes, channels, MLP widths).
pub const MAX_CONFIG_WIDTH: usize = 16_384;
/// Largest depth (layers of any stack, attention heads, IoU head depth) in a config.
pub const MAX_CONFIG_DEPTH: usize = 64;
/// Largest convolution kernel, stride or padding in a config.
pub const MAX_CONFIG_KERNEL: usize = 31;
/// Largest memory bank (`num_maskmem`), object-pointer count, latent count or RoPE grid side.
pub const MAX_CONFIG_COUNT: usize = 4096;

// --- checkpoints (safetensors headers, `.pt` pickles) ---

/// Largest safetensors JSON header (the released model's is about 100 KB).
pub const MAX_SAFETENSORS_HEADER_BYTES: usize = 16 << 20;
/// Largest `data.pkl` of a PyTorch checkpoint (the released model's is about 150 KB).
pub const MAX_PICKLE_BYTES: usize = 64 << 20;
/// Most tensors in one checkpoint (the released model has 982).
pub const MAX_CHECKPOINT_TENSORS: usize = 100_000;
/// Largest rank of a checkpoint tensor.
pub const MAX_TENSOR_RANK: usize = 8;
/// Most elements in one checkpoint tensor (2^28: 1 GiB of f32).
pub const MAX_TENSOR_ELEMENTS: usize = 1 << 28;
/// Most bytes of tensor data in one checkpoint (4 GiB).
pub const MAX_CHECKPOINT_BYTES: u64 = 4 << 30;

// --- frames, masks, prompts ---

/// Longest frame (and mask) side in pixels.
pub const MAX_FRAME_SIDE: usize = 16_384;
/// Most pixels in a frame or mask (8192 x 8192; 8K UHD is 7680 x 4320).
pub const MAX_FRAME_PIXELS: usize = 8192 * 8192;
/// Most points in one prompt (a box counts as two).
pub const MAX_PROMPT_POINTS: usize = 64;
/// Most objects one tracker follows at once.
pub const MAX_OBJECTS: usize = 1024;

/// Checks a frame's or mask's `width x height` against [`MAX_FRAME_SIDE`] and
/// [`MAX_FRAME_PIXELS`]; `what` names it in the error.
pub fn check_image_size(what: &str, width: usize, height: usize) -> Result<(), LimitError> {
    check(|| format!("{what} width"), width, MAX_FRAME_SIDE)?;
    check(|| format!("{what} height"), height, MAX_FRAME_SIDE)?;
    check(
        || format!("{what} area ({width}x{height} pixels)"),
        (width as u128) * (height as u128),
        MAX_FRAME_PIXELS,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_value_and_bound() {
        let e = check(|| "image_size".into(), 65536usize, MAX_IMAGE_SIZE).unwrap_err();
        assert_eq!(
            e.to_string(),
            "image_size is 65536, above the limit of 4096"
        );
        assert!(check(|| "x".into(), 4096usize, MAX_IMAGE_SIZE).is_ok());
        let e = check_image_size("frame", 20_000, 2).unwrap_err();
        assert_eq!((e.value, e.limit), (20_000, MAX_FRAME_SIDE as u64));
        let e = check_image_size("mask", 16_384, 16_384).unwrap_err();
        assert_eq!(e.what, "mask area (16384x16384 pixels)");
        assert!(check_image_size("frame", 7680, 4320).is_ok());
    }
}
