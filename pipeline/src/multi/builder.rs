//! Settings of a [`MultiPipeline`] and of each of its streams, and the start of its two worker
//! threads.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use edgetam_tracker::util::panic_message;
use edgetam_tracker::{EdgeTam, TrackerOptions};

use crate::error::{Error, Result};
use crate::multi::schedule::{MultiMsg, MultiShared};
use crate::multi::workers::{run_tracking, RoundEncoder};
use crate::multi::MultiPipeline;
use crate::types::{DropPolicy, ResolutionChange};
use crate::workers::{encoder_ahead_pools, TrackHook};

/// Settings of one stream of a [`MultiPipeline`] (see [`MultiPipeline::add_stream`]).
#[derive(Debug, Clone)]
pub struct StreamOptions {
    pub(crate) capacity: usize,
    pub(crate) policy: DropPolicy,
    pub(crate) tracker_options: TrackerOptions,
    pub(crate) resolution_change: ResolutionChange,
}

impl Default for StreamOptions {
    /// As a lone [`crate::Pipeline`]'s defaults: a queue of 4 frames, [`DropPolicy::Block`].
    fn default() -> Self {
        Self {
            capacity: 4,
            policy: DropPolicy::Block,
            tracker_options: TrackerOptions::default(),
            resolution_change: ResolutionChange::default(),
        }
    }
}

impl StreamOptions {
    /// A live camera: a queue of one frame, [`DropPolicy::DropOldest`] (the newest frame wins;
    /// the frames it replaced come out as [`crate::Outcome::Dropped`], counted in the stream's
    /// [`crate::Stats::frames_dropped`]).
    pub fn live() -> Self {
        Self {
            capacity: 1,
            policy: DropPolicy::DropOldest,
            ..Self::default()
        }
    }

    /// Frames the stream's queue holds before its [`DropPolicy`] applies (at least 1).
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.capacity = n;
        self
    }

    pub fn drop_policy(mut self, policy: DropPolicy) -> Self {
        self.policy = policy;
        self
    }

    pub fn tracker_options(mut self, options: TrackerOptions) -> Self {
        self.tracker_options = options;
        self
    }

    /// What a change of frame size mid-stream does (default [`ResolutionChange::Reset`]).
    pub fn resolution_change(mut self, on_change: ResolutionChange) -> Self {
        self.resolution_change = on_change;
        self
    }
}

/// Settings of a [`MultiPipeline`].
pub struct MultiPipelineBuilder {
    model: Arc<EdgeTam>,
    threads: Option<usize>,
    max_batch: usize,
    hook: Option<TrackHook>,
}

impl MultiPipeline {
    pub fn builder(model: Arc<EdgeTam>) -> MultiPipelineBuilder {
        MultiPipelineBuilder {
            model,
            threads: None,
            max_batch: 4,
            hook: None,
        }
    }
}

impl MultiPipelineBuilder {
    /// Each of the two worker threads (the encoder, the tracking) runs its model calls in a
    /// rayon pool of its own of `n` threads. Default: half of rayon's global pool each (at
    /// least one), and the tracking of a stream with more than one object on the global pool,
    /// as a lone [`crate::Pipeline`] with encoder-ahead does.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }

    /// Frames (of different streams) the image encoder runs on in one call, at most (default
    /// 4; 1 encodes each frame alone). Results are byte-identical either way.
    pub fn max_batch(mut self, n: usize) -> Self {
        self.max_batch = n;
        self
    }

    /// Called on the tracking thread with each frame's id (in its stream) before the frame is
    /// tracked, for every stream (tests use it to inject a panic).
    #[doc(hidden)]
    pub fn track_hook(mut self, hook: TrackHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Starts the worker threads (with no stream yet).
    pub fn build(self) -> Result<MultiPipeline> {
        if self.threads == Some(0) {
            return Err(Error::Config("threads must be at least 1".into()));
        }
        if self.max_batch == 0 {
            return Err(Error::Config("max_batch must be at least 1".into()));
        }
        let (track_pool, encoder_pool) = encoder_ahead_pools(self.threads)?;
        let encoder = RoundEncoder::new(self.model.clone(), encoder_pool, self.max_batch);
        let shared = Arc::new(MultiShared::default());
        let (out_tx, out_rx) = crossbeam_channel::unbounded();
        // A rendezvous: the encoder runs one round ahead of the tracking, no further (the
        // freshest frames of live streams are the ones encoded).
        let (tx, rx) = crossbeam_channel::bounded(0);
        let mut threads = Vec::new();
        let sh = shared.clone();
        threads.push(spawn(
            "edgetam-encoder",
            shared.clone(),
            out_tx.clone(),
            move || encoder.run(&sh, tx),
        )?);
        let (sh, out) = (shared.clone(), out_tx.clone());
        let spawned = spawn("edgetam-tracker", shared.clone(), out_tx, move || {
            run_tracking(&sh, rx, &out)
        });
        match spawned {
            Ok(h) => threads.push(h),
            Err(e) => {
                shared.cancel();
                for t in threads {
                    let _ = t.join();
                }
                return Err(e);
            }
        }
        Ok(MultiPipeline::start(
            self.model, track_pool, self.hook, shared, out_rx, threads,
        ))
    }
}

/// Spawns a worker whose panic becomes an error on the output queue and stops every stream.
fn spawn(
    name: &str,
    shared: Arc<MultiShared>,
    out: Sender<MultiMsg>,
    body: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(body)) {
                let msg = panic_message(payload.as_ref());
                tracing::error!(%msg, "multi-stream pipeline worker panicked");
                shared.fail(msg.clone());
                let _ = out.send(Err(Error::WorkerFailed(format!("panic: {msg}"))));
            }
        })
        .map_err(|e| Error::Config(format!("cannot start a worker thread: {e}")))
}
