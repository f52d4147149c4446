//! Frames as cameras, decoders and GStreamer hand them over, and what happens to them before and
//! after the model: the one pixel-layout type of every crate ([`Frame`], [`PixelFormat`]), its
//! validation ([`FrameError`]) and conversion to RGB ([`convert`]), preprocessing to the model
//! input ([`preprocess`]) and mask post-processing ([`postprocess`]).
//!
//! A frame's planes live either back to back in one buffer ([`Frame::new`]: one luma stride,
//! I420's chroma rows at half of it) or in buffers of their own, each with its own stride
//! ([`Frame::from_planes`]: GStreamer's mapped planes, a decoder's surfaces), so no caller repacks
//! planes before handing them over. On CUDA only the frame's bytes go to the device; elsewhere the
//! frame is converted to packed RGB8 on the host (no copy when it already is). Both use the same
//! integer arithmetic, so they agree exactly.

pub(crate) mod convert;
#[cfg(feature = "opencv")]
pub(crate) mod mat;
pub(crate) mod postprocess;
pub(crate) mod preprocess;
pub(crate) mod taps;

use std::borrow::Cow;
use std::time::Duration;

pub use convert::yuv_to_rgb;

/// Layout of a frame's pixels.
///
/// Packed formats store `width * bytes_per_pixel` bytes per row; the fourth byte of
/// `Rgba8`/`Bgra8` (alpha or padding, GStreamer's RGBx/BGRx) is ignored. The 4:2:0 formats need
/// an even width and height and have two planes (`Nv12`: Y, then interleaved U,V rows of `width`
/// bytes) or three (`I420`: Y, U, V, chroma rows of `width / 2` bytes), each `height / 2` chroma
/// rows high.
///
/// YUV is converted with the **BT.601 limited-range** ("video range", Y in 16..=235, U/V in
/// 16..=240) matrix in 8-bit fixed point (see [`yuv_to_rgb`]); `Gray8` is full range,
/// R = G = B = Y.
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

    /// Number of planes: 1 for the packed formats and gray, 2 for NV12, 3 for I420.
    pub fn planes(self) -> usize {
        match self {
            PixelFormat::Nv12 => 2,
            PixelFormat::I420 => 3,
            _ => 1,
        }
    }

    /// Whether chroma is subsampled 2x2 (width and height must be even).
    pub fn is_420(self) -> bool {
        matches!(self, PixelFormat::Nv12 | PixelFormat::I420)
    }

    /// Smallest row stride of plane 0 (the luma plane for 4:2:0) of a frame `width` pixels wide.
    pub fn min_stride(self, width: usize) -> Option<usize> {
        width.checked_mul(self.bytes_per_pixel().unwrap_or(1))
    }

    /// Bytes per row and rows of `plane` in a `width x height` frame (`None` past the last
    /// plane or on overflow).
    pub fn plane_size(self, plane: usize, width: usize, height: usize) -> Option<(usize, usize)> {
        if plane >= self.planes() {
            return None;
        }
        match (self, plane) {
            (_, 0) => Some((self.min_stride(width)?, height)),
            (PixelFormat::Nv12, _) => Some((width, height / 2)),
            _ => Some((width / 2, height / 2)),
        }
    }
}

/// Why a frame cannot be tracked: which part of its description is wrong, what it needs and what
/// it has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame is {width}x{height}: both sides must be at least one pixel")]
    ZeroSize { width: usize, height: usize },
    #[error("frame {width}x{height} is too large to address (at most 2^31 bytes)")]
    TooLarge { width: usize, height: usize },
    /// A side or the area is beyond [`crate::limits::MAX_FRAME_SIDE`] /
    /// [`crate::limits::MAX_FRAME_PIXELS`].
    #[error("frame {width}x{height}: {limit}")]
    OverLimit {
        width: usize,
        height: usize,
        limit: crate::limits::LimitError,
    },
    #[error("{format:?} has {expected} plane(s), got {got}")]
    PlaneCount {
        format: PixelFormat,
        expected: usize,
        got: usize,
    },
    #[error(
        "{format:?} frame {width} pixels wide needs a row stride of at least {min} bytes in \
         plane {plane}, got {stride}"
    )]
    StrideTooSmall {
        format: PixelFormat,
        plane: usize,
        width: usize,
        stride: usize,
        min: usize,
    },
    #[error(
        "{format:?} frame {width}x{height} with row stride {stride} needs at least {needed} \
         bytes (plane {plane} runs past the end), got {got}"
    )]
    BufferTooShort {
        format: PixelFormat,
        plane: usize,
        width: usize,
        height: usize,
        stride: usize,
        needed: usize,
        got: usize,
    },
    #[error("{format:?} is 4:2:0 subsampled: width and height must be even, got {width}x{height}")]
    OddDimensions {
        format: PixelFormat,
        width: usize,
        height: usize,
    },
    #[error("I420 in one buffer needs an even row stride (chroma rows are stride / 2 bytes), got {stride}")]
    OddStride { stride: usize },
}

/// One plane of a frame: its bytes from the first row on, and its row stride.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaneRef<'a> {
    pub data: &'a [u8],
    pub stride: usize,
}

/// Where a frame's planes are.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Storage<'a> {
    /// One buffer, planes back to back: plane 0 with stride `stride`, NV12's chroma with the
    /// same stride, I420's U and V with `stride / 2`.
    Packed { data: Cow<'a, [u8]>, stride: usize },
    /// A buffer and a stride per plane.
    Planes(Vec<(Cow<'a, [u8]>, usize)>),
}

/// One video frame: pixels (borrowed or owned) in one of the [`PixelFormat`]s, its size, row
/// strides and an optional timestamp that is returned on the frame's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<'a> {
    storage: Storage<'a>,
    width: usize,
    height: usize,
    format: PixelFormat,
    timestamp: Option<Duration>,
}

impl<'a> Frame<'a> {
    /// A frame in one buffer with tightly packed rows (stride = `width * bytes_per_pixel`, or
    /// `width` for the 4:2:0 formats, whose chroma follows the luma plane). Nothing is checked
    /// until [`Self::validate`] or a conversion.
    pub fn new(
        data: impl Into<Cow<'a, [u8]>>,
        width: usize,
        height: usize,
        format: PixelFormat,
    ) -> Self {
        Self {
            storage: Storage::Packed {
                data: data.into(),
                stride: format.min_stride(width).unwrap_or(usize::MAX),
            },
            width,
            height,
            format,
            timestamp: None,
        }
    }

    /// A packed RGB8 frame (`width * height * 3` bytes).
    pub fn rgb8(data: impl Into<Cow<'a, [u8]>>, width: usize, height: usize) -> Self {
        Self::new(data, width, height, PixelFormat::Rgb8)
    }

    /// A frame whose planes lie in buffers of their own, each `(bytes, row stride)`, in the
    /// format's plane order (Y, UV for NV12; Y, U, V for I420; one plane otherwise). Nothing is
    /// checked until [`Self::validate`] or a conversion.
    pub fn from_planes<D: Into<Cow<'a, [u8]>>>(
        width: usize,
        height: usize,
        format: PixelFormat,
        planes: impl IntoIterator<Item = (D, usize)>,
    ) -> Self {
        Self {
            storage: Storage::Planes(planes.into_iter().map(|(d, s)| (d.into(), s)).collect()),
            width,
            height,
            format,
            timestamp: None,
        }
    }

    /// Sets the row stride in bytes of a frame made by [`Self::new`] (the luma stride for the
    /// 4:2:0 formats; I420's chroma rows are half of it). No effect on [`Self::from_planes`]
    /// frames, whose planes carry their own strides.
    pub fn with_stride(mut self, stride: usize) -> Self {
        if let Storage::Packed { stride: s, .. } = &mut self.storage {
            *s = stride;
        }
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

    pub fn format(&self) -> PixelFormat {
        self.format
    }

    pub fn timestamp(&self) -> Option<Duration> {
        self.timestamp
    }

    /// Row stride of plane 0 (the luma plane for 4:2:0).
    pub fn stride(&self) -> usize {
        match &self.storage {
            Storage::Packed { stride, .. } => *stride,
            Storage::Planes(planes) => planes.first().map_or(0, |p| p.1),
        }
    }

    /// The bytes of plane 0: for a frame made by [`Self::new`], the whole buffer.
    pub fn data(&self) -> &[u8] {
        match &self.storage {
            Storage::Packed { data, .. } => data,
            Storage::Planes(planes) => planes.first().map_or(&[][..], |p| &p.0[..]),
        }
    }

    /// Whether the frame owns its pixels.
    pub fn is_owned(&self) -> bool {
        match &self.storage {
            Storage::Packed { data, .. } => matches!(data, Cow::Owned(_)),
            Storage::Planes(planes) => planes.iter().all(|p| matches!(p.0, Cow::Owned(_))),
        }
    }

    /// The frame with owned pixels (copies borrowed pixels once).
    pub fn into_owned(self) -> Frame<'static> {
        let storage = match self.storage {
            Storage::Packed { data, stride } => Storage::Packed {
                data: Cow::Owned(data.into_owned()),
                stride,
            },
            Storage::Planes(planes) => Storage::Planes(
                planes
                    .into_iter()
                    .map(|(d, s)| (Cow::Owned(d.into_owned()), s))
                    .collect(),
            ),
        };
        Frame {
            storage,
            width: self.width,
            height: self.height,
            format: self.format,
            timestamp: self.timestamp,
        }
    }

    /// Plane `i` (see [`PixelFormat::planes`]) of a frame that passed [`Self::validate`]; `None`
    /// past the last plane or where the buffer ends before the plane starts.
    pub fn plane(&self, i: usize) -> Option<PlaneRef<'_>> {
        if i >= self.format.planes() {
            return None;
        }
        match &self.storage {
            Storage::Packed { data, stride } => {
                let (offset, plane_stride) = self.packed_plane(i, *stride)?;
                Some(PlaneRef {
                    data: data.get(offset..)?,
                    stride: plane_stride,
                })
            }
            Storage::Planes(planes) => planes.get(i).map(|(d, s)| PlaneRef {
                data: d,
                stride: *s,
            }),
        }
    }

    /// For a frame made by [`Self::new`]: its buffer and each plane's `(offset, stride)` in it.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    #[allow(clippy::type_complexity)] // the buffer and its planes' (offset, stride)
    pub(crate) fn one_buffer(&self) -> Option<(&[u8], Vec<(usize, usize)>)> {
        let Storage::Packed { data, stride } = &self.storage else {
            return None;
        };
        let layout = (0..self.format.planes())
            .map(|i| self.packed_plane(i, *stride))
            .collect::<Option<Vec<_>>>()?;
        Some((data, layout))
    }

    /// Offset and stride of plane `i` in a one-buffer frame with plane-0 stride `stride`.
    fn packed_plane(&self, i: usize, stride: usize) -> Option<(usize, usize)> {
        let luma = stride.checked_mul(self.height)?;
        match (self.format, i) {
            (_, 0) => Some((0, stride)),
            (PixelFormat::Nv12, 1) => Some((luma, stride)),
            (PixelFormat::I420, 1) => Some((luma, stride / 2)),
            (PixelFormat::I420, 2) => Some((
                luma.checked_add((stride / 2).checked_mul(self.height / 2)?)?,
                stride / 2,
            )),
            _ => None,
        }
    }

    /// Checks size, strides and buffer lengths against the format; returns the bytes the
    /// frame's planes span in all (what goes to a GPU).
    pub fn validate(&self) -> Result<usize, FrameError> {
        let (w, h, f) = (self.width, self.height, self.format);
        if w == 0 || h == 0 {
            return Err(FrameError::ZeroSize {
                width: w,
                height: h,
            });
        }
        crate::limits::check_image_size("frame", w, h).map_err(|limit| FrameError::OverLimit {
            width: w,
            height: h,
            limit,
        })?;
        let too_large = || FrameError::TooLarge {
            width: w,
            height: h,
        };
        if let Storage::Planes(planes) = &self.storage {
            if planes.len() != f.planes() {
                return Err(FrameError::PlaneCount {
                    format: f,
                    expected: f.planes(),
                    got: planes.len(),
                });
            }
        }
        let strides: Vec<usize> = match &self.storage {
            Storage::Packed { stride, .. } => (0..f.planes())
                .map(|i| self.packed_plane(i, *stride).map_or(usize::MAX, |p| p.1))
                .collect(),
            Storage::Planes(planes) => planes.iter().map(|p| p.1).collect(),
        };
        for (plane, &stride) in strides.iter().enumerate() {
            let (min, _) = f.plane_size(plane, w, h).ok_or_else(too_large)?;
            if stride < min && (plane == 0 || !matches!(self.storage, Storage::Packed { .. })) {
                return Err(FrameError::StrideTooSmall {
                    format: f,
                    plane,
                    width: w,
                    stride,
                    min,
                });
            }
        }
        if f.is_420() && (w % 2 != 0 || h % 2 != 0) {
            return Err(FrameError::OddDimensions {
                format: f,
                width: w,
                height: h,
            });
        }
        // Bytes a plane spans: the last row need not be padded to the stride.
        let span = |rows: usize, stride: usize, row: usize| -> Option<usize> {
            stride.checked_mul(rows.checked_sub(1)?)?.checked_add(row)
        };
        let short =
            |plane: usize, stride: usize, needed: usize, got: usize| FrameError::BufferTooShort {
                format: f,
                plane,
                width: w,
                height: h,
                stride,
                needed,
                got,
            };
        let needed = match &self.storage {
            Storage::Packed { data, stride } => {
                if f == PixelFormat::I420 && stride % 2 != 0 {
                    return Err(FrameError::OddStride { stride: *stride });
                }
                let mut ends = Vec::with_capacity(f.planes());
                for plane in 0..f.planes() {
                    let (offset, ps) = self.packed_plane(plane, *stride).ok_or_else(too_large)?;
                    let (row, rows) = f.plane_size(plane, w, h).ok_or_else(too_large)?;
                    let end = offset
                        .checked_add(span(rows.max(1), ps, row).ok_or_else(too_large)?)
                        .ok_or_else(too_large)?;
                    ends.push(end);
                }
                let needed = ends.last().copied().unwrap_or(0);
                if let Some(plane) = ends.iter().position(|&e| e > data.len()) {
                    return Err(short(plane, *stride, needed, data.len()));
                }
                needed
            }
            Storage::Planes(planes) => {
                let mut total = 0usize;
                for (plane, (data, stride)) in planes.iter().enumerate() {
                    let (row, rows) = f.plane_size(plane, w, h).ok_or_else(too_large)?;
                    let needed = span(rows.max(1), *stride, row).ok_or_else(too_large)?;
                    if data.len() < needed {
                        return Err(short(plane, *stride, needed, data.len()));
                    }
                    total = total.checked_add(needed).ok_or_else(too_large)?;
                }
                total
            }
        };
        // Offsets are 32-bit on the device.
        if needed > i32::MAX as usize {
            return Err(too_large());
        }
        Ok(needed)
    }

    /// Packed RGB8 (`width * height * 3` bytes, row-major).
    pub fn to_rgb8(&self) -> Result<Vec<u8>, FrameError> {
        Ok(self.rgb8_view()?.into_owned())
    }

    /// As [`Self::to_rgb8`], without a copy when the frame already owns packed RGB8.
    pub fn into_rgb8(self) -> Result<Vec<u8>, FrameError> {
        self.validate()?;
        let packed = self.width * 3;
        let len = packed * self.height;
        if let (PixelFormat::Rgb8, Storage::Packed { data, stride }) = (self.format, &self.storage)
        {
            if *stride == packed && data.len() == len {
                if let Storage::Packed { data, .. } = self.storage {
                    return Ok(data.into_owned());
                }
            }
        }
        Ok(convert::to_rgb8(&self)?.into_owned())
    }

    /// Packed RGB8, borrowed when the frame already is that.
    pub(crate) fn rgb8_view(&self) -> Result<Cow<'_, [u8]>, FrameError> {
        self.validate()?;
        convert::to_rgb8(self)
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
        let borrowed = [1u8, 2, 3];
        let f = Frame::rgb8(&borrowed[..], 1, 1);
        assert!(matches!(f.rgb8_view(), Ok(Cow::Borrowed(_))));
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

    /// A 4x2 frame: left half red, right half blue; chroma is shared by 2x2 blocks. Returns the
    /// one-buffer layout and the planes.
    fn yuv_frame(format: PixelFormat, stride: usize) -> (Vec<u8>, Vec<Vec<u8>>) {
        let (y_red, u_red, v_red) = (81u8, 90u8, 240u8);
        let (y_blue, u_blue, v_blue) = (41u8, 240u8, 110u8);
        let mut luma = Vec::new();
        for _ in 0..2 {
            let mut row = vec![y_red, y_red, y_blue, y_blue];
            row.resize(stride, 0);
            luma.extend(row);
        }
        let chroma = match format {
            PixelFormat::Nv12 => {
                let mut row = vec![u_red, v_red, u_blue, v_blue];
                row.resize(stride, 0);
                vec![row]
            }
            _ => {
                let mut u = vec![u_red, u_blue];
                u.resize(stride / 2, 0);
                let mut v = vec![v_red, v_blue];
                v.resize(stride / 2, 0);
                vec![u, v]
            }
        };
        let mut one = luma.clone();
        chroma.iter().for_each(|c| one.extend(c));
        let mut planes = vec![luma];
        planes.extend(chroma);
        (one, planes)
    }

    #[test]
    fn nv12_and_i420() {
        let want: Vec<u8> = [[255u8, 0, 0], [255, 0, 0], [0, 0, 255], [0, 0, 255]]
            .repeat(2)
            .concat();
        for stride in [4, 6] {
            for format in [PixelFormat::Nv12, PixelFormat::I420] {
                let (one, planes) = yuv_frame(format, stride);
                let f = Frame::new(one, 4, 2, format).with_stride(stride);
                assert_eq!(rgb(&f), want, "{format:?} stride {stride}");
                let strides = [
                    stride,
                    if format == PixelFormat::Nv12 {
                        stride
                    } else {
                        stride / 2
                    },
                    stride / 2,
                ];
                let p = Frame::from_planes(
                    4,
                    2,
                    format,
                    planes.iter().zip(strides).map(|(d, s)| (&d[..], s)),
                );
                assert_eq!(rgb(&p), want, "{format:?} planes, stride {stride}");
            }
        }
    }

    /// Planes in buffers of their own, with strides that one buffer could not have (chroma wider
    /// than half the luma stride, planes in any order in memory).
    #[test]
    fn separate_planes_with_their_own_strides() {
        let (_, planes) = yuv_frame(PixelFormat::I420, 4);
        // U with stride 7: its 2 bytes, then 5 of padding.
        let u = [&planes[1][..2], &[0u8; 5][..]].concat();
        let f = Frame::from_planes(
            4,
            2,
            PixelFormat::I420,
            [(&planes[0][..], 4), (&u[..], 7), (&planes[2][..], 2)],
        );
        let one = Frame::new(yuv_frame(PixelFormat::I420, 4).0, 4, 2, PixelFormat::I420);
        assert_eq!(rgb(&f), rgb(&one));
        assert_eq!(f.plane(1).map(|p| p.stride), Some(7));
        assert_eq!(f.validate(), Ok(8 + 2 + 2));
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
                plane: 0,
                width: 4,
                stride: 15,
                min: 16
            }
        );
        assert_eq!(
            e(Frame::new(&[0u8; 17][..], 3, 2, PixelFormat::Rgb8)),
            FrameError::BufferTooShort {
                format: PixelFormat::Rgb8,
                plane: 0,
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
                plane: 1,
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
            FrameError::BufferTooShort {
                needed: 12,
                plane: 2,
                ..
            }
        ));
        assert!(matches!(
            e(Frame::new(&[0u8; 3][..], usize::MAX, 2, PixelFormat::Rgb8)),
            FrameError::OverLimit { .. }
        ));
        // Bounded before anything is converted: a 1-pixel-wide frame 2^30 rows high (whose
        // resize taps alone would need tens of GiB) is refused by its height.
        let tall = e(Frame::new(&[0u8; 3][..], 1, 1 << 30, PixelFormat::Gray8));
        assert_eq!(
            tall,
            FrameError::OverLimit {
                width: 1,
                height: 1 << 30,
                limit: crate::limits::LimitError::new(
                    "frame height",
                    1u64 << 30,
                    crate::limits::MAX_FRAME_SIDE
                )
            }
        );
        assert_eq!(
            tall.to_string(),
            "frame 1x1073741824: frame height is 1073741824, above the limit of 16384"
        );
        // 16384 x 8192 is within the side bound but over the area bound.
        assert!(matches!(
            e(Frame::from_planes(16384, 8192, PixelFormat::Gray8, [(&[0u8; 1][..], 16384)])),
            FrameError::OverLimit { limit, .. } if limit.what.starts_with("frame area")
        ));
        assert!(Frame::new(&[0u8; 12][..], 4, 2, PixelFormat::Gray8)
            .to_rgb8()
            .is_ok());
        // Separate planes: the count, a short chroma plane, a chroma stride below its row.
        let y = [0u8; 8];
        assert_eq!(
            e(Frame::from_planes(4, 2, PixelFormat::Nv12, [(&y[..], 4)])),
            FrameError::PlaneCount {
                format: PixelFormat::Nv12,
                expected: 2,
                got: 1
            }
        );
        assert!(matches!(
            e(Frame::from_planes(
                4,
                2,
                PixelFormat::Nv12,
                [(&y[..], 4), (&y[..3], 4)]
            )),
            FrameError::BufferTooShort {
                plane: 1,
                needed: 4,
                got: 3,
                ..
            }
        ));
        assert!(matches!(
            e(Frame::from_planes(
                4,
                2,
                PixelFormat::I420,
                [(&y[..], 4), (&y[..], 1), (&y[..], 2)]
            )),
            FrameError::StrideTooSmall {
                plane: 1,
                min: 2,
                stride: 1,
                ..
            }
        ));
    }
}
