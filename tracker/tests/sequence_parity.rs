//! Streaming parity with transformers' EdgeTAM session on the committed sequences: every frame,
//! every object, free-running and with the reference's binarised memory inputs forced, plus
//! stage checks at one late tracked frame. See `edgetam_tracker::checks::sequence`.

use std::path::PathBuf;
use std::sync::Arc;

use candle_core::Device;
use edgetam_tracker::checks::sequence::{run, Mode, SequenceFixture};
use edgetam_tracker::Weights;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn check(dir: &str, mode: Mode) {
    let fx = SequenceFixture::load(fixtures().join(dir)).expect("sequence fixture");
    let base =
        Weights::load(fixtures().join("model/model.safetensors"), &Device::Cpu).expect("weights");
    let model = Arc::new(fx.model(&base, &Device::Cpu).expect("model"));
    let reports = run(&fx, model, mode).expect("replay");
    assert!(reports.len() > 10, "too few checks: {}", reports.len());
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.passed)
        .map(|r| r.line())
        .collect();
    for r in &reports {
        eprintln!("{}", r.line());
    }
    assert!(
        failed.is_empty(),
        "{} of {} checks failed:\n{}",
        failed.len(),
        reports.len(),
        failed.join("\n")
    );
}

#[test]
fn sequence_256_free_running() {
    check("sequence_256", Mode::FreeRunning);
}

#[test]
fn sequence_256_forced_and_stages() {
    check("sequence_256", Mode::Forced);
}

#[test]
fn sequence_256_transformers_defaults_free_running() {
    check("sequence_256_defaults", Mode::FreeRunning);
}

#[test]
fn sequence_256_transformers_defaults_forced_and_stages() {
    check("sequence_256_defaults", Mode::Forced);
}

#[test]
fn sequence_1024_free_running() {
    check("sequence_1024", Mode::FreeRunning);
}

#[test]
fn sequence_1024_forced() {
    check("sequence_1024", Mode::Forced);
}
