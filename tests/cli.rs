//! The `edgetam` binary as a user runs it: outputs, exit codes and error messages.

use std::path::PathBuf;
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn edgetam(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_edgetam"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run edgetam")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("edgetam-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn segment_with_random_weights_writes_mask_and_overlay() {
    let (mask, overlay) = (tmp("mask.png"), tmp("overlay.png"));
    let o = edgetam(&[
        "segment",
        "--random-weights",
        "--size",
        "256",
        "--image",
        "examples/data/shapes.png",
        "--box",
        "150,90,330,260",
        "--point",
        "240,170,1",
        "--out",
        mask.to_str().unwrap(),
        "--overlay",
        overlay.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("meaningless"),
        "must warn that random masks are meaningless"
    );
    let m = image::open(&mask).unwrap();
    assert_eq!((m.width(), m.height()), (480, 360));
    let ov = image::open(&overlay).unwrap();
    assert_eq!((ov.width(), ov.height()), (480, 360));
}

#[test]
fn segment_with_fixture_weights_reports_scores() {
    let mask = tmp("mask_fixture.png");
    let o = edgetam(&[
        "segment",
        "--model",
        "fixtures/model",
        "--image",
        "examples/data/shapes.png",
        "--point",
        "240,170,1",
        "--out",
        mask.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("object score") && out.contains("best of 3"),
        "{out}"
    );
}

#[test]
fn missing_image_is_a_clear_error() {
    let o = edgetam(&[
        "segment",
        "--random-weights",
        "--image",
        "no/such.png",
        "--box",
        "1,1,5,5",
        "--out",
        "x.png",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no/such.png"), "{}", stderr(&o));
}

#[test]
fn unreadable_image_is_a_clear_error() {
    let bad = tmp("not_an_image.png");
    std::fs::write(&bad, b"this is not a PNG").unwrap();
    let o = edgetam(&[
        "segment",
        "--random-weights",
        "--image",
        bad.to_str().unwrap(),
        "--box",
        "1,1,5,5",
        "--out",
        "x.png",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot"), "{}", stderr(&o));
}

#[test]
fn prompt_outside_the_image_is_rejected() {
    let o = edgetam(&[
        "segment",
        "--random-weights",
        "--image",
        "examples/data/shapes.png",
        "--box",
        "10,10,900,50",
        "--out",
        "x.png",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("outside"), "{}", stderr(&o));
    let o = edgetam(&[
        "segment",
        "--random-weights",
        "--image",
        "examples/data/shapes.png",
        "--point",
        "10,10,7",
        "--out",
        "x.png",
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("label"), "{}", stderr(&o));
}

#[test]
fn missing_model_is_a_clear_error() {
    let o = edgetam(&[
        "segment",
        "--model",
        "no/model",
        "--image",
        "examples/data/shapes.png",
        "--box",
        "1,1,5,5",
        "--out",
        "x.png",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no/model"), "{}", stderr(&o));
}

#[test]
fn check_passes_on_the_fixtures() {
    let o = edgetam(&["check", "--fixtures", "fixtures/image_256"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(out.contains("[ok]") && !out.contains("[FAIL]"), "{out}");
}

#[test]
fn check_fails_with_other_weights() {
    // Same fixture, but a model with different (random) weights must fail the checks: proves
    // `check` can fail. Uses a copy of the fixture weights with one tensor scaled.
    let dir = tmp("perturbed");
    std::fs::create_dir_all(&dir).unwrap();
    let src = root().join("fixtures/model/model.safetensors");
    let mut tensors = candle_core::safetensors::load(&src, &candle_core::Device::Cpu).unwrap();
    let key = "vision_encoder.neck.convs.1.weight";
    let t = tensors[key].clone();
    tensors.insert(key.into(), (t * 1.01).unwrap());
    let dst = dir.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &dst).unwrap();
    let o = edgetam(&[
        "check",
        "--fixtures",
        "fixtures/image_256",
        "--model",
        dst.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("[FAIL]"));
}
