//! Errors of the pipeline and of frame validation.

use std::time::Duration;

use crate::frame::PixelFormat;

/// Why a [`crate::Frame`] cannot be converted: its size, stride or buffer do not match its
/// format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame is {width}x{height}: both sides must be at least one pixel")]
    ZeroSize { width: usize, height: usize },
    #[error("frame {width}x{height} is too large to address")]
    TooLarge { width: usize, height: usize },
    #[error(
        "{format:?} frame {width} pixels wide needs a row stride of at least {min} bytes, got {stride}"
    )]
    StrideTooSmall {
        format: PixelFormat,
        width: usize,
        stride: usize,
        min: usize,
    },
    #[error(
        "{format:?} frame {width}x{height} with row stride {stride} needs at least {needed} bytes, got {got}"
    )]
    BufferTooShort {
        format: PixelFormat,
        width: usize,
        height: usize,
        stride: usize,
        needed: usize,
        got: usize,
    },
    #[error("{format:?} is 4:2:0 subsampled: width and height must be even, got {width}x{height}")]
    OddDimensions {
        format: PixelFormat,
        width: usize,
        height: usize,
    },
    #[error("I420 row stride must be even (chroma rows are stride / 2 bytes), got {stride}")]
    OddStride { stride: usize },
}

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
    /// A bad builder setting, or a thread or thread pool that could not be started.
    #[error("pipeline configuration: {0}")]
    Config(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
