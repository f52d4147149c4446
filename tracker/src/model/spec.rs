//! [`ModelSpec`]: the one way the front ends (the CLI, the GStreamer element, the C ABI, the
//! Python module) load a model, so that each validates the same things in the same order, sets
//! the process up the same way and reports the same backend and errors.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use candle_core::Device;

use crate::device::{parse_device, Backend};
use crate::error::Result;
use crate::model::config::EdgeTamConfig;
use crate::model::edgetam::{EdgeTam, LoadOptions};
use crate::model::hub::ModelSource;
use crate::model::precision::Precision;

/// What to load, where it runs and how: a model source, a device, a precision and an input
/// size, set builder style; [`Self::load`] checks everything and loads.
///
/// ```no_run
/// use edgetam_tracker::{ModelSpec, Precision};
///
/// # fn main() -> edgetam_tracker::Result<()> {
/// let loaded = ModelSpec::new("yonigozlan/EdgeTAM-hf") // or a folder, or an edgetam.pt
///     .device("cpu")
///     .precision(Precision::Bf16)
///     .input_size(512)
///     .load()?; // Error::PrecisionUnavailable where bf16 cannot run: never a silent f32
/// println!("running on {}", loaded.backend); // "cpu avx512"
/// let model = std::sync::Arc::new(loaded.model);
/// # Ok(()) }
/// ```
///
/// Everything that can be checked without reading the model is checked first ([`Self::check`]):
/// `EDGETAM_ISA`, the input size, the device, and whether the precision can run on it. So a
/// typo fails at once, before a download or a load of several seconds.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    source: Source,
    device: String,
    precision: Precision,
    input_size: Option<usize>,
    process_setup: bool,
}

/// Where the weights come from.
#[derive(Debug, Clone)]
enum Source {
    Model(ModelSource),
    /// Deterministic random weights (for trying the tools and benchmarking without a checkpoint):
    /// the released config, or one of the caller's.
    Random {
        seed: u64,
        config: Option<Box<EdgeTamConfig>>,
    },
}

/// A model loaded by [`ModelSpec::load`] and what the front ends report about it.
#[non_exhaustive]
pub struct LoadedModel {
    /// The model, with the precision the spec asked for in effect.
    pub model: EdgeTam,
    /// Where it runs: `"cpu avx512"`, `"cuda:0"`, ... (its `Display`).
    pub backend: Backend,
    /// The local path the weights were read from (a hub model's files in the Hugging Face
    /// cache); `None` for random weights.
    pub path: Option<PathBuf>,
}

impl ModelSpec {
    /// The model a user named: a folder with `config.json` + `model.safetensors`, a checkpoint
    /// such as `edgetam.pt`, or a Hugging Face hub repository id (`owner/name`, feature `hub`),
    /// told apart by [`ModelSource::parse`]. The defaults: the CPU, exact f32, the checkpoint's
    /// own input size, and the process set-up ([`crate::process_setup`]).
    pub fn new(source: impl AsRef<OsStr>) -> Self {
        Self::from_source(ModelSource::parse(source))
    }

    /// [`Self::new`] with the source already told apart.
    pub fn from_source(source: ModelSource) -> Self {
        Self::with(Source::Model(source))
    }

    /// Deterministic random weights from `seed` in the released config (input 1024 unless
    /// [`Self::input_size`] says otherwise): the model runs end to end, its masks are
    /// meaningless. For trying the tools and benchmarking without a checkpoint.
    pub fn random(seed: u64) -> Self {
        Self::with(Source::Random { seed, config: None })
    }

    /// [`Self::random`] in `config` (e.g. one made for input sizes below 256).
    pub fn random_with_config(config: EdgeTamConfig, seed: u64) -> Self {
        Self::with(Source::Random {
            seed,
            config: Some(Box::new(config)),
        })
    }

    fn with(source: Source) -> Self {
        Self {
            source,
            device: "cpu".into(),
            precision: Precision::F32,
            input_size: None,
            process_setup: true,
        }
    }

    /// The compute device: `"cpu"` (default), `"cuda"` or `"cuda:N"` ([`parse_device`]).
    pub fn device(mut self, device: impl Into<String>) -> Self {
        self.device = device.into();
        self
    }

    /// The precision of the heaviest products (default exact f32). [`Precision::Bf16`] where it
    /// cannot run is refused by [`Self::check`] and [`Self::load`].
    pub fn precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }

    /// The model's square input side: a multiple of 256 from 256 to 2048 (`None`, the
    /// default: the checkpoint's own, 1024 for the released EdgeTAM). See [`LoadOptions`].
    pub fn input_size(mut self, size: impl Into<Option<usize>>) -> Self {
        self.input_size = size.into();
        self
    }

    /// Whether [`Self::load`] runs [`crate::process_setup`] (default `true`). Off for a host
    /// application that manages its threads and allocator itself.
    pub fn process_setup(mut self, on: bool) -> Self {
        self.process_setup = on;
        self
    }

    /// The model source (`None` for random weights).
    pub fn source(&self) -> Option<&ModelSource> {
        match &self.source {
            Source::Model(source) => Some(source),
            Source::Random { .. } => None,
        }
    }

    /// The requested precision.
    pub fn requested_precision(&self) -> Precision {
        self.precision
    }

    /// The requested input size (`None`: the checkpoint's own).
    pub fn requested_input_size(&self) -> Option<usize> {
        self.input_size
    }

    /// The device as given.
    pub fn device_spec(&self) -> &str {
        &self.device
    }

    /// Checks everything that can be checked without reading the model: `EDGETAM_ISA`
    /// ([`Error::Isa`](crate::Error::Isa)), the input size
    /// ([`Error::InputSize`](crate::Error::InputSize)), the device
    /// ([`Error::InvalidDevice`](crate::Error::InvalidDevice)) and whether the precision runs on
    /// it ([`Error::PrecisionUnavailable`](crate::Error::PrecisionUnavailable)), in that order.
    /// Opens the device (a CUDA context) to do so.
    pub fn check(&self) -> Result<()> {
        self.prepare().map(drop)
    }

    /// The same spec with a hub repository fetched into the Hugging Face cache (or found
    /// there) and named by its local path; a path or random weights as they are. For a caller
    /// that needs the local path before loading (the element keys its shared models on it).
    pub fn resolve(self) -> Result<Self> {
        match &self.source {
            Source::Model(source @ ModelSource::Hub { .. }) => {
                let path = source.resolve()?;
                Ok(Self {
                    source: Source::Model(ModelSource::Path(path)),
                    ..self
                })
            }
            _ => Ok(self),
        }
    }

    /// The local path of a path source (`None` for a hub id not yet [resolved](Self::resolve)
    /// and for random weights).
    pub fn path(&self) -> Option<&Path> {
        match &self.source {
            Source::Model(ModelSource::Path(p)) => Some(p),
            _ => None,
        }
    }

    /// Sets the process up ([`crate::process_setup`], unless switched off), runs
    /// [`Self::check`], fetches a hub model, loads the weights and switches the precision on.
    /// Nothing falls back silently: a precision or device that cannot run here is an error.
    pub fn load(&self) -> Result<LoadedModel> {
        let device = self.prepare()?;
        let options = match self.input_size {
            Some(n) => LoadOptions::default().input_size(n),
            None => LoadOptions::default(),
        };
        let (mut model, path) = match &self.source {
            Source::Model(source) => {
                let path = source.resolve()?;
                (EdgeTam::load_with(&path, &device, &options)?, Some(path))
            }
            Source::Random { seed, config } => {
                let config = match config {
                    Some(c) => EdgeTamConfig::clone(c),
                    None => EdgeTamConfig::default(),
                };
                let config = options.apply(config)?;
                (EdgeTam::random(config, *seed, &device)?, None)
            }
        };
        // A new model runs exact f32: switch only for another precision, so the f32 path is
        // exactly the one `EdgeTam::load_with` builds.
        if model.precision() != self.precision {
            model.try_set_precision(self.precision)?;
        }
        Ok(LoadedModel {
            model,
            backend: Backend::of(&device),
            path,
        })
    }

    /// The process set-up, the checks of [`Self::check`], and the device they opened.
    fn prepare(&self) -> Result<Device> {
        if self.process_setup {
            crate::setup::process_setup();
        }
        crate::kernels::cpu::isa()?;
        if let Some(n) = self.input_size {
            EdgeTamConfig::default().at_input_size(n)?;
        }
        let device = parse_device(&self.device)?;
        self.precision.available_on(&device)?;
        if self.precision == Precision::Bf16 {
            crate::model::bf16_policy::Bf16Policy::from_env()?;
        }
        Ok(device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    fn fixture_model() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/model")
    }

    #[test]
    fn loads_the_fixture_with_its_backend() -> Result<()> {
        let loaded = ModelSpec::new(fixture_model()).input_size(256).load()?;
        assert_eq!(loaded.model.config().image_size, 256);
        assert_eq!(loaded.model.precision(), Precision::F32);
        assert_eq!(loaded.backend, Backend::cpu());
        assert!(loaded.backend.to_string().starts_with("cpu "));
        assert_eq!(loaded.path.as_deref(), Some(fixture_model().as_path()));
        Ok(())
    }

    #[test]
    fn bad_settings_fail_before_the_model_is_read() {
        // The path does not exist: each error below comes before it would be read.
        let spec = ModelSpec::new("/nonexistent/edgetam-model");
        assert!(matches!(
            spec.clone().input_size(300).load(),
            Err(Error::InputSize { size: 300, .. })
        ));
        assert!(matches!(
            spec.clone().device("tpu").check(),
            Err(Error::InvalidDevice(_))
        ));
        assert!(matches!(spec.check(), Ok(())));
        assert!(matches!(spec.load(), Err(Error::Io { .. })));
    }

    #[test]
    fn bf16_is_loaded_or_refused_never_replaced() {
        let spec = ModelSpec::random(0)
            .input_size(256)
            .precision(Precision::Bf16);
        match crate::kernels::cpu::bf16_unavailable() {
            None => {
                let loaded = spec.load().map_err(|e| e.to_string());
                assert_eq!(loaded.map(|l| l.model.precision()), Ok(Precision::Bf16));
            }
            Some(reason) => match spec.load() {
                Err(Error::PrecisionUnavailable {
                    precision,
                    reason: r,
                }) => {
                    assert_eq!(precision, Precision::Bf16);
                    assert_eq!(r, reason);
                }
                Err(e) => panic!("wrong error: {e}"),
                Ok(_) => panic!("bf16 loaded where it cannot run: {reason}"),
            },
        }
    }
}
