//! Frames from OpenCV `Mat`s (feature `opencv`).
//!
//! A `Mat`'s pixels are borrowed, not copied: the frame's row stride is the `Mat`'s row step, so
//! a non-continuous `Mat` (a region of interest of a larger image, or rows with padding) needs
//! no copy either. OpenCV's 8-bit images map to pixel formats as OpenCV lays them out:
//!
//! | `Mat` type | [`PixelFormat`] |
//! |------------|-----------------|
//! | `CV_8UC3`  | `Bgr8`          |
//! | `CV_8UC4`  | `Bgra8`         |
//! | `CV_8UC1`  | `Gray8`         |
//!
//! Other depths and channel counts (16-bit, float, two channels), empty `Mat`s and `Mat`s with
//! more than two dimensions are rejected with a [`MatError`].

use opencv::core::{Mat, MatTraitConst, CV_8U};

use super::{Frame, FrameError, PixelFormat};

/// Why a `Mat` cannot be taken as a [`Frame`].
#[derive(Debug, thiserror::Error)]
pub enum MatError {
    /// The `Mat` has no pixels.
    #[error("the Mat is empty")]
    Empty,
    /// Only 2-D `Mat`s (images) are frames.
    #[error("the Mat has {dims} dimensions; a frame needs 2")]
    Dimensions { dims: i32 },
    /// Not an 8-bit image with 1, 3 or 4 channels.
    #[error(
        "unsupported Mat type {name} (depth {depth}, {channels} channels): a frame needs \
         CV_8UC3 (BGR), CV_8UC4 (BGRA) or CV_8UC1 (GRAY)"
    )]
    UnsupportedType {
        name: String,
        depth: i32,
        channels: i32,
    },
    /// The `Mat`'s layout does not describe a valid frame (should not happen for a valid `Mat`).
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// OpenCV reported an error while the `Mat` was inspected.
    #[error("OpenCV: {0}")]
    OpenCv(#[from] opencv::Error),
}

/// The pixel format of an OpenCV `Mat` type (`CV_8UC3` and so on), if a frame can have it.
pub fn pixel_format_of(mat_type: i32) -> Option<PixelFormat> {
    let depth = mat_type & 7; // CV_MAT_DEPTH_MASK
    let channels = (mat_type >> 3) + 1; // CV_CN_SHIFT
    if depth != CV_8U {
        return None;
    }
    match channels {
        1 => Some(PixelFormat::Gray8),
        3 => Some(PixelFormat::Bgr8),
        4 => Some(PixelFormat::Bgra8),
        _ => None,
    }
}

impl<'a> Frame<'a> {
    /// A frame that borrows the pixels of an 8-bit BGR, BGRA or GRAY `Mat` (continuous or
    /// not; see [`MatError`] for what is refused). Use [`Frame::into_owned`] to keep it beyond
    /// the `Mat`'s borrow.
    ///
    /// The borrow holds for `'a` on this `Mat` header: as everywhere in OpenCV, pixels written
    /// meanwhile through another header that shares the buffer are seen by the frame.
    pub fn from_mat<M: MatTraitConst + ?Sized>(mat: &'a M) -> Result<Self, MatError> {
        if mat.empty() || mat.data().is_null() {
            return Err(MatError::Empty);
        }
        if mat.dims() != 2 {
            return Err(MatError::Dimensions { dims: mat.dims() });
        }
        let typ = mat.typ();
        let format = pixel_format_of(typ).ok_or_else(|| MatError::UnsupportedType {
            name: opencv::core::type_to_string(typ).unwrap_or_else(|_| typ.to_string()),
            depth: mat.depth(),
            channels: mat.channels(),
        })?;
        // Both are positive for a non-empty 2-D Mat.
        let width = usize::try_from(mat.cols()).map_err(|_| MatError::Empty)?;
        let height = usize::try_from(mat.rows()).map_err(|_| MatError::Empty)?;
        let stride = mat.mat_step()[0];
        let bpp = format.bytes_per_pixel().unwrap_or(1);
        let too_large = || FrameError::TooLarge { width, height };
        let len = stride
            .checked_mul(height - 1)
            .and_then(|n| n.checked_add(width.checked_mul(bpp)?))
            .ok_or_else(too_large)?;
        // SAFETY: `data` points to the first pixel of a non-empty 2-D Mat whose rows are
        // `stride` bytes apart, each `width * bpp` bytes long: the `len` bytes up to the end of
        // the last row lie within the Mat's buffer (for a ROI, within its parent's), which the
        // Mat header borrowed for `'a` keeps alive.
        let data: &'a [u8] = unsafe { std::slice::from_raw_parts(mat.data(), len) };
        let frame = Frame::new(data, width, height, format).with_stride(stride);
        frame.validate()?;
        Ok(frame)
    }
}

impl<'a> TryFrom<&'a Mat> for Frame<'a> {
    type Error = MatError;

    fn try_from(mat: &'a Mat) -> Result<Self, MatError> {
        Frame::from_mat(mat)
    }
}

#[cfg(test)]
mod tests {
    use opencv::core::{Rect, Scalar, CV_16UC1, CV_32FC3, CV_8UC1, CV_8UC2, CV_8UC3, CV_8UC4};
    use opencv::prelude::*;

    use super::*;

    /// A `rows x cols` Mat of `typ` whose byte `i` (in row-major order, channels interleaved)
    /// is `i * 7 + 3` (mod 256).
    fn patterned(rows: i32, cols: i32, typ: i32) -> Mat {
        let mut m =
            Mat::new_rows_cols_with_default(rows, cols, typ, Scalar::all(0.0)).expect("Mat");
        for (i, b) in m
            .data_bytes_mut()
            .expect("continuous")
            .iter_mut()
            .enumerate()
        {
            *b = (i * 7 + 3) as u8;
        }
        m
    }

    /// Packed RGB of a continuous `Mat`, computed independently of `Frame`.
    fn expected_rgb(m: &impl MatTraitConst) -> Vec<u8> {
        let cn = m.channels() as usize;
        let bytes = m.data_bytes().expect("continuous");
        assert_eq!(bytes.len(), (m.rows() * m.cols()) as usize * cn);
        let mut out = Vec::new();
        for px in bytes.chunks_exact(cn) {
            match cn {
                1 => out.extend([px[0]; 3]),
                _ => out.extend([px[2], px[1], px[0]]),
            }
        }
        out
    }

    #[test]
    fn continuous_mats_of_each_type() {
        for (typ, format) in [
            (CV_8UC3, PixelFormat::Bgr8),
            (CV_8UC4, PixelFormat::Bgra8),
            (CV_8UC1, PixelFormat::Gray8),
        ] {
            let m = patterned(5, 7, typ);
            let f = Frame::from_mat(&m).expect("supported Mat");
            assert_eq!(f.format(), format);
            assert_eq!((f.width(), f.height()), (7, 5));
            assert_eq!(f.stride(), 7 * format.bytes_per_pixel().expect("packed"));
            // Borrowed, not copied.
            assert!(!f.is_owned());
            assert_eq!(f.data().as_ptr(), m.data());
            let rgb = f.to_rgb8().expect("valid");
            assert_eq!(rgb.len(), 5 * 7 * 3);
            assert_eq!(rgb, expected_rgb(&m), "{format:?}");
        }
        // Spot check of the BGR order: pixel (0,0) of the pattern is B=3, G=10, R=17.
        let one = patterned(1, 1, CV_8UC3);
        let f = Frame::try_from(&one).expect("BGR");
        assert_eq!(f.to_rgb8().expect("valid"), [17, 10, 3]);
    }

    #[test]
    fn non_continuous_roi_uses_the_row_step() {
        for typ in [CV_8UC3, CV_8UC4, CV_8UC1] {
            let big = patterned(10, 12, typ);
            let roi = big.roi(Rect::new(3, 2, 5, 4)).expect("roi");
            assert!(!roi.is_continuous());
            let f = Frame::from_mat(&roi).expect("ROI");
            assert_eq!((f.width(), f.height()), (5, 4));
            assert_eq!(f.stride(), big.mat_step()[0]);
            assert_eq!(f.data().as_ptr(), roi.data());
            // The reference: the same region copied into a continuous Mat by OpenCV.
            let copy = roi.try_clone().expect("clone");
            assert!(copy.is_continuous());
            assert_eq!(f.to_rgb8().expect("valid"), expected_rgb(&copy));
            // An owned copy converts the same.
            assert_eq!(
                f.clone().into_owned().into_rgb8().expect("valid"),
                expected_rgb(&copy)
            );
        }
    }

    #[test]
    fn unsupported_and_empty_mats_are_errors() {
        assert!(matches!(
            Frame::from_mat(&Mat::default()),
            Err(MatError::Empty)
        ));
        for typ in [CV_16UC1, CV_32FC3, CV_8UC2] {
            let m = Mat::new_rows_cols_with_default(2, 2, typ, Scalar::all(0.0)).expect("Mat");
            let err = Frame::from_mat(&m).expect_err("unsupported");
            assert!(
                matches!(err, MatError::UnsupportedType { .. }),
                "{typ}: {err}"
            );
            assert!(err.to_string().contains("CV_8UC3"), "{err}");
        }
        let cube = Mat::new_nd_with_default(&[2, 2, 2], CV_8UC1, Scalar::all(0.0)).expect("Mat");
        assert!(matches!(
            Frame::from_mat(&cube),
            Err(MatError::Dimensions { dims: 3 })
        ));
    }

    #[test]
    fn pixel_formats_of_mat_types() {
        assert_eq!(pixel_format_of(CV_8UC3), Some(PixelFormat::Bgr8));
        assert_eq!(pixel_format_of(CV_8UC4), Some(PixelFormat::Bgra8));
        assert_eq!(pixel_format_of(CV_8UC1), Some(PixelFormat::Gray8));
        assert_eq!(pixel_format_of(CV_8UC2), None);
        assert_eq!(pixel_format_of(CV_16UC1), None);
    }
}
