//! Frames from C: a pixel format, a size and a pointer + row stride per plane, borrowed (never
//! copied here) as the tracker's [`Frame`].

use edgetam_tracker::{limits, Frame, PixelFormat};

use crate::error::CapiError;
use crate::ptr::{bytes, span, VersionedStruct};

/// Layout of a frame's pixels (the values of `EdgetamFrame.format`).
///
/// Packed formats have one plane of `width * bytes_per_pixel` bytes per row (the fourth byte of
/// RGBA8/BGRA8 is ignored). The 4:2:0 formats need an even width and height: NV12 has two
/// planes (Y; interleaved U,V rows of `width` bytes), I420 three (Y, U, V; chroma rows of
/// `width / 2` bytes), chroma planes `height / 2` rows high. YUV is BT.601 limited range;
/// GRAY8 is full range.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgetamPixelFormat {
    Rgb8 = 0,
    Rgba8 = 1,
    Bgr8 = 2,
    Bgra8 = 3,
    Gray8 = 4,
    Nv12 = 5,
    I420 = 6,
}

impl EdgetamPixelFormat {
    /// The format a C integer names: read as an integer first, since an out-of-range value in a
    /// Rust enum would be undefined behaviour.
    fn from_raw(raw: i32) -> Result<PixelFormat, CapiError> {
        Ok(match raw {
            0 => PixelFormat::Rgb8,
            1 => PixelFormat::Rgba8,
            2 => PixelFormat::Bgr8,
            3 => PixelFormat::Bgra8,
            4 => PixelFormat::Gray8,
            5 => PixelFormat::Nv12,
            6 => PixelFormat::I420,
            other => {
                return Err(CapiError::InvalidArgument(format!(
                    "unknown pixel format {other} (expected an EdgetamPixelFormat, 0 to 6)"
                )))
            }
        })
    }
}

/// One plane of a frame: its first row and the distance in bytes between rows. A fixed value
/// type inside `EdgetamFrame` (no `size` field): it never changes; a new frame layout would
/// extend `EdgetamFrame` instead.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EdgetamPlane {
    pub data: *const u8,
    /// Row stride in bytes, at least the plane's row size.
    pub stride: usize,
}

/// A frame as the caller holds it; nothing is copied until the model reads it. Planes past the
/// format's count are ignored.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EdgetamFrame {
    /// `sizeof(EdgetamFrame)`: which version of this struct the caller holds, so a later
    /// version can add fields.
    pub size: usize,
    /// An `EdgetamPixelFormat` value.
    pub format: i32,
    pub width: u32,
    pub height: u32,
    /// `planes[0]` for packed and gray formats, Y + UV for NV12, Y + U + V for I420.
    pub planes: [EdgetamPlane; 3],
}

// SAFETY: repr(C), `size: usize` first.
unsafe impl VersionedStruct for EdgetamFrame {
    const C_NAME: &'static str = "EdgetamFrame";
    const MIN_SIZE: usize = std::mem::size_of::<Self>();
}

/// Borrows the caller's planes as a [`Frame`] after checking everything a slice needs: the
/// size against the limits, every used plane non-NULL, each stride at least its row, the
/// spans without overflow. The tracker then checks the rest (even 4:2:0 sizes).
///
/// # Safety
/// Each used plane's `data` points to at least `stride * (rows - 1) + row_bytes` readable bytes
/// that outlive the returned frame and are not written meanwhile.
pub(crate) unsafe fn borrow_frame(f: &EdgetamFrame) -> Result<Frame<'_>, CapiError> {
    let format = EdgetamPixelFormat::from_raw(f.format)?;
    let (width, height) = (f.width as usize, f.height as usize);
    if width == 0 || height == 0 {
        return Err(CapiError::InvalidFrame(format!(
            "frame is {width}x{height}: both sides must be at least one pixel"
        )));
    }
    limits::check_image_size("frame", width, height)?;
    let mut planes = Vec::with_capacity(format.planes());
    for (i, plane) in f.planes.iter().take(format.planes()).enumerate() {
        let overflow = || CapiError::InvalidFrame(format!("plane {i} is too large to address"));
        let (row_bytes, rows) = format.plane_size(i, width, height).ok_or_else(overflow)?;
        if plane.stride < row_bytes {
            return Err(CapiError::InvalidFrame(format!(
                "{format:?} frame {width} pixels wide needs a row stride of at least {row_bytes} \
                 bytes in plane {i}, got {}",
                plane.stride
            )));
        }
        let len = span(rows, plane.stride, row_bytes).ok_or_else(overflow)?;
        const NAMES: [&str; 3] = [
            "frame->planes[0].data",
            "frame->planes[1].data",
            "frame->planes[2].data",
        ];
        // SAFETY: the caller's contract: `len` readable bytes for this plane.
        let data = unsafe { bytes(plane.data, len, NAMES[i]) }?;
        planes.push((data, plane.stride));
    }
    let frame = Frame::from_planes(width, height, format, planes);
    frame
        .validate()
        .map_err(|e| CapiError::Tracker(edgetam_tracker::Error::InvalidFrame(e)))?;
    Ok(frame)
}
