//! A frame's results as a handle the caller owns: per object id, score, visibility, box, area
//! and a mask the handle owns (borrowed by pointer, or copied into the caller's buffer).

use edgetam_tracker::FrameResult;

use crate::error::{guard, CapiError, EdgetamStatus};
use crate::ptr::{
    free_handle, get, handle, mask_span, require_out, write_out, write_sized, VersionedStruct,
};

/// One frame's results (opaque). Owned by the caller: free it with `edgetam_result_free`. It
/// does not depend on the tracker that made it (it may outlive it) and is never modified, so
/// several threads may read one result at the same time.
pub struct EdgetamResult {
    frame_index: u64,
    width: u32,
    height: u32,
    objects: Vec<ObjectOut>,
}

struct ObjectOut {
    id: u32,
    score: f32,
    visible: bool,
    iou: f32,
    prompted: bool,
    bbox: Option<[usize; 4]>,
    area: usize,
    mask: Vec<u8>,
}

impl EdgetamResult {
    /// Keeps what C reads of a tracker result; the masks move, the logit tensors are dropped
    /// (on a GPU they would hold device memory for as long as the caller keeps the result).
    pub(crate) fn new(r: FrameResult) -> Self {
        let side = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        Self {
            frame_index: r.frame_index,
            width: side(r.width),
            height: side(r.height),
            objects: r
                .objects
                .into_iter()
                .map(|o| ObjectOut {
                    id: o.id,
                    score: o.score,
                    visible: o.visible,
                    iou: o.iou,
                    prompted: o.prompted,
                    bbox: o.bbox,
                    area: o.area,
                    mask: o.mask.data,
                })
                .collect(),
        }
    }

    fn find(&self, id: u32) -> Result<&ObjectOut, CapiError> {
        self.objects
            .iter()
            .find(|o| o.id == id)
            .ok_or(CapiError::UnknownObject(id))
    }

    fn view(&self, o: &ObjectOut) -> EdgetamObject {
        let bbox = o.bbox.unwrap_or_default();
        let side = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        EdgetamObject {
            size: std::mem::size_of::<EdgetamObject>(),
            id: o.id,
            score: o.score,
            visible: u8::from(o.visible),
            has_box: u8::from(o.bbox.is_some()),
            prompted: u8::from(o.prompted),
            iou: o.iou,
            bbox: bbox.map(side),
            area: o.area as u64,
            mask_width: self.width,
            mask_height: self.height,
            mask: o.mask.as_ptr(),
        }
    }
}

/// One object on one frame. `mask` points into the result that filled this struct and is valid
/// until that result is freed. Set `size` before the call that fills it:
/// `EdgetamObject o = {0}; o.size = sizeof o;`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EdgetamObject {
    /// `sizeof(EdgetamObject)`, set by the caller: which version of this struct it holds, so a
    /// later version can add fields. The call writes the fields that fit and sets `size` to the
    /// bytes it wrote.
    pub size: usize,
    /// The caller's object id.
    pub id: u32,
    /// Object-score logit: the object is visible when it is > 0.
    pub score: f32,
    /// 1 when `score > 0`, else 0.
    pub visible: u8,
    /// 1 when the mask is not empty (then `bbox` is its tight box), else 0.
    pub has_box: u8,
    /// 1 when this frame was a prompted (conditioning) frame for the object.
    pub prompted: u8,
    /// The decoder's predicted IoU of the chosen mask (1 for a mask prompt).
    pub iou: f32,
    /// `x0, y0, x1, y1`, inclusive pixels; zeros when `has_box` is 0.
    pub bbox: [u32; 4],
    /// Pixels in the mask.
    pub area: u64,
    /// The mask's size: the frame's.
    pub mask_width: u32,
    pub mask_height: u32,
    /// `mask_width * mask_height` bytes, row-major, 1 inside the object and 0 outside.
    pub mask: *const u8,
}

// SAFETY: repr(C), `size: usize` first.
unsafe impl VersionedStruct for EdgetamObject {
    const C_NAME: &'static str = "EdgetamObject";
    const MIN_SIZE: usize = std::mem::size_of::<Self>();
}

/// The body of the calls that fill an `EdgetamObject`: `result` and `out` checked (NULL is an
/// error, the result first), then the object `pick` chooses written into `*out`, inside the
/// guard.
///
/// # Safety
/// `result` is NULL or a live handle; `out` is NULL or an `EdgetamObject` whose `size` is set,
/// `out->size` writable bytes.
unsafe fn write_object(
    result: *const EdgetamResult,
    out: *mut EdgetamObject,
    pick: impl FnOnce(&EdgetamResult) -> Result<&ObjectOut, CapiError>,
) -> EdgetamStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let r = unsafe { handle(result, "result") }?;
        require_out(out, "out")?;
        let o = pick(r)?;
        // SAFETY: non-null, `out->size` writable bytes (the caller's contract).
        unsafe { write_sized(out, r.view(o), "out") }
    })
}

/// The frame the result is for: its index in the stream (0-based, restarting at a tracker
/// reset) and its size. Any out-pointer may be NULL to skip it.
///
/// # Safety
/// `result` is NULL or a live handle; each out-pointer is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn edgetam_result_frame(
    result: *const EdgetamResult,
    frame_index: *mut u64,
    width: *mut u32,
    height: *mut u32,
) -> EdgetamStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let r = unsafe { handle(result, "result") }?;
        for (out, value) in [(width, r.width), (height, r.height)] {
            if !out.is_null() {
                // SAFETY: non-null and writable (the caller's contract).
                unsafe { write_out(out, value) };
            }
        }
        if !frame_index.is_null() {
            // SAFETY: non-null and writable (the caller's contract).
            unsafe { write_out(frame_index, r.frame_index) };
        }
        Ok(())
    })
}

/// Number of objects in the result (every object the tracker follows, visible or not, in the
/// order they were first prompted).
///
/// # Safety
/// `result` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn edgetam_result_count(
    result: *const EdgetamResult,
    out: *mut usize,
) -> EdgetamStatus {
    // SAFETY: the caller's contract is `get`'s.
    unsafe { get(result, "result", out, |r| r.objects.len()) }
}

/// The `index`-th object (0 <= index < count). `EDGETAM_STATUS_INVALID_ARGUMENT` past the end.
///
/// # Safety
/// `result` is NULL or a live handle; `out` is NULL or an `EdgetamObject` whose `size` is set,
/// `out->size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn edgetam_result_object(
    result: *const EdgetamResult,
    index: usize,
    out: *mut EdgetamObject,
) -> EdgetamStatus {
    // SAFETY: the caller's contract is `write_object`'s.
    unsafe {
        write_object(result, out, |r| {
            r.objects.get(index).ok_or_else(|| {
                CapiError::InvalidArgument(format!(
                    "object index {index} is past the end: the result has {} object(s)",
                    r.objects.len()
                ))
            })
        })
    }
}

/// The object with id `object_id`; `EDGETAM_STATUS_UNKNOWN_OBJECT` if the result has none.
///
/// # Safety
/// `result` is NULL or a live handle; `out` is NULL or an `EdgetamObject` whose `size` is set,
/// `out->size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn edgetam_result_find(
    result: *const EdgetamResult,
    object_id: u32,
    out: *mut EdgetamObject,
) -> EdgetamStatus {
    // SAFETY: the caller's contract is `write_object`'s.
    unsafe { write_object(result, out, |r| r.find(object_id)) }
}

/// Copies object `object_id`'s mask (0/1 bytes) into the caller's buffer, rows `stride` bytes
/// apart (`stride` >= the frame width; the bytes between rows are left as they are). `len` is
/// the buffer's size: at least `stride * (height - 1) + width`.
///
/// # Safety
/// `result` is NULL or a live handle; `dst` is NULL or points to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn edgetam_result_copy_mask(
    result: *const EdgetamResult,
    object_id: u32,
    dst: *mut u8,
    len: usize,
    stride: usize,
) -> EdgetamStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let r = unsafe { handle(result, "result") }?;
        require_out(dst, "dst")?;
        let o = r.find(object_id)?;
        let (w, h) = (r.width as usize, r.height as usize);
        let needed = mask_span(w, h, stride)?;
        if len < needed {
            return Err(CapiError::BufferTooSmall {
                what: format!("a {w}x{h} mask with row stride {stride}"),
                needed,
                got: len,
            });
        }
        if len > isize::MAX as usize {
            return Err(CapiError::InvalidArgument(format!(
                "len {len} is larger than any buffer can be"
            )));
        }
        // SAFETY: non-null, `len` writable bytes (the caller's contract), len <= isize::MAX,
        // and not aliased by the result's own memory (which the caller cannot reach mutably).
        let out = unsafe { std::slice::from_raw_parts_mut(dst, len) };
        for (row, src) in o.mask.chunks_exact(w.max(1)).take(h).enumerate() {
            out[row * stride..row * stride + w].copy_from_slice(src);
        }
        Ok(())
    })
}

/// Frees a result and the masks it owns. NULL is ignored.
///
/// # Safety
/// `result` is NULL or a handle from a track/refresh call not freed before.
#[no_mangle]
pub unsafe extern "C" fn edgetam_result_free(result: *mut EdgetamResult) {
    // SAFETY: a handle from a track or refresh call (`hand_out` in `tracker.rs`), freed once
    // (the caller's contract).
    unsafe { free_handle(result) }
}
