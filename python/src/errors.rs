//! Rust errors as Python exceptions, and the guard that keeps panics out of Python.
//!
//! The exception classes are made at import time with `type(name, bases, ...)` because each
//! derives from `edgetam.Error` *and* from the builtin a caller already catches (`ValueError`
//! for bad input, `OSError` for files): pyo3's `create_exception!` takes one base only.

use std::panic::{catch_unwind, AssertUnwindSafe};

use edgetam_tracker::util::panic_message;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// Which `edgetam` exception a failure raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `edgetam.Error`: the base; also what an internal failure (tensor engine, panic) raises.
    Base,
    /// `edgetam.InvalidInputError` (`ValueError`): an argument out of range (device, precision,
    /// input size, a limit, a pipeline setting), or one this machine cannot run (a device it
    /// lacks, bf16 without AVX512-BF16).
    Input,
    /// `edgetam.InvalidFrameError` (an `InvalidInputError`): dtype, shape, layout, size.
    Frame,
    /// `edgetam.InvalidPromptError` (an `InvalidInputError`): a prompt outside the frame, an
    /// empty or malformed prompt, an unknown object.
    Prompt,
    /// `edgetam.ModelFileError` (`OSError`): a model file missing, unreadable or malformed, a
    /// hub download that failed.
    File,
    /// `edgetam.PipelineError` (`RuntimeError`): a pipeline closed or whose worker failed.
    Pipeline,
}

/// One exception class: the [`Kind`] that raises it, its name in the module, the `edgetam`
/// class it derives from (`None` for the base), the builtin it derives from as well, and its
/// docstring.
struct Spec {
    kind: Kind,
    name: &'static str,
    parent: Option<Kind>,
    builtin: Option<&'static str>,
    doc: &'static str,
}

/// Every class, in [`Kind`] order (a parent before its children): made from this table at
/// import, registered from it, and looked up in it by kind, so a class is named once.
const SPECS: [Spec; 6] = [
    Spec {
        kind: Kind::Base,
        name: "Error",
        parent: None,
        builtin: Some("Exception"),
        doc: "Base class of every error edgetam raises.",
    },
    Spec {
        kind: Kind::Input,
        name: "InvalidInputError",
        parent: Some(Kind::Base),
        builtin: Some("ValueError"),
        doc: "An argument edgetam cannot use (also a ValueError).",
    },
    Spec {
        kind: Kind::Frame,
        name: "InvalidFrameError",
        parent: Some(Kind::Input),
        builtin: None,
        doc: "A frame with the wrong dtype, shape, layout or size (also a ValueError).",
    },
    Spec {
        kind: Kind::Prompt,
        name: "InvalidPromptError",
        parent: Some(Kind::Input),
        builtin: None,
        doc: "A prompt outside the frame, empty or malformed, or an unknown object (also a \
              ValueError).",
    },
    Spec {
        kind: Kind::File,
        name: "ModelFileError",
        parent: Some(Kind::Base),
        builtin: Some("OSError"),
        doc: "A model file missing, unreadable or malformed, or a failed hub download (also an \
              OSError).",
    },
    Spec {
        kind: Kind::Pipeline,
        name: "PipelineError",
        parent: Some(Kind::Base),
        builtin: Some("RuntimeError"),
        doc: "A pipeline that is closed or whose worker failed (also a RuntimeError).",
    },
];

// `SPECS[kind as usize]` is the class of `kind`, and a parent comes before its children.
const _: () = {
    let mut i = 0;
    while i < SPECS.len() {
        assert!(SPECS[i].kind as usize == i);
        if let Some(parent) = SPECS[i].parent {
            assert!((parent as usize) < i);
        }
        i += 1;
    }
};

/// The exception classes, made once per process at import, indexed by [`Kind`].
static CLASSES: PyOnceLock<[Py<PyType>; SPECS.len()]> = PyOnceLock::new();

/// `type(name, bases, {"__doc__": doc, "__module__": "edgetam"})`.
fn make_class<'py>(
    py: Python<'py>,
    name: &str,
    bases: Vec<Bound<'py, PyAny>>,
    doc: &str,
) -> PyResult<Py<PyType>> {
    let dict = PyDict::new(py);
    dict.set_item("__doc__", doc)?;
    dict.set_item("__module__", "edgetam")?;
    let bases = PyTuple::new(py, bases)?;
    let class = py
        .get_type::<PyType>()
        .call1((name, bases, dict))?
        .cast_into::<PyType>()?;
    Ok(class.unbind())
}

fn classes(py: Python<'_>) -> PyResult<&[Py<PyType>; SPECS.len()]> {
    CLASSES.get_or_try_init(py, || {
        let builtins = py.import("builtins")?;
        let mut made: Vec<Py<PyType>> = Vec::with_capacity(SPECS.len());
        for spec in &SPECS {
            let mut bases = Vec::with_capacity(2);
            if let Some(parent) = spec.parent {
                // Made already: the table lists a parent first (checked at compile time).
                if let Some(class) = made.get(parent as usize) {
                    bases.push(class.bind(py).clone().into_any());
                }
            }
            if let Some(builtin) = spec.builtin {
                bases.push(builtins.getattr(builtin)?);
            }
            made.push(make_class(py, spec.name, bases, spec.doc)?);
        }
        <[Py<PyType>; SPECS.len()]>::try_from(made)
            .map_err(|_| PyRuntimeError::new_err("edgetam: an exception class was not made"))
    })
}

/// Adds the exception classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    for (spec, class) in SPECS.iter().zip(classes(py)?) {
        m.add(spec.name, class.bind(py))?;
    }
    Ok(())
}

/// The exception of `kind` with `message`.
pub(crate) fn error(py: Python<'_>, kind: Kind, message: impl Into<String>) -> PyErr {
    let message = message.into();
    let class = match classes(py) {
        Ok(c) => &c[kind as usize],
        // Only if making the classes failed at import, which would have failed the import.
        Err(e) => return e,
    };
    PyErr::from_type(class.bind(py).clone(), (message,))
}

/// The class a tracker error raises.
pub(crate) fn tracker_kind(e: &edgetam_tracker::Error) -> Kind {
    use edgetam_tracker::Error as E;
    match e {
        E::Io { .. }
        | E::Config { .. }
        | E::WeightFile { .. }
        | E::MissingWeight { .. }
        | E::WeightShape { .. }
        | E::UnexpectedWeights { .. }
        | E::Hub(_) => Kind::File,
        E::InputSize { .. }
        | E::InvalidDevice(_)
        | E::Limit(_)
        | E::Isa(_)
        | E::Bf16Policy(_)
        | E::PrecisionUnavailable { .. } => Kind::Input,
        E::InvalidFrame(_) | E::InvalidImage(_) => Kind::Frame,
        E::InvalidPrompt(_) => Kind::Prompt,
        _ => Kind::Base,
    }
}

/// The class a pipeline error raises.
pub(crate) fn pipeline_kind(e: &edgetam_pipeline::Error) -> Kind {
    use edgetam_pipeline::Error as E;
    match e {
        E::InvalidFrame(_) => Kind::Frame,
        E::InvalidCommand(_) => Kind::Prompt,
        E::Tracker(t) => tracker_kind(t),
        E::Config(_) | E::UnknownStream(_) => Kind::Input,
        E::Closed | E::WorkerFailed(_) | E::Timeout(_) => Kind::Pipeline,
    }
}

/// A failure of the Rust side, converted to a Python exception once the GIL is held again.
#[derive(Debug)]
pub(crate) enum Failure {
    Tracker(edgetam_tracker::Error),
    Pipeline(edgetam_pipeline::Error),
    /// A panic caught by [`guard`]: its message.
    Panic(String),
}

impl From<edgetam_tracker::Error> for Failure {
    fn from(e: edgetam_tracker::Error) -> Self {
        Self::Tracker(e)
    }
}

impl From<edgetam_pipeline::Error> for Failure {
    fn from(e: edgetam_pipeline::Error) -> Self {
        Self::Pipeline(e)
    }
}

impl Failure {
    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Self::Tracker(e) => error(py, tracker_kind(&e), e.to_string()),
            Self::Pipeline(e) => error(py, pipeline_kind(&e), e.to_string()),
            Self::Panic(msg) => error(py, Kind::Base, format!("internal error (panic): {msg}")),
        }
    }
}

/// Runs `f`, turning a panic into [`Failure::Panic`]: a panic must not cross into Python (pyo3
/// would raise its `PanicException`, a `BaseException` that `except Exception` misses).
pub(crate) fn guard<T>(f: impl FnOnce() -> Result<T, Failure>) -> Result<T, Failure> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|payload| Err(Failure::Panic(panic_message(&*payload))))
}

/// Runs `f` with the GIL released and a panic caught, then raises its error as an `edgetam`
/// exception: every model call goes through here, so a capture thread keeps running meanwhile.
pub(crate) fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> Result<T, Failure> + Send,
) -> PyResult<T> {
    py.detach(|| guard(f)).map_err(|e| e.into_py(py))
}

/// `TypeError` for an argument of the wrong Python type.
pub(crate) fn type_error(message: impl Into<String>) -> PyErr {
    PyTypeError::new_err(message.into())
}

/// Panics inside [`detached`], as a model call that hit a bug would: the test suite checks that
/// this raises `edgetam.Error` (not pyo3's `PanicException`) and that the module keeps working.
/// Not public API.
#[pyfunction]
pub(crate) fn panic_for_test(py: Python<'_>) -> PyResult<()> {
    detached(py, || -> Result<(), Failure> {
        panic!("deliberate panic for the test suite")
    })
}
