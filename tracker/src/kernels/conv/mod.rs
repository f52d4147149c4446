//! Convolutions on the CPU: dense (im2col), depthwise, pointwise (1x1) in f32 and bf16, and
//! RepViT's channel mixer (two 1x1 convs with GELU between) as one pass; the decoder's 2x
//! transposed convs with what follows them.

pub(crate) mod channel_mixer;
pub(crate) mod dense;
pub(crate) mod depthwise;
pub(crate) mod pointwise;
pub(crate) mod pointwise_bf16;
pub(crate) mod upscale;
