//! Reference fixtures written by `tools/reference/generate_fixtures.py`.
//!
//! A fixture directory holds the `config.json` the reference ran with and `image.safetensors`
//! with the inputs and outputs of every stage (names documented in `fixtures/README.md`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use crate::checks::Result;
use crate::model::config::EdgeTamConfig;
use crate::Error;

/// One fixture directory, loaded.
pub struct Fixture {
    pub dir: PathBuf,
    pub config: EdgeTamConfig,
    tensors: HashMap<String, Tensor>,
}

impl Fixture {
    /// Loads `dir/config.json` and `dir/image.safetensors` onto `device`.
    pub fn load(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let dir = dir.as_ref().to_owned();
        let config = EdgeTamConfig::from_file(dir.join("config.json"))?;
        let file = dir.join("image.safetensors");
        if !file.exists() {
            return Err(Error::Io {
                path: file,
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "fixture file not found"),
            }
            .into());
        }
        let tensors =
            candle_core::safetensors::load(&file, device).map_err(|e| Error::WeightFile {
                path: file.clone(),
                message: e.to_string(),
            })?;
        Ok(Self {
            dir,
            config,
            tensors,
        })
    }

    /// A tensor by name; an error naming it if absent.
    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.tensors.get(name).ok_or_else(|| {
            Error::MissingWeight {
                key: name.to_owned(),
                path: self.dir.join("image.safetensors"),
            }
            .into()
        })
    }

    /// Whether the fixture has a tensor of this name.
    pub fn has(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Whether stage tensors are stored in full (`false`: spatially subsampled, see
    /// [`subsample`]).
    pub fn is_full(&self) -> bool {
        self.get("preprocess.pixel_values")
            .map(|t| t.dims().last().copied() == Some(self.config.image_size))
            .unwrap_or(false)
    }
}

/// Spatially subsamples an NCHW tensor to at most `grid` x `grid`, as the generator does for
/// large fixtures (`t[..., ::step, ::step]`, `step = W / grid`).
pub fn subsample(t: &Tensor, grid: usize) -> Result<Tensor> {
    let dims = t.dims();
    let (h, w) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let step = (w / grid).max(1);
    if step == 1 {
        return Ok(t.clone());
    }
    let rank = dims.len();
    let rows: Vec<u32> = (0..h).step_by(step).map(|i| i as u32).collect();
    let cols: Vec<u32> = (0..w).step_by(step).map(|i| i as u32).collect();
    let rows = Tensor::new(rows.as_slice(), t.device())?;
    let cols = Tensor::new(cols.as_slice(), t.device())?;
    Ok(t.index_select(&rows, rank - 2)?
        .index_select(&cols, rank - 1)?)
}
