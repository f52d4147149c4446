//! The data of `edgetam.Model`: the loaded network that trackers and pipelines share.
//!
//! The class's Python methods live in `model.rs`, which makes trackers and pipelines; the
//! struct lives here, below `tracker.rs` and `pipeline.rs`, so that those two can hold the model
//! they run (their `model` property) without importing the file that constructs them: imports
//! among the three run one way, from `model.rs` down.

use std::sync::Arc;

use edgetam_tracker::EdgeTam;
use pyo3::prelude::*;

/// An EdgeTAM model. Load it once; trackers and pipelines made from it share its weights, and
/// several can run at once from several Python threads (the GIL is released while they run).
#[pyclass(module = "edgetam", frozen)]
pub struct Model {
    /// The network, shared with every tracker and pipeline made from it.
    pub(crate) inner: Arc<EdgeTam>,
    /// Where it runs, as `Model.backend` reports it.
    pub(crate) backend: String,
}
