//! The EdgeTAM model, one file per stage, in the order a frame flows through them:
//! [`image_encoder`] (RepViT backbone, FPN neck, the decoder's high-resolution projections),
//! [`prompt_encoder`], [`decoder`] (two-way transformer, cross-attentions, upscaling),
//! [`memory_attention`] (RoPE, the memory cross-attention), [`memory_encoder`] and [`perceiver`].
//! [`edgetam`] holds them together; [`weights`], [`pt`] and [`original_keys`] load checkpoints, [`hub`]
//! finds them by Hugging Face hub repository id, [`spec`] is the one way the front ends load
//! a model (`ModelSpec`).
//!
//! Stage files compose the crate's kernels ([`crate::kernels`]); they hold no custom op, no
//! intrinsics and no CPU feature probe.

#[cfg(test)]
mod batch_encoder_tests;
pub(crate) mod bf16_policy;
pub(crate) mod config;
pub(crate) mod conv;
#[cfg(test)]
mod conv_tests;
pub(crate) mod decoder;
pub(crate) mod edgetam;
pub(crate) mod hub;
pub(crate) mod image_encoder;
pub(crate) mod layers;
pub(crate) mod memory_attention;
pub(crate) mod memory_encoder;
pub(crate) mod original_keys;
pub(crate) mod perceiver;
pub(crate) mod position_encoding;
pub(crate) mod precision;
pub(crate) mod prompt;
pub(crate) mod prompt_encoder;
pub(crate) mod pt;
pub(crate) mod spec;
pub(crate) mod weights;
