//! [`ModelSpec`], the one loader of every front end: a bf16 request where bf16 cannot run is
//! refused with [`Error::PrecisionUnavailable`], never loaded as f32.
//!
//! The refusal is exercised on any CPU by capping the kernels below the bf16 kernels' avx512
//! (`EDGETAM_ISA=avx2`, or `portable` on a CPU without AVX2). The cap is read once per process,
//! so the test runs this binary again with it set (`refusal_child`, ignored in a plain run).

use std::path::PathBuf;
use std::process::Command;

use candle_core::Device;
use edgetam_tracker::{Backend, EdgeTam, Error, Isa, ModelSpec, Precision};

fn model_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/model")
}

/// Set in the child run: the cap it runs under.
const CHILD_CAP: &str = "EDGETAM_MODEL_SPEC_CHILD_CAP";

#[test]
fn bf16_is_refused_under_an_isa_cap() {
    let cap = if Isa::Avx2.runs_here() {
        "avx2"
    } else {
        "portable"
    };
    let exe = std::env::current_exe().expect("test binary");
    let out = Command::new(exe)
        .args(["--exact", "refusal_child", "--ignored", "--nocapture"])
        .env("EDGETAM_ISA", cap)
        .env(CHILD_CAP, cap)
        .output()
        .expect("run the child");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child ran nothing:\n{text}");
}

/// The child of [`bf16_is_refused_under_an_isa_cap`]: run only under the cap.
#[test]
#[ignore = "run by bf16_is_refused_under_an_isa_cap with EDGETAM_ISA set"]
fn refusal_child() {
    let Ok(cap) = std::env::var(CHILD_CAP) else {
        return;
    };
    assert_eq!(edgetam_tracker::isa().map(|i| i.name()), Ok(cap.as_str()));
    let spec = ModelSpec::new(model_dir())
        .input_size(256)
        .precision(Precision::Bf16);
    // Refused by the check (before the model is read) and by the load, with the same error.
    for result in [spec.check().map(|_| ()), spec.load().map(|_| ())] {
        match result {
            Err(e @ Error::PrecisionUnavailable { .. }) => {
                let message = e.to_string();
                println!("refused: {message}");
                assert!(
                    message.starts_with("precision bf16 is not available here: it needs ")
                        && message.contains("this CPU runs"),
                    "{message}"
                );
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(()) => panic!("bf16 accepted under EDGETAM_ISA={cap}"),
        }
    }
    // What the compatibility call does there: f32, with a warning; the strict one refuses.
    let mut model = EdgeTam::load_with(
        model_dir(),
        &Device::Cpu,
        &edgetam_tracker::LoadOptions::default().input_size(256),
    )
    .expect("the fixture model");
    assert!(matches!(
        model.try_set_precision(Precision::Bf16),
        Err(Error::PrecisionUnavailable { .. })
    ));
    assert_eq!(model.precision(), Precision::F32);
    assert_eq!(model.set_precision(Precision::Bf16), Precision::F32);
    // f32 loads, on the capped path.
    let loaded = spec.precision(Precision::F32).load().expect("f32 loads");
    assert_eq!(loaded.model.precision(), Precision::F32);
    assert_eq!(loaded.backend.to_string(), format!("cpu {cap}"));
    assert_eq!(loaded.backend, Backend::of(&Device::Cpu));
}
