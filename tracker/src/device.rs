//! Device selection from user strings (`cpu`, `cuda:N`).

use candle_core::Device;

use crate::error::{Error, Result};
use crate::model::precision::Precision;

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

/// Where a model really runs, as the front ends report it: the CPU and the instruction set its
/// kernels take, or a GPU. One type so that the CLI, the element, the C ABI and Python print
/// the same string (`Display`): `"cpu avx512"`, `"cpu avx2"`, `"cpu neon"`, `"cpu portable"`,
/// `"cuda:0"`, `"metal:0"`. A silent fallback from a GPU to the CPU, or from AVX-512 to a
/// narrower path, shows in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The CPU, its kernels on this instruction set (the widest the CPU runs, or the
    /// `EDGETAM_ISA` cap; when `EDGETAM_ISA` is invalid, the path the kernels keep).
    Cpu(crate::Isa),
    /// A CUDA GPU by ordinal.
    Cuda(usize),
    /// An Apple GPU by ordinal (candle's Metal backend; not built by this workspace).
    Metal(usize),
}

impl Backend {
    /// The backend of a model on `device`.
    pub fn of(device: &Device) -> Self {
        match device.location() {
            candle_core::DeviceLocation::Cpu => Self::Cpu(crate::kernels::cpu::in_effect()),
            candle_core::DeviceLocation::Cuda { gpu_id } => Self::Cuda(gpu_id),
            candle_core::DeviceLocation::Metal { gpu_id } => Self::Metal(gpu_id),
        }
    }

    /// The CPU backend of this process (what models on `"cpu"` run on).
    pub fn cpu() -> Self {
        Self::Cpu(crate::kernels::cpu::in_effect())
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Cpu(isa) => write!(f, "cpu {isa}"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
            Self::Metal(n) => write!(f, "metal:{n}"),
        }
    }
}

impl Precision {
    /// Whether this precision can run on `device` in this process: `Ok` for
    /// [`Precision::F32`] everywhere; [`Precision::Bf16`] needs the CPU, AVX512-BF16 and the
    /// avx512 kernels (an `EDGETAM_ISA` cap below avx512 rules it out). Otherwise
    /// [`Error::PrecisionUnavailable`](crate::Error::PrecisionUnavailable), whose message says
    /// why and what this machine runs instead: front ends refuse a precision that would not run
    /// rather than silently running another one.
    pub fn available_on(self, device: &Device) -> Result<()> {
        let reason = match self {
            Self::F32 => None,
            Self::Bf16 if !device.is_cpu() => Some(format!(
                "the bf16 mode runs on the CPU only (the model is on {})",
                Backend::of(device)
            )),
            Self::Bf16 => crate::kernels::cpu::bf16_unavailable(),
        };
        match reason {
            None => Ok(()),
            Some(reason) => Err(Error::PrecisionUnavailable {
                precision: self,
                reason,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_strings() {
        assert_eq!(Backend::Cpu(crate::Isa::Avx2).to_string(), "cpu avx2");
        assert_eq!(Backend::Cuda(1).to_string(), "cuda:1");
        assert_eq!(Backend::of(&Device::Cpu), Backend::cpu());
    }
}
