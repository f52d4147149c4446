//! EdgeTAM on candle: the model, one module per stage, and per-stream tracking state
//! ([`Tracker`]).
//!
//! Every stage is checked against transformers' `EdgeTamVideoModel` on deterministic random
//! weights (see `tools/reference/` and the tests). Functions take the [`candle_core::Device`]
//! their tensors live on, so the CPU and CUDA paths share this code.

pub mod allocator;
pub mod attention;
pub mod attention_bf16;
pub mod checks;
pub mod compare;
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
pub mod error;
pub mod fixture;
pub mod folded_attention;
pub mod gemm_f32;
pub mod image_encoder;
pub mod kernels;
pub mod layers;
pub mod linear_bf16;
pub mod linear_f32;
pub mod mask_decoder;
pub mod memory_attention;
pub mod memory_encoder;
pub mod model;
pub mod original_keys;
pub mod position_encoding;
pub mod postprocess;
pub mod precision;
pub mod preprocess;
pub mod prompt_encoder;
pub mod raw_frame;
pub mod repvit;
pub mod rope;
pub mod spatial_perceiver;
pub mod split_key_attention;
pub mod timings;
pub mod tracker;
pub mod tracking_step;
pub mod transfer;
pub mod two_way_transformer;
pub mod upscale;
pub mod vision_neck;
pub mod weights;
pub mod work;

pub use config::EdgeTamConfig;
pub use device::parse_device;
pub use error::{Error, Result};
pub use model::{EdgeTam, ImageEmbedding, MultimaskMode, Point, PointLabel, Prompt, Segmentation};
pub use precision::Precision;
pub use raw_frame::{PixelLayout, RawFrame};
pub use timings::StageTimes;
pub use tracker::{
    FrameResult, Mask, MemoryMaskOverride, ObjectPrompt, ObjectResult, Tracker, TrackerOptions,
};
pub use weights::Weights;
