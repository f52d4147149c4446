//! Stage-by-stage checks against reference fixtures.
//!
//! The parity tests and `edgetam check` run the same functions: each stage is fed the fixture's
//! own inputs (so errors do not compound) and compared with the reference output.

pub mod compare;
pub mod decoder;
mod error;
pub mod fixture;
pub mod frame;
pub mod memory;
pub mod memory_attention;
pub mod sequence;
pub mod vision;

pub use self::error::{CheckError, Result};
use crate::checks::compare::Comparison;

/// The outcome of one stage check.
#[derive(Debug, Clone)]
pub struct StageReport {
    /// Stage and case, e.g. `backbone.stage2` or `decoder.box.mm1.masks`.
    pub name: String,
    pub comparison: Comparison,
    /// The bar this check had to meet, in words (e.g. `rel_l2 <= 1e-4`).
    pub limit: String,
    pub passed: bool,
}

impl StageReport {
    /// A check whose bar is a relative L2 error.
    pub fn rel_l2(name: impl Into<String>, comparison: Comparison, max_rel_l2: f64) -> Self {
        Self {
            name: name.into(),
            passed: comparison.rel_l2 <= max_rel_l2 && comparison.rel_l2.is_finite(),
            limit: format!("rel_l2 <= {max_rel_l2:e}"),
            comparison,
        }
    }

    /// A check whose bar is a max absolute difference.
    pub fn max_abs(name: impl Into<String>, comparison: Comparison, max_abs: f64) -> Self {
        Self {
            name: name.into(),
            passed: comparison.max_abs <= max_abs && comparison.max_abs.is_finite(),
            limit: format!("max_abs <= {max_abs:e}"),
            comparison,
        }
    }

    /// A check with its own pass/fail rule.
    pub fn custom(
        name: impl Into<String>,
        comparison: Comparison,
        passed: bool,
        limit: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            comparison,
            limit: limit.into(),
            passed,
        }
    }

    /// One line: `[ok]   name  rel_l2=… cos=… max_abs=…  (limit)`.
    pub fn line(&self) -> String {
        let c = &self.comparison;
        format!(
            "{} {:<40} rel_l2={:.2e} cos={:.8} max_abs={:.2e}  ({})",
            if self.passed { "[ok]  " } else { "[FAIL]" },
            self.name,
            c.rel_l2,
            c.cosine,
            c.max_abs,
            self.limit
        )
    }
}

/// The parity bar of the foundation issue: relative L2 error per stage.
pub const STAGE_REL_L2: f64 = 1e-4;

/// Every check that applies to a fixture directory, chosen by the tensors it holds: image-path
/// fixtures get the per-stage vision and decoder checks and the end-to-end single-frame path;
/// video-stage fixtures get their stage's checks.
pub fn run_all(
    fx: &crate::checks::fixture::Fixture,
    weights: &crate::model::weights::Weights,
) -> Result<Vec<StageReport>> {
    let mut reports = Vec::new();
    if fx.has("image.rgb_u8") {
        reports.extend(vision::run(fx, weights)?);
        reports.extend(decoder::run(fx, weights)?);
        reports.extend(frame::run(fx, weights)?);
    }
    if fx.has("memory.tracked.memory") {
        reports.extend(memory::run(fx, weights)?);
    }
    if fx.has("memattn.output") {
        reports.extend(memory_attention::run(fx, weights)?);
    }
    if reports.is_empty() {
        return Err(CheckError::Fixture(format!(
            "{} holds no tensors any check knows (is it a fixture directory?)",
            fx.dir.display()
        )));
    }
    Ok(reports)
}
