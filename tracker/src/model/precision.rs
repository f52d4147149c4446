//! Numeric precision of the model's heaviest products. Where each can run
//! ([`Precision::available_on`]) is in `device.rs`, beside the devices.

use std::fmt;
use std::str::FromStr;

/// How the model computes its heaviest products.
///
/// * [`Precision::F32`] (default): exact float32 everywhere; what the parity tests check.
/// * [`Precision::Bf16`]: the fast mode, on CPUs with AVX512-BF16. Its products take bf16
///   inputs with f32 accumulation where that keeps the mode's tolerance (the memory
///   attention's projections, attention products and MLP) and split bf16 products (accurate
///   to about 16 bits, on AMX; exact f32 without it) in the image encoder, whose rounding
///   reaches every object's every frame, and in the memory encoder. Which layer group runs which
///   is one table, `BF16_POLICY` in `model/bf16_policy.rs`, chosen by measured sensitivity.
///   Exact f32 stays in the decoder, norms, softmax and everything elementwise.
///   The mode's own tolerance: the binary masks keep an IoU >= 0.99 with the f32 path on every
///   frame of the sequence fixtures (`tracker/tests/bf16_mode.rs`).
///   Elsewhere it cannot run: [`Self::available_on`] says why, and loading with it
///   ([`ModelSpec`](crate::ModelSpec)) fails with
///   [`Error::PrecisionUnavailable`](crate::Error::PrecisionUnavailable).
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
