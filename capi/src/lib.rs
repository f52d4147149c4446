//! The C ABI of edgetam-rs: `libedgetam.so` / `libedgetam.a` and `include/edgetam.h`.
//!
//! The header is generated from these sources by cbindgen (`cbindgen.toml`); the unit test in
//! `header_check.rs` fails when the committed header is stale (`EDGETAM_BLESS=1` rewrites it).
//! `include/edgetam.hpp` is a hand-written C++17 wrapper over the header.
//!
//! Every exported function runs inside [`error::guard`] (the string getters inside
//! [`error::guard_value`]): errors become an [`EdgetamStatus`] and
//! a per-thread message, panics are caught before they reach C. Handles are boxed Rust values
//! handed out as opaque pointers; each has one free function that accepts NULL.
//!
//! Files: `error.rs` (status codes, last error, the guard), `ptr.rs` (reading C pointers and
//! strings), `model.rs`, `tracker.rs` (prompts, track, refresh), `frame.rs` (pixel formats and
//! planes), `result.rs` (objects and masks).

#![deny(unsafe_op_in_unsafe_fn)]

mod error;
mod frame;
mod model;
mod ptr;
mod result;
mod tracker;

#[cfg(test)]
mod header_check;
#[cfg(test)]
mod tests;

use std::ffi::{c_char, CStr, CString};
use std::sync::OnceLock;

pub use error::EdgetamStatus;
pub use frame::{EdgetamFrame, EdgetamPixelFormat, EdgetamPlane};
pub use model::{
    edgetam_model_backend, edgetam_model_free, edgetam_model_input_size, edgetam_model_load,
    edgetam_model_precision, EdgetamModel, EdgetamModelOptions,
};
pub use result::{
    edgetam_result_copy_mask, edgetam_result_count, edgetam_result_find, edgetam_result_frame,
    edgetam_result_free, edgetam_result_object, EdgetamObject, EdgetamResult,
};
pub use tracker::{
    edgetam_tracker_add_box, edgetam_tracker_add_mask, edgetam_tracker_add_points,
    edgetam_tracker_free, edgetam_tracker_new, edgetam_tracker_next_frame, edgetam_tracker_refresh,
    edgetam_tracker_remove_object, edgetam_tracker_reset, edgetam_tracker_track, EdgetamBox,
    EdgetamPoint, EdgetamTracker, EDGETAM_NEXT_FRAME,
};

/// The library's version, e.g. `"0.1.0"` (a static string).
///
/// Thread safety: may run on several threads at once.
#[no_mangle]
pub extern "C" fn edgetam_version() -> *const c_char {
    const VERSION: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    error::guard_value(c"unknown".as_ptr(), || VERSION.as_ptr())
}

/// The library's version as one number, `MAJOR * 1000000 + MINOR * 1000 + PATCH` (what
/// `EDGETAM_VERSION_NUMBER` is for the header), for `edgetam_version_compatible()` in
/// edgetam.h: a program checks at run time that the library it loaded is one its header
/// describes.
///
/// Thread safety: may run on several threads at once.
#[no_mangle]
pub extern "C" fn edgetam_version_number() -> u32 {
    const fn parse(s: &str) -> u32 {
        let bytes = s.as_bytes();
        let mut i = 0;
        let mut n = 0u32;
        while i < bytes.len() {
            n = n * 10 + (bytes[i] - b'0') as u32;
            i += 1;
        }
        n
    }
    const NUMBER: u32 = parse(env!("CARGO_PKG_VERSION_MAJOR")) * 1_000_000
        + parse(env!("CARGO_PKG_VERSION_MINOR")) * 1_000
        + parse(env!("CARGO_PKG_VERSION_PATCH"));
    NUMBER
}

/// The CPU path models loaded on `"cpu"` run on (a static string): `"cpu "` and the instruction
/// set of the CPU kernels, e.g. `"cpu avx512"`, `"cpu avx2"`, `"cpu neon"` or `"cpu portable"`
/// (the widest this CPU runs, or the one `EDGETAM_ISA` caps it to). For a given model, which
/// may be on a GPU, ask `edgetam_model_backend`.
///
/// Thread safety: may run on several threads at once.
#[no_mangle]
pub extern "C" fn edgetam_backend() -> *const c_char {
    static BACKEND: OnceLock<CString> = OnceLock::new();
    error::guard_value(c"cpu".as_ptr(), || {
        BACKEND
            .get_or_init(|| {
                CString::new(edgetam_tracker::Backend::cpu().to_string()).unwrap_or_default()
            })
            .as_ptr()
    })
}

/// The message of the last call that failed on the calling thread (never NULL; `""` if none
/// failed yet). Valid until the next failing call on this thread; copy it to keep it.
/// Successful calls leave it as it is.
///
/// Thread safety: may run on several threads at once; each thread sees its own message.
#[no_mangle]
pub extern "C" fn edgetam_last_error() -> *const c_char {
    error::guard_value(c"".as_ptr(), error::last_error_ptr)
}

/// The name of a status code, e.g. `"EDGETAM_STATUS_NULL_POINTER"` (a static string;
/// `"EDGETAM_STATUS_UNKNOWN"` for a value that is not a status). Takes an `int` so any value is
/// safe to pass.
///
/// Thread safety: may run on several threads at once.
#[no_mangle]
pub extern "C" fn edgetam_status_name(status: i32) -> *const c_char {
    let name: &CStr = match status {
        0 => c"EDGETAM_STATUS_OK",
        1 => c"EDGETAM_STATUS_NULL_POINTER",
        2 => c"EDGETAM_STATUS_INVALID_ARGUMENT",
        3 => c"EDGETAM_STATUS_INVALID_FRAME",
        4 => c"EDGETAM_STATUS_INVALID_PROMPT",
        5 => c"EDGETAM_STATUS_UNKNOWN_OBJECT",
        6 => c"EDGETAM_STATUS_BUFFER_TOO_SMALL",
        7 => c"EDGETAM_STATUS_LIMIT",
        8 => c"EDGETAM_STATUS_MODEL",
        9 => c"EDGETAM_STATUS_DEVICE",
        10 => c"EDGETAM_STATUS_RUNTIME",
        11 => c"EDGETAM_STATUS_PANIC",
        12 => c"EDGETAM_STATUS_PRECISION_UNAVAILABLE",
        _ => c"EDGETAM_STATUS_UNKNOWN",
    };
    error::guard_value(c"EDGETAM_STATUS_UNKNOWN".as_ptr(), || name.as_ptr())
}
