//! Segmentation Mtds of an analytics relation meta (GStreamer >= 1.26, feature `v1_26`).
//!
//! gstreamer-analytics 0.24 binds the object-detection, tracking and classification Mtds but
//! not `GstAnalyticsSegmentationMtd`; this is that binding, in the crate's own idiom: the Mtd
//! type implements [`AnalyticsMtd`], so `meta.iter::<AnalyticsSegmentationMtd>()`,
//! `meta.mtd::<AnalyticsSegmentationMtd>(id)` and `iter_direct_related` work on it, and
//! [`SegmentationMtdExt`] reads a found one.
//!
//! A segmentation Mtd holds a mask: a buffer with a `GstVideoMeta` (GRAY8 or GRAY16) whose
//! pixel values are region ids, the rectangle of the frame it covers (its location, in frame
//! pixels; the mask is scaled to it) and the region ids present, in index order.

use gst::glib;
use gst::glib::translate::{from_glib, from_glib_full, IntoGlibPtr, UnsafeFrom};
use gst_analytics::{ffi, AnalyticsMtd, AnalyticsMtdRef, AnalyticsRelationMeta};

/// `GstAnalyticsSegmentationMtd` (type name `segmentation`).
#[derive(Debug)]
pub enum AnalyticsSegmentationMtd {}

// SAFETY: the type id is the one GStreamer gives segmentation Mtds, so the crate's lookups by
// type only hand out handles to Mtds of this layout.
unsafe impl AnalyticsMtd for AnalyticsSegmentationMtd {
    fn mtd_type() -> ffi::GstAnalyticsMtdType {
        // SAFETY: a constant of the library, no arguments.
        unsafe { ffi::gst_analytics_segmentation_mtd_get_mtd_type() }
    }
}

/// `GstSegmentationType`: whether region ids name object types or object instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentationType {
    /// Every object of a type has the type's id.
    Semantic,
    /// Every object has its own id.
    Instance,
}

impl SegmentationType {
    fn into_ffi(self) -> ffi::GstSegmentationType {
        match self {
            SegmentationType::Semantic => ffi::GST_SEGMENTATION_TYPE_SEMANTIC,
            SegmentationType::Instance => ffi::GST_SEGMENTATION_TYPE_INSTANCE,
        }
    }
}

/// Where a mask lies in the frame: `x, y, w, h` in frame pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MaskLocation {
    pub x: i32,
    pub y: i32,
    pub w: u32,
    pub h: u32,
}

/// Adds a segmentation Mtd holding `mask` (which must carry a GRAY8 or GRAY16 `GstVideoMeta`)
/// for the `location` of the frame, with `region_ids` (index order); returns its Mtd id.
pub fn add_segmentation_mtd(
    meta: &mut gst::MetaRefMut<'_, AnalyticsRelationMeta, gst::meta::Standalone>,
    mask: gst::Buffer,
    kind: SegmentationType,
    region_ids: &[u32],
    location: MaskLocation,
) -> Result<u32, glib::BoolError> {
    if mask.meta::<gst_video::VideoMeta>().is_none() {
        return Err(glib::bool_error!(
            "a segmentation mask needs a GstVideoMeta"
        ));
    }
    let mut ids = region_ids.to_vec();
    let mut out = ffi::GstAnalyticsSegmentationMtd {
        id: 0,
        meta: std::ptr::null_mut(),
    };
    // SAFETY: the relation meta is alive and mutably borrowed for the call; `ids` outlives it
    // (the library copies the region ids); the mask's reference passes to the library (transfer
    // full), which stores it only when it returns TRUE, so on FALSE it is taken back and
    // released here.
    let added: bool = unsafe {
        let buf = mask.into_glib_ptr();
        let ok: bool = from_glib(ffi::gst_analytics_relation_meta_add_segmentation_mtd(
            meta.as_mut_ptr(),
            buf,
            kind.into_ffi(),
            ids.len(),
            ids.as_mut_ptr(),
            location.x,
            location.y,
            location.w,
            location.h,
            &mut out,
        ));
        if !ok {
            drop(from_glib_full::<_, gst::Buffer>(buf));
        }
        ok
    };
    if added {
        Ok(out.id)
    } else {
        Err(glib::bool_error!("cannot add a segmentation Mtd"))
    }
}

/// What a segmentation Mtd found in a relation meta holds.
pub trait SegmentationMtdExt {
    /// The mask buffer (its `GstVideoMeta` gives size, stride and format) and where it lies.
    fn mask(&self) -> Option<(gst::Buffer, MaskLocation)>;
    /// The region ids, in index order.
    fn region_ids(&self) -> Vec<u32>;
}

fn handle(mtd: &AnalyticsMtdRef<'_, AnalyticsSegmentationMtd>) -> ffi::GstAnalyticsSegmentationMtd {
    // SAFETY: the handle of an Mtd of `mtd`'s relation meta, used only while `mtd` (and with it
    // the meta) is borrowed.
    let any = unsafe { ffi::GstAnalyticsMtd::unsafe_from(mtd) };
    ffi::GstAnalyticsSegmentationMtd {
        id: any.id,
        meta: any.meta,
    }
}

impl SegmentationMtdExt for AnalyticsMtdRef<'_, AnalyticsSegmentationMtd> {
    fn mask(&self) -> Option<(gst::Buffer, MaskLocation)> {
        let h = handle(self);
        let mut loc = MaskLocation::default();
        // SAFETY: `h` is a segmentation Mtd of a live meta (checked by type on lookup); the
        // returned buffer is a new reference (transfer full), NULL when there is none.
        let buf: Option<gst::Buffer> = unsafe {
            from_glib_full(ffi::gst_analytics_segmentation_mtd_get_mask(
                &h, &mut loc.x, &mut loc.y, &mut loc.w, &mut loc.h,
            ))
        };
        buf.map(|b| (b, loc))
    }

    fn region_ids(&self) -> Vec<u32> {
        let h = handle(self);
        // SAFETY: as in `mask`; indices stay below the count the library reports.
        unsafe {
            let n = ffi::gst_analytics_segmentation_mtd_get_region_count(&h);
            (0..n)
                .map(|i| ffi::gst_analytics_segmentation_mtd_get_region_id(&h, i))
                .collect()
        }
    }
}

/// A GRAY8 mask's values: `(width, height, values)`, row-major without padding, read through
/// its video meta (offset and stride honoured). `None` for other formats or a short buffer.
pub fn gray8_mask_values(mask: &gst::BufferRef) -> Option<(u32, u32, Vec<u8>)> {
    let vmeta = mask.meta::<gst_video::VideoMeta>()?;
    if vmeta.format() != gst_video::VideoFormat::Gray8 {
        return None;
    }
    let (w, h) = (vmeta.width() as usize, vmeta.height() as usize);
    let stride = usize::try_from(*vmeta.stride().first()?).ok()?;
    let offset = *vmeta.offset().first()?;
    let map = mask.map_readable().ok()?;
    let mut out = Vec::with_capacity(w * h);
    for row in 0..h {
        let start = offset + row * stride;
        out.extend_from_slice(map.get(start..start + w)?);
    }
    Some((w as u32, h as u32, out))
}
