//! An async handle on a [`Pipeline`] (feature `tokio`).
//!
//! Nothing here blocks a runtime worker thread: `push` waits for queue room on a
//! [`tokio::sync::Notify`], results are read with a non-blocking `try_recv` plus a notification,
//! and dropping or [`AsyncPipeline::close`]-ing joins the worker threads on a plain thread.
//!
//! Cancel safety:
//! * [`AsyncPipeline::push`] is cancel-safe: the frame is queued (and gets its id) at the
//!   moment the future completes; a future dropped before that queued nothing.
//! * [`AsyncPipeline::recv`] (and therefore the [`futures::Stream`] of
//!   [`AsyncPipeline::results`]) is cancel-safe: a result is taken off the queue only when the
//!   future returns it.
//! * The commands (`add_prompt`, `remove_object`, `reset`) never wait and are plain functions.

use std::sync::Arc;

use crossbeam_channel::TryRecvError;
use edgetam_tracker::ObjectPrompt;
use futures::Stream;

use crate::error::{Error, Result};
use crate::pipeline::Pipeline;
use crate::queue::PushError;
use crate::stats::Stats;
use crate::types::{FrameId, FrameOutput};
use edgetam_tracker::Frame;

/// An async handle on a [`Pipeline`]; clone it to push from one task and read from another.
#[derive(Clone)]
pub struct AsyncPipeline {
    inner: Arc<Holder>,
}

/// Joins the workers off the runtime when the last handle goes.
struct Holder {
    pipeline: Option<Pipeline>,
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(p) = self.pipeline.take() {
            // Joining waits for the frame in progress: do it on a plain thread.
            p.shared_cancel();
            let spawned = std::thread::Builder::new()
                .name("edgetam-pipeline-close".into())
                .spawn(move || drop(p));
            if let Err(e) = spawned {
                tracing::warn!("cannot start a thread to join the pipeline: {e}");
            }
        }
    }
}

impl AsyncPipeline {
    pub fn new(pipeline: Pipeline) -> Self {
        Self {
            inner: Arc::new(Holder {
                pipeline: Some(pipeline),
            }),
        }
    }

    fn p(&self) -> Result<&Pipeline> {
        self.inner.pipeline.as_ref().ok_or(Error::Closed)
    }

    /// Queues a frame (see [`Pipeline::push`]); with [`crate::DropPolicy::Block`] it waits
    /// asynchronously for room. Cancel-safe.
    pub async fn push(&self, frame: Frame<'_>) -> Result<FrameId> {
        frame.validate()?;
        let mut frame = frame.into_owned();
        let p = self.p()?;
        loop {
            let mut notified = std::pin::pin!(p.shared.space.notified());
            notified.as_mut().enable();
            match p.shared.enqueue_frame(frame, false) {
                Ok(id) => return Ok(id),
                Err(PushError::Failed(e)) => return Err(e),
                Err(PushError::Full(f)) => frame = f,
            }
            notified.await;
        }
    }

    /// See [`Pipeline::add_prompt`].
    pub fn add_prompt(&self, obj: u32, prompt: impl Into<ObjectPrompt>) -> Result<()> {
        self.p()?.add_prompt(obj, prompt)
    }

    /// See [`Pipeline::remove_object`].
    pub fn remove_object(&self, obj: u32) -> Result<()> {
        self.p()?.remove_object(obj)
    }

    /// See [`Pipeline::reset`].
    pub fn reset(&self) -> Result<()> {
        self.p()?.reset()
    }

    /// See [`Pipeline::finish`].
    pub fn finish(&self) {
        if let Ok(p) = self.p() {
            p.finish();
        }
    }

    pub fn stats(&self) -> Stats {
        self.p().map(Pipeline::stats).unwrap_or_default()
    }

    /// The next result; `None` once the pipeline is finished and drained. A worker failure is
    /// an `Err` item. Cancel-safe.
    pub async fn recv(&self) -> Option<Result<FrameOutput>> {
        let p = self.p().ok()?;
        loop {
            let mut notified = std::pin::pin!(p.shared.results.notified());
            notified.as_mut().enable();
            match p.try_recv_msg() {
                Ok(m) => return Some(m),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) => notified.await,
            }
        }
    }

    /// Results as a stream, in push order.
    pub fn results(&self) -> impl Stream<Item = Result<FrameOutput>> + Send + 'static {
        futures::stream::unfold(self.clone(), |h| async move {
            let item = h.recv().await?;
            Some((item, h))
        })
    }

    /// Stops the workers and waits (without blocking the runtime) until they are joined; the
    /// final stats. Other clones of this handle see [`Error::Closed`].
    pub async fn close(self) -> Stats {
        let Some(p) = self.p().ok() else {
            return Stats::default();
        };
        p.shared_cancel();
        let stats_now = p.stats();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let holder = self.inner;
        let spawned = std::thread::Builder::new()
            .name("edgetam-pipeline-close".into())
            .spawn(move || {
                let stats = match Arc::try_unwrap(holder) {
                    Ok(mut h) => h.pipeline.take().map(Pipeline::close),
                    Err(shared) => {
                        drop(shared);
                        None
                    }
                };
                let _ = tx.send(stats);
            });
        if spawned.is_err() {
            return stats_now;
        }
        rx.await.ok().flatten().unwrap_or(stats_now)
    }
}
