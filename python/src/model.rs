//! `edgetam.Model`'s methods: loading, the model's settings, and the trackers and pipelines
//! made from it (the struct itself is in `loaded.rs`, below the tracker and pipeline files).

use std::path::PathBuf;
use std::sync::Arc;

use edgetam_tracker::{mask_area_and_box, Mask, ModelSpec, MultimaskMode, ObjectResult, Precision};
use pyo3::prelude::*;

use crate::errors::{detached, error, Kind};
use crate::frame::ArrayFrame;
use crate::loaded::Model;
use crate::pipeline::{drop_policy, Pipeline};
use crate::prompts::{points_prompt, BoxArg};
use crate::results::PreparedObject;
use crate::tracker::Tracker;

#[pymethods]
impl Model {
    /// Loads a model: a folder with `config.json` + `model.safetensors`, an original
    /// `edgetam.pt`, or a Hugging Face hub repository id such as `yonigozlan/EdgeTAM-hf`
    /// (downloaded into the Hugging Face cache). `device` is `"cpu"` or `"cuda:N"`,
    /// `precision` `"f32"` (exact) or `"bf16"` (fast; needs a CPU with AVX512-BF16 and the
    /// avx512 kernels: elsewhere `InvalidInputError` says why, never running f32 in its place),
    /// `input_size` the model's square input side (a multiple of 256 from 256 to 2048; default:
    /// the checkpoint's, 1024 for the released EdgeTAM; smaller is faster).
    ///
    /// Raises `ModelFileError` for a model missing or unreadable, `InvalidInputError` for a bad
    /// device, precision, input size or `EDGETAM_ISA`, and for a precision that cannot run here.
    #[staticmethod]
    #[pyo3(signature = (path_or_hub_id, device = "cpu", precision = "f32", input_size = None))]
    fn load(
        py: Python<'_>,
        path_or_hub_id: PathBuf,
        device: &str,
        precision: &str,
        input_size: Option<usize>,
    ) -> PyResult<Self> {
        let precision: Precision = precision
            .parse()
            .map_err(|e: String| error(py, Kind::Input, e))?;
        let spec = ModelSpec::new(&path_or_hub_id)
            .device(device)
            .precision(precision)
            .input_size(input_size);
        let loaded = detached(py, || Ok(spec.load()?))?;
        Ok(Self {
            inner: Arc::new(loaded.model),
            backend: loaded.backend.to_string(),
        })
    }

    /// Where the model runs: `"cpu avx512"`, `"cpu avx2"`, `"cpu neon"` or `"cpu portable"` (the
    /// CPU kernels' instruction-set path), or `"cuda:N"`.
    #[getter]
    fn backend(&self) -> &str {
        &self.backend
    }

    /// The model's square input side in pixels.
    #[getter]
    fn input_size(&self) -> usize {
        self.inner.config().image_size
    }

    /// `"f32"` or `"bf16"`: the precision the model runs, the one `load` asked for (a load
    /// never falls back to another).
    #[getter]
    fn precision(&self) -> String {
        self.inner.precision().to_string()
    }

    /// A new tracker (one video stream) on this model.
    fn tracker(slf: &Bound<'_, Self>) -> Tracker {
        Tracker::new(slf)
    }

    /// A frame-queue pipeline on this model: `push` frames from one thread, read results in
    /// order from another (or iterate over it). `queue` frames wait at most; when the queue is
    /// full `drop` decides: `"block"` (wait for room), `"oldest"` (drop the oldest queued
    /// frame: live cameras) or `"newest"` (drop the new frame). `encoder_ahead` runs the image
    /// encoder of the next frame on its own thread; `threads` sizes each worker's thread pool.
    #[pyo3(signature = (queue = 4, drop = "block", encoder_ahead = false, threads = None))]
    fn pipeline(
        slf: &Bound<'_, Self>,
        queue: usize,
        drop: &str,
        encoder_ahead: bool,
        threads: Option<usize>,
    ) -> PyResult<Pipeline> {
        let policy = drop_policy(slf.py(), drop)?;
        Pipeline::new(slf, queue, policy, encoder_ahead, threads)
    }

    /// Segments one object on a single image (no tracking): a box `(x0, y0, x1, y1)` and/or
    /// points `[(x, y, label), ...]` (label 1 object, 0 background) in pixels. `image` is a
    /// frame as `Tracker.track` takes it. Returns an `ObjectResult` with `id` 0.
    #[pyo3(signature = (image, *, r#box = None, points = None, format = None))]
    fn segment(
        &self,
        py: Python<'_>,
        image: &Bound<'_, PyAny>,
        r#box: Option<BoxArg>,
        points: Option<&Bound<'_, PyAny>>,
        format: Option<&str>,
    ) -> PyResult<Py<crate::results::ObjectResult>> {
        let prompt = points_prompt(py, points, r#box)?;
        let view = ArrayFrame::new(image, format)?;
        let (width, height) = (view.width(), view.height());
        let model = &self.inner;
        let frame = view.frame();
        let prepared = detached(py, || {
            frame.validate().map_err(edgetam_tracker::Error::from)?;
            prompt.validate(width, height)?;
            let embedding = model.encode_frame(&frame)?;
            let seg = model.segment(&embedding, &prompt, MultimaskMode::Auto)?;
            let (_, mask) = model.mask_at_original(&embedding, &seg)?;
            let (area, bbox) = mask_area_and_box(&mask)?;
            let data = mask
                .flatten_all()
                .and_then(|m| m.to_vec1::<u8>())
                .map_err(edgetam_tracker::Error::from)?;
            let result = ObjectResult {
                id: 0,
                low_res_logits: seg.low_res_logits.clone(),
                mask: Mask {
                    width,
                    height,
                    data,
                },
                bbox,
                area,
                score: seg.object_score,
                visible: seg.is_present(),
                iou: seg.iou(),
                chosen_mask: seg.chosen,
                multimask: seg.multimask,
                prompted: true,
            };
            Ok(PreparedObject::new(&result))
        })?;
        prepared.into_py(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "Model(input_size={}, precision={}, backend={:?})",
            self.inner.config().image_size,
            self.inner.precision(),
            self.backend
        )
    }
}
