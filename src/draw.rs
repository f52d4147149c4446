//! Drawing on RGB images: the overlays of the CLI and the examples.

use edgetam_tracker::ObjectResult;
use image::{Rgb, RgbImage};

/// Overlay colors, by an object's position in a frame's results (objects in order of first
/// prompt).
pub use edgetam_pipeline::OBJECT_COLORS as PALETTE;

/// Each object's mask tinted and its box outlined in its [`PALETTE`] color (masks must be the
/// image's size).
pub fn objects(img: &mut RgbImage, objects: &[ObjectResult]) {
    for (o, color) in objects.iter().zip(PALETTE.iter().cycle()) {
        tint(img, &o.mask.data, *color);
    }
    for (o, color) in objects.iter().zip(PALETTE.iter().cycle()) {
        if let Some([x0, y0, x1, y1]) = o.bbox {
            rect(img, [x0, y0, x1, y1].map(|v| v as i64), *color);
        }
    }
}

/// Blends `color` 50/50 into every pixel where `mask` (row-major, one value per pixel) is
/// nonzero.
pub fn tint(img: &mut RgbImage, mask: &[u8], color: [u8; 3]) {
    for (px, &m) in img.pixels_mut().zip(mask) {
        if m != 0 {
            for c in 0..3 {
                px[c] = ((px[c] as u16 + color[c] as u16) / 2) as u8;
            }
        }
    }
}

/// Sets one pixel; coordinates outside the image are ignored.
fn put(img: &mut RgbImage, x: i64, y: i64, color: [u8; 3]) {
    if x >= 0 && y >= 0 && (x as u32) < img.width() && (y as u32) < img.height() {
        img.put_pixel(x as u32, y as u32, Rgb(color));
    }
}

/// A 2-pixel outline of the box `[x0, y0, x1, y1]` (inclusive), drawn inwards.
pub fn rect(img: &mut RgbImage, [x0, y0, x1, y1]: [i64; 4], color: [u8; 3]) {
    for t in 0..2 {
        for x in x0..=x1 {
            put(img, x, y0 + t, color);
            put(img, x, y1 - t, color);
        }
        for y in y0..=y1 {
            put(img, x0 + t, y, color);
            put(img, x1 - t, y, color);
        }
    }
}

/// A filled disc of radius 4 centred on `(cx, cy)`.
pub fn dot(img: &mut RgbImage, cx: i64, cy: i64, color: [u8; 3]) {
    for dy in -4i64..=4 {
        for dx in -4i64..=4 {
            if dx * dx + dy * dy <= 16 {
                put(img, cx + dx, cy + dy, color);
            }
        }
    }
}
