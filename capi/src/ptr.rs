//! Reading what C hands over: strings, out-pointers, borrowed byte ranges. Every raw pointer
//! is checked for NULL here before it is read, and every length is checked before a slice is
//! made of it.

use std::ffi::{c_char, CStr};

use crate::error::{guard, CapiError, EdgetamStatus};

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

/// Borrows a live handle; NULL is [`CapiError::Null`] naming the argument.
///
/// # Safety
/// `ptr` is NULL or a live handle that is not freed while the borrow lasts.
pub(crate) unsafe fn handle<'a, T>(ptr: *const T, what: &'static str) -> Result<&'a T, CapiError> {
    // SAFETY: the caller's contract.
    unsafe { ptr.as_ref() }.ok_or(CapiError::Null(what))
}

/// Refuses a NULL out-pointer, before anything is computed for it.
pub(crate) fn require_out<T>(out: *mut T, what: &'static str) -> Result<(), CapiError> {
    match out.is_null() {
        true => Err(CapiError::Null(what)),
        false => Ok(()),
    }
}

/// The body of every getter that reads one handle and writes one value: `handle` and `out`
/// checked (NULL is an error, the handle first), then `*out = value(handle)`, inside the guard.
///
/// # Safety
/// `ptr` is NULL or a live handle; `out` is NULL or writable.
pub(crate) unsafe fn get<H, T>(
    ptr: *const H,
    what: &'static str,
    out: *mut T,
    value: impl FnOnce(&H) -> T,
) -> EdgetamStatus {
    guard(|| {
        // SAFETY: forwarded from the caller's contract.
        let h = unsafe { handle(ptr, what) }?;
        require_out(out, "out")?;
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { write_out(out, value(h)) };
        Ok(())
    })
}

/// Moves `value` into a new handle and returns it through `out`; the caller frees it with the
/// type's `_free` function ([`free_handle`]).
///
/// # Safety
/// `out` is non-null and writable.
pub(crate) unsafe fn hand_out<T>(out: *mut *mut T, value: T) {
    // SAFETY: the caller's contract.
    unsafe { write_out(out, Box::into_raw(Box::new(value))) };
}

/// Frees a handle that [`hand_out`] made; NULL is ignored. Inside the guard: a panic in a
/// destructor must not unwind into C.
///
/// # Safety
/// `ptr` is NULL or a handle from [`hand_out`], not freed before and not in use.
pub(crate) unsafe fn free_handle<T>(ptr: *mut T) {
    let _ = guard(|| {
        if !ptr.is_null() {
            // SAFETY: made by `Box::into_raw` in `hand_out`, freed once (the caller's contract).
            drop(unsafe { Box::from_raw(ptr) });
        }
        Ok(())
    });
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

/// Bytes a `width` x `height` mask spans with rows `stride` bytes apart (the last row not padded);
/// a stride below the width, or a span past `usize`, is refused.
pub(crate) fn mask_span(width: usize, height: usize, stride: usize) -> Result<usize, CapiError> {
    if stride < width {
        return Err(CapiError::InvalidArgument(format!(
            "a mask {width} pixels wide needs a row stride of at least {width} bytes, got {stride}"
        )));
    }
    span(height, stride, width).ok_or_else(|| {
        CapiError::InvalidArgument(format!("stride {stride} x {height} rows overflows"))
    })
}

/// The largest `size` a versioned struct may claim: far above any struct of this library, low
/// enough that a garbage `size` (a caller that forgot to set it) is refused instead of read past.
const MAX_STRUCT_SIZE: usize = 4096;

/// A struct whose first field is `size: usize`, set by the caller to `sizeof` the struct as its
/// edgetam.h declares it. A later version may append fields; `size` tells which version's struct
/// the caller holds, so a program built against an older header keeps working.
///
/// # Safety
/// Implementors are `#[repr(C)]` with `size: usize` as their first field.
pub(crate) unsafe trait VersionedStruct: Copy {
    /// The name C sees, for messages (`"EdgetamFrame"`).
    const C_NAME: &'static str;
    /// The smallest `size` this library accepts: the struct as the first release that had a
    /// `size` field declared it (0.1.0: the whole struct as it is now).
    const MIN_SIZE: usize;
}

/// The caller's `size` of the struct at `ptr`, checked against what this library can read.
///
/// # Safety
/// `ptr` is non-null and aligned, and its first `size_of::<usize>()` bytes are readable.
unsafe fn caller_size<T: VersionedStruct>(ptr: *const T, what: &str) -> Result<usize, CapiError> {
    // SAFETY: `size` is the first field of a repr(C) struct (the trait's contract), so the
    // pointer is aligned for a usize there and that field is readable (the caller's contract).
    let size = unsafe { ptr.cast::<usize>().read() };
    if size < T::MIN_SIZE || size > MAX_STRUCT_SIZE {
        return Err(CapiError::InvalidArgument(format!(
            "{what}->size is {size}: set it to sizeof({}) ({} bytes in edgetam.h {})",
            T::C_NAME,
            std::mem::size_of::<T>(),
            env!("CARGO_PKG_VERSION")
        )));
    }
    Ok(size)
}

/// Reads a caller's struct of the caller's `size`. A larger struct (a program built against a
/// newer edgetam.h) is accepted when every byte past what this library knows is zero (the new
/// fields left at their defaults); otherwise the call is refused rather than the caller's
/// settings silently ignored.
///
/// # Safety
/// `ptr` is non-null, aligned, and points to `(*ptr).size` readable bytes.
pub(crate) unsafe fn read_sized<T: VersionedStruct>(
    ptr: *const T,
    what: &str,
) -> Result<T, CapiError> {
    // SAFETY: forwarded from the caller's contract.
    let size = unsafe { caller_size(ptr, what) }?;
    let known = std::mem::size_of::<T>();
    if size > known {
        // SAFETY: the caller's `size` bytes are readable; `known < size <= MAX_STRUCT_SIZE`.
        let tail = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>().add(known), size - known) };
        if tail.iter().any(|&b| b != 0) {
            return Err(CapiError::InvalidArgument(format!(
                "{what} is a {size}-byte {} that sets fields libedgetam {} does not know (it \
                 reads {known} bytes): the program was built against a newer edgetam.h",
                T::C_NAME,
                env!("CARGO_PKG_VERSION")
            )));
        }
    }
    // SAFETY: at least `known` readable bytes (size >= MIN_SIZE == known for every struct of
    // this version), aligned (the caller's contract).
    Ok(unsafe { ptr.read() })
}

/// Writes `value` into the caller's struct, the fields its `size` has room for, and sets its
/// `size` to the bytes written (so the caller sees which fields this library filled).
///
/// # Safety
/// `out` is non-null, aligned, and points to `(*out).size` writable bytes.
pub(crate) unsafe fn write_sized<T: VersionedStruct>(
    out: *mut T,
    value: T,
    what: &str,
) -> Result<(), CapiError> {
    // SAFETY: forwarded from the caller's contract.
    let size = unsafe { caller_size(out.cast_const(), what) }?;
    let written = size.min(std::mem::size_of::<T>());
    // SAFETY: `written` bytes of `value` are readable, and the caller's struct has `size >=
    // written` writable bytes; the two cannot overlap (`value` is a local).
    unsafe {
        std::ptr::copy_nonoverlapping((&raw const value).cast::<u8>(), out.cast::<u8>(), written);
        out.cast::<usize>().write(written);
    }
    Ok(())
}
