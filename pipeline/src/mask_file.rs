//! Mask prompts from image files (`mask=PATH` of a [`crate::PromptSpec`]): the one reader the
//! CLI and the GStreamer element share.
//!
//! The image's size is read from its header and checked against
//! [`edgetam_tracker::limits`] before a pixel is decoded, and the decoder runs with the `image`
//! crate's allocation limits, so a file claiming a huge size is an error, not an allocation.

use std::io::{BufRead, Seek};
use std::path::{Path, PathBuf};

use edgetam_tracker::limits::{self, LimitError, MAX_FRAME_PIXELS, MAX_FRAME_SIDE};
use edgetam_tracker::Mask;

/// Why a mask file cannot be a prompt.
#[derive(Debug, thiserror::Error)]
pub enum MaskFileError {
    #[error("cannot read mask {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not an image the reader knows (PNG, JPEG, BMP), or corrupt.
    #[error("cannot decode mask {path}: {message}")]
    Decode { path: PathBuf, message: String },
    /// Its width, height or area is beyond the frame bounds.
    #[error("mask {path}: {limit}")]
    Limit { path: PathBuf, limit: LimitError },
    /// No nonzero pixel.
    #[error("mask {path} is empty (no nonzero pixel)")]
    Empty { path: PathBuf },
}

/// Reads a mask prompt from an image file (PNG, JPEG or BMP; converted to 8-bit gray,
/// nonzero = inside). Its size is checked against the frame's when the prompt is applied.
pub fn read_mask(path: &Path) -> Result<Mask, MaskFileError> {
    let file = std::fs::File::open(path).map_err(|source| MaskFileError::Io {
        path: path.to_owned(),
        source,
    })?;
    decode(std::io::BufReader::new(file), path)
}

/// As [`read_mask`], from the file's bytes; `label` names it in errors.
pub fn decode_mask(bytes: &[u8], label: impl Into<PathBuf>) -> Result<Mask, MaskFileError> {
    decode(std::io::Cursor::new(bytes), &label.into())
}

fn decode<R: BufRead + Seek>(mut input: R, path: &Path) -> Result<Mask, MaskFileError> {
    let io = |source| MaskFileError::Io {
        path: path.to_owned(),
        source,
    };
    let decode_error = |e: image::ImageError| MaskFileError::Decode {
        path: path.to_owned(),
        message: e.to_string(),
    };
    crate::png_guard::check_png_palette(&mut input)
        .map_err(io)?
        .map_err(|message| MaskFileError::Decode {
            path: path.to_owned(),
            message,
        })?;
    // The size from the header alone, then back to the start to decode.
    let start = input.stream_position().map_err(io)?;
    let (w, h) = image::ImageReader::new(&mut input)
        .with_guessed_format()
        .map_err(io)?
        .into_dimensions()
        .map_err(decode_error)?;
    limits::check_image_size("mask", w as usize, h as usize).map_err(|limit| {
        MaskFileError::Limit {
            path: path.to_owned(),
            limit,
        }
    })?;
    input.seek(std::io::SeekFrom::Start(start)).map_err(io)?;
    let mut reader = image::ImageReader::new(input)
        .with_guessed_format()
        .map_err(io)?;
    let mut image_limits = image::Limits::default();
    image_limits.max_image_width = Some(MAX_FRAME_SIDE as u32);
    image_limits.max_image_height = Some(MAX_FRAME_SIDE as u32);
    // The largest decoded buffer: 16-bit RGBA at the largest area.
    image_limits.max_alloc = Some(MAX_FRAME_PIXELS as u64 * 8);
    reader.limits(image_limits);
    let img = reader.decode().map_err(decode_error)?.into_luma8();
    let (w, h) = (img.width() as usize, img.height() as usize);
    let mask = Mask::new(w, h, img.into_raw()).map_err(|e| match e {
        edgetam_tracker::Error::Limit(limit) => MaskFileError::Limit {
            path: path.to_owned(),
            limit,
        },
        other => MaskFileError::Decode {
            path: path.to_owned(),
            message: other.to_string(),
        },
    })?;
    if mask.area() == 0 {
        return Err(MaskFileError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32, pixels: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        image::codecs::png::PngEncoder::new(&mut out)
            .write_image(pixels, width, height, image::ExtendedColorType::L8)
            .unwrap();
        out
    }

    use image::ImageEncoder;

    /// `png` with its IHDR width and height replaced (and the chunk's CRC redone).
    fn claim_size(png: &[u8], width: u32, height: u32) -> Vec<u8> {
        let mut p = png.to_vec();
        p[16..20].copy_from_slice(&width.to_be_bytes());
        p[20..24].copy_from_slice(&height.to_be_bytes());
        let crc = crate::png_guard::crc(&p[12..29]);
        p[29..33].copy_from_slice(&crc.to_be_bytes());
        p
    }

    #[test]
    fn decodes_and_checks() {
        let m = decode_mask(&png(3, 2, &[0, 9, 0, 0, 0, 255]), "m.png").unwrap();
        // The CRC helper is right: an unchanged size still decodes.
        assert!(decode_mask(&claim_size(&png(1, 1, &[1]), 1, 1), "m.png").is_ok());
        assert_eq!((m.width, m.height, m.data), (3, 2, vec![0, 1, 0, 0, 0, 1]));
        assert!(matches!(
            decode_mask(&png(2, 1, &[0, 0]), "m.png"),
            Err(MaskFileError::Empty { .. })
        ));
        assert!(matches!(
            decode_mask(b"not an image", "m.png"),
            Err(MaskFileError::Decode { .. })
        ));
        // A PNG whose header claims 20000 x 1 (IHDR patched; its data is a 1x1 image): refused
        // by its width before any pixel is decoded.
        let big = claim_size(&png(1, 1, &[1]), 20_000, 1);
        match decode_mask(&big, "big.png") {
            Err(MaskFileError::Limit { limit, .. }) => {
                assert_eq!((limit.value, limit.limit), (20_000, MAX_FRAME_SIDE as u64));
                assert_eq!(limit.what, "mask width");
            }
            other => panic!("{:?}", other.map(|m| (m.width, m.height))),
        }
        // Within the side bound but over the area bound (16384 x 16384).
        let wide = claim_size(&png(1, 1, &[1]), 16_384, 16_384);
        assert!(matches!(
            decode_mask(&wide, "wide.png"),
            Err(MaskFileError::Limit { .. })
        ));
    }

    #[test]
    fn the_decoder_never_sees_a_partial_palette() {
        use crate::png_guard::indexed_png;
        // Whole entries decode (gray 7, inside the mask).
        let mask = decode_mask(&indexed_png(3), "whole.png").expect("decodes");
        assert_eq!((mask.width, mask.height, mask.area()), (1, 1, 1));
        // Four bytes panicked inside the png crate before the check (png_guard).
        match decode_mask(&indexed_png(4), "partial.png") {
            Err(MaskFileError::Decode { message, .. }) => {
                assert!(message.contains("PLTE chunk is 4 bytes"), "{message}")
            }
            other => panic!("{:?}", other.map(|m| m.area())),
        }
    }
}
