//! The bf16 fast mode ([`Precision::Bf16`]) against exact f32 on the committed sequences: the
//! binary masks keep an IoU >= 0.99 on every frame and object (the mode's documented
//! tolerance), and visibility decisions agree. On CPUs without AVX512-BF16 the mode falls back
//! to f32 and the test checks that fallback instead.

use std::path::PathBuf;
use std::sync::Arc;

use candle_core::Device;
use edgetam_tracker::checks::sequence::{replay, SequenceFixture};
use edgetam_tracker::{Mask, Precision, Weights};

/// The mode's tolerance (documented on [`Precision::Bf16`]).
const MIN_IOU: f64 = 0.99;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// IoU of two binary masks; two empty masks agree perfectly.
fn iou(a: &Mask, b: &Mask) -> f64 {
    let (mut inter, mut union) = (0usize, 0usize);
    for (&x, &y) in a.data.iter().zip(&b.data) {
        inter += usize::from(x != 0 && y != 0);
        union += usize::from(x != 0 || y != 0);
    }
    if union == 0 {
        1.0
    } else {
        inter as f64 / union as f64
    }
}

fn check(dir: &str) {
    let fx = SequenceFixture::load(fixtures().join(dir)).expect("sequence fixture");
    let base =
        Weights::load(fixtures().join("model/model.safetensors"), &Device::Cpu).expect("weights");
    let exact = Arc::new(fx.model(&base, &Device::Cpu).expect("model"));
    let mut fast = fx.model(&base, &Device::Cpu).expect("model");
    let effective = fast.set_precision(Precision::Bf16);
    assert_eq!(fast.precision(), effective);
    let a = replay(&fx, exact).expect("f32 replay");
    let b = replay(&fx, Arc::new(fast)).expect("bf16 replay");
    assert_eq!(a.len(), b.len());
    let mut worst = 1.0f64;
    let mut max_logit_diff = 0f32;
    for (ra, rb) in a.iter().zip(&b) {
        assert_eq!(ra.frame_index, rb.frame_index);
        assert_eq!(ra.objects.len(), rb.objects.len());
        for (oa, ob) in ra.objects.iter().zip(&rb.objects) {
            assert_eq!(oa.id, ob.id);
            let v = iou(&oa.mask, &ob.mask);
            worst = worst.min(v);
            assert!(
                v >= MIN_IOU,
                "{dir} frame {} object {}: bf16 mask IoU {v:.4} < {MIN_IOU}",
                ra.frame_index,
                oa.id
            );
            assert_eq!(
                oa.visible, ob.visible,
                "{dir} frame {} object {}: visibility differs (scores {} vs {})",
                ra.frame_index, oa.id, oa.score, ob.score
            );
            max_logit_diff = max_logit_diff.max((oa.score - ob.score).abs());
        }
    }
    eprintln!(
        "{dir}: {} results, precision in effect {effective}, worst mask IoU {worst:.5}, max \
         object-score difference {max_logit_diff:.2e}",
        a.len()
    );
    if effective == Precision::F32 {
        assert_eq!(worst, 1.0, "the f32 fallback must be exact");
    }
}

#[test]
fn bf16_sequence_256() {
    check("sequence_256");
}

#[test]
fn bf16_sequence_256_transformers_defaults() {
    check("sequence_256_defaults");
}

#[test]
fn bf16_sequence_1024() {
    check("sequence_1024");
}
