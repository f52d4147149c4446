//! The blocking pipeline handle and what it returns: frames and commands go into one queue in
//! push order (`queue.rs`), through the producer (`producer.rs`) and the tracking stage
//! (`track_stage.rs`), and come out as one [`FrameOutput`] per frame, in push order.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use edgetam_tracker::{Frame, ObjectPrompt};

use crate::error::{Error, Result};
use crate::queue::{lock, Command, Msg, PushError, Shared};
use crate::stats::Stats;
use crate::types::{FrameId, FrameOutput};

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
    /// The handle of threads [`crate::PipelineBuilder::build`] started.
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
