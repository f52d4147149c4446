//! Mapped GStreamer video frames as tracker [`Frame`]s, plane by plane.

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
        Some(PixelFormat::Nv12 | PixelFormat::I420)
            if !width.is_multiple_of(2) || !height.is_multiple_of(2) =>
        {
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

/// The frame's pixels as a tracker frame, borrowed plane by plane with GStreamer's strides (no
/// repacking; the pipeline copies the planes once on `push`).
pub fn to_frame<'a>(frame: &'a VideoFrameRef<&gst::BufferRef>) -> Result<Frame<'a>, ConvertError> {
    let format = frame.format();
    let (w, h) = (frame.width(), frame.height());
    check_format(format, w, h)?;
    let pf = pixel_format(format).ok_or(ConvertError::Format(format))?;
    let strides = frame.plane_stride();
    let planes = (0..pf.planes() as u32)
        .map(|i| {
            let stride = strides.get(i as usize).copied().unwrap_or(0);
            let stride = usize::try_from(stride).map_err(|_| ConvertError::Plane {
                plane: i,
                message: format!("negative stride {stride}"),
            })?;
            Ok((plane(frame, i)?, stride))
        })
        .collect::<Result<Vec<_>, ConvertError>>()?;
    Ok(Frame::from_planes(w as usize, h as usize, pf, planes))
}
