//! `sensor_msgs/Image` and `CompressedImage` to tracker frames, and every way an input can be
//! refused ([`BadInput`]: the kinds counted on `/diagnostics` and logged once each).

use edgetam_pipeline::{Frame, PixelFormat};

use crate::msgs::{CompressedImage, Image};

/// Why a frame is not tracked. [`BadInput::kind`] names the counter on `/diagnostics`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadInput {
    #[error(
        "unsupported encoding `{encoding}` (rgb8, bgr8, rgba8, bgra8, mono8/8UC1 are tracked)"
    )]
    Encoding { encoding: String },
    #[error("zero-size image {width}x{height}")]
    ZeroSize { width: u32, height: u32 },
    #[error("step {step} is below {min} bytes ({width} pixels of {encoding})")]
    Step {
        step: u32,
        min: usize,
        width: u32,
        encoding: String,
    },
    #[error("data is {got} bytes, step {step} x height {height} = {expected}")]
    DataLength {
        got: usize,
        expected: usize,
        step: u32,
        height: u32,
    },
    #[error("image {width}x{height} is too large: {reason}")]
    TooLarge {
        width: u32,
        height: u32,
        reason: String,
    },
    #[error("compressed image (format `{format}`): {reason}")]
    Compressed { format: String, reason: String },
}

impl BadInput {
    /// The `/diagnostics` key counting this kind.
    pub fn kind(&self) -> &'static str {
        match self {
            BadInput::Encoding { .. } => "bad_encoding",
            BadInput::ZeroSize { .. } => "bad_zero_size",
            BadInput::Step { .. } => "bad_step",
            BadInput::DataLength { .. } => "bad_data_length",
            BadInput::TooLarge { .. } => "bad_too_large",
            BadInput::Compressed { .. } => "bad_compressed",
        }
    }
}

/// The tracker's pixel format of a ROS encoding (`sensor_msgs/image_encodings.hpp` names).
pub fn pixel_format(encoding: &str) -> Option<PixelFormat> {
    Some(match encoding {
        "rgb8" => PixelFormat::Rgb8,
        "bgr8" => PixelFormat::Bgr8,
        "rgba8" => PixelFormat::Rgba8,
        "bgra8" => PixelFormat::Bgra8,
        "mono8" | "8UC1" => PixelFormat::Gray8,
        _ => return None,
    })
}

/// A frame borrowing `msg`'s pixels, checked: the encoding is one the tracker reads, the size is
/// not zero, `step` holds a row and `data` is exactly `step * height` bytes.
pub fn frame_of(msg: &Image) -> Result<Frame<'_>, BadInput> {
    let format = pixel_format(&msg.encoding).ok_or_else(|| BadInput::Encoding {
        encoding: msg.encoding.clone(),
    })?;
    let (w, h) = (msg.width, msg.height);
    if w == 0 || h == 0 {
        return Err(BadInput::ZeroSize {
            width: w,
            height: h,
        });
    }
    let bpp = format.bytes_per_pixel().unwrap_or(1);
    let min = (w as usize).saturating_mul(bpp);
    if (msg.step as usize) < min {
        return Err(BadInput::Step {
            step: msg.step,
            min,
            width: w,
            encoding: msg.encoding.clone(),
        });
    }
    let expected = (msg.step as usize).saturating_mul(h as usize);
    if msg.data.len() != expected {
        return Err(BadInput::DataLength {
            got: msg.data.len(),
            expected,
            step: msg.step,
            height: h,
        });
    }
    let frame =
        Frame::new(&msg.data[..], w as usize, h as usize, format).with_stride(msg.step as usize);
    frame.validate().map_err(|e| BadInput::TooLarge {
        width: w,
        height: h,
        reason: e.to_string(),
    })?;
    Ok(frame)
}

/// A `CompressedImage` (JPEG or PNG, told apart by its bytes) decoded to an `rgb8` [`Image`]
/// with the same header.
pub fn decode_compressed(msg: &CompressedImage) -> Result<Image, BadInput> {
    let bad = |reason: String| BadInput::Compressed {
        format: msg.format.clone(),
        reason,
    };
    let format =
        image::guess_format(&msg.data).map_err(|e| bad(format!("not a JPEG or PNG image: {e}")))?;
    if !matches!(format, image::ImageFormat::Jpeg | image::ImageFormat::Png) {
        return Err(bad(format!("{format:?} is not JPEG or PNG")));
    }
    edgetam_pipeline::check_png_palette_bytes(&msg.data).map_err(bad)?;
    let mut reader = image::ImageReader::with_format(std::io::Cursor::new(&msg.data), format);
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(edgetam_tracker::limits::MAX_FRAME_SIDE as u32);
    limits.max_image_height = Some(edgetam_tracker::limits::MAX_FRAME_SIDE as u32);
    reader.limits(limits);
    let rgb = reader.decode().map_err(|e| bad(e.to_string()))?.into_rgb8();
    let (width, height) = rgb.dimensions();
    Ok(Image {
        header: msg.header.clone(),
        height,
        width,
        encoding: "rgb8".into(),
        is_bigendian: 0,
        step: width * 3,
        data: rgb.into_raw(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(encoding: &str, w: u32, h: u32, step: u32, len: usize) -> Image {
        Image {
            encoding: encoding.into(),
            width: w,
            height: h,
            step,
            data: (0..len).map(|i| (i * 7 % 251) as u8).collect(),
            ..Image::default()
        }
    }

    /// Every supported encoding converts to the same RGB as the tracker's own conversion of
    /// the matching packed layout.
    #[test]
    fn each_encoding_converts() {
        let (w, h) = (5u32, 3u32);
        let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 13 % 256) as u8).collect();
        let px = |i: usize| [rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]];
        let n = (w * h) as usize;
        let bgr: Vec<u8> = (0..n)
            .flat_map(|i| {
                let [r, g, b] = px(i);
                [b, g, r]
            })
            .collect();
        let rgba: Vec<u8> = (0..n)
            .flat_map(|i| {
                let [r, g, b] = px(i);
                [r, g, b, 255]
            })
            .collect();
        let bgra: Vec<u8> = (0..n)
            .flat_map(|i| {
                let [r, g, b] = px(i);
                [b, g, r, 9]
            })
            .collect();
        for (enc, data, bpp) in [
            ("rgb8", &rgb, 3),
            ("bgr8", &bgr, 3),
            ("rgba8", &rgba, 4),
            ("bgra8", &bgra, 4),
        ] {
            let msg = Image {
                encoding: enc.into(),
                width: w,
                height: h,
                step: w * bpp,
                data: data.clone(),
                ..Image::default()
            };
            let out = frame_of(&msg).unwrap().to_rgb8().unwrap();
            assert_eq!(out, rgb, "{enc}");
        }
        // mono8 with padded rows (step > width): gray replicated in R, G, B.
        let gray: Vec<u8> = (0..h * 8).map(|i| i as u8).collect();
        let msg = Image {
            encoding: "mono8".into(),
            width: w,
            height: h,
            step: 8,
            data: gray.clone(),
            ..Image::default()
        };
        let out = frame_of(&msg).unwrap().to_rgb8().unwrap();
        for y in 0..h as usize {
            for x in 0..w as usize {
                let g = gray[y * 8 + x];
                assert_eq!(&out[3 * (y * w as usize + x)..][..3], &[g, g, g]);
            }
        }
    }

    #[test]
    fn bad_images_are_refused_with_their_kind() {
        let cases = [
            (image("16UC1", 4, 4, 8, 32), "bad_encoding"),
            (image("yuv422", 4, 4, 8, 32), "bad_encoding"),
            (image("rgb8", 0, 4, 0, 0), "bad_zero_size"),
            (image("rgb8", 4, 0, 12, 0), "bad_zero_size"),
            (image("rgb8", 4, 4, 11, 44), "bad_step"),
            (image("rgb8", 4, 4, 12, 47), "bad_data_length"),
            (image("rgb8", 4, 4, 12, 49), "bad_data_length"),
            (
                image("mono8", 100_000, 1, 100_000, 100_000),
                "bad_too_large",
            ),
        ];
        for (msg, kind) in cases {
            let err = frame_of(&msg).unwrap_err();
            assert_eq!(err.kind(), kind, "{err}");
            assert!(!err.to_string().is_empty());
        }
        assert!(frame_of(&image("rgb8", 4, 4, 12, 48)).is_ok());
    }

    #[test]
    fn compressed_png_and_garbage() {
        let mut png = Vec::new();
        let img =
            image::RgbImage::from_fn(6, 4, |x, y| image::Rgb([x as u8 * 40, y as u8 * 60, 7]));
        img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        let msg = CompressedImage {
            format: "png".into(),
            data: png,
            ..CompressedImage::default()
        };
        let out = decode_compressed(&msg).unwrap();
        assert_eq!((out.width, out.height, out.step), (6, 4, 18));
        assert_eq!(out.data, img.into_raw());
        let junk = CompressedImage {
            format: "jpeg".into(),
            data: vec![1, 2, 3, 4],
            ..CompressedImage::default()
        };
        assert_eq!(
            decode_compressed(&junk).unwrap_err().kind(),
            "bad_compressed"
        );
        // A PNG whose PLTE chunk is 70 bytes (not whole RGB entries): it panicked inside the png
        // crate (the mask_png fuzz target's finding); from a peer it is one bad frame.
        let partial_palette = CompressedImage {
            format: "png".into(),
            data: include_bytes!("../../fuzz/seeds/mask_png/plte-not-whole-entries.png").to_vec(),
            ..CompressedImage::default()
        };
        let err = decode_compressed(&partial_palette).unwrap_err();
        assert_eq!(err.kind(), "bad_compressed");
        assert!(err.to_string().contains("PLTE chunk is 70 bytes"), "{err}");
    }
}
