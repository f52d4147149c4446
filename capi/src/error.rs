//! Status codes, the per-thread last-error message and the guard every entry point runs in.
//!
//! Inside the crate errors are the typed [`CapiError`]; at the boundary each becomes an
//! [`EdgetamStatus`] plus a message kept per thread, so a C caller gets a code to branch on and
//! a sentence to log, and no Rust panic ever unwinds into C (undefined behaviour).

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use edgetam_tracker::util::panic_message;
use edgetam_tracker::Error as TrackerError;

/// What a call returns. `EDGETAM_STATUS_OK` (0) is success; on any other code
/// `edgetam_last_error()` holds a message on the calling thread.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EdgetamStatus {
    /// Success.
    Ok = 0,
    /// A handle, pointer or string argument is NULL.
    NullPointer = 1,
    /// An argument is out of its range: an unknown pixel format, device, precision or point
    /// label, an unsupported input size, an index past the end, a string that is not UTF-8.
    InvalidArgument = 2,
    /// A frame's size, strides, planes or buffers do not fit its pixel format.
    InvalidFrame = 3,
    /// A prompt is malformed, outside the frame, or on a frame where it cannot be applied.
    InvalidPrompt = 4,
    /// No object with that id (in the tracker or the result).
    UnknownObject = 5,
    /// A caller's buffer is too small (the message says how large it must be).
    BufferTooSmall = 6,
    /// A size is beyond one of the library's limits (frame, mask, points, objects).
    Limit = 7,
    /// The model could not be found, read or loaded (files, config, weights, hub).
    Model = 8,
    /// The device is unknown or not available in this build or on this machine.
    Device = 9,
    /// The tensor engine failed while running the model.
    Runtime = 10,
    /// A bug: the library panicked. The call had no effect beyond what the message says; a
    /// tracker that panicked refuses further calls until `edgetam_tracker_reset`.
    Panic = 11,
    /// The requested precision cannot run here: `"bf16"` needs the CPU, AVX512-BF16 and the
    /// avx512 kernels (not capped by `EDGETAM_ISA`). The message says what this machine runs;
    /// load with `"f32"` instead. Never a silent fallback to f32.
    PrecisionUnavailable = 12,
}

/// Everything a call can fail with, typed; [`Self::status`] is its code at the boundary.
#[derive(Debug, thiserror::Error)]
pub enum CapiError {
    #[error("{0} is NULL")]
    Null(&'static str),
    #[error("{0}")]
    InvalidArgument(String),
    #[error("invalid frame: {0}")]
    InvalidFrame(String),
    #[error("invalid prompt: {0}")]
    InvalidPrompt(String),
    #[error("no object {0}")]
    UnknownObject(u32),
    #[error("{what} needs {needed} bytes, the buffer has {got}")]
    BufferTooSmall {
        what: String,
        needed: usize,
        got: usize,
    },
    #[error(transparent)]
    Limit(#[from] edgetam_tracker::LimitError),
    #[error(transparent)]
    Tracker(#[from] TrackerError),
    #[error("internal error (a panic in edgetam): {0}")]
    Panic(String),
    #[error(
        "this tracker panicked in an earlier call and its state is unknown; \
         call edgetam_tracker_reset or free it"
    )]
    Poisoned,
}

impl CapiError {
    /// The status code a C caller branches on.
    pub fn status(&self) -> EdgetamStatus {
        match self {
            Self::Null(_) => EdgetamStatus::NullPointer,
            Self::InvalidArgument(_) => EdgetamStatus::InvalidArgument,
            Self::InvalidFrame(_) => EdgetamStatus::InvalidFrame,
            Self::InvalidPrompt(_) => EdgetamStatus::InvalidPrompt,
            Self::UnknownObject(_) => EdgetamStatus::UnknownObject,
            Self::BufferTooSmall { .. } => EdgetamStatus::BufferTooSmall,
            Self::Limit(_) => EdgetamStatus::Limit,
            Self::Panic(_) | Self::Poisoned => EdgetamStatus::Panic,
            Self::Tracker(e) => tracker_status(e),
        }
    }
}

/// The code of a tracker error. Variants not named here (the memory bank's and the tensor
/// engine's) are failures while running.
fn tracker_status(e: &TrackerError) -> EdgetamStatus {
    use edgetam_tracker::FrameError;
    match e {
        TrackerError::Io { .. }
        | TrackerError::Config { .. }
        | TrackerError::WeightFile { .. }
        | TrackerError::MissingWeight { .. }
        | TrackerError::WeightShape { .. }
        | TrackerError::UnexpectedWeights { .. }
        | TrackerError::Hub(_) => EdgetamStatus::Model,
        TrackerError::InputSize { .. } | TrackerError::Bf16Policy(_) => {
            EdgetamStatus::InvalidArgument
        }
        TrackerError::Limit(_) | TrackerError::InvalidFrame(FrameError::OverLimit { .. }) => {
            EdgetamStatus::Limit
        }
        TrackerError::InvalidFrame(_) | TrackerError::InvalidImage(_) => {
            EdgetamStatus::InvalidFrame
        }
        TrackerError::InvalidPrompt(_) => EdgetamStatus::InvalidPrompt,
        TrackerError::InvalidDevice(_) => EdgetamStatus::Device,
        TrackerError::PrecisionUnavailable { .. } => EdgetamStatus::PrecisionUnavailable,
        _ => EdgetamStatus::Runtime,
    }
}

thread_local! {
    /// The message of the last failed call on this thread (NUL-terminated for C).
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Keeps `message` as this thread's last error. Interior NULs (from a path, say) become `?`
/// so the message is never cut short or lost.
pub(crate) fn set_last_error(message: &str) {
    let bytes: Vec<u8> = message
        .bytes()
        .map(|b| if b == 0 { b'?' } else { b })
        .collect();
    let text = CString::new(bytes).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Pointer to this thread's last error message ("" when no call failed yet on this thread).
pub(crate) fn last_error_ptr() -> *const c_char {
    // The pointer stays valid after `with` returns: the CString lives in the thread-local until
    // the next failed call on this thread replaces it (the documented lifetime).
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Runs one entry point: its error becomes a status code and this thread's last error, and a
/// panic is caught here (it must not unwind into C) and reported as `EDGETAM_STATUS_PANIC`.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), CapiError>) -> EdgetamStatus {
    // AssertUnwindSafe: state a panic may leave half-updated is a tracker's, and the tracker
    // entry points mark their handle poisoned for the duration of the call (see `tracker.rs`),
    // so a caller never reads that state again without a reset.
    let outcome = catch_unwind(AssertUnwindSafe(f));
    let error = match outcome {
        Ok(Ok(())) => return EdgetamStatus::Ok,
        Ok(Err(e)) => e,
        Err(payload) => CapiError::Panic(panic_message(payload.as_ref())),
    };
    // Formatting the message runs caller-independent Display code; guard it as well.
    let text = catch_unwind(AssertUnwindSafe(|| error.to_string()))
        .unwrap_or_else(|_| "an error whose message could not be formatted".into());
    set_last_error(&text);
    error.status()
}

/// Runs one entry point that returns a value instead of a status (the string getters): a
/// panic is caught here, as in [`guard`], and `fallback` returned instead.
pub(crate) fn guard_value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    // AssertUnwindSafe: these entry points only read process-wide or thread-local state.
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: `last_error_ptr` points at this thread's NUL-terminated message.
        unsafe { CStr::from_ptr(last_error_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let status = guard(|| panic!("boom {}", 7));
        assert_eq!(status, EdgetamStatus::Panic);
        assert_eq!(last(), "internal error (a panic in edgetam): boom 7");
    }

    #[test]
    fn errors_are_per_thread_and_success_keeps_the_last_one() {
        assert_eq!(
            guard(|| Err(CapiError::Null("frame"))),
            EdgetamStatus::NullPointer
        );
        assert_eq!(guard(|| Ok(())), EdgetamStatus::Ok);
        assert_eq!(last(), "frame is NULL");
        let other = std::thread::spawn(last).join().unwrap_or_default();
        assert_eq!(other, "");
    }

    #[test]
    fn a_panic_in_a_getter_returns_the_fallback() {
        let value = guard_value(c"fallback".as_ptr(), || panic!("boom"));
        // SAFETY: a static NUL-terminated string.
        assert_eq!(
            unsafe { CStr::from_ptr(value) }.to_str().ok(),
            Some("fallback")
        );
    }

    #[test]
    fn interior_nul_is_kept_visible() {
        set_last_error("a\0b");
        assert_eq!(last(), "a?b");
    }
}
