//! Drawing tracking results into raw video frames of any accepted format.

use edgetam_tracker::ObjectResult;
use gst_video::prelude::*;
use gst_video::{VideoFormat, VideoFrameRef};

/// Object colors (RGB), by object id (`id % 10`): the palette of `edgetam::draw`.
pub use edgetam_pipeline::OBJECT_COLORS as PALETTE;

/// What to draw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Style {
    /// Tint the mask's pixels with the object's color.
    pub mask: bool,
    /// Paint the mask's boundary pixels.
    pub contour: bool,
    /// Outline the mask's box (2 pixels, inwards).
    pub boxes: bool,
    /// Weight of the color in the tint, 0..=1.
    pub alpha: f32,
}

impl Style {
    pub fn is_empty(&self) -> bool {
        !(self.mask || self.contour || self.boxes)
    }
}

/// BT.601 limited-range YUV of an RGB color (the pipeline reads YUV with the same matrix).
fn yuv([r, g, b]: [u8; 3]) -> [u8; 3] {
    let (r, g, b) = (r as f32, g as f32, b as f32);
    let y = 16.0 + (65.738 * r + 129.057 * g + 25.064 * b) / 256.0;
    let u = 128.0 + (-37.945 * r - 74.494 * g + 112.439 * b) / 256.0;
    let v = 128.0 + (112.439 * r - 94.154 * g - 18.285 * b) / 256.0;
    [y, u, v].map(|c| c.round().clamp(0.0, 255.0) as u8)
}

fn mix(dst: &mut u8, src: u8, alpha: f32) {
    *dst = (*dst as f32 * (1.0 - alpha) + src as f32 * alpha).round() as u8;
}

/// Blends one pixel's color into plane `plane` of a frame of `format` (`data`, row stride
/// `stride`): packed RGB formats take `rgb` in their channel order, YUV formats `yuv` (luma at
/// every pixel, chroma once per 2x2 block, at its top-left pixel), GRAY8 the luma.
#[allow(clippy::too_many_arguments)]
fn blend(
    format: VideoFormat,
    plane: u32,
    data: &mut [u8],
    stride: usize,
    (x, y): (usize, usize),
    rgb: [u8; 3],
    yuv: [u8; 3],
    alpha: f32,
) {
    let packed = match format {
        VideoFormat::Rgb => Some(([0, 1, 2], 3)),
        VideoFormat::Bgr => Some(([2, 1, 0], 3)),
        VideoFormat::Rgba | VideoFormat::Rgbx => Some(([0, 1, 2], 4)),
        VideoFormat::Bgra | VideoFormat::Bgrx => Some(([2, 1, 0], 4)),
        _ => None,
    };
    if let Some((order, bpp)) = packed {
        let at = y * stride + x * bpp;
        if let Some(px) = data.get_mut(at..at + bpp) {
            for c in 0..3 {
                mix(&mut px[order[c]], rgb[c], alpha);
            }
        }
        return;
    }
    if plane == 0 {
        if let Some(p) = data.get_mut(y * stride + x) {
            mix(p, yuv[0], alpha);
        }
        return;
    }
    if x % 2 != 0 || y % 2 != 0 {
        return;
    }
    let (cx, cy) = (x / 2, y / 2);
    match (format, plane) {
        (VideoFormat::Nv12, 1) => {
            let at = cy * stride + cx * 2;
            if let Some(px) = data.get_mut(at..at + 2) {
                mix(&mut px[0], yuv[1], alpha);
                mix(&mut px[1], yuv[2], alpha);
            }
        }
        (VideoFormat::I420, 1 | 2) => {
            if let Some(p) = data.get_mut(cy * stride + cx) {
                mix(p, yuv[plane as usize], alpha);
            }
        }
        _ => {}
    }
}

/// Calls `paint(x, y, rgb, yuv, alpha)` for every pixel the style draws, objects in order.
fn strokes(
    objects: &[ObjectResult],
    style: Style,
    (width, height): (usize, usize),
    mut paint: impl FnMut((usize, usize), [u8; 3], [u8; 3], f32),
) {
    for o in objects {
        let m = &o.mask;
        let Some([x0, y0, x1, y1]) = o.bbox else {
            continue;
        };
        if m.width != width || m.height != height || x1 >= width || y1 >= height {
            continue;
        }
        let rgb = PALETTE[o.id as usize % PALETTE.len()];
        let yuv = yuv(rgb);
        let inside = |x: usize, y: usize| m.data[y * width + x] != 0;
        for y in y0..=y1 {
            for x in x0..=x1 {
                if !inside(x, y) {
                    continue;
                }
                if style.contour {
                    let edge = x == 0
                        || y == 0
                        || x + 1 == width
                        || y + 1 == height
                        || !inside(x - 1, y)
                        || !inside(x + 1, y)
                        || !inside(x, y - 1)
                        || !inside(x, y + 1);
                    if edge {
                        paint((x, y), rgb, yuv, 1.0);
                        continue;
                    }
                }
                if style.mask {
                    paint((x, y), rgb, yuv, style.alpha);
                }
            }
        }
        if style.boxes {
            for t in 0..2 {
                for x in x0..=x1 {
                    paint((x, (y0 + t).min(y1)), rgb, yuv, 1.0);
                    paint((x, y1.saturating_sub(t).max(y0)), rgb, yuv, 1.0);
                }
                for y in y0..=y1 {
                    paint(((x0 + t).min(x1), y), rgb, yuv, 1.0);
                    paint((x1.saturating_sub(t).max(x0), y), rgb, yuv, 1.0);
                }
            }
        }
    }
}

/// Draws every object with a non-empty mask of the frame's size, plane by plane. Formats
/// other than the element's are left untouched.
pub fn draw(
    frame: &mut VideoFrameRef<&mut gst::BufferRef>,
    objects: &[ObjectResult],
    style: Style,
) {
    if style.is_empty() {
        return;
    }
    let format = frame.format();
    let size = (frame.width() as usize, frame.height() as usize);
    let strides: Vec<usize> = frame
        .plane_stride()
        .iter()
        .map(|s| (*s).max(0) as usize)
        .collect();
    for plane in 0..frame.n_planes() {
        let stride = strides.get(plane as usize).copied().unwrap_or(0);
        let Ok(data) = frame.plane_data_mut(plane) else {
            return;
        };
        strokes(objects, style, size, |xy, rgb, yuv, alpha| {
            blend(format, plane, data, stride, xy, rgb, yuv, alpha)
        });
    }
}
