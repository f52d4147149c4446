//! Frame-queue pipeline for EdgeTAM tracking: push frames (any common pixel format) from a
//! camera thread, read results in push order from another, with a bounded input queue and a
//! drop policy, prompts and other commands ordered with the frames, and optionally the image
//! encoder of the next frame running on its own thread ("encoder-ahead"). Several streams
//! (cameras) on one model and one pair of worker threads: [`MultiPipeline`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use edgetam_pipeline::{DropPolicy, Frame, PixelFormat, Pipeline};
//! use edgetam_tracker::{EdgeTam, Prompt};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = Arc::new(EdgeTam::load("/models/edgetam", &candle_core::Device::Cpu)?);
//! let pipeline = Pipeline::builder(model)
//!     .queue_capacity(2)
//!     .drop_policy(DropPolicy::DropOldest)
//!     .build()?;
//! let (w, h) = (640, 480);
//! let nv12 = vec![128u8; w * h * 3 / 2];
//! pipeline.add_prompt(1, Prompt::from_box(100.0, 80.0, 300.0, 260.0))?; // applies to the next frame
//! let id = pipeline.push(Frame::new(&nv12[..], w, h, PixelFormat::Nv12))?;
//! let out = pipeline.recv()?;
//! assert_eq!(out.id, id);
//! if let Some(r) = out.result() {
//!     for o in &r.objects {
//!         println!("object {} area {} score {:.2}", o.id, o.area, o.score);
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Semantics:
//!
//! * Results come out in push order, one per accepted frame (dropped frames included, marked
//!   [`Outcome::Dropped`]). Frames rejected by `push` (bad layout) get no id.
//! * A command (`add_prompt`, `remove_object`, `reset`) goes through the same queue as frames
//!   and is never dropped: sent between frames k and k+1 it applies from frame k+1, exactly as
//!   on a [`edgetam_tracker::Tracker`] driven serially. Commands before a dropped frame apply
//!   to the next frame that is tracked.
//! * A frame whose size differs from the previous one's resets tracking (with a
//!   `tracing::warn!` and [`FrameOutput::resolution_changed`]); commands queued before it are
//!   applied after that reset. [`ResolutionChange::Continue`] keeps tracking instead.
//! * A worker panic reaches the caller as [`Error::WorkerFailed`] on `recv` (and on later
//!   `push`es); it never hangs.
//! * Feature `opencv`: `Frame::from_mat` borrows an OpenCV `Mat` (BGR, BGRA or GRAY,
//!   continuous or not) without copying; see `MatError` for what is refused.

pub mod association;
mod builder;
mod error;
mod id_mask;
mod mask_file;
mod multi;
mod palette;
mod pipeline;
mod png_guard;
mod producer;
mod prompt_spec;
mod queue;
mod stats;
mod track_stage;
mod types;
mod workers;

#[cfg(feature = "tokio")]
mod async_pipeline;

#[cfg(feature = "tokio")]
pub use async_pipeline::AsyncPipeline;
pub use builder::PipelineBuilder;
#[cfg(feature = "opencv")]
pub use edgetam_tracker::{opencv, MatError};
pub use edgetam_tracker::{yuv_to_rgb, Frame, PixelFormat, PlaneRef};
pub use error::{Error, FrameError, Result};
pub use id_mask::{compose_id_mask, IdMaskError};
pub use mask_file::{decode_mask, read_mask, MaskFileError};
pub use multi::{MultiPipeline, MultiPipelineBuilder, MultiResults, StreamOptions};
pub use palette::OBJECT_COLORS;
pub use pipeline::{Pipeline, Results};
pub use png_guard::{check_png_palette, check_png_palette_bytes};
pub use prompt_spec::{
    parse_floats, parse_point, take_stream, PromptSpec, PromptSpecError, MAX_SPECS,
};
pub use stats::{LatencySummary, StageTimings, Stats};
pub use types::{
    DropPolicy, FrameId, FrameOutput, Outcome, ResolutionChange, StreamId, StreamOutput,
};
pub use workers::TrackHook;
