//! Frames as they come from a camera or decoder (packed RGB/BGR with or without a fourth byte,
//! gray, or 4:2:0 YUV), borrowed, for preprocessing without an intermediate RGB copy on the host.
//!
//! On CUDA ([`crate::frame::preprocess::preprocess_frame`]) only these bytes go to the device; the
//! conversion to RGB, the resize and the normalisation run there. On the CPU the frame is
//! converted to packed RGB8 here ([`RawFrame::to_rgb8`]) and preprocessed as usual. Both paths
//! use the same integer arithmetic, so they agree exactly.

pub(crate) mod postprocess;
pub(crate) mod preprocess;

use std::borrow::Cow;

use crate::error::{Error, Result};

/// Layout of a frame's pixels (the pipeline's `PixelFormat`, one to one).
///
/// Packed layouts store `width * bytes_per_pixel` bytes per row, rows `stride` bytes apart; the
/// fourth byte of `Rgba8`/`Bgra8` (alpha or padding, GStreamer's RGBx/BGRx) is ignored. The 4:2:0
/// layouts need an even width and height, `stride` is the luma stride: `Nv12` has `height` rows
/// of Y then `height / 2` rows of interleaved U,V (row stride `stride`); `I420` has `height`
/// rows of Y, then `height / 2` rows of U, then of V, chroma rows `stride / 2` apart. YUV is
/// BT.601 limited range in 8-bit fixed point (see [`yuv_to_rgb`]); `Gray8` is R = G = B = Y.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PixelLayout {
    Rgb8,
    Rgba8,
    Bgr8,
    Bgra8,
    Gray8,
    Nv12,
    I420,
}

impl PixelLayout {
    /// Bytes per pixel of a packed layout; `None` for 4:2:0.
    pub fn bytes_per_pixel(self) -> Option<usize> {
        match self {
            PixelLayout::Rgb8 | PixelLayout::Bgr8 => Some(3),
            PixelLayout::Rgba8 | PixelLayout::Bgra8 => Some(4),
            PixelLayout::Gray8 => Some(1),
            PixelLayout::Nv12 | PixelLayout::I420 => None,
        }
    }
}

/// A borrowed frame: bytes, size, row stride and layout.
#[derive(Debug, Clone, Copy)]
pub struct RawFrame<'a> {
    pub data: &'a [u8],
    pub width: usize,
    pub height: usize,
    /// Row stride in bytes (luma stride for 4:2:0).
    pub stride: usize,
    pub layout: PixelLayout,
}

impl<'a> RawFrame<'a> {
    /// Tightly packed RGB8 (`width * height * 3` bytes).
    pub fn rgb8(data: &'a [u8], width: usize, height: usize) -> Self {
        Self {
            data,
            width,
            height,
            stride: width.saturating_mul(3),
            layout: PixelLayout::Rgb8,
        }
    }

    /// Checks size, stride and buffer length against the layout; returns the bytes the layout
    /// spans (what goes to the device).
    pub fn validate(&self) -> Result<usize> {
        let (w, h, s, f) = (self.width, self.height, self.stride, self.layout);
        let bad = |m: String| Err(Error::InvalidImage(m));
        if w == 0 || h == 0 {
            return bad(format!(
                "frame is {w}x{h}: both sides must be at least one pixel"
            ));
        }
        let too_large = || Error::InvalidImage(format!("frame {w}x{h} is too large"));
        let min = w
            .checked_mul(f.bytes_per_pixel().unwrap_or(1))
            .ok_or_else(too_large)?;
        if s < min {
            return bad(format!(
                "{f:?} frame {w} pixels wide needs a stride of at least {min} bytes, got {s}"
            ));
        }
        if matches!(f, PixelLayout::Nv12 | PixelLayout::I420) && (w % 2 != 0 || h % 2 != 0) {
            return bad(format!("{f:?} needs an even width and height, got {w}x{h}"));
        }
        if f == PixelLayout::I420 && s % 2 != 0 {
            return bad(format!("I420 needs an even stride, got {s}"));
        }
        let plane = |rows: usize, stride: usize, row: usize| -> Option<usize> {
            stride.checked_mul(rows.checked_sub(1)?)?.checked_add(row)
        };
        let needed = match f.bytes_per_pixel() {
            Some(bpp) => w.checked_mul(bpp).and_then(|row| plane(h, s, row)),
            None => {
                let luma = s.checked_mul(h);
                match f {
                    PixelLayout::Nv12 => luma.and_then(|l| l.checked_add(plane(h / 2, s, w)?)),
                    _ => {
                        let cs = s / 2;
                        luma.and_then(|l| {
                            l.checked_add(cs.checked_mul(h / 2)?)?.checked_add(plane(
                                h / 2,
                                cs,
                                w / 2,
                            )?)
                        })
                    }
                }
            }
        }
        .ok_or_else(too_large)?;
        if self.data.len() < needed {
            return bad(format!(
                "{f:?} frame {w}x{h} with stride {s} needs {needed} bytes, got {}",
                self.data.len()
            ));
        }
        // Int32 indexing on the device.
        if needed > i32::MAX as usize {
            return Err(too_large());
        }
        Ok(needed)
    }

    /// Packed RGB8 (`width * height * 3` bytes); borrowed when the frame already is that.
    pub fn to_rgb8(&self) -> Result<Cow<'a, [u8]>> {
        let needed = self.validate()?;
        let (w, h, s) = (self.width, self.height, self.stride);
        let d = self.data;
        if self.layout == PixelLayout::Rgb8 && s == w * 3 {
            return Ok(Cow::Borrowed(&d[..needed]));
        }
        let mut out = vec![0u8; w * h * 3];
        for (y, dst) in out.chunks_exact_mut(w * 3).enumerate() {
            match self.layout {
                PixelLayout::Rgb8 | PixelLayout::Rgba8 | PixelLayout::Bgr8 | PixelLayout::Bgra8 => {
                    let bpp = self.layout.bytes_per_pixel().unwrap_or(3);
                    let bgr = matches!(self.layout, PixelLayout::Bgr8 | PixelLayout::Bgra8);
                    let row = &d[y * s..y * s + w * bpp];
                    for (o, p) in dst.chunks_exact_mut(3).zip(row.chunks_exact(bpp)) {
                        if bgr {
                            o.copy_from_slice(&[p[2], p[1], p[0]]);
                        } else {
                            o.copy_from_slice(&p[..3]);
                        }
                    }
                }
                PixelLayout::Gray8 => {
                    for (o, &g) in dst.chunks_exact_mut(3).zip(&d[y * s..y * s + w]) {
                        o.fill(g);
                    }
                }
                PixelLayout::Nv12 => {
                    let luma = &d[y * s..y * s + w];
                    let uv = &d[s * h + (y / 2) * s..s * h + (y / 2) * s + w];
                    for (x, o) in dst.chunks_exact_mut(3).enumerate() {
                        let c = x / 2 * 2;
                        o.copy_from_slice(&yuv_to_rgb(luma[x], uv[c], uv[c + 1]));
                    }
                }
                PixelLayout::I420 => {
                    let cs = s / 2;
                    let luma = &d[y * s..y * s + w];
                    let u0 = s * h + (y / 2) * cs;
                    let v0 = s * h + cs * (h / 2) + (y / 2) * cs;
                    let (u, v) = (&d[u0..u0 + w / 2], &d[v0..v0 + w / 2]);
                    for (x, o) in dst.chunks_exact_mut(3).enumerate() {
                        o.copy_from_slice(&yuv_to_rgb(luma[x], u[x / 2], v[x / 2]));
                    }
                }
            }
        }
        Ok(Cow::Owned(out))
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_layouts_agree() -> Result<()> {
        let rgb: Vec<u8> = (0..2 * 2 * 3).map(|v| v as u8 * 10).collect();
        let frame = RawFrame::rgb8(&rgb, 2, 2);
        assert_eq!(&*frame.to_rgb8()?, &rgb[..]);
        let mut bgrx = Vec::new();
        for p in rgb.chunks_exact(3) {
            bgrx.extend_from_slice(&[p[2], p[1], p[0], 255]);
        }
        let bgrx = RawFrame {
            data: &bgrx,
            width: 2,
            height: 2,
            stride: 8,
            layout: PixelLayout::Bgra8,
        };
        assert_eq!(&*bgrx.to_rgb8()?, &rgb[..]);
        Ok(())
    }

    #[test]
    fn yuv_layouts_agree() -> Result<()> {
        // 4x2: Y plane, then chroma.
        let y: Vec<u8> = (0..8).map(|v| 16 + v * 20).collect();
        let (u, v) = ([90u8, 200], [60u8, 240]);
        let mut nv12 = y.clone();
        nv12.extend_from_slice(&[u[0], v[0], u[1], v[1]]);
        let mut i420 = y.clone();
        i420.extend_from_slice(&u);
        i420.extend_from_slice(&v);
        let a = RawFrame {
            data: &nv12,
            width: 4,
            height: 2,
            stride: 4,
            layout: PixelLayout::Nv12,
        };
        let b = RawFrame {
            layout: PixelLayout::I420,
            data: &i420,
            ..a
        };
        assert_eq!(a.to_rgb8()?, b.to_rgb8()?);
        assert_eq!(&a.to_rgb8()?[..3], &yuv_to_rgb(y[0], u[0], v[0]));
        Ok(())
    }

    #[test]
    fn rejects_short_buffers() {
        let f = RawFrame {
            data: &[0u8; 11],
            width: 4,
            height: 2,
            stride: 4,
            layout: PixelLayout::Nv12,
        };
        assert!(f.validate().is_err());
        assert!(RawFrame::rgb8(&[0u8; 11], 2, 2).validate().is_err());
    }
}
