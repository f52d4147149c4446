//! Conversion of a validated [`Frame`] to packed RGB8 on the host. The CUDA preprocessing
//! (`kernels::cuda::preprocess`) mirrors it with the same integer arithmetic.

use std::borrow::Cow;

use super::{Frame, FrameError, PixelFormat};

/// BT.601 limited range ("video range"), 8-bit fixed point (the ITU/Microsoft integer form):
/// `C = Y - 16, D = U - 128, E = V - 128`, `R = clamp((298 C + 409 E + 128) >> 8)`,
/// `G = clamp((298 C - 100 D - 208 E + 128) >> 8)`, `B = clamp((298 C + 516 D + 128) >> 8)`.
#[inline]
pub fn yuv_to_rgb(y: u8, u: u8, v: u8) -> [u8; 3] {
    let c = i32::from(y) - 16;
    let d = i32::from(u) - 128;
    let e = i32::from(v) - 128;
    let clamp = |x: i32| (x >> 8).clamp(0, 255) as u8;
    [
        clamp(298 * c + 409 * e + 128),
        clamp(298 * c - 100 * d - 208 * e + 128),
        clamp(298 * c + 516 * d + 128),
    ]
}

/// Packed RGB8 of a frame that passed `validate` (borrowed when it already is packed RGB8).
pub(crate) fn to_rgb8<'f>(frame: &'f Frame<'_>) -> Result<Cow<'f, [u8]>, FrameError> {
    let (w, h, format) = (frame.width(), frame.height(), frame.format());
    let too_large = || FrameError::TooLarge {
        width: w,
        height: h,
    };
    let plane = |i: usize| frame.plane(i).ok_or_else(too_large);
    let p0 = plane(0)?;
    if format == PixelFormat::Rgb8 && p0.stride == w * 3 {
        return Ok(Cow::Borrowed(&p0.data[..w * h * 3]));
    }
    let mut out = vec![0u8; w * h * 3];
    let (d, s) = (p0.data, p0.stride);
    match format {
        PixelFormat::Rgb8 | PixelFormat::Rgba8 | PixelFormat::Bgr8 | PixelFormat::Bgra8 => {
            let bpp = format.bytes_per_pixel().unwrap_or(3);
            let bgr = matches!(format, PixelFormat::Bgr8 | PixelFormat::Bgra8);
            for (y, dst) in out.chunks_exact_mut(w * 3).enumerate() {
                let row = &d[y * s..y * s + w * bpp];
                for (o, p) in dst.chunks_exact_mut(3).zip(row.chunks_exact(bpp)) {
                    if bgr {
                        o.copy_from_slice(&[p[2], p[1], p[0]]);
                    } else {
                        o.copy_from_slice(&p[..3]);
                    }
                }
            }
        }
        PixelFormat::Gray8 => {
            for (y, dst) in out.chunks_exact_mut(w * 3).enumerate() {
                for (o, &g) in dst.chunks_exact_mut(3).zip(&d[y * s..y * s + w]) {
                    o.fill(g);
                }
            }
        }
        PixelFormat::Nv12 => {
            let uv = plane(1)?;
            for (y, dst) in out.chunks_exact_mut(w * 3).enumerate() {
                let luma = &d[y * s..y * s + w];
                let chroma = &uv.data[(y / 2) * uv.stride..(y / 2) * uv.stride + w];
                for (x, o) in dst.chunks_exact_mut(3).enumerate() {
                    let c = x / 2 * 2;
                    o.copy_from_slice(&yuv_to_rgb(luma[x], chroma[c], chroma[c + 1]));
                }
            }
        }
        PixelFormat::I420 => {
            let (u, v) = (plane(1)?, plane(2)?);
            for (y, dst) in out.chunks_exact_mut(w * 3).enumerate() {
                let luma = &d[y * s..y * s + w];
                let ur = &u.data[(y / 2) * u.stride..(y / 2) * u.stride + w / 2];
                let vr = &v.data[(y / 2) * v.stride..(y / 2) * v.stride + w / 2];
                for (x, o) in dst.chunks_exact_mut(3).enumerate() {
                    o.copy_from_slice(&yuv_to_rgb(luma[x], ur[x / 2], vr[x / 2]));
                }
            }
        }
    }
    Ok(Cow::Owned(out))
}
