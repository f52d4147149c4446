//! Loading errors name what is wrong: missing, mis-shaped and unexpected tensors, bad paths.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use edgetam_tracker::{EdgeTam, EdgeTamConfig, Error, Weights};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

fn fixture_tensors() -> HashMap<String, Tensor> {
    let w =
        Weights::load(fixtures().join("model/model.safetensors"), &Device::Cpu).expect("weights");
    w.tensors().clone()
}

fn config() -> EdgeTamConfig {
    EdgeTamConfig::from_file(fixtures().join("image_256/config.json")).expect("config")
}

fn build(tensors: HashMap<String, Tensor>) -> Result<EdgeTam, Error> {
    let w = Weights::from_tensors(tensors, "test.safetensors");
    EdgeTam::from_weights(config(), &w, &Device::Cpu)
}

#[test]
fn complete_checkpoint_builds() {
    build(fixture_tensors()).expect("the fixture checkpoint is complete");
}

#[test]
fn missing_tensor_is_named() {
    let mut t = fixture_tensors();
    let key = "mask_decoder.iou_prediction_head.proj_out.weight";
    t.remove(key).expect("key exists");
    match build(t) {
        Err(Error::MissingWeight { key: k, .. }) => assert_eq!(k, key),
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("built without {key}"),
    }
}

#[test]
fn misshaped_tensor_is_named() {
    let mut t = fixture_tensors();
    let key = "prompt_encoder.point_embed.weight";
    t.insert(
        key.into(),
        Tensor::zeros((3, 256), DType::F32, &Device::Cpu).unwrap(),
    );
    match build(t) {
        Err(Error::WeightShape { key: k, actual, .. }) => {
            assert_eq!(k, key);
            assert_eq!(actual, vec![3, 256]);
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("built with a mis-shaped {key}"),
    }
}

#[test]
fn unexpected_tensor_is_named() {
    let mut t = fixture_tensors();
    t.insert(
        "mask_decoder.extra_head.weight".into(),
        Tensor::zeros(4, DType::F32, &Device::Cpu).unwrap(),
    );
    match build(t) {
        Err(Error::UnexpectedWeights { first, count, .. }) => {
            assert_eq!(first, "mask_decoder.extra_head.weight");
            assert_eq!(count, 1);
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("built with an unexpected tensor"),
    }
}

#[test]
fn missing_model_path_is_an_error() {
    let err = EdgeTam::load("/nonexistent/edgetam", &Device::Cpu)
        .err()
        .expect("must fail");
    assert!(err.to_string().contains("/nonexistent/edgetam"), "{err}");
}

#[test]
fn resnet_typo_config_is_rejected() {
    let text = r#"{"vision_config": {"backbone_config": {"archirecture": "repvit_m1"}}}"#;
    let err = EdgeTamConfig::from_json(text).expect_err("must fail");
    assert!(err.to_string().contains("archirecture"), "{err}");
}

#[test]
fn random_weights_run_end_to_end() {
    let model = EdgeTam::random(
        EdgeTamConfig::with_image_size(256).unwrap(),
        0,
        &Device::Cpu,
    )
    .unwrap();
    let (w, h) = (90usize, 60usize);
    let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 7 % 251) as u8).collect();
    let emb = model.encode_image(&rgb, w, h).unwrap();
    let prompt = edgetam_tracker::Prompt::from_box(10.0, 10.0, 60.0, 50.0);
    let seg = model.segment(&emb, &prompt, Default::default()).unwrap();
    assert!(seg.object_score.is_finite());
    let (logits, mask) = model.mask_at_original(&emb, &seg).unwrap();
    assert_eq!(mask.dims(), &[h, w]);
    assert_eq!(logits.dims(), &[1, 1, h, w]);
}

#[test]
fn config_without_backbone_is_rejected() {
    for text in [
        r#"{}"#,
        r#"{"vision_config": {}}"#,
        r#"{"vision_config": {"backbone_config": {}}}"#,
    ] {
        let err = EdgeTamConfig::from_json(text).expect_err("must fail");
        assert!(err.to_string().contains("repvit_m1"), "{text}: {err}");
    }
    let ok = r#"{"vision_config": {"backbone_config": {"architecture": "repvit_m1"}}}"#;
    let cfg = EdgeTamConfig::from_json(ok).expect("minimal config");
    assert_eq!(cfg.image_size, 1024);
    assert_eq!(cfg.embed_size(), 64);
}

/// Meta's original `edgetam.pt` layout builds the whole single-frame model through the key map
/// (no config.json beside it: the released config is used).
#[test]
fn original_checkpoint_builds_the_model() {
    let model = EdgeTam::load(fixtures().join("original/edgetam.pt"), &Device::Cpu)
        .expect("original layout loads");
    assert_eq!(model.config().image_size, 1024);
}
