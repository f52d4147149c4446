//! `config.json`: any bytes are a typed error or a config whose sizes are within
//! `edgetam_tracker::limits`; a config that validates builds the model from the fixture
//! checkpoint (the real loader, the weights an attacker cannot size) or fails with a typed
//! error, never a panic, an abort or an unbounded allocation.
#![no_main]

use std::sync::LazyLock;

use candle_core::{Device, Tensor};
use edgetam_tracker::limits::MAX_IMAGE_SIZE;
use edgetam_tracker::{EdgeTam, EdgeTamConfig, Weights};
use libfuzzer_sys::fuzz_target;

/// The fixture checkpoint's tensors, loaded once.
static TENSORS: LazyLock<std::collections::HashMap<String, Tensor>> = LazyLock::new(|| {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fixtures/model/model.safetensors"
    );
    Weights::load(path, &Device::Cpu)
        .expect("fixtures/model/model.safetensors")
        .tensors()
        .clone()
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cfg) = EdgeTamConfig::from_json(text) else {
        return;
    };
    assert!(cfg.image_size <= MAX_IMAGE_SIZE);
    let _ = cfg.embed_size();
    let _ = cfg.low_res_mask_size();
    let _ = cfg.check_tracking();
    // Model construction precomputes tables sized by the input (position encodings, RoPE):
    // built for the sizes a fuzzer reaches quickly, bounded above by the limits anyway.
    if cfg.image_size <= 256 {
        let weights = Weights::from_tensors(TENSORS.clone(), "fixture.safetensors");
        let _ = EdgeTam::from_weights(cfg, &weights, &Device::Cpu);
    }
});
