//! The blocking pipeline handle and what it returns: frames and commands go into one queue in
//! push order (`queue.rs`), through the producer (`producer.rs`) and the tracking stage
//! (`track_stage.rs`), and come out as one [`FrameOutput`] per frame, in push order.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use edgetam_tracker::{EdgeTam, Frame, FrameResult, ObjectPrompt};

use crate::builder::PipelineBuilder;
use crate::error::{Error, Result};
use crate::queue::{lock, Command, Msg, PushError, Shared};
use crate::stats::{StageTimings, Stats};

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

/// A running pipeline. `push`, the commands and the `recv` family take `&self`: share it
/// (e.g. in an [`Arc`]) between a camera thread and a consumer thread.
///
/// Results wait in an unbounded queue until read (the input queue is what is bounded), so a
/// caller that pushes and never reads holds every result in memory.
///
/// Dropping it (or [`Self::close`]) stops the workers after the frame they are on and joins
/// them; queued frames are discarded. To process every queued frame, call [`Self::finish`] and
/// read results until the iterator ends.
pub struct Pipeline {
    pub(crate) shared: Arc<Shared>,
    results: Receiver<Msg>,
    threads: Vec<JoinHandle<()>>,
}

impl Pipeline {
    pub fn builder(model: Arc<EdgeTam>) -> PipelineBuilder {
        PipelineBuilder::new(model)
    }

    /// The handle of threads [`PipelineBuilder::build`] started.
    pub(crate) fn start(
        shared: Arc<Shared>,
        results: Receiver<Msg>,
        threads: Vec<JoinHandle<()>>,
    ) -> Self {
        Self {
            shared,
            results,
            threads,
        }
    }

    /// Queues a frame and returns its id. A frame whose layout does not match its format is
    /// rejected here with [`Error::InvalidFrame`] (it gets no id; the stream is unaffected).
    /// Borrowed pixels are copied once; conversion to RGB happens on the worker.
    ///
    /// With [`DropPolicy::Block`] this waits while the queue is full; the drop policies never
    /// wait. A dropped frame still gets an id and a result marked [`Outcome::Dropped`].
    pub fn push(&self, frame: Frame<'_>) -> Result<FrameId> {
        frame.validate()?;
        match self.shared.enqueue_frame(frame.into_owned(), true) {
            Ok(id) => Ok(id),
            Err(PushError::Failed(e)) => Err(e),
            Err(PushError::Full(_)) => Err(Error::Closed),
        }
    }

    /// Adds a box / points / mask prompt for object `obj` (new or existing). It applies to the
    /// next frame pushed after this call, exactly as [`edgetam_tracker::Tracker::add_prompt`] on the tracker's
    /// next frame. Errors found when it is applied come back in that frame's
    /// [`FrameOutput::command_errors`].
    pub fn add_prompt(&self, obj: u32, prompt: impl Into<ObjectPrompt>) -> Result<()> {
        let prompt = check_prompt(obj, prompt.into())?;
        self.shared.enqueue_command(Command::AddPrompt(obj, prompt))
    }

    /// Removes an object from the next frame on.
    pub fn remove_object(&self, obj: u32) -> Result<()> {
        self.shared.enqueue_command(Command::Remove(obj))
    }

    /// Forgets every object and restarts the tracker's frame numbering from the next frame on
    /// (frame ids keep counting).
    pub fn reset(&self) -> Result<()> {
        self.shared.enqueue_command(Command::Reset)
    }

    /// Ends the input: queued frames are still processed, then the result queue ends.
    pub fn finish(&self) {
        self.shared.finish();
    }

    /// The next result, waiting for it. [`Error::Closed`] once every result has been read after
    /// [`Self::finish`]; [`Error::WorkerFailed`] if a worker failed.
    pub fn recv(&self) -> Result<FrameOutput> {
        self.results.recv().map_err(|_| Error::Closed)?
    }

    /// The next result if one is ready.
    pub fn try_recv(&self) -> Result<Option<FrameOutput>> {
        match self.results.try_recv() {
            Ok(m) => m.map(Some),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(Error::Closed),
        }
    }

    /// The next result, waiting at most `timeout` ([`Error::Timeout`]).
    pub fn recv_timeout(&self, timeout: Duration) -> Result<FrameOutput> {
        match self.results.recv_timeout(timeout) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => Err(Error::Timeout(timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(Error::Closed),
        }
    }

    /// Results as they come, until the pipeline is finished and drained (or a worker failed:
    /// that error is the last item).
    pub fn results(&self) -> Results<'_> {
        Results { pipeline: self }
    }

    pub fn stats(&self) -> Stats {
        lock(&self.shared.stats).snapshot()
    }

    /// Stops the workers (after their current frame), joins them and returns the final stats.
    pub fn close(mut self) -> Stats {
        self.stop();
        self.stats()
    }

    /// Stops the workers without joining them.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn shared_cancel(&self) {
        self.shared.cancel();
    }

    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn try_recv_msg(&self) -> std::result::Result<Msg, TryRecvError> {
        self.results.try_recv()
    }

    fn stop(&mut self) {
        self.shared.cancel();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Rejects prompts the tracker would reject whatever the frame.
pub(crate) fn check_prompt(obj: u32, prompt: ObjectPrompt) -> Result<ObjectPrompt> {
    match &prompt {
        ObjectPrompt::Points(p) if p.bbox.is_none() && p.points.is_empty() => {
            Err(Error::InvalidCommand(format!(
                "object {obj}: a prompt needs a box, points or a mask"
            )))
        }
        ObjectPrompt::Mask(m)
            if m.width == 0 || m.height == 0 || m.data.len() != m.width * m.height =>
        {
            Err(Error::InvalidCommand(format!(
                "object {obj}: a {}x{} mask needs {} values, got {}",
                m.width,
                m.height,
                m.width.saturating_mul(m.height),
                m.data.len()
            )))
        }
        _ => Ok(prompt),
    }
}

/// Iterator over a pipeline's results (see [`Pipeline::results`]).
pub struct Results<'a> {
    pipeline: &'a Pipeline,
}

impl Iterator for Results<'_> {
    type Item = Result<FrameOutput>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.pipeline.recv() {
            Err(Error::Closed) => None,
            r => Some(r),
        }
    }
}
