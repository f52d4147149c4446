//! What the worker threads run with: their rayon pool and the tests' hook on the tracking
//! thread (below the stages that use them and the builder that starts them).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::types::FrameId;

/// Called on the tracking thread with each frame's id before the frame is tracked (tests use
/// it to hold the worker or inject a panic).
#[doc(hidden)]
pub type TrackHook = Arc<dyn Fn(FrameId) + Send + Sync>;

/// The tracking stage's threads: its own pool (`None`: rayon's global pool), used while it
/// tracks at most `max_objects` objects; with more it runs on the global pool.
#[derive(Clone)]
pub(crate) struct StagePool {
    pub(crate) pool: Pool,
    pub(crate) max_objects: usize,
}

/// A worker's rayon pool (`None`: rayon's global pool), shared by every stream of a
/// [`crate::MultiPipeline`].
pub(crate) type Pool = Option<Arc<rayon::ThreadPool>>;

pub(crate) fn make_pool(threads: Option<usize>) -> Result<Pool> {
    threads
        .map(|n| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .map(Arc::new)
                .map_err(|e| Error::Config(format!("thread pool: {e}")))
        })
        .transpose()
}

/// The two pools of encoder-ahead (a [`crate::Pipeline`] with it, and a
/// [`crate::MultiPipeline`]): the tracking stage's and the encoder's, each of `threads` threads
/// (default: half of rayon's global pool, at least one). Chosen by default, the tracking takes
/// the global pool back above one object, where it outweighs the encoder (about one object's
/// worth); set explicitly, the pools hold.
pub(crate) fn encoder_ahead_pools(threads: Option<usize>) -> Result<(StagePool, Pool)> {
    let stage_threads = threads.unwrap_or_else(|| (rayon::current_num_threads() / 2).max(1));
    let track = StagePool {
        pool: make_pool(Some(stage_threads))?,
        max_objects: if threads.is_some() { usize::MAX } else { 1 },
    };
    Ok((track, make_pool(Some(stage_threads))?))
}

pub(crate) fn install<R: Send>(pool: &Pool, f: impl FnOnce() -> R + Send) -> R {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}
