//! Timing helpers for `examples/overhead.py`, which says what one Python `track` call adds over
//! the Rust [`edgetam_tracker::Tracker`] call: the Rust tracker timed on the same frames in the
//! same process, and the binding's result conversion timed alone. Not public API.

use std::time::Instant;

use edgetam_tracker::{Frame, FrameResult, Mask, ObjectResult, Prompt};
use numpy::{PyReadonlyArray4, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::errors::{detached, error, Failure, Kind};
use crate::loaded::Model;
use crate::prompts::BoxArg;
use crate::results::PreparedFrame;

/// Seconds per `track` call of a Rust tracker on `frames` (`[N, H, W, 3]` RGB, C-contiguous),
/// with object 1 prompted by `box` on the first frame (the first, prompted, call included), or
/// with no object when `box` is `None` (then the model does not run: the call validates the
/// frame and returns an empty result).
#[pyfunction]
#[pyo3(signature = (model, frames, r#box = None))]
pub(crate) fn rust_track_times(
    py: Python<'_>,
    model: &Bound<'_, Model>,
    frames: PyReadonlyArray4<'_, u8>,
    r#box: Option<BoxArg>,
) -> PyResult<Vec<f64>> {
    let &[_, h, w, 3] = frames.shape() else {
        return Err(error(py, Kind::Frame, "frames must be [N, H, W, 3]"));
    };
    let data = frames
        .as_slice()
        .map_err(|e| error(py, Kind::Frame, e.to_string()))?;
    let model = model.get().inner.clone();
    detached(py, || {
        let mut tracker = edgetam_tracker::Tracker::new(model);
        if let Some((x0, y0, x1, y1)) = r#box {
            tracker.add_prompt(1, 0, Prompt::from_box(x0, y0, x1, y1))?;
        }
        let size = h * w * 3;
        let mut times = Vec::new();
        for pixels in data.chunks_exact(size.max(1)) {
            let frame = Frame::rgb8(pixels, w, h);
            let start = Instant::now();
            let result = tracker.track_frame(&frame)?;
            times.push(start.elapsed().as_secs_f64());
            drop(result);
        }
        Ok(times)
    })
}

/// Seconds per conversion of a Rust result with `objects` objects on a `width` x `height` frame
/// into the Python `FrameResult` (masks to `numpy.ndarray[bool]`), `n` times: the part of a
/// tracked `track` call that grows with the frame's size and the number of objects.
#[pyfunction]
pub(crate) fn result_conversion_times(
    py: Python<'_>,
    width: usize,
    height: usize,
    objects: usize,
    n: usize,
) -> PyResult<Vec<f64>> {
    let pixels = width
        .checked_mul(height)
        .filter(|&p| p <= 1 << 26 && objects <= 64)
        .ok_or_else(|| error(py, Kind::Input, "at most 2^26 pixels and 64 objects"))?;
    let logits = candle_core::Tensor::zeros(
        (1, 1, 1, 1),
        candle_core::DType::F32,
        &candle_core::Device::Cpu,
    )
    .map_err(|e| Failure::from(edgetam_tracker::Error::from(e)).into_py(py))?;
    let data: Vec<u8> = (0..pixels).map(|i| u8::from(i % 3 == 0)).collect();
    let object = |id| {
        let mask = Mask {
            width,
            height,
            data: data.clone(),
        };
        let bbox = Some([0, 0, width.saturating_sub(1), height.saturating_sub(1)]);
        ObjectResult::from_mask(id, logits.clone(), mask, bbox, pixels / 3, 1.0)
    };
    let result =
        FrameResult::from_objects(width, height, (1..).take(objects).map(object).collect());
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        // As `Tracker.track` does it: prepared with the GIL released, then made into objects.
        let prepared = py.detach(|| PreparedFrame::new(&result));
        let frame = prepared.into_py(py)?;
        times.push(start.elapsed().as_secs_f64());
        drop(frame);
    }
    Ok(times)
}
