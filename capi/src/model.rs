//! The model handle: loaded once, shared (an `Arc`) by every tracker and thread.

use std::ffi::{c_char, CString};
use std::sync::Arc;

use candle_core::DeviceLocation;
use edgetam_tracker::{parse_device, resolve_model, EdgeTam, LoadOptions, Precision};

use crate::error::{guard, CapiError, EdgetamStatus};
use crate::ptr::{clear_out, optional_str, required_str, write_out};

/// A loaded model (opaque). Immutable once loaded: any number of threads may use one model at
/// the same time, and trackers keep it alive (freeing the handle while trackers use it is fine).
pub struct EdgetamModel {
    pub(crate) model: Arc<EdgeTam>,
    /// `edgetam_model_backend`'s answer, made once.
    backend: CString,
}

/// How to load a model. A zeroed struct (`EdgetamModelOptions o = {0};`) asks for the
/// defaults: the CPU, exact f32, the checkpoint's input size.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EdgetamModelOptions {
    /// `"cpu"`, `"cuda"` or `"cuda:N"`; NULL means `"cpu"`. CUDA needs a library built with
    /// the `cuda` feature.
    pub device: *const c_char,
    /// `"f32"` (exact) or `"bf16"` (faster on CPUs with AVX512-BF16; elsewhere f32 runs);
    /// NULL means `"f32"`.
    pub precision: *const c_char,
    /// Side of the square model input: a multiple of 256 from 256 to 2048; 0 keeps the
    /// checkpoint's (1024 for the released EdgeTAM). Smaller is faster and less accurate.
    pub input_size: u32,
}

/// The backend string of the CPU path: `"cpu "` and the instruction set the kernels run with
/// (`edgetam_tracker::isa()`), e.g. `"cpu avx512"`. When `EDGETAM_ISA` names a path this CPU
/// cannot run, the kernels keep the widest one it has (and loading a model fails, naming why),
/// so that is the path named here.
pub(crate) fn cpu_backend() -> String {
    let isa = edgetam_tracker::isa().unwrap_or_else(|_| {
        edgetam_tracker::available_isas()
            .first()
            .copied()
            .unwrap_or(edgetam_tracker::Isa::Portable)
    });
    format!("cpu {isa}")
}

fn load(source: &str, options: Option<&EdgetamModelOptions>) -> Result<EdgetamModel, CapiError> {
    let (device, precision, input_size) = match options {
        // SAFETY (both strings): the caller passes NULL or NUL-terminated strings (the
        // documented contract of EdgetamModelOptions).
        Some(o) => (
            unsafe { optional_str(o.device, "options->device") }?,
            unsafe { optional_str(o.precision, "options->precision") }?,
            o.input_size,
        ),
        None => (None, None, 0),
    };
    let device = parse_device(device.unwrap_or("cpu"))?;
    let precision: Precision = precision
        .unwrap_or("f32")
        .parse()
        .map_err(CapiError::InvalidArgument)?;
    let mut load_options = LoadOptions::default();
    if input_size != 0 {
        load_options = load_options.input_size(input_size as usize);
    }
    let path = resolve_model(source)?;
    let mut model = EdgeTam::load_with(&path, &device, &load_options)?;
    model.set_precision(precision);
    let backend = match device.location() {
        DeviceLocation::Cpu => cpu_backend(),
        DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    };
    Ok(EdgetamModel {
        model: Arc::new(model),
        backend: CString::new(backend).unwrap_or_default(),
    })
}

/// Loads a model. `source` is a folder with `config.json` + `model.safetensors`, an
/// `edgetam.pt` checkpoint, or (in a library built with the `hub` feature, the default) a
/// Hugging Face repository id such as `"yonigozlan/EdgeTAM-hf"`, downloaded into the Hugging
/// Face cache. `options` may be NULL (defaults). On success `*out` is a new handle to free with
/// `edgetam_model_free`; on failure it is set to NULL.
///
/// Thread safety: may run on several threads at once.
///
/// # Safety
/// `source` is a NUL-terminated string; `options` is NULL or points to an
/// `EdgetamModelOptions`; `out` points to writable storage for a pointer.
#[no_mangle]
pub unsafe extern "C" fn edgetam_model_load(
    source: *const c_char,
    options: *const EdgetamModelOptions,
    out: *mut *mut EdgetamModel,
) -> EdgetamStatus {
    guard(|| {
        // SAFETY: `out` is NULL or writable (the caller's contract).
        unsafe { clear_out(out) };
        // SAFETY: `source` is NULL or NUL-terminated (the caller's contract).
        let source = unsafe { required_str(source, "source") }?;
        // SAFETY: `options` is NULL or points to a valid struct (the caller's contract).
        let options = unsafe { options.as_ref() };
        if out.is_null() {
            return Err(CapiError::Null("out"));
        }
        let model = load(source, options)?;
        // SAFETY: `out` was checked non-null and is writable (the caller's contract).
        unsafe { write_out(out, Box::into_raw(Box::new(model))) };
        Ok(())
    })
}

/// Releases a model handle. Trackers made from it keep the model alive until they are freed.
/// NULL is ignored.
///
/// # Safety
/// `model` is NULL or a handle from `edgetam_model_load` not freed before.
#[no_mangle]
pub unsafe extern "C" fn edgetam_model_free(model: *mut EdgetamModel) {
    let _ = guard(|| {
        if !model.is_null() {
            // SAFETY: a handle from `edgetam_model_load` (Box::into_raw), freed once.
            drop(unsafe { Box::from_raw(model) });
        }
        Ok(())
    });
}

/// Where this model really runs: `"cpu "` and the kernels' instruction set (`"cpu avx512"`,
/// `"cpu avx2"`, `"cpu neon"`, `"cpu portable"`) or `"cuda:N"`, so that a silent fallback from
/// a GPU to the CPU is caught. `*out` points to a string owned by the model, valid until it is freed.
///
/// Thread safety: may run on several threads at once.
///
/// # Safety
/// `model` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn edgetam_model_backend(
    model: *const EdgetamModel,
    out: *mut *const c_char,
) -> EdgetamStatus {
    guard(|| {
        // SAFETY: `model` is NULL or a live handle (the caller's contract).
        let model = unsafe { model.as_ref() }.ok_or(CapiError::Null("model"))?;
        if out.is_null() {
            return Err(CapiError::Null("out"));
        }
        // SAFETY: `out` is non-null and writable (the caller's contract).
        unsafe { write_out(out, model.backend.as_ptr()) };
        Ok(())
    })
}

/// The side of the square model input this model runs at (e.g. 1024, or the `input_size`
/// it was loaded with).
///
/// Thread safety: may run on several threads at once.
///
/// # Safety
/// `model` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn edgetam_model_input_size(
    model: *const EdgetamModel,
    out: *mut u32,
) -> EdgetamStatus {
    guard(|| {
        // SAFETY: `model` is NULL or a live handle (the caller's contract).
        let model = unsafe { model.as_ref() }.ok_or(CapiError::Null("model"))?;
        if out.is_null() {
            return Err(CapiError::Null("out"));
        }
        let size = u32::try_from(model.model.config().image_size).unwrap_or(u32::MAX);
        // SAFETY: `out` is non-null and writable (the caller's contract).
        unsafe { write_out(out, size) };
        Ok(())
    })
}
