//! Errors of the pipeline (a bad frame is the tracker's [`FrameError`]).

use std::time::Duration;

pub use edgetam_tracker::FrameError;

/// Errors of the pipeline.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A frame was rejected by [`crate::Pipeline::push`]; the stream is unaffected.
    #[error("invalid frame: {0}")]
    InvalidFrame(#[from] FrameError),
    /// A command was rejected before it was queued (an empty prompt, an inconsistent mask).
    #[error("invalid command: {0}")]
    InvalidCommand(String),
    /// The tracker failed on one frame (or rejected a command); the stream keeps working.
    #[error(transparent)]
    Tracker(#[from] edgetam_tracker::Error),
    /// The pipeline was closed or finished: no more input, or no more results.
    #[error("the pipeline is closed")]
    Closed,
    /// A worker thread panicked or failed; the pipeline stopped.
    #[error("a pipeline worker failed: {0}")]
    WorkerFailed(String),
    /// [`crate::Pipeline::recv_timeout`] saw no result in time.
    #[error("no result within {0:?}")]
    Timeout(Duration),
    /// A [`crate::MultiPipeline`] has no stream of this id (never added, or removed).
    #[error("no stream {0} in the pipeline")]
    UnknownStream(u64),
    /// A bad builder setting, or a thread or thread pool that could not be started.
    #[error("pipeline configuration: {0}")]
    Config(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
