//! `edgetam.Tracker`: one video stream's tracking state, driven frame by frame.

use std::sync::Mutex;

use edgetam_tracker::util::lock;
use edgetam_tracker::ObjectPrompt;
use pyo3::prelude::*;

use crate::errors::{detached, error, Failure, Kind};
use crate::frame::ArrayFrame;
use crate::loaded::Model;
use crate::prompts::{frame_index, keyword_prompt, mask_prompt, object_id, points_prompt, BoxArg};
use crate::results::{FrameResult, PreparedFrame};

/// One video stream: objects, their prompts and memories. Made by `Model.tracker()`.
///
/// Prompts go on the next frame `track` is given (or on the current one, which `track` then
/// re-runs first). Calls on one tracker from several threads take turns; trackers of one
/// model run in parallel.
#[pyclass(module = "edgetam", frozen)]
pub struct Tracker {
    /// Locked only with the GIL released (so a thread waiting for it never holds the GIL that
    /// the thread holding it may need to return).
    inner: Mutex<edgetam_tracker::Tracker>,
    model: Py<Model>,
}

impl Tracker {
    pub(crate) fn new(model: &Bound<'_, Model>) -> Self {
        Self {
            inner: Mutex::new(edgetam_tracker::Tracker::new(model.get().inner.clone())),
            model: model.clone().unbind(),
        }
    }

    /// Runs `f` on the tracker with the GIL released.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut edgetam_tracker::Tracker) -> Result<T, Failure> + Send,
    ) -> PyResult<T> {
        detached(py, || f(&mut lock(&self.inner)))
    }

    fn add(&self, py: Python<'_>, obj: u32, frame: u64, prompt: ObjectPrompt) -> PyResult<()> {
        self.with(py, |t| Ok(t.add_prompt(obj, frame, prompt)?))
    }
}

#[pymethods]
impl Tracker {
    /// Prompts object `obj` (new or existing) with a box `(x0, y0, x1, y1)` in pixels on frame
    /// `frame` (the next frame, `next_frame`, or the current one).
    fn add_box(&self, py: Python<'_>, obj: i64, frame: i64, r#box: BoxArg) -> PyResult<()> {
        let (obj, frame) = (object_id(py, obj)?, frame_index(py, frame)?);
        let prompt = points_prompt(py, None, Some(r#box))?;
        self.add(py, obj, frame, prompt.into())
    }

    /// Prompts object `obj` with points `[(x, y), (x, y, label), ...]` in pixels (label 1, the
    /// default, on the object; 0 on the background), and optionally a box as well.
    #[pyo3(signature = (obj, frame, points, r#box = None))]
    fn add_points(
        &self,
        py: Python<'_>,
        obj: i64,
        frame: i64,
        points: &Bound<'_, PyAny>,
        r#box: Option<BoxArg>,
    ) -> PyResult<()> {
        let (obj, frame) = (object_id(py, obj)?, frame_index(py, frame)?);
        let prompt = points_prompt(py, Some(points), r#box)?;
        self.add(py, obj, frame, prompt.into())
    }

    /// Prompts object `obj` with a mask: a 2-D bool or uint8 array the frame's size, nonzero
    /// inside.
    fn add_mask(
        &self,
        py: Python<'_>,
        obj: i64,
        frame: i64,
        mask: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (obj, frame) = (object_id(py, obj)?, frame_index(py, frame)?);
        let mask = mask_prompt(py, mask)?;
        self.add(py, obj, frame, mask.into())
    }

    /// SAM 2's keyword prompt (`add_new_points_or_box` / `add_new_mask`): object `obj_id` on
    /// frame `frame_idx` (default: the next frame), with `points` ((N, 2) pixels) and `labels`
    /// (N ints, 1 object / 0 background; all 1 when omitted), a `box` (x0, y0, x1, y1), both
    /// together, or a `mask` alone. Numpy arrays, lists and tuples are all accepted.
    #[pyo3(signature = (*, obj_id, frame_idx = None, points = None, labels = None, r#box = None, mask = None))]
    #[allow(clippy::too_many_arguments)] // SAM 2's keywords
    fn add_prompt(
        &self,
        py: Python<'_>,
        obj_id: i64,
        frame_idx: Option<i64>,
        points: Option<&Bound<'_, PyAny>>,
        labels: Option<&Bound<'_, PyAny>>,
        r#box: Option<&Bound<'_, PyAny>>,
        mask: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let obj = object_id(py, obj_id)?;
        let frame = frame_idx.map(|f| frame_index(py, f)).transpose()?;
        let prompt = keyword_prompt(py, points, labels, r#box, mask)?;
        self.with(py, |t| {
            let frame = frame.unwrap_or_else(|| t.next_frame_index());
            Ok(t.add_prompt(obj, frame, prompt)?)
        })
    }

    /// Stops tracking object `obj` and forgets its memory; `InvalidPromptError` if it is not
    /// tracked.
    fn remove(&self, py: Python<'_>, obj: i64) -> PyResult<()> {
        let obj = object_id(py, obj)?;
        if self.with(py, |t| Ok(t.remove_object(obj)))? {
            Ok(())
        } else {
            Err(error(
                py,
                Kind::Prompt,
                format!("object {obj} is not tracked"),
            ))
        }
    }

    /// Forgets every object and restarts frame numbering at 0.
    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, |t| {
            t.reset();
            Ok(())
        })
    }

    /// Tracks every object on the next frame: a `numpy.ndarray` of uint8, `(H, W, 3)` RGB (or
    /// BGR with `format="bgr"`, as OpenCV hands it), `(H, W, 4)` RGBA/BGRA or `(H, W)` gray,
    /// C-contiguous or with rows any stride apart (a crop); borrowed, not copied. The GIL is
    /// released while the model runs.
    #[pyo3(signature = (frame, format = None))]
    fn track(
        &self,
        py: Python<'_>,
        frame: &Bound<'_, PyAny>,
        format: Option<&str>,
    ) -> PyResult<Py<FrameResult>> {
        let view = ArrayFrame::new(frame, format)?;
        let frame = view.frame();
        let prepared = self.with(py, |t| {
            let result = t.track_frame(&frame)?;
            Ok(PreparedFrame::new(&result))
        })?;
        prepared.into_py(py)
    }

    /// Ids of the tracked objects, in result order.
    #[getter]
    fn objects(&self, py: Python<'_>) -> PyResult<Vec<u32>> {
        self.with(py, |t| Ok(t.object_ids()))
    }

    /// The index the next `track` call gives its frame.
    #[getter]
    fn next_frame(&self, py: Python<'_>) -> PyResult<u64> {
        self.with(py, |t| Ok(t.next_frame_index()))
    }

    /// The model this tracker runs.
    #[getter]
    fn model(&self, py: Python<'_>) -> Py<Model> {
        self.model.clone_ref(py)
    }
}
