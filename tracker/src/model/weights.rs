//! Checkpoint loading: transformers `model.safetensors` or Meta's original `edgetam.pt`.
//!
//! Both layouts end up as one map from **transformers key names** to f32 tensors on the target
//! device (the `.pt` names go through [`crate::model::original_keys`]). The model is then built through a
//! [`VarBuilder`] whose backend records which keys were read and the first failure with its key,
//! so a missing, mis-shaped or unexpected tensor is reported by name instead of as a panic.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::VarBuilder;

use crate::error::{Error, Result};

/// Which on-disk layout a checkpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointFormat {
    /// transformers' `model.safetensors` (`EdgeTamVideoModel` key names).
    Safetensors,
    /// Meta's original PyTorch checkpoint (`{"model": state_dict}` with sam2 key names).
    OriginalPt,
}

/// All tensors of a checkpoint, keyed by transformers names, plus bookkeeping of what was used.
pub struct Weights {
    path: PathBuf,
    format: CheckpointFormat,
    tensors: Arc<HashMap<String, Tensor>>,
    state: Arc<Mutex<LoadState>>,
}

#[derive(Default)]
struct LoadState {
    used: HashSet<String>,
    first_error: Option<Error>,
}

impl Weights {
    /// Loads a checkpoint file; the format is detected from the file's first bytes. Every size
    /// in the file (the safetensors header, the pickle, each tensor's rank, shape and storage)
    /// is checked against [`crate::limits`] before anything is allocated for it.
    pub fn load(path: impl AsRef<Path>, device: &Device) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let format = detect_format(&path)?;
        let raw: Vec<(String, Tensor)> = match format {
            CheckpointFormat::Safetensors => {
                check_safetensors_file(&path)?;
                let map = candle_core::safetensors::load(&path, &Device::Cpu)
                    .map_err(|e| file_error(&path, e))?;
                map.into_iter().collect()
            }
            CheckpointFormat::OriginalPt => {
                let file = std::fs::File::open(&path).map_err(|source| Error::Io {
                    path: path.clone(),
                    source,
                })?;
                let raw = crate::model::pt::read_tensors(
                    std::io::BufReader::new(file),
                    Some("model"),
                    &path,
                )?;
                Self::original_names(raw, &path)?
            }
        };
        Self::from_raw(path, format, raw, device)
    }

    /// A checkpoint held in memory, either format (detected from its first bytes); `label`
    /// names it in errors. Bounded exactly as [`Self::load`].
    pub fn from_bytes(bytes: &[u8], label: impl Into<PathBuf>, device: &Device) -> Result<Self> {
        let label = label.into();
        if bytes.starts_with(b"PK\x03\x04") {
            Self::from_pt_bytes(bytes, label, device)
        } else {
            Self::from_safetensors_bytes(bytes, label, device)
        }
    }

    /// A transformers `model.safetensors` held in memory; `label` names it in errors.
    pub fn from_safetensors_bytes(
        bytes: &[u8],
        label: impl Into<PathBuf>,
        device: &Device,
    ) -> Result<Self> {
        let path = label.into();
        let header_len = safetensors_header_len(bytes.get(..8), bytes.len() as u64, &path)?;
        check_safetensors_header(&bytes[8..8 + header_len], bytes.len() as u64, &path)?;
        let map = candle_core::safetensors::load_buffer(bytes, &Device::Cpu)
            .map_err(|e| file_error(&path, e))?;
        Self::from_raw(
            path,
            CheckpointFormat::Safetensors,
            map.into_iter().collect(),
            device,
        )
    }

    /// Meta's original `edgetam.pt` held in memory; `label` names it in errors.
    pub fn from_pt_bytes(bytes: &[u8], label: impl Into<PathBuf>, device: &Device) -> Result<Self> {
        let path = label.into();
        let raw =
            crate::model::pt::read_tensors(std::io::Cursor::new(bytes), Some("model"), &path)?;
        let raw = Self::original_names(raw, &path)?;
        Self::from_raw(path, CheckpointFormat::OriginalPt, raw, device)
    }

    /// The tensors of an original checkpoint under their transformers names.
    fn original_names(raw: Vec<(String, Tensor)>, path: &Path) -> Result<Vec<(String, Tensor)>> {
        if raw.is_empty() {
            return Err(Error::WeightFile {
                path: path.to_owned(),
                message: "no tensors found under the `model` key (is this an EdgeTAM checkpoint?)"
                    .into(),
            });
        }
        crate::model::original_keys::to_transformers(raw, path)
    }

    fn from_raw(
        path: PathBuf,
        format: CheckpointFormat,
        raw: Vec<(String, Tensor)>,
        device: &Device,
    ) -> Result<Self> {
        let mut tensors = HashMap::with_capacity(raw.len());
        for (key, t) in raw {
            // Integer buffers (BatchNorm `num_batches_tracked`) are kept as they are; every float
            // tensor becomes f32 on the target device.
            let t = if t.dtype().is_float() {
                t.to_dtype(DType::F32)?.to_device(device)?
            } else {
                t
            };
            tensors.insert(key, t);
        }
        Ok(Self {
            path,
            format,
            tensors: Arc::new(tensors),
            state: Arc::default(),
        })
    }

    /// Builds from tensors already in memory (tests, conversions).
    pub fn from_tensors(tensors: HashMap<String, Tensor>, path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            format: CheckpointFormat::Safetensors,
            tensors: Arc::new(tensors),
            state: Arc::default(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn format(&self) -> CheckpointFormat {
        self.format
    }

    /// Every tensor, by transformers key name.
    pub fn tensors(&self) -> &HashMap<String, Tensor> {
        &self.tensors
    }

    /// A `VarBuilder` over these weights producing f32 tensors on `device`.
    pub fn var_builder(&self, device: &Device) -> VarBuilder<'static> {
        let backend = TrackingBackend {
            tensors: self.tensors.clone(),
            state: self.state.clone(),
            path: self.path.clone(),
        };
        VarBuilder::from_backend(Box::new(backend), DType::F32, device.clone())
    }

    /// Turns an engine error raised while building the model into the typed error that caused it
    /// (a missing or mis-shaped key), if the backend recorded one.
    pub fn lift(&self, err: candle_core::Error) -> Error {
        match self.state.lock() {
            Ok(mut s) => s.first_error.take().unwrap_or(Error::Tensor(err)),
            Err(_) => Error::Tensor(err),
        }
    }

    /// Fails if the checkpoint holds float tensors the model never read (integer BatchNorm
    /// counters are ignored): a sign of a different model or a wrong key map.
    pub fn check_all_used(&self) -> Result<()> {
        self.check_all_used_except(&[])
    }

    /// Like [`Weights::check_all_used`], but tolerates unread keys under the given prefixes
    /// (stages a model variant deliberately does not build).
    pub fn check_all_used_except(&self, allowed_prefixes: &[&str]) -> Result<()> {
        let used = match self.state.lock() {
            Ok(s) => s.used.clone(),
            Err(_) => HashSet::new(),
        };
        let mut extra: Vec<&String> = self
            .tensors
            .iter()
            .filter(|(k, t)| {
                !used.contains(*k)
                    && t.dtype().is_float()
                    && !is_ignored_key(k)
                    && !allowed_prefixes.iter().any(|p| k.starts_with(p))
            })
            .map(|(k, _)| k)
            .collect();
        extra.sort();
        match extra.first() {
            None => Ok(()),
            Some(first) => Err(Error::UnexpectedWeights {
                count: extra.len(),
                first: (*first).clone(),
                path: self.path.clone(),
            }),
        }
    }
}

/// Keys present in real checkpoints that inference does not need.
fn is_ignored_key(key: &str) -> bool {
    key.ends_with("num_batches_tracked")
}

fn file_error(path: &Path, e: candle_core::Error) -> Error {
    Error::WeightFile {
        path: path.to_owned(),
        message: e.to_string(),
    }
}

fn detect_format(path: &Path) -> Result<CheckpointFormat> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut head = [0u8; 8];
    let n = f.read(&mut head).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    if n >= 4 && &head[..4] == b"PK\x03\x04" {
        return Ok(CheckpointFormat::OriginalPt);
    }
    if n == 8 {
        // safetensors: little-endian u64 header length followed by a JSON header.
        let len = u64::from_le_bytes(head);
        let file_len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len > 1 && len.saturating_add(8) <= file_len {
            return Ok(CheckpointFormat::Safetensors);
        }
    }
    Err(Error::WeightFile {
        path: path.to_owned(),
        message: "neither a safetensors file nor a PyTorch zip checkpoint (truncated or corrupt?)"
            .into(),
    })
}

/// The JSON header length of a safetensors file from its first 8 bytes, bounded by
/// [`crate::limits::MAX_SAFETENSORS_HEADER_BYTES`] and by the file's length.
fn safetensors_header_len(head: Option<&[u8]>, file_len: u64, path: &Path) -> Result<usize> {
    let bad = |message: String| Error::WeightFile {
        path: path.to_owned(),
        message,
    };
    let head: [u8; 8] = head
        .and_then(|h| h.try_into().ok())
        .ok_or_else(|| bad("shorter than a safetensors header (8 bytes)".into()))?;
    let len = u64::from_le_bytes(head);
    crate::limits::check(
        || format!("{} safetensors header size in bytes", path.display()),
        len,
        crate::limits::MAX_SAFETENSORS_HEADER_BYTES,
    )?;
    if len.saturating_add(8) > file_len {
        return Err(bad(format!(
            "its safetensors header of {len} bytes runs past the end of the {file_len}-byte file              (truncated?)"
        )));
    }
    Ok(len as usize)
}

/// Reads and checks the header of the safetensors file at `path` (see
/// [`check_safetensors_header`]) before the file is loaded.
fn check_safetensors_file(path: &Path) -> Result<()> {
    use std::io::Read;
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let file_len = f.metadata().map_err(io)?.len();
    let mut head = [0u8; 8];
    f.read_exact(&mut head).map_err(io)?;
    let len = safetensors_header_len(Some(&head), file_len, path)?;
    let mut header = vec![0u8; len];
    f.read_exact(&mut header).map_err(io)?;
    check_safetensors_header(&header, file_len, path)
}

/// One entry of a safetensors header.
#[derive(serde::Deserialize)]
struct SafetensorsEntry {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: [u64; 2],
}

/// Checks a safetensors JSON header against [`crate::limits`] (tensor count, rank, elements,
/// total bytes) and the file (each tensor's bytes inside the data), naming the first tensor
/// that is out of bounds.
fn check_safetensors_header(header: &[u8], file_len: u64, path: &Path) -> Result<()> {
    use crate::limits::{check, MAX_CHECKPOINT_TENSORS, MAX_TENSOR_ELEMENTS, MAX_TENSOR_RANK};
    let bad = |message: String| Error::WeightFile {
        path: path.to_owned(),
        message,
    };
    let entries: HashMap<String, serde_json::Value> = serde_json::from_slice(header)
        .map_err(|e| bad(format!("the safetensors header is not a JSON object: {e}")))?;
    check(
        || format!("{} tensor count", path.display()),
        entries.len(),
        MAX_CHECKPOINT_TENSORS,
    )?;
    let data_len = file_len.saturating_sub(8 + header.len() as u64);
    for (name, value) in entries {
        if name == "__metadata__" {
            continue;
        }
        let e: SafetensorsEntry = serde_json::from_value(value)
            .map_err(|err| bad(format!("tensor `{name}` in the header: {err}")))?;
        check(
            || format!("{} tensor `{name}` rank", path.display()),
            e.shape.len(),
            MAX_TENSOR_RANK,
        )?;
        let elements = e
            .shape
            .iter()
            .fold(1u128, |n, &d| n.saturating_mul(d as u128));
        check(
            || {
                format!(
                    "{} tensor `{name}` ({:?}) element count",
                    path.display(),
                    e.shape
                )
            },
            elements,
            MAX_TENSOR_ELEMENTS,
        )?;
        let size = match e.dtype.as_str() {
            "BOOL" | "U8" | "I8" | "F8_E4M3" | "F8_E5M2" => 1,
            "I16" | "U16" | "F16" | "BF16" => 2,
            "I32" | "U32" | "F32" => 4,
            "I64" | "U64" | "F64" => 8,
            other => return Err(bad(format!("tensor `{name}` has unknown dtype `{other}`"))),
        };
        let [start, end] = e.data_offsets;
        if start > end || end > data_len || (end - start) as u128 != elements * size {
            return Err(bad(format!(
                "tensor `{name}` ({} {:?}) has data offsets {start}..{end}, which do not hold its                  {} bytes inside the file's {data_len} bytes of data",
                e.dtype,
                e.shape,
                elements * size
            )));
        }
    }
    Ok(())
}

struct TrackingBackend {
    tensors: Arc<HashMap<String, Tensor>>,
    state: Arc<Mutex<LoadState>>,
    path: PathBuf,
}

impl TrackingBackend {
    fn fail(&self, err: Error) -> candle_core::Error {
        let msg = err.to_string();
        if let Ok(mut s) = self.state.lock() {
            if s.first_error.is_none() {
                s.first_error = Some(err);
            }
        }
        candle_core::Error::Msg(msg)
    }

    fn fetch(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let t = self.tensors.get(name).ok_or_else(|| {
            self.fail(Error::MissingWeight {
                key: name.to_owned(),
                path: self.path.clone(),
            })
        })?;
        if let Ok(mut s) = self.state.lock() {
            s.used.insert(name.to_owned());
        }
        t.to_dtype(dtype)?.to_device(dev)
    }
}

impl candle_nn::var_builder::SimpleBackend for TrackingBackend {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let t = self.fetch(name, dtype, dev)?;
        if t.shape() != &s {
            return Err(self.fail(Error::WeightShape {
                key: name.to_owned(),
                path: self.path.clone(),
                expected: s.dims().to_vec(),
                actual: t.dims().to_vec(),
            }));
        }
        Ok(t)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.fetch(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

/// A `VarBuilder` that invents deterministic random tensors of whatever shape is asked for.
///
/// For running the whole model without a checkpoint (demos, benchmarks): shapes are right, values
/// are meaningless. Norm scales and BatchNorm variances stay near 1 so activations stay finite.
pub fn random_var_builder(seed: u64, device: &Device) -> VarBuilder<'static> {
    VarBuilder::from_backend(Box::new(RandomBackend { seed }), DType::F32, device.clone())
}

struct RandomBackend {
    seed: u64,
}

impl RandomBackend {
    fn make(&self, s: &Shape, name: &str, dev: &Device) -> candle_core::Result<Tensor> {
        // FNV-1a of the name mixed with the seed: each tensor gets its own reproducible stream.
        let mut state = name
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64 ^ self.seed, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
            });
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Uniform in [-1, 1).
            (state >> 11) as f32 / (1u64 << 52) as f32 - 1.0
        };
        let n = s.elem_count();
        let leaf = name.rsplit('.').next().unwrap_or(name);
        let is_norm = name.contains("norm") || name.contains(".bn.") || name.contains("layer_norm");
        let data: Vec<f32> = if leaf == "running_var" {
            (0..n).map(|_| 1.0 + 0.1 * next()).collect()
        } else if leaf == "running_mean" || leaf == "bias" {
            (0..n).map(|_| 0.02 * next()).collect()
        } else if is_norm && leaf == "weight" {
            (0..n).map(|_| 1.0 + 0.1 * next()).collect()
        } else {
            let dims = s.dims();
            let fan_in: usize = if dims.len() >= 2 {
                dims[1..].iter().product()
            } else {
                dims.iter().product()
            };
            // Uniform with variance 1/fan_in.
            let a = (3.0 / fan_in.max(1) as f32).sqrt();
            (0..n).map(|_| a * next()).collect()
        };
        Tensor::from_vec(data, s.clone(), dev)
    }
}

impl candle_nn::var_builder::SimpleBackend for RandomBackend {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        self.make(&s, name, dev)?.to_dtype(dtype)
    }

    fn get_unchecked(
        &self,
        name: &str,
        _dtype: DType,
        _dev: &Device,
    ) -> candle_core::Result<Tensor> {
        candle_core::bail!("random weights need a shape for `{name}`")
    }

    fn contains_tensor(&self, _name: &str) -> bool {
        true
    }
}
