//! Tracking results as Python objects: per object its id, score, visibility, box and the mask
//! as a `numpy.ndarray[bool]` at the frame's size.

use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;

/// One object on one frame (also what `Model.segment` returns, with `id` 0).
#[pyclass(module = "edgetam", frozen, get_all)]
pub struct ObjectResult {
    /// The object's id.
    pub id: u32,
    /// The object-score logit: the model judges the object present when it is > 0.
    pub score: f32,
    /// Whether the object is present (`score > 0`); an absent object's mask is empty.
    pub visible: bool,
    /// `(x0, y0, x1, y1)`, the mask's tight box in pixels, inclusive; `None` for an empty mask.
    #[pyo3(name = "box")]
    pub bbox: Option<(usize, usize, usize, usize)>,
    /// Pixels inside the mask.
    pub area: usize,
    /// The decoder's predicted IoU of the chosen mask.
    pub iou: f32,
    /// `numpy.ndarray[bool]` of shape `(H, W)`, the frame's size.
    pub mask: Py<PyArray2<bool>>,
}

#[pymethods]
impl ObjectResult {
    fn __repr__(&self) -> String {
        format!(
            "ObjectResult(id={}, score={:.4}, visible={}, box={:?}, area={})",
            self.id, self.score, self.visible, self.bbox, self.area
        )
    }
}

/// Every object's result on one frame, in the tracker's object order.
#[pyclass(module = "edgetam", frozen, get_all)]
pub struct FrameResult {
    /// The frame's index in the tracker's numbering (0 after `reset`).
    pub frame_index: u64,
    pub width: usize,
    pub height: usize,
    /// `list[ObjectResult]`.
    pub objects: Vec<Py<ObjectResult>>,
}

#[pymethods]
impl FrameResult {
    fn __repr__(&self) -> String {
        format!(
            "FrameResult(frame_index={}, size={}x{}, objects={})",
            self.frame_index,
            self.width,
            self.height,
            self.objects.len()
        )
    }

    fn __len__(&self) -> usize {
        self.objects.len()
    }

    /// The result of object `id`, or `None` if it is not tracked.
    fn get(&self, py: Python<'_>, id: i64) -> Option<Py<ObjectResult>> {
        let id = u32::try_from(id).ok()?;
        self.objects
            .iter()
            .find(|o| o.get().id == id)
            .map(|o| o.clone_ref(py))
    }
}

/// An object's result with its mask as bools, made without the GIL.
pub(crate) struct PreparedObject {
    id: u32,
    score: f32,
    visible: bool,
    bbox: Option<[usize; 4]>,
    area: usize,
    iou: f32,
    width: usize,
    height: usize,
    mask: Vec<bool>,
}

impl PreparedObject {
    /// From the tracker's result (`mask.data` holds 0/1 bytes).
    pub(crate) fn new(o: &edgetam_tracker::ObjectResult) -> Self {
        Self {
            id: o.id,
            score: o.score,
            visible: o.visible,
            bbox: o.bbox,
            area: o.area,
            iou: o.iou,
            width: o.mask.width,
            height: o.mask.height,
            mask: o.mask.data.iter().map(|&v| v != 0).collect(),
        }
    }

    pub(crate) fn into_py(self, py: Python<'_>) -> PyResult<Py<ObjectResult>> {
        // `from_vec` takes the buffer as it is; `reshape` makes a view of it.
        let mask = PyArray1::from_vec(py, self.mask).reshape([self.height, self.width])?;
        Py::new(
            py,
            ObjectResult {
                id: self.id,
                score: self.score,
                visible: self.visible,
                bbox: self.bbox.map(|[x0, y0, x1, y1]| (x0, y0, x1, y1)),
                area: self.area,
                iou: self.iou,
                mask: mask.unbind(),
            },
        )
    }
}

/// A frame's results ready to become Python objects.
pub(crate) struct PreparedFrame {
    frame_index: u64,
    width: usize,
    height: usize,
    objects: Vec<PreparedObject>,
}

impl PreparedFrame {
    /// Converts the masks (run it with the GIL released).
    pub(crate) fn new(r: &edgetam_tracker::FrameResult) -> Self {
        let objects = r.objects.iter().map(PreparedObject::new).collect();
        Self {
            frame_index: r.frame_index,
            width: r.width,
            height: r.height,
            objects,
        }
    }

    pub(crate) fn into_py(self, py: Python<'_>) -> PyResult<Py<FrameResult>> {
        let objects = self
            .objects
            .into_iter()
            .map(|o| o.into_py(py))
            .collect::<PyResult<Vec<_>>>()?;
        Py::new(
            py,
            FrameResult {
                frame_index: self.frame_index,
                width: self.width,
                height: self.height,
                objects,
            },
        )
    }
}
