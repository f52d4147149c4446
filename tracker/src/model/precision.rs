//! Numeric precision of the model's heaviest products. Where each can run
//! ([`Precision::available_on`]) is in `device.rs`, beside the devices.

use std::fmt;
use std::str::FromStr;

/// How the model computes its heaviest products.
///
/// * [`Precision::F32`] (default): exact float32 everywhere; what the parity tests check.
/// * [`Precision::Bf16`]: the fast mode, on CPUs with AVX512-BF16. These products take bf16
///   inputs with f32 accumulation: memory attention's attention products (the folded
///   cross-attention's too), projections and MLP; the memory encoder's 1x1 convolutions (its
///   fuser's MLPs included); the image encoder's 1x1 convolutions from the backbone's
///   stride-16 stage on, its FPN and high-resolution convs. Exact f32 stays where bf16 costs accuracy or gains nothing: the
///   backbone's stride-4/8 stages (in bf16 they moved prompted-frame masks below the bar,
///   IoU 0.9856), the decoder, norms, softmax and everything elementwise.
///   The mode's own tolerance: the binary masks keep an IoU >= 0.99 with the f32 path on every
///   frame of the sequence fixtures (`tracker/tests/bf16_mode.rs`; worst measured 0.9907).
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
