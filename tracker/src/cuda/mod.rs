//! The tracker's own CUDA kernels (compiled at run time with NVRTC, once per process, and loaded
//! once per device), used when the model lives on a CUDA device. Everything else on the GPU path
//! is candle's CUDA backend: the CPU-only custom ops of this crate (fused attention, LayerNorm,
//! depthwise and pointwise convolutions, GELU, layout kernels) check the device first and fall
//! back to plain candle tensor ops, which run on the GPU without host round trips.

pub mod preprocess;

use std::sync::OnceLock;

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
