//! EdgeTAM on candle: the model and per-stream tracking state ([`Tracker`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use edgetam_tracker::{EdgeTam, Prompt, Tracker};
//!
//! # fn main() -> edgetam_tracker::Result<()> {
//! let model = Arc::new(EdgeTam::load("/models/edgetam", &candle_core::Device::Cpu)?);
//! let mut tracker = Tracker::new(model);
//! tracker.add_prompt(1, 0, Prompt::from_box(40.0, 50.0, 85.0, 90.0))?;
//! let (w, h) = (320, 240);
//! let rgb = vec![0u8; w * h * 3];
//! let result = tracker.track(&rgb, w, h)?;
//! for o in &result.objects {
//!     println!("object {} visible {} box {:?}", o.id, o.visible, o.bbox);
//! }
//! # Ok(()) }
//! ```
//!
//! Every stage is checked against transformers' `EdgeTamVideoModel` on deterministic random
//! weights (see `tools/reference/` and the tests). The source follows a frame's data flow:
//! `frame/` (pixel layouts, preprocessing, mask post-processing), `model/` (one file per stage),
//! `tracking/` (the [`Tracker`] and one object's step), `kernels/` (crate-private CPU and CUDA
//! kernels), `instrument/` (timings, counted work); `checks/` (feature `checks`) replays the
//! reference fixtures. ARCHITECTURE.md at the repository root maps every file.

/// For `benches/stages.rs` only (the facade turns `checks` on); it times stage parts that exist
/// only with that feature.
#[doc(hidden)]
#[cfg(feature = "checks")]
pub mod bench_support;
mod device;
mod error;
mod frame;
mod instrument;
mod kernels;
pub mod limits;
mod model;
mod setup;
mod tracking;
#[doc(hidden)]
pub mod util;

/// Stage-by-stage checks against the reference fixtures (what the parity tests and
/// `edgetam check` run).
#[cfg(feature = "checks")]
pub mod checks;

pub use device::{parse_device, Backend};
pub use error::{Error, HubError, Result};
#[cfg(feature = "opencv")]
pub use frame::mat::{pixel_format_of, MatError};
pub use frame::{yuv_to_rgb, Frame, FrameError, PixelFormat, PlaneRef};
pub use instrument::allocator::keep_freed_memory;
pub use instrument::timings::StageTimes;
pub use kernels::cpu::{available_isas, isa, Isa, IsaError};
pub use kernels::{pin_default_threads, CANDLE_SPIN_LIMIT};
pub use limits::LimitError;
pub use model::config::{EdgeTamConfig, MAX_INPUT_SIZE, MIN_INPUT_SIZE};
pub use setup::process_setup;

/// The model configuration (`config.json`, transformers' `EdgeTamVideoConfig`) and its parts.
pub mod config {
    pub use crate::model::config::{
        BackboneConfig, EdgeTamConfig, MaskDecoderConfig, PromptEncoderConfig, RopeParameters,
        VisionConfig,
    };
}
pub use model::edgetam::{
    mask_area_and_box, EdgeTam, ImageEmbedding, LoadOptions, MultimaskMode, Segmentation,
    NO_OBJECT_SCORE,
};
pub use model::hub::{resolve_model, ModelSource};
pub use model::precision::Precision;
pub use model::prompt::{Point, PointLabel, Prompt};
pub use model::spec::{LoadedModel, ModelSpec};
pub use model::weights::{CheckpointFormat, Weights};
/// The `opencv` crate this one was built against (feature `opencv`).
#[cfg(feature = "opencv")]
pub use opencv;
pub use tracking::prompts::{Mask, ObjectPrompt};
pub use tracking::results::{FrameResult, ObjectResult};
pub use tracking::tracker::{MemoryMaskOverride, Tracker, TrackerOptions};

/// Internals for this workspace's benchmarks, CLI and parity tests: stage modules and kernels
/// that are not part of the supported API and may change at any time.
#[doc(hidden)]
pub mod internals {
    pub use crate::frame::postprocess::{binarize, resize_logits};
    pub use crate::frame::preprocess::{
        preprocess, preprocess_frame, preprocess_host, resize_rgb_u8,
    };
    pub use crate::instrument::layers::{self, LayerTime};
    pub use crate::instrument::macs::StageWork;
    pub use crate::instrument::transfer::{self, Transfers};
    pub use crate::kernels::attention::bf16::scaled_dot_product_bf16;
    pub use crate::kernels::attention::split_key::split_key_attention;
    pub use crate::kernels::attention::{scaled_dot_product, scaled_dot_product_unfused};
    pub use crate::kernels::conv::depthwise::Depthwise;
    pub use crate::kernels::rope::rotate_pairwise;
    pub use crate::model::decoder::{
        select_single_mask, stability_scores, DecoderInputs, MaskDecoder,
    };
    pub use crate::model::memory_attention::rope::AxialRope;
    pub use crate::model::memory_attention::MemoryAttention;
    pub use crate::model::original_keys::{to_transformers, transformers_name};
}
