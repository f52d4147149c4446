//! Typed errors of the tracker crate (the hub's too: `model/hub.rs` builds on this file, never
//! the other way round).

use std::path::PathBuf;

/// Everything that can go wrong while loading or running EdgeTAM.
///
/// Messages name the offending file, key, prompt or frame so a user can act on them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `config.json` is malformed or describes a model this crate does not implement.
    #[error("invalid model config {path}: {message}")]
    Config { path: PathBuf, message: String },
    /// A requested model input size the model cannot run at.
    #[error("input size {size} is not supported: it must be {rule}")]
    InputSize { size: usize, rule: String },
    /// A weight file is truncated, corrupt or not a checkpoint.
    #[error("cannot load weights from {path}: {message}")]
    WeightFile { path: PathBuf, message: String },
    /// A tensor the model needs is absent from the checkpoint.
    #[error("missing weight `{key}` in {path}")]
    MissingWeight { key: String, path: PathBuf },
    /// A tensor exists but has the wrong shape.
    #[error("weight `{key}` in {path} has shape {actual:?}, expected {expected:?}")]
    WeightShape {
        key: String,
        path: PathBuf,
        expected: Vec<usize>,
        actual: Vec<usize>,
    },
    /// The checkpoint holds tensors the model does not use (a different model or version).
    #[error("{count} unexpected weight(s) in {path}, e.g. `{first}`")]
    UnexpectedWeights {
        count: usize,
        first: String,
        path: PathBuf,
    },
    /// A size from a file or a caller is beyond one of the [`crate::limits`]: refused before
    /// anything is allocated for it.
    #[error(transparent)]
    Limit(#[from] crate::limits::LimitError),
    /// A frame's size, strides or buffers do not match its pixel format.
    #[error("invalid frame: {0}")]
    InvalidFrame(#[from] crate::frame::FrameError),
    /// An image, mask or tensor does not have the size or layout a stage needs.
    #[error("invalid image: {0}")]
    InvalidImage(String),
    /// The memory bank refused an operation (shapes, layout).
    #[error(transparent)]
    Memory(#[from] edgetam_memory_bank::Error),
    /// A prompt is malformed or lies outside the image.
    #[error("invalid prompt: {0}")]
    InvalidPrompt(String),
    /// The requested precision cannot run on this device or CPU: [`Bf16`](crate::Precision::Bf16) needs the
    /// CPU, AVX512-BF16 and the avx512 kernels (not capped by `EDGETAM_ISA`). Loading through
    /// [`ModelSpec`](crate::ModelSpec) and [`EdgeTam::try_set_precision`](crate::EdgeTam::try_set_precision)
    /// refuse with this instead of running another precision than the one asked for.
    #[error("precision {precision} is not available here: {reason}")]
    PrecisionUnavailable {
        /// What was asked for.
        precision: crate::Precision,
        /// Why it cannot run, naming what this machine runs instead.
        reason: String,
    },
    /// `EDGETAM_ISA` names an instruction set that is unknown or that this CPU lacks.
    #[error(transparent)]
    Isa(#[from] crate::kernels::cpu::IsaError),
    /// `EDGETAM_BF16_POLICY` (the fast mode's per-group precision override) is malformed or
    /// names a group or precision that does not exist.
    #[error(transparent)]
    Bf16Policy(#[from] crate::model::bf16_policy::PolicyError),
    /// The requested compute device is unknown or unavailable in this build.
    #[error("invalid device {0}")]
    InvalidDevice(String),
    /// A model named by hub repository id could not be found, downloaded or read from the
    /// cache ([`ModelSource`](crate::ModelSource)); the message names the repository.
    /// (Boxed: it is the largest of these errors and would make every `Result` bigger.)
    #[error(transparent)]
    Hub(Box<HubError>),
    /// An error from the tensor engine (a bug or an unsupported device operation).
    #[error("tensor error: {0}")]
    Tensor(#[from] candle_core::Error),
}

impl From<HubError> for Error {
    fn from(e: HubError) -> Self {
        Self::Hub(Box::new(e))
    }
}

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a hub model could not be made available locally. Every message names the repository.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HubError {
    /// The hub does not know the repository (or it is private and no token was given).
    #[error(
        "model `{repo}` is neither a local file or folder nor a repository on {endpoint} \
         (HTTP {status}; a private repository needs HF_TOKEN)"
    )]
    RepoNotFound {
        repo: String,
        endpoint: String,
        status: u16,
    },
    /// The repository exists but holds neither weight layout.
    #[error(
        "hub repository `{repo}` has no EdgeTAM weights: it lacks {missing} (wanted \
         config.json + model.safetensors, or edgetam.pt); it holds: {}",
        list(available)
    )]
    MissingFiles {
        repo: String,
        /// What is missing, e.g. `model.safetensors (beside config.json) and edgetam.pt`.
        missing: String,
        /// The repository's files.
        available: Vec<String>,
    },
    /// The hub could not be reached and the model is not in the cache.
    #[error(
        "cannot reach {endpoint} to fetch model `{repo}`, and it is not in the cache {cache}: \
         {message}"
    )]
    Unreachable {
        repo: String,
        endpoint: String,
        cache: PathBuf,
        message: String,
    },
    /// `HF_HUB_OFFLINE` is set and the model is not in the cache.
    #[error(
        "model `{repo}` is not a local file or folder and not in the hub cache {cache}, and \
         HF_HUB_OFFLINE is set: fetch it once with network access"
    )]
    NotCached { repo: String, cache: PathBuf },
    /// A file of the repository could not be downloaded or stored.
    #[error("cannot download `{file}` of hub model `{repo}`: {message}")]
    Download {
        repo: String,
        file: String,
        message: String,
    },
    /// The server answered, but not as the hub does (HF_ENDPOINT not a hub?).
    #[error("unexpected answer from {endpoint} about model `{repo}`: {message}")]
    Protocol {
        repo: String,
        endpoint: String,
        message: String,
    },
    /// No cache folder: none of HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HOME is set.
    #[error("no Hugging Face cache folder for model `{repo}`: set HF_HOME")]
    NoCacheDir { repo: String },
    /// This build cannot fetch hub models (crate feature `hub` off).
    #[error(
        "model `{repo}` is not a local file or folder, and this build cannot fetch hub models \
         (edgetam-tracker feature `hub`)"
    )]
    Unsupported { repo: String },
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "no files".into()
    } else {
        names.join(", ")
    }
}
