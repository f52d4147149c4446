//! Image-path parity against transformers' EdgeTAM on the committed random-weight fixtures.

use std::path::PathBuf;
use std::time::Instant;

use candle_core::Device;
use edgetam_tracker::checks::vision;
use edgetam_tracker::fixture::Fixture;
use edgetam_tracker::preprocess::{preprocess, resize_rgb_u8};
use edgetam_tracker::{Error, Weights};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn run_fixture(name: &str) -> edgetam_tracker::Result<()> {
    let dev = Device::Cpu;
    let weights = Weights::load(fixtures().join("model/model.safetensors"), &dev)?;
    let fx = Fixture::load(fixtures().join(name), &dev)?;
    let t = Instant::now();
    let reports = vision::run(&fx, &weights)?;
    eprintln!("{name}: vision checks in {:.2?}", t.elapsed());
    for r in &reports {
        println!("{}", r.line());
    }
    assert!(
        reports.len() == 13,
        "expected 13 checks, got: {}",
        reports.len()
    );
    let failed: Vec<_> = reports
        .iter()
        .filter(|r| !r.passed)
        .map(|r| &r.name)
        .collect();
    assert!(failed.is_empty(), "{name}: failed stages {failed:?}");
    Ok(())
}

#[test]
fn vision_parity_256() -> edgetam_tracker::Result<()> {
    run_fixture("image_256")
}

#[test]
fn vision_parity_1024() -> edgetam_tracker::Result<()> {
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
