//! The tracker's own CUDA kernels (compiled at run time with NVRTC, once per process, and loaded
//! once per device), used when the model lives on a CUDA device. Everything else on the GPU path
//! is candle's CUDA backend: the CPU-only custom ops of this crate (fused attention, LayerNorm,
//! depthwise and pointwise convolutions, GELU, layout kernels) check the device first and fall
//! back to plain candle tensor ops, which run on the GPU without host round trips.

pub mod preprocess;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use candle_core::{Device, Tensor};

use candle_core::cuda_backend::cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};

/// Name under which the module is cached by candle (per device).
pub(crate) const MODULE: &str = "edgetam_kernels";

/// PTX of [`preprocess::SOURCE`], compiled once. fp32 division and square roots stay IEEE
/// (NVRTC's defaults, spelt out): the normalisation must match the CPU bit for bit.
pub(crate) fn ptx() -> candle_core::Result<&'static str> {
    static PTX: OnceLock<Result<String, String>> = OnceLock::new();
    let compiled = PTX.get_or_init(|| {
        let opts = CompileOptions {
            ftz: Some(false),
            prec_div: Some(true),
            prec_sqrt: Some(true),
            fmad: Some(false),
            ..Default::default()
        };
        compile_ptx_with_opts(preprocess::SOURCE, opts)
            .map(|p| p.to_src())
            .map_err(|e| format!("NVRTC could not compile the preprocessing kernels: {e}"))
    });
    match compiled {
        Ok(src) => Ok(src.as_str()),
        Err(e) => Err(candle_core::Error::Msg(e.clone())),
    }
}

/// What a cached constant is: a name and the sizes it was made for.
pub(crate) type ConstKey = (&'static str, usize, usize, usize);

/// Small constant tensors (resize taps and the like) made once per CUDA device and key instead
/// of being uploaded on every frame. `make` runs on a miss; CPU tensors are never cached (the
/// caller makes those directly).
pub(crate) fn cached_consts(
    device: &Device,
    key: ConstKey,
    make: impl FnOnce() -> candle_core::Result<Vec<Tensor>>,
) -> candle_core::Result<Vec<Tensor>> {
    type Cache = HashMap<(candle_core::cuda_backend::DeviceId, ConstKey), Vec<Tensor>>;
    static CACHE: OnceLock<Mutex<Cache>> = OnceLock::new();
    let Device::Cuda(cuda) = device else {
        return make();
    };
    let full = (cuda.id(), key);
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(t) = cache.lock().ok().and_then(|c| c.get(&full).cloned()) {
        return Ok(t);
    }
    let made = make()?;
    if let Ok(mut c) = cache.lock() {
        // A few frame sizes per stream in practice; never grow without bound.
        if c.len() >= 256 {
            c.clear();
        }
        c.insert(full, made.clone());
    }
    Ok(made)
}
