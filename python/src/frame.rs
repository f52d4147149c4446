//! numpy arrays as [`Frame`]s without copying: the array's buffer is borrowed as the frame's
//! one plane, with the array's row stride.

use edgetam_tracker::{Frame, PixelFormat};
use numpy::{
    PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;

use crate::errors::{error, type_error, Kind};

/// A borrowed numpy frame: the array (kept alive and marked borrowed for the frame's life) and
/// the layout checked against it.
pub(crate) struct ArrayFrame<'py> {
    array: PyReadonlyArrayDyn<'py, u8>,
    width: usize,
    height: usize,
    format: PixelFormat,
    /// Row stride in bytes (numpy's stride of axis 0).
    stride: usize,
    /// Bytes from the first pixel to the end of the last row.
    len: usize,
}

impl<'py> ArrayFrame<'py> {
    /// Checks `obj` (a uint8 `HxWx3`, `HxWx4` or `HxW` array whose pixels are packed within each
    /// row; rows may be any positive stride apart, as in a crop) and borrows it. `format` is
    /// `"rgb"`/`"bgr"` for 3 channels (default rgb), `"rgba"`/`"bgra"` for 4 (default rgba),
    /// `"gray"` for 2-D arrays.
    pub(crate) fn new(obj: &Bound<'py, PyAny>, format: Option<&str>) -> PyResult<Self> {
        let py = obj.py();
        let bad = |msg: String| error(py, Kind::Frame, msg);
        let untyped = obj.cast::<PyUntypedArray>().map_err(|_| {
            type_error(format!(
                "a frame must be a numpy.ndarray of uint8, got {}",
                type_name(obj)
            ))
        })?;
        let dtype = untyped.dtype();
        if !dtype.is_equiv_to(&numpy::dtype::<u8>(py)) {
            return Err(bad(format!(
                "a frame must be uint8, got dtype {dtype} (convert with arr.astype(numpy.uint8))"
            )));
        }
        let shape = untyped.shape().to_vec();
        let strides = untyped.strides().to_vec();
        let (height, width, channels) = match shape[..] {
            [h, w] => (h, w, 1),
            [h, w, c] if c == 3 || c == 4 => (h, w, c),
            _ => {
                return Err(bad(format!(
                    "a frame must have shape (H, W, 3), (H, W, 4) or (H, W), got {shape:?}"
                )))
            }
        };
        let format = pixel_format(format, channels).map_err(bad)?;
        // Pixels packed within a row (channel step 1, pixel step = channels), rows a positive
        // stride apart: the layout a Frame plane describes. Anything else (a flipped or
        // transposed view, every other column) needs a copy the caller should see.
        let packed = match strides[..] {
            [row, px] => px == 1 && row > 0,
            [row, px, ch] => ch == 1 && px == channels as isize && row > 0,
            _ => false,
        };
        let row_bytes = width.saturating_mul(channels);
        // The row stride (axis 0); a negative one was refused above as not `packed`.
        let stride = strides
            .first()
            .and_then(|&s| usize::try_from(s).ok())
            .unwrap_or(0);
        if height > 0 && width > 0 && (!packed || (height > 1 && stride < row_bytes)) {
            return Err(bad(format!(
                "a frame's pixels must be contiguous within each row (strides (S, {channels}, 1) \
                 with S >= {row_bytes}), got strides {strides:?}; pass \
                 numpy.ascontiguousarray(frame)"
            )));
        }
        let len = match (height, width) {
            (0, _) | (_, 0) => 0,
            _ => (height - 1)
                .checked_mul(stride)
                .and_then(|n| n.checked_add(row_bytes))
                .ok_or_else(|| bad(format!("frame {width}x{height} is too large")))?,
        };
        let array = obj
            .cast::<PyArrayDyn<u8>>()
            .map_err(|e| bad(e.to_string()))?
            .try_readonly()
            .map_err(|e| {
                error(
                    py,
                    Kind::Frame,
                    format!("the frame is borrowed mutably: {e}"),
                )
            })?;
        Ok(Self {
            array,
            width,
            height,
            format,
            // One row: any stride >= the row's bytes describes it.
            stride: if height <= 1 { row_bytes } else { stride },
            len,
        })
    }

    /// The frame over the array's buffer (no copy).
    pub(crate) fn frame(&self) -> Frame<'_> {
        let data: &[u8] = if self.len == 0 {
            &[]
        } else {
            // SAFETY: `data()` points at the array's first element (index [0, 0, 0]). `new`
            // checked that pixels are packed within rows (channel step 1, pixel step =
            // channels) and rows are `stride > 0` bytes apart, so the bytes of row y are
            // `data + y * stride .. + width * channels`, and the last of them, at `len - 1`,
            // is the element [H-1, W-1, C-1], inside the array's memory as every valid index
            // is. The memory lives as long as `self.array`, which holds a reference to the
            // array and a shared borrow in numpy's borrow checker (no Rust `&mut` to it can
            // exist meanwhile). Bytes between rows (a crop's other columns) are read-only
            // uint8 memory of the same allocation, never interpreted. Python code writing into
            // the array from another thread while a call runs would race, as with any numpy
            // function that releases the GIL; the guide (docs/src/python.md) says not to.
            unsafe { std::slice::from_raw_parts(self.array.data() as *const u8, self.len) }
        };
        Frame::new(data, self.width, self.height, self.format).with_stride(self.stride)
    }

    pub(crate) fn width(&self) -> usize {
        self.width
    }

    pub(crate) fn height(&self) -> usize {
        self.height
    }
}

/// The pixel format named by `format` for an array with `channels` channels.
fn pixel_format(format: Option<&str>, channels: usize) -> Result<PixelFormat, String> {
    let name = format.map(|f| f.trim().to_ascii_lowercase());
    match (name.as_deref(), channels) {
        (None | Some("rgb"), 3) => Ok(PixelFormat::Rgb8),
        (Some("bgr"), 3) => Ok(PixelFormat::Bgr8),
        (None | Some("rgba") | Some("rgbx"), 4) => Ok(PixelFormat::Rgba8),
        (Some("bgra") | Some("bgrx"), 4) => Ok(PixelFormat::Bgra8),
        (None | Some("gray") | Some("grey"), 1) => Ok(PixelFormat::Gray8),
        (Some(f), c)
            if ["rgb", "bgr", "rgba", "rgbx", "bgra", "bgrx", "gray", "grey"].contains(&f) =>
        {
            Err(format!(
                "format {f:?} does not fit an array with {c} channel(s) ((H, W, 3): rgb or bgr; \
                 (H, W, 4): rgba or bgra; (H, W): gray)"
            ))
        }
        (Some(f), _) => Err(format!(
            "unknown format {f:?}: use rgb, bgr, rgba, bgra or gray"
        )),
        (None, c) => Err(format!("no pixel format has {c} channels")),
    }
}

/// The Python type name of `obj`, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "an unknown type".into())
}
