//! Mapped GStreamer video frames as pipeline [`Frame`]s.

use edgetam_pipeline::{Frame, PixelFormat};
use gst_video::prelude::*;
use gst_video::{VideoFormat, VideoFrameRef};

/// The raw video formats the element accepts, in caps order.
pub const FORMATS: [VideoFormat; 9] = [
    VideoFormat::Rgb,
    VideoFormat::Rgba,
    VideoFormat::Rgbx,
    VideoFormat::Bgr,
    VideoFormat::Bgra,
    VideoFormat::Bgrx,
    VideoFormat::Nv12,
    VideoFormat::I420,
    VideoFormat::Gray8,
];

/// Why a video frame cannot be handed to the tracker.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("video format {0:?} is not supported")]
    Format(VideoFormat),
    #[error("{format:?} needs an even width and height, got {width}x{height}")]
    OddSize {
        format: VideoFormat,
        width: u32,
        height: u32,
    },
    #[error("cannot read plane {plane} of the frame: {message}")]
    Plane { plane: u32, message: String },
}

/// The pipeline's pixel format for a GStreamer format (`x` padding bytes read like alpha,
/// which is ignored).
pub fn pixel_format(format: VideoFormat) -> Option<PixelFormat> {
    Some(match format {
        VideoFormat::Rgb => PixelFormat::Rgb8,
        VideoFormat::Rgba | VideoFormat::Rgbx => PixelFormat::Rgba8,
        VideoFormat::Bgr => PixelFormat::Bgr8,
        VideoFormat::Bgra | VideoFormat::Bgrx => PixelFormat::Bgra8,
        VideoFormat::Nv12 => PixelFormat::Nv12,
        VideoFormat::I420 => PixelFormat::I420,
        VideoFormat::Gray8 => PixelFormat::Gray8,
        _ => return None,
    })
}

/// Checks that frames of this format and size can be tracked (4:2:0 needs even sides).
pub fn check_format(format: VideoFormat, width: u32, height: u32) -> Result<(), ConvertError> {
    match pixel_format(format) {
        None => Err(ConvertError::Format(format)),
        Some(PixelFormat::Nv12 | PixelFormat::I420) if width % 2 != 0 || height % 2 != 0 => {
            Err(ConvertError::OddSize {
                format,
                width,
                height,
            })
        }
        Some(_) => Ok(()),
    }
}

fn plane<'a>(
    frame: &'a VideoFrameRef<&gst::BufferRef>,
    plane: u32,
) -> Result<&'a [u8], ConvertError> {
    frame.plane_data(plane).map_err(|e| ConvertError::Plane {
        plane,
        message: e.to_string(),
    })
}

/// The frame's pixels as a pipeline frame: packed formats borrow plane 0 with its stride
/// (the pipeline copies it once on `push`); NV12 / I420 are packed into the pipeline's
/// contiguous layout (one copy, whatever the buffer's plane offsets and strides).
pub fn to_frame<'a>(frame: &'a VideoFrameRef<&gst::BufferRef>) -> Result<Frame<'a>, ConvertError> {
    let format = frame.format();
    let (w, h) = (frame.width(), frame.height());
    check_format(format, w, h)?;
    let pf = pixel_format(format).ok_or(ConvertError::Format(format))?;
    let (wu, hu) = (w as usize, h as usize);
    let strides = frame.plane_stride();
    let stride = |i: usize| strides.get(i).copied().unwrap_or(0).max(0) as usize;
    let copy_rows = |out: &mut Vec<u8>, data: &[u8], stride: usize, rows: usize, row: usize| {
        for r in 0..rows {
            let start = r * stride;
            out.extend_from_slice(&data[start..start + row]);
        }
    };
    match pf {
        PixelFormat::Nv12 => {
            let (y, uv) = (plane(frame, 0)?, plane(frame, 1)?);
            let (sy, suv) = (stride(0), stride(1));
            check_len(0, y, sy, hu, wu)?;
            check_len(1, uv, suv, hu / 2, wu)?;
            let mut out = Vec::with_capacity(wu * hu * 3 / 2);
            copy_rows(&mut out, y, sy, hu, wu);
            copy_rows(&mut out, uv, suv, hu / 2, wu);
            Ok(Frame::new(out, wu, hu, pf))
        }
        PixelFormat::I420 => {
            let (y, u, v) = (plane(frame, 0)?, plane(frame, 1)?, plane(frame, 2)?);
            let (sy, su, sv) = (stride(0), stride(1), stride(2));
            check_len(0, y, sy, hu, wu)?;
            check_len(1, u, su, hu / 2, wu / 2)?;
            check_len(2, v, sv, hu / 2, wu / 2)?;
            let mut out = Vec::with_capacity(wu * hu * 3 / 2);
            copy_rows(&mut out, y, sy, hu, wu);
            copy_rows(&mut out, u, su, hu / 2, wu / 2);
            copy_rows(&mut out, v, sv, hu / 2, wu / 2);
            Ok(Frame::new(out, wu, hu, pf))
        }
        _ => Ok(Frame::new(plane(frame, 0)?, wu, hu, pf).with_stride(stride(0))),
    }
}

/// A plane must hold `rows` rows of `row` bytes, `stride` apart.
fn check_len(
    plane: u32,
    data: &[u8],
    stride: usize,
    rows: usize,
    row: usize,
) -> Result<(), ConvertError> {
    let needed = stride * rows.saturating_sub(1) + row;
    if stride < row || data.len() < needed {
        return Err(ConvertError::Plane {
            plane,
            message: format!(
                "{} bytes with stride {stride}, need {needed} for {rows} rows of {row}",
                data.len()
            ),
        });
    }
    Ok(())
}
