#![allow(dead_code)]
//! Shared helpers: the 256 fixture model, synthetic frames, deadlines, byte comparison.

#[path = "../../../tracker/tests/common/scene.rs"]
mod scene;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use candle_core::DType;
use edgetam_tracker::{EdgeTam, FrameResult};

pub use scene::frame_sized;

/// The 256 fixture model, loaded once per test binary.
pub fn model() -> Arc<EdgeTam> {
    static MODEL: OnceLock<Arc<EdgeTam>> = OnceLock::new();
    MODEL.get_or_init(|| Arc::new(scene::model_256())).clone()
}

pub const W: usize = 96;
pub const H: usize = 64;

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
