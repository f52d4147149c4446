//! Image-path parity against transformers' EdgeTAM on the committed random-weight fixtures.

#[path = "common/parity.rs"]
mod parity;

use std::time::Instant;

use candle_core::Device;
use edgetam_tracker::checks::{vision, CheckError};
use edgetam_tracker::internals::{preprocess, resize_rgb_u8};
use edgetam_tracker::{Error, Weights};

fn run_fixture(name: &str) -> edgetam_tracker::checks::Result<()> {
    let (fx, weights) = parity::load(name)?;
    let t = Instant::now();
    let reports = vision::run(&fx, &weights)?;
    eprintln!("{name}: vision checks in {:.2?}", t.elapsed());
    parity::assert_all_pass(&reports, name);
    assert_eq!(reports.len(), 13, "{name}: the number of checks");
    Ok(())
}

#[test]
fn vision_parity_256() -> edgetam_tracker::checks::Result<()> {
    run_fixture("image_256")
}

#[test]
fn vision_parity_1024() -> edgetam_tracker::checks::Result<()> {
    run_fixture("image_1024")
}

#[test]
fn preprocess_rejects_malformed_images() {
    let dev = Device::Cpu;
    for (len, w, h) in [(0, 0, 0), (12, 4, 0), (11, 2, 2), (13, 2, 2)] {
        let r = preprocess(&vec![0u8; len], w, h, 64, &dev);
        assert!(
            matches!(r, Err(Error::InvalidImage(_))),
            "{len} bytes {w}x{h}"
        );
    }
    assert!(matches!(
        resize_rgb_u8(&[0; 12], 2, 2, 0, 3),
        Err(Error::InvalidImage(_))
    ));
}

/// A deterministic test image: hashed noise over a gradient, so every tap weight matters.
fn test_image(w: usize, h: usize) -> Vec<u8> {
    (0..w * h * 3)
        .map(|i| {
            let hash = ((i as u64).wrapping_mul(2654435761) % (1 << 32)) >> 13;
            let (x, y, c) = ((i / 3) % w, (i / 3) / w, i % 3);
            ((hash % 64) + ((x * 3 + y * 2 + c * 40) % 192) as u64) as u8
        })
        .collect()
}

/// Checksums `sum(v[i] * (i % 251 + 1))` of torchvision's uint8 antialiased bilinear resize of
/// [`test_image`] (computed with torch 2.x / torchvision on AVX2): downscale, upscale, mixed,
/// and single-axis resizes.
#[test]
fn resize_matches_torchvision_uint8() -> edgetam_tracker::checks::Result<()> {
    let cases: [(usize, usize, usize, usize, i64); 8] = [
        (300, 200, 256, 256, 3145513712),
        (480, 270, 1024, 1024, 50363615673),
        (37, 53, 64, 16, 52210891),
        (640, 480, 320, 241, 3707569582),
        (17, 9, 5, 200, 39174533),
        (64, 64, 64, 32, 97625717),
        (50, 40, 77, 40, 153157039),
        (1, 1, 3, 2, 14148),
    ];
    for (w, h, ow, oh, expected) in cases {
        let out = resize_rgb_u8(&test_image(w, h), w, h, ow, oh)?;
        assert_eq!(out.len(), ow * oh * 3);
        let sum: i64 = out
            .iter()
            .enumerate()
            .map(|(i, &v)| i64::from(v) * ((i % 251) as i64 + 1))
            .sum();
        assert_eq!(sum, expected, "{w}x{h} -> {ow}x{oh}");
    }
    Ok(())
}

/// A checkpoint without a tensor the encoder needs is reported by key, not as a panic.
#[test]
fn missing_weight_is_named() -> edgetam_tracker::checks::Result<()> {
    let (fx, full) = parity::load("image_256")?;
    let key =
        "vision_encoder.backbone.timm_model.stages_2.blocks.5.token_mixer.conv1.bn.running_var";
    let mut tensors = full.tensors().clone();
    assert!(tensors.remove(key).is_some(), "fixture lacks {key}");
    let weights = Weights::from_tensors(tensors, "partial.safetensors");
    match vision::run(&fx, &weights) {
        Err(CheckError::Model(Error::MissingWeight { key: k, .. })) => assert_eq!(k, key),
        Err(e) => panic!("expected MissingWeight, got {e}"),
        Ok(_) => panic!("expected MissingWeight, got reports"),
    }
    Ok(())
}
