//! `edgetam._edgetam._rust_track_times`: the Rust [`edgetam_tracker::Tracker`] timed on the same
//! frames in the same process, so `examples/overhead.py` can say what one Python `track` call
//! adds (array checks, the GIL released and taken back, masks as numpy arrays). Not public API.

use std::time::Instant;

use edgetam_tracker::{Frame, Prompt};
use numpy::{PyReadonlyArray4, PyUntypedArrayMethods};
use pyo3::prelude::*;

use crate::errors::{detached, error, Kind};
use crate::model::Model;
use crate::prompts::BoxArg;

/// Seconds per `track` call of a Rust tracker on `frames` (`[N, H, W, 3]` RGB, C-contiguous)
/// with object 1 prompted by `box` on the first frame; the first (prompted) frame included.
#[pyfunction]
pub(crate) fn _rust_track_times(
    py: Python<'_>,
    model: &Bound<'_, Model>,
    frames: PyReadonlyArray4<'_, u8>,
    r#box: BoxArg,
) -> PyResult<Vec<f64>> {
    let &[n, h, w, 3] = frames.shape() else {
        return Err(error(py, Kind::Frame, "frames must be [N, H, W, 3]"));
    };
    let data = frames
        .as_slice()
        .map_err(|e| error(py, Kind::Frame, e.to_string()))?;
    let model = model.get().inner.clone();
    detached(py, || {
        let mut tracker = edgetam_tracker::Tracker::new(model);
        let (x0, y0, x1, y1) = r#box;
        tracker.add_prompt(1, 0, Prompt::from_box(x0, y0, x1, y1))?;
        let size = h * w * 3;
        let mut times = Vec::with_capacity(n);
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
