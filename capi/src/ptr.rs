//! Reading what C hands over: strings, out-pointers, borrowed byte ranges. Every raw pointer
//! is checked for NULL here before it is read, and every length is checked before a slice is
//! made of it.

use std::ffi::{c_char, CStr};

use crate::error::CapiError;

/// A required C string argument as UTF-8.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that outlives the returned borrow.
pub(crate) unsafe fn required_str<'a>(
    ptr: *const c_char,
    what: &'static str,
) -> Result<&'a str, CapiError> {
    // SAFETY: forwarded from the caller's contract.
    unsafe { optional_str(ptr, what) }?.ok_or(CapiError::Null(what))
}

/// An optional C string argument (NULL is `None`) as UTF-8.
///
/// # Safety
/// As [`required_str`].
pub(crate) unsafe fn optional_str<'a>(
    ptr: *const c_char,
    what: &'static str,
) -> Result<Option<&'a str>, CapiError> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null and NUL-terminated (the caller's contract).
    let text = unsafe { CStr::from_ptr(ptr) };
    text.to_str()
        .map(Some)
        .map_err(|_| CapiError::InvalidArgument(format!("{what} is not UTF-8")))
}

/// Sets `*out` to NULL, if `out` is not NULL itself, so a failed call leaves no stale handle.
///
/// # Safety
/// `out` is NULL or writable.
pub(crate) unsafe fn clear_out<T>(out: *mut *mut T) {
    if !out.is_null() {
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { out.write(std::ptr::null_mut()) };
    }
}

/// Writes `value` to `*out`.
///
/// # Safety
/// `out` is non-null, aligned and writable.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T) {
    // SAFETY: the caller's contract.
    unsafe { out.write(value) };
}

/// `len` bytes at `data` as a slice, refusing NULL and lengths no slice may have.
///
/// # Safety
/// `data` is NULL or points to at least `len` readable bytes that outlive the borrow and are
/// not written meanwhile.
pub(crate) unsafe fn bytes<'a>(
    data: *const u8,
    len: usize,
    what: &'static str,
) -> Result<&'a [u8], CapiError> {
    if data.is_null() {
        return Err(CapiError::Null(what));
    }
    if len > isize::MAX as usize {
        return Err(CapiError::InvalidArgument(format!(
            "{what} would span {len} bytes, more than any buffer can"
        )));
    }
    // SAFETY: non-null, `len` readable bytes (the caller's contract), len <= isize::MAX.
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}

/// Bytes spanned by `rows` rows of `row_bytes` bytes each, `stride` apart: the last row need not
/// be padded to the stride. `None` on overflow.
pub(crate) fn span(rows: usize, stride: usize, row_bytes: usize) -> Option<usize> {
    match rows {
        0 => Some(0),
        _ => stride.checked_mul(rows - 1)?.checked_add(row_bytes),
    }
}
