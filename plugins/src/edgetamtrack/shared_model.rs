//! One loaded model per process: elements with the same model file, device, precision and input
//! size share
//! it (four cameras in one application hold one copy of the weights); each element keeps its
//! own tracking state.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use edgetam_tracker::util::lock;
use edgetam_tracker::EdgeTam;

/// What makes two loaded models interchangeable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelKey {
    /// The model's path, canonicalized (two spellings of one folder are one model).
    pub path: PathBuf,
    pub device: String,
    pub precision: super::Precision,
    /// The requested model input size (`None`: the checkpoint's own).
    pub input_size: Option<usize>,
}

impl ModelKey {
    pub fn new(
        path: &Path,
        device: &str,
        precision: super::Precision,
        input_size: Option<usize>,
    ) -> Self {
        Self {
            path: path.canonicalize().unwrap_or_else(|_| path.to_path_buf()),
            device: device.trim().to_owned(),
            precision,
            input_size,
        }
    }
}

static MODELS: LazyLock<Mutex<HashMap<ModelKey, Weak<EdgeTam>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The model for `key`: the one already loaded, or `load()`'s. The lock is held while loading,
/// so elements starting together load a model once. `true` when it was shared.
pub fn get_or_load<E>(
    key: ModelKey,
    load: impl FnOnce() -> Result<EdgeTam, E>,
) -> Result<(Arc<EdgeTam>, bool), E> {
    let mut models = lock(&MODELS);
    models.retain(|_, m| m.strong_count() > 0);
    if let Some(model) = models.get(&key).and_then(Weak::upgrade) {
        return Ok((model, true));
    }
    let model = Arc::new(load()?);
    models.insert(key, Arc::downgrade(&model));
    Ok((model, false))
}
