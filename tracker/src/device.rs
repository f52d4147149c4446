//! Device selection from user strings (`cpu`, `cuda:N`).

use candle_core::Device;

use crate::error::{Error, Result};

/// Parses `cpu`, `cuda` or `cuda:N`. A CUDA device gets its own stream (see below); create it
/// once per process and share it (`Device` is a cheap handle).
///
/// CUDA needs a build with the `cuda` feature; without it the error says so instead of silently
/// falling back to the CPU. With it, a machine without a usable GPU or driver gets the driver's
/// error (e.g. no `libcuda.so.1`, or no device with that index).
pub fn parse_device(spec: &str) -> Result<Device> {
    let spec = spec.trim().to_ascii_lowercase();
    if spec == "cpu" {
        return Ok(Device::Cpu);
    }
    let ordinal = match spec.strip_prefix("cuda") {
        Some("") => 0,
        Some(rest) => rest
            .strip_prefix(':')
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| {
                Error::InvalidDevice(format!("`{spec}`: expected `cuda:N` with N a GPU index"))
            })?,
        None => {
            return Err(Error::InvalidDevice(format!(
                "`{spec}` is not a device; use `cpu` or `cuda:N`"
            )))
        }
    };
    if !candle_core::utils::cuda_is_available() {
        return Err(Error::InvalidDevice(format!(
            "`{spec}`: this build has no CUDA support; rebuild with `--features cuda` \
             (see the README's CUDA section)"
        )));
    }
    // One owned stream per device, not candle's default per-thread stream: the pipeline runs
    // stages on several threads (and rayon pools), and cudarc does not order work across
    // per-thread streams, so a tensor written on one thread could be read on another before it
    // is ready. On one stream every kernel runs in the order it was queued, whichever thread
    // queued it; threads still overlap their host-side work (encoder-ahead).
    let device = Device::new_cuda_with_stream(ordinal)
        .map_err(|e| Error::InvalidDevice(format!("`{spec}`: cannot open GPU {ordinal}: {e}")))?;
    #[cfg(feature = "cuda")]
    if let Device::Cuda(cuda) = &device {
        // SAFETY: every tensor of this device lives on its one stream (above), so the per-use
        // CUDA events cudarc records to order several streams are never needed; skipping them
        // saves two driver calls per kernel argument.
        unsafe { cuda.disable_event_tracking() };
    }
    Ok(device)
}
