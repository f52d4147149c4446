//! Numeric precision of the model's heaviest products.

use std::fmt;
use std::str::FromStr;

/// How the model computes its heaviest products.
///
/// * [`Precision::F32`] (default): exact float32 everywhere; what the parity tests check.
/// * [`Precision::Bf16`]: the fast mode. Memory attention's attention products (scores and
///   probability-weighted values, about 70 % of its work) take bf16 inputs with f32
///   accumulation on CPUs with AVX512-BF16; everything else stays f32. Its own tolerance: the
///   binary masks keep an IoU >= 0.99 with the f32 path on every frame of the sequence fixtures
///   (`tracker/tests/bf16_mode.rs`). On CPUs without AVX512-BF16 it runs the f32 path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    F32,
    Bf16,
}

impl FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => Ok(Self::F32),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            other => Err(format!("precision must be f32 or bf16, got `{other}`")),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
        })
    }
}
