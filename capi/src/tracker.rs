//! The tracker handle: one per video stream, with its objects, prompts and memories.

use edgetam_tracker::{limits, Mask, ObjectPrompt, Point, PointLabel, Prompt, Tracker};

use crate::error::{guard, CapiError, EdgetamStatus};
use crate::frame::{borrow_frame, EdgetamFrame};
use crate::model::EdgetamModel;
use crate::ptr::{
    bytes, clear_out, free_handle, hand_out, handle, mask_span, read_sized, require_out, write_out,
};
use crate::result::EdgetamResult;

/// The `frame` of a prompt call meaning "the next frame to be tracked".
pub const EDGETAM_NEXT_FRAME: u64 = u64::MAX;

/// One stream's tracking state (opaque). Use a tracker from one thread at a time (calls on it
/// must not overlap); it may move between threads. Different trackers, even of one model, run
/// in parallel.
pub struct EdgetamTracker {
    tracker: Tracker,
    /// Set while a call runs and cleared when it returns: still set afterwards only when that
    /// call panicked, leaving the tracker's state unknown.
    poisoned: bool,
}

/// A box prompt in frame pixels: `x0 < x1`, `y0 < y1`, inside the frame. A fixed value type
/// (passed by value, no `size` field): it never changes; a new kind of prompt would be a new
/// type and function.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EdgetamBox {
    pub x0: f32,
    pub y0: f32,
    pub x1: f32,
    pub y1: f32,
}

/// A point prompt in frame pixels. A fixed value type (passed in arrays, no `size` field): it
/// never changes; a new kind of prompt would be a new type and function.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EdgetamPoint {
    pub x: f32,
    pub y: f32,
    /// 1: on the object (positive), 0: on the background (negative).
    pub label: i32,
}

/// Runs `f` on a live, unpoisoned tracker, marking it poisoned should `f` panic.
///
/// # Safety
/// `tracker` is NULL or a live handle not used by another thread during the call.
unsafe fn with_tracker<T>(
    tracker: *mut EdgetamTracker,
    f: impl FnOnce(&mut Tracker) -> Result<T, CapiError>,
) -> Result<T, CapiError> {
    // SAFETY: the caller's contract.
    let handle = unsafe { tracker.as_mut() }.ok_or(CapiError::Null("tracker"))?;
    if handle.poisoned {
        return Err(CapiError::Poisoned);
    }
    handle.poisoned = true;
    let out = f(&mut handle.tracker);
    handle.poisoned = false;
    out
}

/// The body of every prompt call: `prompt` for object `object_id` on `frame`, the index a
/// prompt call names (`EDGETAM_NEXT_FRAME`: the next frame to be tracked).
///
/// # Safety
/// As [`with_tracker`].
unsafe fn add_prompt(
    tracker: *mut EdgetamTracker,
    object_id: u32,
    frame: u64,
    prompt: impl Into<ObjectPrompt>,
) -> Result<(), CapiError> {
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        with_tracker(tracker, |t| {
            let frame = match frame {
                EDGETAM_NEXT_FRAME => t.next_frame_index(),
                index => index,
            };
            Ok(t.add_prompt(object_id, frame, prompt)?)
        })
    }
}

/// A new tracker on `model` (which it keeps alive). Free it with `edgetam_tracker_free`.
///
/// Thread safety: may run on several threads at once.
///
/// # Safety
/// `model` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn edgetam_tracker_new(
    model: *const EdgetamModel,
    out: *mut *mut EdgetamTracker,
) -> EdgetamStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { clear_out(out) };
        // SAFETY: the caller's contract.
        let model = unsafe { handle(model, "model") }?;
        require_out(out, "out")?;
        let tracker = EdgetamTracker {
            tracker: Tracker::new(model.model.clone()),
            poisoned: false,
        };
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { hand_out(out, tracker) };
        Ok(())
    })
}

/// Frees a tracker and its memories. NULL is ignored.
///
/// # Safety
/// `tracker` is NULL or a handle from `edgetam_tracker_new` not freed before and not in use.
#[no_mangle]
pub unsafe extern "C" fn edgetam_tracker_free(tracker: *mut EdgetamTracker) {
    // SAFETY: a handle from `edgetam_tracker_new` (`hand_out`), freed once and not in use (the
    // caller's contract).
    unsafe { free_handle(tracker) }
}

/// Tracks every object on the next frame and returns the frame's results in `*out` (a new
/// handle for `edgetam_result_free`; NULL on failure). Prompts queued for this frame apply
/// first. With no object yet the model is not run and the result has no objects.
///
/// # Safety
/// `tracker` is NULL or a live handle not used concurrently; `frame` is NULL or an
/// `EdgetamFrame` of `frame->size` bytes whose used planes hold the bytes its width, height and
/// strides describe; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn edgetam_tracker_track(
    tracker: *mut EdgetamTracker,
    frame: *const EdgetamFrame,
    out: *mut *mut EdgetamResult,
) -> EdgetamStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { clear_out(out) };
        if frame.is_null() {
            return Err(CapiError::Null("frame"));
        }
        // SAFETY: non-null, `frame->size` readable bytes (the caller's contract).
        let frame = unsafe { read_sized(frame, "frame") }?;
        require_out(out, "out")?;
        // SAFETY: the caller's contract on the planes' bytes.
        let frame = unsafe { borrow_frame(&frame) }?;
        // SAFETY: the caller's contract.
        let result = unsafe { with_tracker(tracker, |t| Ok(t.track_frame(&frame)?)) }?;
        // SAFETY: checked non-null above.
        unsafe { hand_out(out, EdgetamResult::new(result)) };
        Ok(())
    })
}

/// Re-runs the current (last tracked) frame for the objects prompted on it since it was
/// tracked, and returns the frame's results (other objects' are as they were).
///
/// # Safety
/// `tracker` is NULL or a live handle not used concurrently; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn edgetam_tracker_refresh(
    tracker: *mut EdgetamTracker,
    out: *mut *mut EdgetamResult,
) -> EdgetamStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { clear_out(out) };
        require_out(out, "out")?;
        // SAFETY: the caller's contract.
        let result = unsafe { with_tracker(tracker, |t| Ok(t.refresh()?)) }?;
        // SAFETY: checked non-null above.
        unsafe { hand_out(out, EdgetamResult::new(result)) };
        Ok(())
    })
}

/// Adds a box prompt for object `object_id` (new or already tracked) on `frame`: the next frame
/// (`EDGETAM_NEXT_FRAME`, or its index), applied by the next track call, or the current one,
/// applied by `edgetam_tracker_refresh`. A later prompt for the same object and frame replaces
/// it.
///
/// # Safety
/// `tracker` is NULL or a live handle not used concurrently.
#[no_mangle]
pub unsafe extern "C" fn edgetam_tracker_add_box(
    tracker: *mut EdgetamTracker,
    object_id: u32,
    frame: u64,
    bbox: EdgetamBox,
) -> EdgetamStatus {
    guard(|| {
        let prompt = Prompt::from_box(bbox.x0, bbox.y0, bbox.x1, bbox.y1);
        // SAFETY: the caller's contract.
        unsafe { add_prompt(tracker, object_id, frame, prompt) }
    })
}

/// Adds a points prompt, with an optional box (`bbox` may be NULL), for object `object_id` on
/// `frame` (as `edgetam_tracker_add_box`). At most 64 points (a box counts as two).
///
/// # Safety
/// `tracker` is NULL or a live handle not used concurrently; `bbox` is NULL or readable;
/// `points` is NULL or points to `num_points` readable points.
#[no_mangle]
pub unsafe extern "C" fn edgetam_tracker_add_points(
    tracker: *mut EdgetamTracker,
    object_id: u32,
    frame: u64,
    bbox: *const EdgetamBox,
    points: *const EdgetamPoint,
    num_points: usize,
) -> EdgetamStatus {
    guard(|| {
        limits::check(
            || "num_points".into(),
            num_points,
            limits::MAX_PROMPT_POINTS,
        )?;
        let points: &[EdgetamPoint] = if num_points == 0 {
            &[]
        } else if points.is_null() {
            return Err(CapiError::Null("points"));
        } else {
            // SAFETY: non-null, `num_points` (<= 64) readable points (the caller's contract).
            unsafe { std::slice::from_raw_parts(points, num_points) }
        };
        let mut prompt = Prompt::default();
        // SAFETY: NULL or readable (the caller's contract).
        if let Some(b) = unsafe { bbox.as_ref() } {
            prompt.bbox = Some([b.x0, b.y0, b.x1, b.y1]);
        }
        for (i, p) in points.iter().enumerate() {
            let label = match p.label {
                1 => PointLabel::Positive,
                0 => PointLabel::Negative,
                other => {
                    return Err(CapiError::InvalidArgument(format!(
                        "points[{i}].label is {other}: 1 (positive) or 0 (negative)"
                    )))
                }
            };
            prompt.points.push(Point {
                x: p.x,
                y: p.y,
                label,
            });
        }
        // SAFETY: the caller's contract.
        unsafe { add_prompt(tracker, object_id, frame, prompt) }
    })
}

/// Adds a mask prompt for object `object_id` on `frame` (as `edgetam_tracker_add_box`): `width`
/// x `height` bytes (the frame's size), rows `stride` bytes apart, nonzero inside the object.
/// The mask is copied; the buffer may be reused when the call returns.
///
/// # Safety
/// `tracker` is NULL or a live handle not used concurrently; `mask` is NULL or points to
/// `stride * (height - 1) + width` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn edgetam_tracker_add_mask(
    tracker: *mut EdgetamTracker,
    object_id: u32,
    frame: u64,
    mask: *const u8,
    width: u32,
    height: u32,
    stride: usize,
) -> EdgetamStatus {
    guard(|| {
        let (w, h) = (width as usize, height as usize);
        limits::check_image_size("mask", w, h)?;
        if w == 0 || h == 0 {
            return Err(CapiError::InvalidPrompt(format!(
                "mask is {w}x{h}: both sides must be at least one pixel"
            )));
        }
        let len = mask_span(w, h, stride)?;
        // SAFETY: `len` readable bytes (the caller's contract).
        let src = unsafe { bytes(mask, len, "mask") }?;
        let mut data = Vec::with_capacity(w * h);
        for row in 0..h {
            data.extend_from_slice(&src[row * stride..row * stride + w]);
        }
        let mask = Mask::new(w, h, data)?;
        // SAFETY: the caller's contract.
        unsafe { add_prompt(tracker, object_id, frame, mask) }
    })
}

/// Removes object `object_id` and its memory; `EDGETAM_STATUS_UNKNOWN_OBJECT` if the tracker
/// has no such object.
///
/// # Safety
/// `tracker` is NULL or a live handle not used concurrently.
#[no_mangle]
pub unsafe extern "C" fn edgetam_tracker_remove_object(
    tracker: *mut EdgetamTracker,
    object_id: u32,
) -> EdgetamStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe {
            with_tracker(tracker, |t| match t.remove_object(object_id) {
                true => Ok(()),
                false => Err(CapiError::UnknownObject(object_id)),
            })
        }
    })
}

/// Forgets every object and restarts frame numbering at 0 (a new scene). Also makes a tracker
/// usable again after `EDGETAM_STATUS_PANIC`.
///
/// # Safety
/// `tracker` is NULL or a live handle not used concurrently.
#[no_mangle]
pub unsafe extern "C" fn edgetam_tracker_reset(tracker: *mut EdgetamTracker) -> EdgetamStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let handle = unsafe { tracker.as_mut() }.ok_or(CapiError::Null("tracker"))?;
        handle.poisoned = true;
        handle.tracker.reset();
        handle.poisoned = false;
        Ok(())
    })
}

/// The index the next track call gives its frame (0 after creation or a reset).
///
/// # Safety
/// `tracker` is NULL or a live handle not used concurrently; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn edgetam_tracker_next_frame(
    tracker: *mut EdgetamTracker,
    out: *mut u64,
) -> EdgetamStatus {
    guard(|| {
        require_out(out, "out")?;
        // SAFETY: the caller's contract.
        let next = unsafe { with_tracker(tracker, |t| Ok(t.next_frame_index())) }?;
        // SAFETY: non-null and writable (the caller's contract).
        unsafe { write_out(out, next) };
        Ok(())
    })
}
