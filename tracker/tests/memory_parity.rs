//! Memory encoder + spatial perceiver parity against transformers' EdgeTamVideoModel
//! (`_encode_new_memory`; fixture from tools/reference/generate_memory_fixtures.py).

use std::path::PathBuf;

use candle_core::Device;
use edgetam_tracker::{checks, checks::fixture::Fixture, Weights};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

#[test]
fn memory_encoder_and_perceiver_match_reference_at_256() {
    let device = Device::Cpu;
    let fx = Fixture::load(fixtures().join("memory_256"), &device).expect("fixture");
    let weights =
        Weights::load(fixtures().join("model/model.safetensors"), &device).expect("weights");
    let reports = checks::memory::run(&fx, &weights).expect("memory checks");
    assert!(reports.len() >= 20, "too few checks ran: {}", reports.len());
    let mut failed = Vec::new();
    for r in &reports {
        println!("{}", r.line());
        if !r.passed {
            failed.push(r.name.clone());
        }
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}
