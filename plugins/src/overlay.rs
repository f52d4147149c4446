//! Drawing tracking results into raw video frames of any accepted format.

use edgetam_tracker::ObjectResult;
use gst_video::prelude::*;
use gst_video::{VideoFormat, VideoFrameRef};

/// Object colors (RGB), by object id (`id % 10`): the palette of `edgetam::draw`.
pub const PALETTE: [[u8; 3]; 10] = [
    [30, 144, 255],
    [255, 69, 0],
    [50, 205, 50],
    [255, 215, 0],
    [186, 85, 211],
    [0, 206, 209],
    [255, 140, 0],
    [255, 20, 147],
    [154, 205, 50],
    [160, 82, 45],
];

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

/// Planes of a writable frame with the per-format pixel addressing.
struct Canvas<'a> {
    format: VideoFormat,
    planes: Vec<(&'a mut [u8], usize)>,
    width: usize,
    height: usize,
}

impl Canvas<'_> {
    /// Blends `rgb` (and its YUV form `yuv`) into pixel (x, y).
    fn blend(&mut self, x: usize, y: usize, rgb: [u8; 3], yuv: [u8; 3], alpha: f32) {
        if x >= self.width || y >= self.height {
            return;
        }
        let rgb_at = |order: [usize; 3], bpp: usize| (order, bpp);
        let packed = match self.format {
            VideoFormat::Rgb => Some(rgb_at([0, 1, 2], 3)),
            VideoFormat::Bgr => Some(rgb_at([2, 1, 0], 3)),
            VideoFormat::Rgba | VideoFormat::Rgbx => Some(rgb_at([0, 1, 2], 4)),
            VideoFormat::Bgra | VideoFormat::Bgrx => Some(rgb_at([2, 1, 0], 4)),
            _ => None,
        };
        if let Some((order, bpp)) = packed {
            let (data, stride) = &mut self.planes[0];
            let at = y * *stride + x * bpp;
            if let Some(px) = data.get_mut(at..at + bpp) {
                for c in 0..3 {
                    mix(&mut px[order[c]], rgb[c], alpha);
                }
            }
            return;
        }
        // Luma at every pixel; chroma once per 2x2 block (at its top-left pixel).
        if let Some((data, stride)) = self.planes.first_mut() {
            if let Some(p) = data.get_mut(y * *stride + x) {
                mix(p, yuv[0], alpha);
            }
        }
        if x % 2 != 0 || y % 2 != 0 {
            return;
        }
        let (cx, cy) = (x / 2, y / 2);
        match self.format {
            VideoFormat::Nv12 => {
                if let Some((data, stride)) = self.planes.get_mut(1) {
                    let at = cy * *stride + cx * 2;
                    if let Some(px) = data.get_mut(at..at + 2) {
                        mix(&mut px[0], yuv[1], alpha);
                        mix(&mut px[1], yuv[2], alpha);
                    }
                }
            }
            VideoFormat::I420 => {
                for (plane, value) in [(1, yuv[1]), (2, yuv[2])] {
                    if let Some((data, stride)) = self.planes.get_mut(plane) {
                        if let Some(p) = data.get_mut(cy * *stride + cx) {
                            mix(p, value, alpha);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Draws every object with a non-empty mask. Objects' masks must be the frame's size (others
/// are skipped). Unsupported formats are left untouched.
pub fn draw(
    frame: &mut VideoFrameRef<&mut gst::BufferRef>,
    objects: &[ObjectResult],
    style: Style,
) {
    if style.is_empty() {
        return;
    }
    let format = frame.format();
    let (width, height) = (frame.width() as usize, frame.height() as usize);
    let strides: Vec<usize> = frame
        .plane_stride()
        .iter()
        .map(|s| (*s).max(0) as usize)
        .collect();
    let n_planes = frame.n_planes();
    let mut planes = Vec::new();
    // Each plane's slice is borrowed separately; `plane_data_mut` borrows the frame mutably,
    // so collect raw parts first.
    let mut raw: Vec<(*mut u8, usize, usize)> = Vec::new();
    for p in 0..n_planes {
        match frame.plane_data_mut(p) {
            Ok(d) => raw.push((
                d.as_mut_ptr(),
                d.len(),
                strides.get(p as usize).copied().unwrap_or(0),
            )),
            Err(_) => return,
        }
    }
    for (ptr, len, stride) in raw {
        // SAFETY: the planes of a mapped video frame are disjoint regions of the mapped
        // memory, which stays mapped while `frame` is borrowed mutably by this function.
        planes.push((unsafe { std::slice::from_raw_parts_mut(ptr, len) }, stride));
    }
    let mut canvas = Canvas {
        format,
        planes,
        width,
        height,
    };
    for o in objects {
        let m = &o.mask;
        if o.bbox.is_none() || m.width != width || m.height != height {
            continue;
        }
        let rgb = PALETTE[o.id as usize % PALETTE.len()];
        let yuv = yuv(rgb);
        let inside = |x: usize, y: usize| m.data[y * width + x] != 0;
        let [x0, y0, x1, y1] = o.bbox.unwrap_or_default();
        for y in y0..=y1.min(height - 1) {
            for x in x0..=x1.min(width - 1) {
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
                        canvas.blend(x, y, rgb, yuv, 1.0);
                        continue;
                    }
                }
                if style.mask {
                    canvas.blend(x, y, rgb, yuv, style.alpha);
                }
            }
        }
        if style.boxes {
            for t in 0..2 {
                for x in x0..=x1 {
                    canvas.blend(x, y0 + t, rgb, yuv, 1.0);
                    canvas.blend(x, y1.saturating_sub(t), rgb, yuv, 1.0);
                }
                for y in y0..=y1 {
                    canvas.blend(x0 + t, y, rgb, yuv, 1.0);
                    canvas.blend(x1.saturating_sub(t), y, rgb, yuv, 1.0);
                }
            }
        }
    }
}
