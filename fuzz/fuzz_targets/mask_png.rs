//! Mask prompt files (`mask=PATH`; PNG, JPEG, BMP): a typed error or a non-empty 0/1 mask
//! within the frame bounds.
#![no_main]

use edgetam_pipeline::decode_mask;
use edgetam_tracker::limits::{MAX_FRAME_PIXELS, MAX_FRAME_SIDE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = decode_mask(data, "fuzz.png") {
        assert!(m.width <= MAX_FRAME_SIDE && m.height <= MAX_FRAME_SIDE);
        assert!(m.width * m.height <= MAX_FRAME_PIXELS);
        assert_eq!(m.data.len(), m.width * m.height);
        assert!(m.data.iter().all(|&v| v <= 1));
        assert!(m.area() > 0);
    }
});
