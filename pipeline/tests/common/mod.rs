#![allow(dead_code)]
//! Shared helpers: the 256 fixture model, synthetic frames, deadlines, byte comparison.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use candle_core::{DType, Device};
use edgetam_tracker::{EdgeTam, EdgeTamConfig, FrameResult, Weights};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

pub fn model() -> Arc<EdgeTam> {
    static MODEL: OnceLock<Arc<EdgeTam>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let cfg =
                EdgeTamConfig::from_file(fixtures().join("image_256/config.json")).expect("config");
            let w = Weights::load(fixtures().join("model/model.safetensors"), &Device::Cpu)
                .expect("weights");
            Arc::new(EdgeTam::from_weights(cfg, &w, &Device::Cpu).expect("model"))
        })
        .clone()
}

pub const W: usize = 96;
pub const H: usize = 64;

/// A deterministic `w x h` RGB frame that changes with `t` (a red block drifting right).
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

pub fn frame(t: usize) -> Vec<u8> {
    frame_sized(t, W, H)
}

/// Runs `f` on a thread and fails the test if it does not finish within `secs`.
pub fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("did not finish in time (deadlock or hang)")
}

/// Every output of a frame as bytes: indices, ids, logits, masks, scores.
pub fn fingerprint(r: &FrameResult) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend(r.frame_index.to_le_bytes());
    v.extend((r.width as u64).to_le_bytes());
    v.extend((r.height as u64).to_le_bytes());
    for o in &r.objects {
        v.extend(o.id.to_le_bytes());
        let logits = o
            .low_res_logits
            .to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .expect("logits");
        assert!(!logits.is_empty());
        for x in logits {
            v.extend(x.to_bits().to_le_bytes());
        }
        v.extend(&o.mask.data);
        v.extend(format!("{:?}", o.bbox).bytes());
        v.extend((o.area as u64).to_le_bytes());
        v.extend(o.score.to_bits().to_le_bytes());
        v.extend(o.iou.to_bits().to_le_bytes());
        v.push(o.chosen_mask as u8);
        v.push(u8::from(o.multimask));
        v.push(u8::from(o.prompted));
        v.push(u8::from(o.visible));
    }
    v
}
