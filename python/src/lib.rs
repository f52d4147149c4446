//! `import edgetam`: EdgeTAM video object tracking from Python. numpy frames in (borrowed, not
//! copied, where the layout allows), masks out as `numpy.ndarray[bool]`, the GIL released while
//! the model runs, Rust errors as `edgetam.Error` subclasses, no panic reaching Python.
//!
//! Built by maturin as `edgetam._edgetam`; `python/edgetam/__init__.py` re-exports it and
//! `_edgetam.pyi` types it.

mod bench;
mod errors;
mod frame;
mod loaded;
mod model;
mod pipeline;
mod prompts;
mod results;
mod tracker;

use pyo3::prelude::*;

/// Where models run on this machine's CPU: `"cpu avx512"`, `"cpu avx2"`, `"cpu neon"` or
/// `"cpu portable"`, the instruction-set path the CPU kernels take (the widest this CPU has, or
/// the one `EDGETAM_ISA` names). Raises `InvalidInputError` when `EDGETAM_ISA` names a path that
/// is unknown or that this CPU lacks (loading a model then fails the same way).
#[pyfunction(name = "backend")]
fn py_backend(py: Python<'_>) -> PyResult<String> {
    edgetam_tracker::isa()
        .map(|_| edgetam_tracker::Backend::cpu().to_string())
        .map_err(|e| errors::Failure::from(edgetam_tracker::Error::from(e)).into_py(py))
}

#[pymodule]
fn _edgetam(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The process set-up every front end runs (`edgetam_tracker::process_setup`: the thread
    // count and candle's spin limit where the caller set neither, 8-10 % of a tracked frame on
    // 2 cores, the guide's docs/src/tuning.md, "Threads"; glibc malloc keeping freed buffers). At import, before any model exists or runs,
    // the earliest point the module gets; it writes the environment as `os.environ[...] = ...`
    // does (setenv, with the GIL held). `Model.load` would run it too (once per process).
    edgetam_tracker::process_setup();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    m.add_class::<loaded::Model>()?;
    m.add_class::<tracker::Tracker>()?;
    m.add_class::<pipeline::Pipeline>()?;
    m.add_class::<pipeline::PipelineOutput>()?;
    m.add_class::<results::FrameResult>()?;
    m.add_class::<results::ObjectResult>()?;
    m.add_function(wrap_pyfunction!(py_backend, m)?)?;
    // Test and benchmark hooks live in a private submodule (`from edgetam._edgetam import
    // _testing`), not among the module's names: `dir(edgetam._edgetam)` is the API.
    let testing = PyModule::new(m.py(), "_testing")?;
    testing.add_function(wrap_pyfunction!(bench::rust_track_times, &testing)?)?;
    testing.add_function(wrap_pyfunction!(bench::result_conversion_times, &testing)?)?;
    testing.add_function(wrap_pyfunction!(errors::panic_for_test, &testing)?)?;
    m.add_submodule(&testing)?;
    Ok(())
}
