//! Settings of a [`crate::Pipeline`] and the start of its worker threads: the tracking thread
//! alone, or an encoder-ahead producer in front of it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::Sender;
use edgetam_tracker::util::panic_message;
use edgetam_tracker::{EdgeTam, Tracker, TrackerOptions};

use crate::error::{Error, Result};
use crate::pipeline::Pipeline;
use crate::producer::{Producer, Stage2};
use crate::queue::{Msg, Shared};
use crate::track_stage::TrackStage;
use crate::types::{DropPolicy, ResolutionChange};
use crate::workers::{encoder_ahead_pools, make_pool, StagePool, TrackHook};

/// Settings of a [`Pipeline`].
pub struct PipelineBuilder {
    model: Arc<EdgeTam>,
    capacity: usize,
    policy: DropPolicy,
    encoder_ahead: bool,
    threads: Option<usize>,
    tracker_options: TrackerOptions,
    resolution_change: ResolutionChange,
    hook: Option<TrackHook>,
}

impl Pipeline {
    pub fn builder(model: Arc<EdgeTam>) -> PipelineBuilder {
        PipelineBuilder::new(model)
    }
}

impl PipelineBuilder {
    /// Defaults: queue of 4, [`DropPolicy::Block`], no encoder-ahead, rayon's global pool.
    pub(crate) fn new(model: Arc<EdgeTam>) -> Self {
        Self {
            model,
            capacity: 4,
            policy: DropPolicy::Block,
            encoder_ahead: false,
            threads: None,
            tracker_options: TrackerOptions::default(),
            resolution_change: ResolutionChange::default(),
            hook: None,
        }
    }

    /// What a change of frame size mid-stream does (default [`ResolutionChange::Reset`]).
    pub fn resolution_change(mut self, on_change: ResolutionChange) -> Self {
        self.resolution_change = on_change;
        self
    }

    /// Frames the input queue holds before the [`DropPolicy`] applies (at least 1; default 4).
    /// Commands do not count and are never dropped.
    pub fn queue_capacity(mut self, n: usize) -> Self {
        self.capacity = n;
        self
    }

    pub fn drop_policy(mut self, policy: DropPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Run the image encoder of the next frame on a producer thread while the tracking thread
    /// runs memory attention, the decoder and the memory encoder of the current one (default
    /// off). Results are byte-identical either way.
    pub fn encoder_ahead(mut self, on: bool) -> Self {
        self.encoder_ahead = on;
        self
    }

    /// Each worker thread runs its model calls inside its own rayon pool of `n` threads: the
    /// tracker's kernels and candle's matrix products both size themselves from the pool they
    /// run in. Default: serial, rayon's global pool (`RAYON_NUM_THREADS`, else every core);
    /// with encoder-ahead, the encoder gets half the global pool's threads (at least one) and
    /// so does the tracking of a single object, so the encoder of frame N+1 and the tracking
    /// of frame N each keep their own cores instead of contending for all of them; with more
    /// objects the tracking outweighs the encoder and runs on the global pool.
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }

    pub fn tracker_options(mut self, options: TrackerOptions) -> Self {
        self.tracker_options = options;
        self
    }

    #[doc(hidden)]
    pub fn track_hook(mut self, hook: TrackHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Starts the worker threads.
    pub fn build(self) -> Result<Pipeline> {
        if self.capacity == 0 {
            return Err(Error::Config("queue_capacity must be at least 1".into()));
        }
        if self.threads == Some(0) {
            return Err(Error::Config("threads must be at least 1".into()));
        }
        let shared = Arc::new(Shared::new(self.capacity, self.policy));
        let (out_tx, out_rx) = crossbeam_channel::unbounded();
        let tracker = Tracker::with_options(self.model.clone(), self.tracker_options);
        // With encoder-ahead each stage gets a pool of its own (see `threads`).
        let (stage_pool, encoder_pool) = match self.encoder_ahead {
            true => {
                let (track, encoder) = encoder_ahead_pools(self.threads)?;
                (track, Some(encoder))
            }
            false => (
                StagePool {
                    pool: make_pool(self.threads)?,
                    max_objects: usize::MAX,
                },
                None,
            ),
        };
        let stage = TrackStage::new(tracker, self.resolution_change, self.hook, stage_pool);
        let mut threads = Vec::new();
        if let Some(encoder_pool) = encoder_pool {
            let (tx, rx) = crossbeam_channel::bounded::<Stage2>(1);
            let producer = Producer::new(self.model.clone(), encoder_pool);
            let (sh, out) = (shared.clone(), out_tx.clone());
            threads.push(spawn(
                "edgetam-encoder",
                shared.clone(),
                out_tx.clone(),
                move || producer.run(&sh, tx, &out),
            )?);
            let (sh, out) = (shared.clone(), out_tx.clone());
            let spawned = spawn("edgetam-tracker", shared.clone(), out_tx, move || {
                stage.run_stage2(&sh, rx, &out)
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
        } else {
            let (sh, out) = (shared.clone(), out_tx.clone());
            threads.push(spawn(
                "edgetam-tracker",
                shared.clone(),
                out_tx,
                move || stage.run_serial(&sh, &out),
            )?);
        }
        Ok(Pipeline::start(shared, out_rx, threads))
    }
}

/// Spawns a worker whose panic becomes an error on the output queue and stops the pipeline.
fn spawn(
    name: &str,
    shared: Arc<Shared>,
    out: Sender<Msg>,
    body: impl FnOnce() + Send + 'static,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            if let Err(payload) = catch_unwind(AssertUnwindSafe(body)) {
                let msg = panic_message(payload.as_ref());
                tracing::error!(%msg, "pipeline worker panicked");
                shared.fail(msg.clone());
                let _ = out.send(Err(Error::WorkerFailed(format!("panic: {msg}"))));
            }
            drop(out);
            shared.notify_results();
        })
        .map_err(|e| Error::Config(format!("cannot start a worker thread: {e}")))
}
