//! The public types of frames in and results out (ids, the drop and resolution policies, one
//! frame's output): what every stage of the pipeline speaks, below all of them.

use std::time::Duration;

use edgetam_tracker::FrameResult;

use crate::error::Error;
use crate::stats::StageTimings;

/// Id of a pushed frame: 0, 1, 2, ... over every frame [`Pipeline::push`] accepted, dropped
/// ones included (it does not restart on [`Pipeline::reset`]).
pub type FrameId = u64;

/// What [`Pipeline::push`] does when the input queue already holds `queue_capacity` frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DropPolicy {
    /// Wait for room (files, offline processing). The default.
    #[default]
    Block,
    /// Drop the oldest queued frame and queue the new one (live cameras: track the freshest).
    DropOldest,
    /// Drop the new frame.
    DropNewest,
}

/// What the pipeline does with a frame whose size differs from the previous frame's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResolutionChange {
    /// Reset tracking before the frame (every object forgotten, frame numbering restarted),
    /// with a `tracing::warn!`; commands queued before the frame apply after the reset. The
    /// default: a camera that changes mode is a new scene.
    #[default]
    Reset,
    /// Keep tracking, as a serially driven [`edgetam_tracker::Tracker`] does (its memory does not depend on the
    /// frame size; prompts are checked against the new size).
    Continue,
}

/// What became of one frame.
#[derive(Debug)]
pub enum Outcome {
    /// The tracker's result.
    Tracked(FrameResult),
    /// Dropped by the [`DropPolicy`]; the tracker never saw it.
    Dropped,
    /// The tracker failed on this frame (for instance a queued prompt outside the frame); the
    /// tracker's state is as after a failed [`edgetam_tracker::Tracker::track`] and the stream goes on.
    Failed(Error),
}

/// The result of one pushed frame. Results come out in push order, one per accepted frame.
#[derive(Debug)]
pub struct FrameOutput {
    pub id: FrameId,
    /// The frame's timestamp, as pushed.
    pub timestamp: Option<Duration>,
    pub outcome: Outcome,
    /// The frame's size differs from the previous frame's (since the last reset). With
    /// [`ResolutionChange::Reset`] (the default) tracking was reset before it (every object
    /// forgotten, frame numbering restarted), then the commands queued before it were applied.
    pub resolution_changed: bool,
    /// Commands queued before this frame that the tracker rejected when they were applied
    /// (for instance a prompt outside the current frame).
    pub command_errors: Vec<Error>,
    pub timings: StageTimings,
}

impl FrameOutput {
    /// The tracker's result, if the frame was tracked.
    pub fn result(&self) -> Option<&FrameResult> {
        match &self.outcome {
            Outcome::Tracked(r) => Some(r),
            _ => None,
        }
    }

    pub fn is_dropped(&self) -> bool {
        matches!(self.outcome, Outcome::Dropped)
    }
}

/// A stream of a [`crate::MultiPipeline`]: 0, 1, 2, ... in the order
/// [`crate::MultiPipeline::add_stream`] made them, never reused after
/// [`crate::MultiPipeline::remove_stream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId(pub(crate) u64);

impl StreamId {
    /// The id as a number (what [`crate::Error::UnknownStream`] names).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream {}", self.0)
    }
}

/// The result of one frame of a [`crate::MultiPipeline`]: which stream it came from, and the
/// frame's output exactly as a lone [`crate::Pipeline`] on that stream gives it (its `id` counts
/// that stream's frames).
#[derive(Debug)]
pub struct StreamOutput {
    pub stream: StreamId,
    pub output: FrameOutput,
}
