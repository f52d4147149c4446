//! What the parity tests share: the fixtures folder, a fixture with the fixture weights, and the
//! verdict on a list of stage checks. Included by each through `#[path]`.
#![allow(dead_code)]

use std::path::PathBuf;

use candle_core::Device;
use edgetam_tracker::checks::fixture::Fixture;
use edgetam_tracker::checks::{Result, StageReport};
use edgetam_tracker::Weights;

/// The repository's `fixtures/` folder.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// The fixture `fixtures/<name>` and the weights it was made with (`fixtures/model`), on the CPU.
pub fn load(name: &str) -> Result<(Fixture, Weights)> {
    let dev = Device::Cpu;
    let fx = Fixture::load(fixtures().join(name), &dev)?;
    let weights = Weights::load(fixtures().join("model/model.safetensors"), &dev)?;
    Ok((fx, weights))
}

/// Prints every check's line, then fails naming the checks that did not pass (`what`: which run,
/// for the message).
pub fn assert_all_pass(reports: &[StageReport], what: &str) {
    for r in reports {
        println!("{}", r.line());
    }
    let failed: Vec<&str> = reports
        .iter()
        .filter(|r| !r.passed)
        .map(|r| r.name.as_str())
        .collect();
    assert!(failed.is_empty(), "{what}: failed checks {failed:?}");
}
