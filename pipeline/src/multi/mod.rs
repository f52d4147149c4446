//! Several cameras, one process: a [`MultiPipeline`] tracks N streams with one model and one
//! pair of worker threads. Frames go in tagged with their [`StreamId`] and results come out
//! tagged the same ([`StreamOutput`]); each stream has its own objects, prompts, memory, queue,
//! drop policy and [`Stats`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use edgetam_pipeline::{Frame, MultiPipeline, PixelFormat, StreamOptions};
//! use edgetam_tracker::{EdgeTam, Prompt};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let model = Arc::new(EdgeTam::load("/models/edgetam", &candle_core::Device::Cpu)?);
//! let pipeline = MultiPipeline::builder(model).build()?;
//! let front = pipeline.add_stream(StreamOptions::live())?; // newest frame wins
//! let back = pipeline.add_stream(StreamOptions::live())?;
//! pipeline.add_prompt(front, 1, Prompt::from_box(100.0, 80.0, 300.0, 260.0))?;
//! pipeline.add_prompt(back, 1, Prompt::from_box(10.0, 10.0, 60.0, 60.0))?;
//! let (vga, hd) = (vec![128u8; 640 * 480 * 3 / 2], vec![128u8; 1280 * 720 * 3]);
//! pipeline.push(front, Frame::new(&vga[..], 640, 480, PixelFormat::Nv12))?;
//! pipeline.push(back, Frame::new(&hd[..], 1280, 720, PixelFormat::Rgb8))?;
//! for _ in 0..2 {
//!     let out = pipeline.recv()?;
//!     if let Some(r) = out.output.result() {
//!         println!("{}: frame {} has {} objects", out.stream, out.output.id, r.objects.len());
//!     }
//! }
//! println!("{:?}", pipeline.stats(front)?.frames_dropped);
//! # Ok(()) }
//! ```
//!
//! Semantics:
//!
//! * Per stream, everything a lone [`crate::Pipeline`] promises: results in push order, one per
//!   accepted frame (dropped ones marked [`crate::Outcome::Dropped`]), frame ids counting that
//!   stream's frames, commands ordered with that stream's frames, resolution changes. Each
//!   stream's results are byte-identical to a lone [`edgetam_tracker::Tracker`] fed that
//!   stream's frames (`tests/multi.rs`). Results of different streams interleave.
//! * Scheduling: rounds of at most [`MultiPipelineBuilder::max_batch`] frames, taken
//!   round-robin over the streams with something queued, at most one frame per stream per
//!   round, so no stream waits for another's backlog: ahead of a pushed frame are at most the
//!   rest of the round being tracked, the round the encoder thread already holds, and one
//!   frame of each other stream. The encoder thread runs the image encoder of a whole round in one call
//!   (frames of any sizes, each resized to the model's input first) while the tracking thread
//!   tracks the previous round (encoder-ahead).
//! * A frame rejected by `push` (bad layout) gets no id and touches nothing; a frame that fails
//!   later is a [`crate::Outcome::Failed`] of its stream alone. A worker panic stops every
//!   stream ([`Error::WorkerFailed`] on `recv`).
//! * [`MultiPipeline::remove_stream`] discards the stream's queued frames; nothing of it is
//!   handed out after it returns (results already in the result queue stay there).

mod builder;
mod schedule;
mod workers;

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, TryRecvError};
use edgetam_tracker::{EdgeTam, Frame, ObjectPrompt, Tracker};

pub use builder::{MultiPipelineBuilder, StreamOptions};

use crate::error::{Error, Result};
use crate::pipeline::check_prompt;
use crate::queue::Command;
use crate::stats::Stats;
use crate::track_stage::TrackStage;
use crate::types::{FrameId, StreamId, StreamOutput};
use crate::workers::{StagePool, TrackHook};
use schedule::{MultiMsg, MultiShared};

/// A running multi-stream pipeline. Every method takes `&self`: share it (e.g. in an
/// [`Arc`]) between camera threads and a consumer thread. Results wait in an unbounded queue
/// until read. Dropping it (or [`Self::close`]) stops the workers after the frame they are on
/// and joins them; [`Self::finish`] instead lets every queued frame through.
pub struct MultiPipeline {
    model: Arc<EdgeTam>,
    /// The tracking thread's pool, which every stream's tracking runs in.
    track_pool: StagePool,
    hook: Option<TrackHook>,
    shared: Arc<MultiShared>,
    results: Receiver<MultiMsg>,
    threads: Vec<JoinHandle<()>>,
}

impl MultiPipeline {
    fn start(
        model: Arc<EdgeTam>,
        track_pool: StagePool,
        hook: Option<TrackHook>,
        shared: Arc<MultiShared>,
        results: Receiver<MultiMsg>,
        threads: Vec<JoinHandle<()>>,
    ) -> Self {
        Self {
            model,
            track_pool,
            hook,
            shared,
            results,
            threads,
        }
    }

    /// Adds a stream (also while others run): a tracker of its own, no objects yet.
    pub fn add_stream(&self, options: StreamOptions) -> Result<StreamId> {
        if options.capacity == 0 {
            return Err(Error::Config("queue_capacity must be at least 1".into()));
        }
        let tracker = Tracker::with_options(self.model.clone(), options.tracker_options);
        let stage = TrackStage::new(
            tracker,
            options.resolution_change,
            self.hook.clone(),
            self.track_pool.clone(),
        );
        self.shared
            .add_stream(options.capacity, options.policy, stage)
    }

    /// Removes a stream (also while others run) and returns its final stats. Its queued frames
    /// are discarded, the one in flight (if any) is finished and not handed out; its id is
    /// never used again. [`Error::UnknownStream`] if it is not there.
    pub fn remove_stream(&self, stream: StreamId) -> Result<Stats> {
        self.shared.remove_stream(stream)
    }

    /// The streams there are, in the order they were added.
    pub fn streams(&self) -> Vec<StreamId> {
        self.shared.streams()
    }

    /// Queues a frame on `stream` and returns its id in that stream. A frame whose layout does
    /// not match its format is rejected here with [`Error::InvalidFrame`] (no id; no stream is
    /// affected). With [`crate::DropPolicy::Block`] this waits while the stream's queue is
    /// full; the drop policies never wait.
    pub fn push(&self, stream: StreamId, frame: Frame<'_>) -> Result<FrameId> {
        frame.validate()?;
        self.shared.push_frame(stream, frame.into_owned())
    }

    /// Adds a prompt for object `obj` of `stream`, applied to that stream's next frame (as
    /// [`crate::Pipeline::add_prompt`]).
    pub fn add_prompt(
        &self,
        stream: StreamId,
        obj: u32,
        prompt: impl Into<ObjectPrompt>,
    ) -> Result<()> {
        let prompt = check_prompt(obj, prompt.into())?;
        self.shared
            .push_command(stream, Command::AddPrompt(obj, prompt))
    }

    /// Removes an object of `stream` from its next frame on.
    pub fn remove_object(&self, stream: StreamId, obj: u32) -> Result<()> {
        self.shared.push_command(stream, Command::Remove(obj))
    }

    /// Forgets every object of `stream` and restarts its tracker's frame numbering from its
    /// next frame on (frame ids keep counting).
    pub fn reset(&self, stream: StreamId) -> Result<()> {
        self.shared.push_command(stream, Command::Reset)
    }

    /// Ends the input of every stream: queued frames are still processed, then the result
    /// queue ends.
    pub fn finish(&self) {
        self.shared.finish();
    }

    /// The next result of any stream, waiting for it. [`Error::Closed`] once every result has
    /// been read after [`Self::finish`]; [`Error::WorkerFailed`] if a worker failed.
    pub fn recv(&self) -> Result<StreamOutput> {
        self.results.recv().map_err(|_| Error::Closed)?
    }

    /// The next result if one is ready.
    pub fn try_recv(&self) -> Result<Option<StreamOutput>> {
        match self.results.try_recv() {
            Ok(m) => m.map(Some),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(Error::Closed),
        }
    }

    /// The next result, waiting at most `timeout` ([`Error::Timeout`]).
    pub fn recv_timeout(&self, timeout: Duration) -> Result<StreamOutput> {
        match self.results.recv_timeout(timeout) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => Err(Error::Timeout(timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(Error::Closed),
        }
    }

    /// Results as they come, until the pipeline is finished and drained (or a worker failed:
    /// that error is the last item).
    pub fn results(&self) -> MultiResults<'_> {
        MultiResults { pipeline: self }
    }

    /// One stream's counters and latencies ([`Error::UnknownStream`] once it is removed:
    /// [`Self::remove_stream`] returns its last ones).
    pub fn stats(&self, stream: StreamId) -> Result<Stats> {
        self.shared.stats(stream)
    }

    /// Image-encoder calls so far that encoded more than one frame (for tests).
    #[doc(hidden)]
    pub fn batched_encoder_calls(&self) -> u64 {
        self.shared
            .batched_calls
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops the workers (after their current frame) and joins them.
    pub fn close(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shared.cancel();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for MultiPipeline {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Iterator over a multi-stream pipeline's results (see [`MultiPipeline::results`]).
pub struct MultiResults<'a> {
    pipeline: &'a MultiPipeline,
}

impl Iterator for MultiResults<'_> {
    type Item = Result<StreamOutput>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.pipeline.recv() {
            Err(Error::Closed) => None,
            r => Some(r),
        }
    }
}
