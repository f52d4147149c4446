//! `edgetam.Pipeline`: the frame-queue pipeline (bounded queue, drop policies, encoder-ahead)
//! with results as an iterator, in push order.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use edgetam_pipeline::{DropPolicy, FrameOutput, Outcome};
use edgetam_tracker::util::lock;
use edgetam_tracker::ObjectPrompt;
use pyo3::exceptions::PyTimeoutError;
use pyo3::prelude::*;

use crate::errors::{detached, error, Failure, Kind};
use crate::frame::ArrayFrame;
use crate::loaded::Model;
use crate::prompts::{keyword_prompt, mask_prompt, object_id, points_prompt, BoxArg};
use crate::results::{FrameResult, PreparedFrame};

/// How often a waiting `recv` wakes to let Ctrl-C (and `close` from another thread) in.
const WAKE: Duration = Duration::from_millis(100);

/// A drop policy by name: `"block"`, `"oldest"` or `"newest"`.
pub(crate) fn drop_policy(py: Python<'_>, name: &str) -> PyResult<DropPolicy> {
    match name.trim().to_ascii_lowercase().as_str() {
        "block" => Ok(DropPolicy::Block),
        "oldest" | "drop_oldest" => Ok(DropPolicy::DropOldest),
        "newest" | "drop_newest" => Ok(DropPolicy::DropNewest),
        other => Err(error(
            py,
            Kind::Input,
            format!("drop must be \"block\", \"oldest\" or \"newest\", got {other:?}"),
        )),
    }
}

/// A running frame-queue pipeline: `push` frames (from a capture thread), read results in push
/// order with `recv` or by iterating; one result per pushed frame, dropped frames included.
/// Prompts, `remove` and `reset` go through the same queue and apply from the next pushed
/// frame on. `finish()` ends the input (iteration then stops after the last result);
/// `close()` (or leaving a `with` block) stops the workers.
#[pyclass(module = "edgetam", frozen)]
pub struct Pipeline {
    /// `None` once closed. Calls clone the `Arc` and wait with the lock released, so `close`
    /// from another thread never waits for a blocked `recv`; the workers stop when the last
    /// clone is dropped.
    inner: Mutex<Option<Arc<edgetam_pipeline::Pipeline>>>,
    model: Py<Model>,
}

impl Pipeline {
    pub(crate) fn new(
        model: &Bound<'_, Model>,
        queue: usize,
        policy: DropPolicy,
        encoder_ahead: bool,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        let py = model.py();
        let inner = model.get().inner.clone();
        let pipeline = detached(py, || {
            let mut builder = edgetam_pipeline::Pipeline::builder(inner)
                .queue_capacity(queue)
                .drop_policy(policy)
                .encoder_ahead(encoder_ahead);
            if let Some(n) = threads {
                builder = builder.threads(n);
            }
            Ok(builder.build()?)
        })?;
        Ok(Self {
            inner: Mutex::new(Some(Arc::new(pipeline))),
            model: model.clone().unbind(),
        })
    }

    fn get(&self, py: Python<'_>) -> PyResult<Arc<edgetam_pipeline::Pipeline>> {
        lock(&self.inner)
            .clone()
            .ok_or_else(|| error(py, Kind::Pipeline, "the pipeline is closed"))
    }

    fn command(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&edgetam_pipeline::Pipeline) -> edgetam_pipeline::Result<()> + Send,
    ) -> PyResult<()> {
        let p = self.get(py)?;
        detached(py, move || Ok(f(&p)?))
    }

    fn add(&self, py: Python<'_>, obj: u32, prompt: ObjectPrompt) -> PyResult<()> {
        self.command(py, |p| p.add_prompt(obj, prompt))
    }

    /// The next result, waiting at most `timeout` (forever when `None`); `None` once the
    /// pipeline is finished and drained.
    fn next_output(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Output>> {
        let deadline = match timeout {
            Some(t) if t.is_finite() && t >= 0.0 => {
                Some(Instant::now() + Duration::from_secs_f64(t))
            }
            Some(t) => {
                return Err(error(
                    py,
                    Kind::Input,
                    format!("timeout must be a number of seconds >= 0, got {t}"),
                ))
            }
            None => None,
        };
        loop {
            let wait = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).min(WAKE),
                None => WAKE,
            };
            let p = match self.get(py) {
                Ok(p) => p,
                // Closed meanwhile: the stream is over.
                Err(_) => return Ok(None),
            };
            // The clone is dropped without the GIL: if `close` ran meanwhile, this drop
            // stops and joins the workers.
            let got = detached(py, move || {
                let got = match p.recv_timeout(wait) {
                    Ok(out) => Ok(Some(Output::new(out))),
                    Err(edgetam_pipeline::Error::Timeout(_)) => Ok(None),
                    Err(edgetam_pipeline::Error::Closed) => Err(Ended),
                    Err(e) => return Err(Failure::from(e)),
                };
                drop(p);
                Ok(got)
            })?;
            match got {
                Ok(Some(out)) => return Ok(Some(out)),
                Ok(None) => {}
                Err(Ended) => return Ok(None),
            }
            py.check_signals()?;
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(PyTimeoutError::new_err(format!(
                    "no result within {:.3} s",
                    timeout.unwrap_or_default()
                )));
            }
        }
    }
}

/// The pipeline's results ended (finished and drained, or closed).
struct Ended;

/// A result made without the GIL.
struct Output {
    id: u64,
    timestamp: Option<f64>,
    outcome: &'static str,
    result: Option<PreparedFrame>,
    error: Option<Failure>,
    command_errors: Vec<Failure>,
    resolution_changed: bool,
}

impl Output {
    fn new(out: FrameOutput) -> Self {
        let (outcome, result, error) = match out.outcome {
            Outcome::Tracked(r) => ("tracked", Some(PreparedFrame::new(&r)), None),
            Outcome::Dropped => ("dropped", None, None),
            Outcome::Failed(e) => ("failed", None, Some(Failure::from(e))),
        };
        Self {
            id: out.id,
            timestamp: out.timestamp.map(|t| t.as_secs_f64()),
            outcome,
            result,
            error,
            command_errors: out.command_errors.into_iter().map(Failure::from).collect(),
            resolution_changed: out.resolution_changed,
        }
    }

    fn into_py(self, py: Python<'_>) -> PyResult<PipelineOutput> {
        let exception = |f: Failure| -> Py<PyAny> { f.into_py(py).into_value(py).into_any() };
        Ok(PipelineOutput {
            id: self.id,
            timestamp: self.timestamp,
            outcome: self.outcome,
            result: self.result.map(|r| r.into_py(py)).transpose()?,
            error: self.error.map(exception),
            command_errors: self.command_errors.into_iter().map(exception).collect(),
            resolution_changed: self.resolution_changed,
        })
    }
}

/// What became of one pushed frame.
#[pyclass(module = "edgetam", frozen, get_all)]
pub struct PipelineOutput {
    /// The id `push` returned (0, 1, 2, ... over every accepted frame).
    pub id: u64,
    /// The timestamp given to `push`, in seconds.
    pub timestamp: Option<f64>,
    /// `"tracked"`, `"dropped"` (by the drop policy) or `"failed"` (see `error`).
    pub outcome: &'static str,
    /// The `FrameResult` when tracked.
    pub result: Option<Py<FrameResult>>,
    /// The exception (an `edgetam.Error`, not raised) when the frame failed; the stream goes on.
    pub error: Option<Py<PyAny>>,
    /// Exceptions of prompts queued before this frame that the tracker refused when applied.
    pub command_errors: Vec<Py<PyAny>>,
    /// The frame's size differs from the previous one's: tracking was reset before it.
    pub resolution_changed: bool,
}

#[pymethods]
impl PipelineOutput {
    /// Whether the drop policy dropped the frame.
    #[getter]
    fn dropped(&self) -> bool {
        self.outcome == "dropped"
    }

    fn __repr__(&self) -> String {
        format!("PipelineOutput(id={}, outcome={:?})", self.id, self.outcome)
    }
}

#[pymethods]
impl Pipeline {
    /// Queues a frame (as `Tracker.track` takes it; copied once, so the array can be reused
    /// at once) and returns its id. With `drop="block"` this waits while the queue is full,
    /// with the GIL released. `timestamp` (seconds) comes back on its result.
    #[pyo3(signature = (frame, format = None, timestamp = None))]
    fn push(
        &self,
        py: Python<'_>,
        frame: &Bound<'_, PyAny>,
        format: Option<&str>,
        timestamp: Option<f64>,
    ) -> PyResult<u64> {
        let view = ArrayFrame::new(frame, format)?;
        let mut frame = view.frame();
        if let Some(t) = timestamp {
            let t = Duration::try_from_secs_f64(t)
                .map_err(|e| error(py, Kind::Input, format!("timestamp {t} s: {e}")))?;
            frame = frame.with_timestamp(t);
        }
        let p = self.get(py)?;
        detached(py, move || Ok(p.push(frame)?))
    }

    /// Prompts object `obj` with a box `(x0, y0, x1, y1)` from the next pushed frame on.
    fn add_box(&self, py: Python<'_>, obj: i64, r#box: BoxArg) -> PyResult<()> {
        let obj = object_id(py, obj)?;
        let prompt = points_prompt(py, None, Some(r#box))?;
        self.add(py, obj, prompt.into())
    }

    /// Prompts object `obj` with points `[(x, y), (x, y, label), ...]` (and optionally a box)
    /// from the next pushed frame on.
    #[pyo3(signature = (obj, points, r#box = None))]
    fn add_points(
        &self,
        py: Python<'_>,
        obj: i64,
        points: &Bound<'_, PyAny>,
        r#box: Option<BoxArg>,
    ) -> PyResult<()> {
        let obj = object_id(py, obj)?;
        let prompt = points_prompt(py, Some(points), r#box)?;
        self.add(py, obj, prompt.into())
    }

    /// Prompts object `obj` with a mask (2-D bool or uint8, the frame's size) from the next
    /// pushed frame on.
    fn add_mask(&self, py: Python<'_>, obj: i64, mask: &Bound<'_, PyAny>) -> PyResult<()> {
        let obj = object_id(py, obj)?;
        let mask = mask_prompt(py, mask)?;
        self.add(py, obj, mask.into())
    }

    /// SAM 2's keyword prompt, from the next pushed frame on: object `obj_id` with `points`
    /// ((N, 2) pixels) and `labels` (N ints, 1 object / 0 background; all 1 when omitted), a
    /// `box` (x0, y0, x1, y1), both together, or a `mask` alone.
    #[pyo3(signature = (*, obj_id, points = None, labels = None, r#box = None, mask = None))]
    fn add_prompt(
        &self,
        py: Python<'_>,
        obj_id: i64,
        points: Option<&Bound<'_, PyAny>>,
        labels: Option<&Bound<'_, PyAny>>,
        r#box: Option<&Bound<'_, PyAny>>,
        mask: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let obj = object_id(py, obj_id)?;
        let prompt = keyword_prompt(py, points, labels, r#box, mask)?;
        self.add(py, obj, prompt)
    }

    /// Stops tracking object `obj` from the next pushed frame on.
    fn remove(&self, py: Python<'_>, obj: i64) -> PyResult<()> {
        let obj = object_id(py, obj)?;
        self.command(py, |p| p.remove_object(obj))
    }

    /// Forgets every object from the next pushed frame on.
    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        self.command(py, |p| p.reset())
    }

    /// Ends the input: queued frames are still tracked, then iteration stops.
    fn finish(&self, py: Python<'_>) -> PyResult<()> {
        self.command(py, |p| {
            p.finish();
            Ok(())
        })
    }

    /// The next result, waiting at most `timeout` seconds (`TimeoutError`), forever when
    /// `None`; `None` once the pipeline is finished and every result was read.
    #[pyo3(signature = (timeout = None))]
    fn recv(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PipelineOutput>> {
        self.next_output(py, timeout)?
            .map(|o| o.into_py(py))
            .transpose()
    }

    /// The next result if one is ready, else `None`.
    fn try_recv(&self, py: Python<'_>) -> PyResult<Option<PipelineOutput>> {
        let p = self.get(py)?;
        let got = detached(py, move || Ok(p.try_recv()?.map(Output::new)))?;
        got.map(|o| o.into_py(py)).transpose()
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PipelineOutput>> {
        self.recv(py, None)
    }

    /// Stops the workers after the frame they are on; queued frames and unread results are
    /// discarded. Further calls raise `PipelineError`; iteration stops.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = lock(&self.inner).take();
        if let Some(p) = taken {
            // Joined here unless another thread is still inside a call (it then stops them).
            detached(py, || {
                if let Ok(p) = Arc::try_unwrap(p) {
                    p.close();
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// The model this pipeline runs.
    #[getter]
    fn model(&self, py: Python<'_>) -> Py<Model> {
        self.model.clone_ref(py)
    }
}
