//! The model handle: loaded once, shared (an `Arc`) by every tracker and thread.

use std::ffi::{c_char, CString};
use std::sync::Arc;

use edgetam_tracker::{EdgeTam, ModelSpec, Precision};

use crate::error::{guard, CapiError, EdgetamStatus};
use crate::ptr::{
    clear_out, free_handle, get, hand_out, optional_str, read_sized, require_out, required_str,
    VersionedStruct,
};

/// A loaded model (opaque). Immutable once loaded: any number of threads may use one model at
/// the same time, and trackers keep it alive (freeing the handle while trackers use it is fine).
pub struct EdgetamModel {
    pub(crate) model: Arc<EdgeTam>,
    /// `edgetam_model_backend`'s answer, made once.
    backend: CString,
}

/// How to load a model. A zeroed struct with its size set asks for the defaults (the CPU, exact
/// f32, the checkpoint's input size): `EdgetamModelOptions o = {0}; o.size = sizeof o;`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EdgetamModelOptions {
    /// `sizeof(EdgetamModelOptions)`: which version of this struct the caller holds, so a later
    /// version can add fields (those past `size` keep their defaults).
    pub size: usize,
    /// `"cpu"`, `"cuda"` or `"cuda:N"`; NULL means `"cpu"`. CUDA needs a library built with
    /// the `cuda` feature.
    pub device: *const c_char,
    /// `"f32"` (exact) or `"bf16"` (faster; needs a CPU with AVX512-BF16 and the avx512
    /// kernels: elsewhere the load fails with `EDGETAM_STATUS_PRECISION_UNAVAILABLE`, never
    /// running f32 in its place); NULL means `"f32"`.
    pub precision: *const c_char,
    /// Side of the square model input: a multiple of 256 from 256 to 2048; 0 keeps the
    /// checkpoint's (1024 for the released EdgeTAM). Smaller is faster and less accurate.
    pub input_size: u32,
}

// SAFETY: repr(C), `size: usize` first.
unsafe impl VersionedStruct for EdgetamModelOptions {
    const C_NAME: &'static str = "EdgetamModelOptions";
    const MIN_SIZE: usize = std::mem::size_of::<Self>();
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
    let precision: Precision = precision
        .unwrap_or("f32")
        .parse()
        .map_err(CapiError::InvalidArgument)?;
    let loaded = ModelSpec::new(source)
        .device(device.unwrap_or("cpu"))
        .precision(precision)
        .input_size((input_size != 0).then_some(input_size as usize))
        .load()?;
    Ok(EdgetamModel {
        model: Arc::new(loaded.model),
        backend: CString::new(loaded.backend.to_string()).unwrap_or_default(),
    })
}

/// Loads a model. `source` is a folder with `config.json` + `model.safetensors`, an
/// `edgetam.pt` checkpoint, or (in a library built with the `hub` feature, the default) a
/// Hugging Face repository id such as `"yonigozlan/EdgeTAM-hf"`, downloaded into the Hugging
/// Face cache. `options` may be NULL (defaults); its `size` must be set
/// (`EDGETAM_STATUS_INVALID_ARGUMENT` otherwise). On success `*out` is a new handle to free with
/// `edgetam_model_free`; on failure it is set to NULL. A precision that cannot run here (`"bf16"`
/// without AVX512-BF16) is `EDGETAM_STATUS_PRECISION_UNAVAILABLE`, its message naming why.
///
/// The first load sets the process up as every edgetam front end does (each only where the
/// environment leaves it unset): `RAYON_NUM_THREADS` to the core count, candle's idle spin limit
/// (`CANDLE_BARRIER_POOL_SPIN_LIMIT`), and glibc malloc keeping freed buffers
/// (`EDGETAM_KEEP_FREED_MEMORY=0` turns that off). It writes the environment: load the first
/// model before starting threads that call `getenv`.
///
/// Thread safety: may run on several threads at once.
///
/// # Safety
/// `source` is a NUL-terminated string; `options` is NULL or points to an
/// `EdgetamModelOptions` of `options->size` bytes; `out` points to writable storage for a
/// pointer.
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
        let options = match options.is_null() {
            true => None,
            // SAFETY: non-null, and `options->size` readable bytes (the caller's contract).
            false => Some(unsafe { read_sized(options, "options") }?),
        };
        require_out(out, "out")?;
        let model = load(source, options.as_ref())?;
        // SAFETY: `out` was checked non-null and is writable (the caller's contract).
        unsafe { hand_out(out, model) };
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
    // SAFETY: a handle from `edgetam_model_load` (`hand_out`), freed once (the caller's contract).
    unsafe { free_handle(model) }
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
    // SAFETY: the caller's contract is `get`'s.
    unsafe { get(model, "model", out, |m| m.backend.as_ptr()) }
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
    // SAFETY: the caller's contract is `get`'s.
    unsafe {
        get(model, "model", out, |m| {
            u32::try_from(m.model.config().image_size).unwrap_or(u32::MAX)
        })
    }
}

/// The precision this model runs: `"f32"` or `"bf16"` (a static string), what the load asked
/// for (a load never falls back to another precision).
///
/// Thread safety: may run on several threads at once.
///
/// # Safety
/// `model` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn edgetam_model_precision(
    model: *const EdgetamModel,
    out: *mut *const c_char,
) -> EdgetamStatus {
    // SAFETY: the caller's contract is `get`'s; the strings are static.
    unsafe {
        get(model, "model", out, |m| match m.model.precision() {
            Precision::F32 => c"f32".as_ptr(),
            Precision::Bf16 => c"bf16".as_ptr(),
        })
    }
}
