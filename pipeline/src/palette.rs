//! Object colors for drawing results, shared by the CLI's overlays (`edgetam::draw`) and the
//! GStreamer element's, so an object looks the same in both.

/// Ten distinct RGB colors; callers index them by object (position or id) modulo 10.
pub const OBJECT_COLORS: [[u8; 3]; 10] = [
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
