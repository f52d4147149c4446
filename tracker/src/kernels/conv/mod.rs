//! Convolutions on the CPU: depthwise, pointwise (1x1) in bf16, RepViT's fused channel mixer.

pub(crate) mod channel_mixer;
pub(crate) mod depthwise;
pub(crate) mod pointwise_bf16;
