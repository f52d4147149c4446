//! Device selection from user strings (`cpu`, `cuda:N`).

use candle_core::Device;

use crate::error::{Error, Result};

/// Parses `cpu`, `cuda` or `cuda:N`.
///
/// CUDA needs a build with the `cuda` feature (a later issue); without it the error says so
/// instead of silently falling back to the CPU.
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
            "`{spec}`: this build has no CUDA support (CPU only for now)"
        )));
    }
    Ok(Device::new_cuda(ordinal)?)
}
