//! `import edgetam`: EdgeTAM video object tracking from Python. numpy frames in (borrowed, not
//! copied, where the layout allows), masks out as `numpy.ndarray[bool]`, the GIL released while
//! the model runs, Rust errors as `edgetam.Error` subclasses, no panic reaching Python.
//!
//! Built by maturin as `edgetam._edgetam`; `python/edgetam/__init__.py` re-exports it and
//! `_edgetam.pyi` types it.

mod bench;
mod errors;
mod frame;
mod model;
mod pipeline;
mod prompts;
mod results;
mod tracker;

use pyo3::prelude::*;

/// Where models run on this machine's CPU: `"cpu"`, with the instruction-set path the kernels
/// take when the tracker reports one.
#[pyfunction(name = "backend")]
fn py_backend() -> String {
    crate::backend()
}

/// The CPU backend's name.
pub(crate) fn backend() -> String {
    "cpu".to_string()
}

#[pymodule]
fn _edgetam(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<model::Model>()?;
    m.add_class::<tracker::Tracker>()?;
    m.add_class::<pipeline::Pipeline>()?;
    m.add_class::<pipeline::PipelineOutput>()?;
    m.add_class::<results::FrameResult>()?;
    m.add_class::<results::ObjectResult>()?;
    m.add_function(wrap_pyfunction!(py_backend, m)?)?;
    m.add_function(wrap_pyfunction!(bench::_rust_track_times, m)?)?;
    Ok(())
}
