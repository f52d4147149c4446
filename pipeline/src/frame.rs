//! Frames: borrowed or owned pixels in one of several layouts, and their conversion to the
//! packed RGB8 the tracker takes.

use std::borrow::Cow;
use std::time::Duration;

use edgetam_tracker::{PixelLayout, RawFrame};

use crate::error::FrameError;

/// BT.601 limited range, 8-bit fixed point (see [`PixelFormat`]): the tracker's conversion.
pub use edgetam_tracker::yuv_to_rgb;

/// Layout of a frame's pixels.
///
/// Packed formats store `width * bytes_per_pixel` bytes per row, rows `stride` bytes apart.
/// The 4:2:0 formats (`Nv12`, `I420`) need an even width and height; `stride` is the luma row
/// stride:
///
/// * `Nv12`: `height` rows of Y, then `height / 2` rows of interleaved U,V (`width` bytes per
///   row), both with row stride `stride`;
/// * `I420`: `height` rows of Y (stride `stride`), then `height / 2` rows of U, then
///   `height / 2` rows of V, each chroma plane with row stride `stride / 2` (`stride` must be
///   even).
///
/// YUV is converted with the **BT.601 limited-range** ("video range", Y in 16..=235, U/V in
/// 16..=240) matrix, in 8-bit fixed point (the ITU/Microsoft integer form):
///
/// ```text
/// C = Y - 16, D = U - 128, E = V - 128
/// R = clamp((298 C + 409 E + 128) >> 8)
/// G = clamp((298 C - 100 D - 208 E + 128) >> 8)
/// B = clamp((298 C + 516 D + 128) >> 8)
/// ```
///
/// `Gray8` is full range: R = G = B = Y. Alpha is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PixelFormat {
    Rgb8,
    Rgba8,
    Bgr8,
    Bgra8,
    Gray8,
    Nv12,
    I420,
}

impl PixelFormat {
    /// Bytes per pixel of a packed format; `None` for the planar 4:2:0 formats.
    pub fn bytes_per_pixel(self) -> Option<usize> {
        match self {
            PixelFormat::Rgb8 | PixelFormat::Bgr8 => Some(3),
            PixelFormat::Rgba8 | PixelFormat::Bgra8 => Some(4),
            PixelFormat::Gray8 => Some(1),
            PixelFormat::Nv12 | PixelFormat::I420 => None,
        }
    }

    /// Smallest row stride (luma stride for 4:2:0) of a frame `width` pixels wide.
    pub fn min_stride(self, width: usize) -> Option<usize> {
        width.checked_mul(self.bytes_per_pixel().unwrap_or(1))
    }
}

/// One video frame: pixels (borrowed or owned), size, row stride, format and an optional
/// timestamp that is returned on the frame's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<'a> {
    data: Cow<'a, [u8]>,
    width: usize,
    height: usize,
    stride: usize,
    format: PixelFormat,
    timestamp: Option<Duration>,
}

impl<'a> Frame<'a> {
    /// A frame with tightly packed rows (stride = `width * bytes_per_pixel`, or `width` for the
    /// 4:2:0 formats). Nothing is checked until [`Self::validate`] or a conversion.
    pub fn new(
        data: impl Into<Cow<'a, [u8]>>,
        width: usize,
        height: usize,
        format: PixelFormat,
    ) -> Self {
        Self {
            data: data.into(),
            width,
            height,
            stride: format.min_stride(width).unwrap_or(usize::MAX),
            format,
            timestamp: None,
        }
    }

    /// A packed RGB8 frame.
    pub fn rgb8(data: impl Into<Cow<'a, [u8]>>, width: usize, height: usize) -> Self {
        Self::new(data, width, height, PixelFormat::Rgb8)
    }

    /// Sets the row stride in bytes (the luma stride for 4:2:0 formats).
    pub fn with_stride(mut self, stride: usize) -> Self {
        self.stride = stride;
        self
    }

    /// Sets the timestamp returned on the frame's result.
    pub fn with_timestamp(mut self, timestamp: Duration) -> Self {
        self.timestamp = Some(timestamp);
        self
    }

    pub fn width(&self) -> usize {
        self.width
    }

    pub fn height(&self) -> usize {
        self.height
    }

    pub fn stride(&self) -> usize {
        self.stride
    }

    pub fn format(&self) -> PixelFormat {
        self.format
    }

    pub fn timestamp(&self) -> Option<Duration> {
        self.timestamp
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// Whether the frame owns its pixels.
    pub fn is_owned(&self) -> bool {
        matches!(self.data, Cow::Owned(_))
    }

    /// The frame with owned pixels (copies borrowed pixels once).
    pub fn into_owned(self) -> Frame<'static> {
        Frame {
            data: Cow::Owned(self.data.into_owned()),
            width: self.width,
            height: self.height,
            stride: self.stride,
            format: self.format,
            timestamp: self.timestamp,
        }
    }

    /// Checks size, stride and buffer length against the format.
    pub fn validate(&self) -> Result<(), FrameError> {
        let (w, h, f) = (self.width, self.height, self.format);
        if w == 0 || h == 0 {
            return Err(FrameError::ZeroSize {
                width: w,
                height: h,
            });
        }
        let too_large = || FrameError::TooLarge {
            width: w,
            height: h,
        };
        let min = f.min_stride(w).ok_or_else(too_large)?;
        if self.stride < min {
            return Err(FrameError::StrideTooSmall {
                format: f,
                width: w,
                stride: self.stride,
                min,
            });
        }
        let needed = self.needed_bytes().ok_or_else(too_large)?;
        if matches!(f, PixelFormat::Nv12 | PixelFormat::I420) && (w % 2 != 0 || h % 2 != 0) {
            return Err(FrameError::OddDimensions {
                format: f,
                width: w,
                height: h,
            });
        }
        if f == PixelFormat::I420 && self.stride % 2 != 0 {
            return Err(FrameError::OddStride {
                stride: self.stride,
            });
        }
        if self.data.len() < needed {
            return Err(FrameError::BufferTooShort {
                format: f,
                width: w,
                height: h,
                stride: self.stride,
                needed,
                got: self.data.len(),
            });
        }
        Ok(())
    }

    /// Bytes the layout needs (the last row of each plane need not be padded to the stride).
    fn needed_bytes(&self) -> Option<usize> {
        let (w, h, s) = (self.width, self.height, self.stride);
        let plane = |rows: usize, stride: usize, row: usize| -> Option<usize> {
            stride.checked_mul(rows.checked_sub(1)?)?.checked_add(row)
        };
        match self.format.bytes_per_pixel() {
            Some(bpp) => plane(h, s, w.checked_mul(bpp)?),
            None => {
                let (cw, ch) = (w / 2, h / 2);
                let luma = s.checked_mul(h)?;
                match self.format {
                    PixelFormat::Nv12 => luma.checked_add(plane(ch.max(1), s, w)?),
                    _ => {
                        let cs = s / 2;
                        luma.checked_add(cs.checked_mul(ch)?)?.checked_add(plane(
                            ch.max(1),
                            cs,
                            cw,
                        )?)
                    }
                }
            }
        }
    }

    /// Packed RGB8 (`width * height * 3` bytes, row-major).
    pub fn to_rgb8(&self) -> Result<Vec<u8>, FrameError> {
        self.validate()?;
        self.convert()
    }

    /// As [`Self::to_rgb8`], without a copy when the frame already owns packed RGB8.
    pub fn into_rgb8(self) -> Result<Vec<u8>, FrameError> {
        self.validate()?;
        let packed = self.width * 3;
        if self.format == PixelFormat::Rgb8
            && self.stride == packed
            && self.data.len() == packed * self.height
        {
            return Ok(self.data.into_owned());
        }
        self.convert()
    }

    /// Conversion of a validated frame: the tracker's converter ([`RawFrame::to_rgb8`], the
    /// one its CUDA preprocessing mirrors).
    fn convert(&self) -> Result<Vec<u8>, FrameError> {
        self.raw()
            .to_rgb8()
            .map(std::borrow::Cow::into_owned)
            // Only the tracker's size limit (offsets must fit 32 bits) can refuse a frame that
            // passed `validate`.
            .map_err(|_| FrameError::TooLarge {
                width: self.width,
                height: self.height,
            })
    }

    /// The frame as the tracker's borrowed view.
    pub(crate) fn raw(&self) -> RawFrame<'_> {
        RawFrame {
            data: &self.data,
            width: self.width,
            height: self.height,
            stride: self.stride,
            layout: self.format.into(),
        }
    }
}

impl From<PixelFormat> for PixelLayout {
    fn from(format: PixelFormat) -> Self {
        match format {
            PixelFormat::Rgb8 => PixelLayout::Rgb8,
            PixelFormat::Rgba8 => PixelLayout::Rgba8,
            PixelFormat::Bgr8 => PixelLayout::Bgr8,
            PixelFormat::Bgra8 => PixelLayout::Bgra8,
            PixelFormat::Gray8 => PixelLayout::Gray8,
            PixelFormat::Nv12 => PixelLayout::Nv12,
            PixelFormat::I420 => PixelLayout::I420,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rgb(f: &Frame) -> Vec<u8> {
        f.to_rgb8().expect("valid frame")
    }

    #[test]
    fn packed_formats() {
        let px = [10u8, 20, 30, 40, 50, 60];
        assert_eq!(rgb(&Frame::new(&px[..], 2, 1, PixelFormat::Rgb8)), px);
        assert_eq!(
            rgb(&Frame::new(&px[..], 2, 1, PixelFormat::Bgr8)),
            [30, 20, 10, 60, 50, 40]
        );
        let rgba = [1u8, 2, 3, 255, 4, 5, 6, 0];
        assert_eq!(
            rgb(&Frame::new(&rgba[..], 2, 1, PixelFormat::Rgba8)),
            [1, 2, 3, 4, 5, 6]
        );
        assert_eq!(
            rgb(&Frame::new(&rgba[..], 2, 1, PixelFormat::Bgra8)),
            [3, 2, 1, 6, 5, 4]
        );
        assert_eq!(
            rgb(&Frame::new(&[7u8, 200][..], 1, 2, PixelFormat::Gray8)),
            [7, 7, 7, 200, 200, 200]
        );
    }

    #[test]
    fn stride_padding_is_skipped() {
        // 1x2 RGB with 2 bytes of padding per row; the last row is unpadded.
        let data = [1u8, 2, 3, 99, 99, 4, 5, 6];
        let f = Frame::new(&data[..], 1, 2, PixelFormat::Rgb8).with_stride(5);
        assert_eq!(rgb(&f), [1, 2, 3, 4, 5, 6]);
        let g = Frame::new(vec![9u8, 0, 8], 1, 2, PixelFormat::Gray8).with_stride(2);
        assert_eq!(g.into_rgb8().expect("valid"), [9, 9, 9, 8, 8, 8]);
    }

    #[test]
    fn owned_packed_rgb_is_not_copied() {
        let v = vec![1u8, 2, 3];
        let ptr = v.as_ptr();
        let out = Frame::rgb8(v, 1, 1).into_rgb8().expect("valid");
        assert_eq!(out.as_ptr(), ptr);
    }

    #[test]
    fn bt601_limited_range_values() {
        assert_eq!(yuv_to_rgb(16, 128, 128), [0, 0, 0]);
        assert_eq!(yuv_to_rgb(235, 128, 128), [255, 255, 255]);
        assert_eq!(yuv_to_rgb(126, 128, 128), [128, 128, 128]);
        // BT.601 primaries (limited range).
        assert_eq!(yuv_to_rgb(81, 90, 240), [255, 0, 0]);
        assert_eq!(yuv_to_rgb(145, 54, 34), [0, 255, 1]);
        assert_eq!(yuv_to_rgb(41, 240, 110), [0, 0, 255]);
    }

    /// A 4x2 frame: left half red, right half blue; chroma is shared by 2x2 blocks.
    fn yuv_frame(format: PixelFormat, stride: usize) -> Vec<u8> {
        let (y_red, u_red, v_red) = (81u8, 90u8, 240u8);
        let (y_blue, u_blue, v_blue) = (41u8, 240u8, 110u8);
        let mut d = Vec::new();
        for _ in 0..2 {
            let mut row = vec![y_red, y_red, y_blue, y_blue];
            row.resize(stride, 0);
            d.extend(row);
        }
        match format {
            PixelFormat::Nv12 => {
                let mut row = vec![u_red, v_red, u_blue, v_blue];
                row.resize(stride, 0);
                d.extend(row);
            }
            _ => {
                let mut u = vec![u_red, u_blue];
                u.resize(stride / 2, 0);
                let mut v = vec![v_red, v_blue];
                v.resize(stride / 2, 0);
                d.extend(u);
                d.extend(v);
            }
        }
        d
    }

    #[test]
    fn nv12_and_i420() {
        let want: Vec<u8> = [[255u8, 0, 0], [255, 0, 0], [0, 0, 255], [0, 0, 255]]
            .repeat(2)
            .concat();
        for stride in [4, 6] {
            for format in [PixelFormat::Nv12, PixelFormat::I420] {
                let f = Frame::new(yuv_frame(format, stride), 4, 2, format).with_stride(stride);
                assert_eq!(rgb(&f), want, "{format:?} stride {stride}");
            }
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let e = |f: Frame| f.validate().expect_err("invalid");
        assert_eq!(
            e(Frame::new(&[][..], 0, 4, PixelFormat::Rgb8)),
            FrameError::ZeroSize {
                width: 0,
                height: 4
            }
        );
        assert_eq!(
            e(Frame::new(&[0u8; 64][..], 4, 2, PixelFormat::Rgba8).with_stride(15)),
            FrameError::StrideTooSmall {
                format: PixelFormat::Rgba8,
                width: 4,
                stride: 15,
                min: 16
            }
        );
        assert_eq!(
            e(Frame::new(&[0u8; 17][..], 3, 2, PixelFormat::Rgb8)),
            FrameError::BufferTooShort {
                format: PixelFormat::Rgb8,
                width: 3,
                height: 2,
                stride: 9,
                needed: 18,
                got: 17
            }
        );
        assert_eq!(
            e(Frame::new(&[0u8; 100][..], 3, 2, PixelFormat::Nv12)),
            FrameError::OddDimensions {
                format: PixelFormat::Nv12,
                width: 3,
                height: 2
            }
        );
        assert_eq!(
            e(Frame::new(&[0u8; 100][..], 4, 3, PixelFormat::I420)),
            FrameError::OddDimensions {
                format: PixelFormat::I420,
                width: 4,
                height: 3
            }
        );
        assert_eq!(
            e(Frame::new(&[0u8; 100][..], 4, 2, PixelFormat::I420).with_stride(5)),
            FrameError::OddStride { stride: 5 }
        );
        // NV12 4x2 needs 8 luma + 4 chroma bytes.
        assert_eq!(
            e(Frame::new(&[0u8; 11][..], 4, 2, PixelFormat::Nv12)),
            FrameError::BufferTooShort {
                format: PixelFormat::Nv12,
                width: 4,
                height: 2,
                stride: 4,
                needed: 12,
                got: 11
            }
        );
        // I420 4x2 needs 8 luma + 2 U + 2 V bytes.
        assert!(matches!(
            e(Frame::new(&[0u8; 11][..], 4, 2, PixelFormat::I420)),
            FrameError::BufferTooShort { needed: 12, .. }
        ));
        assert!(matches!(
            e(Frame::new(&[0u8; 3][..], usize::MAX, 2, PixelFormat::Rgb8)),
            FrameError::TooLarge { .. }
        ));
        assert!(Frame::new(&[0u8; 12][..], 4, 2, PixelFormat::Gray8)
            .to_rgb8()
            .is_ok());
    }
}
