//! End-to-end single-frame parity: raw image + user prompt -> masks, scores and pointer, against
//! transformers' EdgeTamVideoModel (fixtures from tools/reference/generate_fixtures.py).

use std::path::PathBuf;

use candle_core::Device;
use edgetam_tracker::{checks, checks::fixture::Fixture, Weights};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn run(dir: &str) {
    let device = Device::Cpu;
    let fx = Fixture::load(fixtures().join(dir), &device).expect("fixture");
    let weights =
        Weights::load(fixtures().join("model/model.safetensors"), &device).expect("weights");
    let reports = checks::frame::run(&fx, &weights).expect("single-frame run");
    assert!(reports.len() >= 8, "too few checks ran: {}", reports.len());
    let mut failed = Vec::new();
    for r in &reports {
        println!("{}", r.line());
        if !r.passed {
            failed.push(r.name.clone());
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}

#[test]
fn single_frame_matches_reference_at_256() {
    run("image_256");
}

/// The one end-to-end test on the full default config (1024 input).
#[test]
fn single_frame_matches_reference_at_1024() {
    run("image_1024");
}
