//! Streaming parity with transformers' EdgeTAM session on the committed sequences: every frame,
//! every object, free-running and with the reference's binarised memory inputs forced, plus
//! stage checks at one late tracked frame. See `edgetam_tracker::checks::sequence`.

use std::path::PathBuf;
use std::sync::Arc;

use candle_core::Device;
use edgetam_tracker::checks::sequence::{run, Event, Mode, SequenceFixture};
use edgetam_tracker::{EdgeTam, LoadOptions, Weights};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// `EDGETAM_SEQUENCE_FRAMES=N` keeps the events of the first `N` frames only: under emulation
/// (the ARM64 tests run in qemu, ~50x slower) a whole sequence takes minutes.
fn load(dir: &str) -> SequenceFixture {
    let mut fx = SequenceFixture::load(fixtures().join(dir)).expect("sequence fixture");
    let keep = std::env::var("EDGETAM_SEQUENCE_FRAMES").ok();
    if let Some(n) = keep.and_then(|v| v.trim().parse::<u64>().ok()) {
        fx.events.retain(|ev| match ev {
            Event::Prompt { frame, .. }
            | Event::Track { frame, .. }
            | Event::Refresh { frame, .. } => *frame < n,
        });
    }
    fx
}

fn check(dir: &str, mode: Mode) {
    let fx = load(dir);
    let base =
        Weights::load(fixtures().join("model/model.safetensors"), &Device::Cpu).expect("weights");
    let model = Arc::new(fx.model(&base, &Device::Cpu).expect("model"));
    replay_and_compare(dir, &fx, model, mode);
}

/// A fixture the reference ran at a smaller input size than the checkpoint's: the model is the
/// 1024 checkpoint (`fixtures/model`, config untouched) loaded with `LoadOptions::input_size`,
/// the path users take; its derived config must be the one the reference ran with.
fn check_at_input_size(dir: &str, mode: Mode) {
    let fx = load(dir);
    let size = fx.config.image_size;
    let options = LoadOptions::default().input_size(size);
    let model = EdgeTam::load_with(fixtures().join("model"), &Device::Cpu, &options)
        .expect("model at the input size");
    let (ours, theirs) = (model.config(), &fx.config);
    assert_eq!(ours.image_size, size);
    assert_eq!(ours.prompt_encoder_config.image_size, size);
    assert_eq!(
        ours.vision_config.backbone_feature_sizes,
        theirs.vision_config.backbone_feature_sizes
    );
    assert_eq!(
        ours.memory_attention_rope_feat_sizes,
        theirs.memory_attention_rope_feat_sizes
    );
    assert_eq!(
        ours.memory_attention_rope_k_sizes,
        theirs.memory_attention_rope_k_sizes
    );
    replay_and_compare(dir, &fx, Arc::new(model), mode);
}

fn replay_and_compare(dir: &str, fx: &SequenceFixture, model: Arc<EdgeTam>, mode: Mode) {
    let reports = run(fx, model, mode).expect("replay");
    assert!(reports.len() > 10, "too few checks: {}", reports.len());
    let failed: Vec<String> = reports
        .iter()
        .filter(|r| !r.passed)
        .map(|r| r.line())
        .collect();
    for r in &reports {
        eprintln!("{dir}: {}", r.line());
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

#[test]
fn sequence_512_free_running() {
    check_at_input_size("sequence_512", Mode::FreeRunning);
}

#[test]
fn sequence_512_forced() {
    check_at_input_size("sequence_512", Mode::Forced);
}

#[test]
fn sequence_768_free_running() {
    check_at_input_size("sequence_768", Mode::FreeRunning);
}

#[test]
fn sequence_768_forced() {
    check_at_input_size("sequence_768", Mode::Forced);
}
