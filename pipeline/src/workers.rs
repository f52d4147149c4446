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

pub(crate) fn install<R: Send>(pool: &Pool, f: impl FnOnce() -> R + Send) -> R {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}
