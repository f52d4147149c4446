//! The small model and synthetic frames that the streaming tests of the tracker
//! (`tracker_api.rs`) and the pipeline (`pipeline/tests/common`, through `#[path]`) run on.
#![allow(dead_code)]

use std::path::PathBuf;

use candle_core::Device;
use edgetam_tracker::{EdgeTam, EdgeTamConfig, Weights};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// The fixture weights in the 256 config (`fixtures/image_256`): the released model's layout,
/// 16x cheaper to run than its 1024 config.
pub fn model_256() -> EdgeTam {
    let cfg = EdgeTamConfig::from_file(fixtures().join("image_256/config.json")).expect("config");
    let w =
        Weights::load(fixtures().join("model/model.safetensors"), &Device::Cpu).expect("weights");
    EdgeTam::from_weights(cfg, &w, &Device::Cpu).expect("model")
}

/// A deterministic `w x h` RGB frame that changes with `t`: a red block drifting right over a
/// textured background.
pub fn frame_sized(t: usize, w: usize, h: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let inside = (x as i64 - 30 - t as i64).abs() < 12 && (y as i64 - 30).abs() < 10;
            let base = ((x * 7 + y * 3 + t * 5) % 64) as u8;
            let (r, g, b) = if inside {
                (200, 60 + base, 40)
            } else {
                (base, 90, 120 + base)
            };
            v.extend_from_slice(&[r, g, b]);
        }
    }
    v
}
