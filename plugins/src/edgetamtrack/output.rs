//! What the element attaches to buffers and posts on the bus (names in [`crate::results`]).

use std::collections::BTreeMap;
use std::time::Duration;

use edgetam_tracker::{FrameResult, ObjectResult};
use gst::glib;
use gst::prelude::*;

use super::detector::{Decision, Detection};
use crate::results;

/// When an object was first tracked (the running time of the first tracked buffer whose result
/// has it) and last seen (the running time of the latest tracked buffer on which it was
/// visible; its first one until then): the analytics Tracking Mtd's first-seen and last-seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub first: gst::ClockTime,
    pub last: gst::ClockTime,
}

/// The latest tracked buffer's objects, kept for the stale metas of untracked buffers.
#[derive(Debug, Clone)]
pub struct LastObjects {
    /// The tracker's frame index of that buffer.
    pub frame: u64,
    pub objects: Vec<ObjectResult>,
    /// Each object's mask as a buffer (shared by every buffer that carries it).
    masks: Vec<gst::Buffer>,
    /// Each object's first and last seen times.
    #[cfg_attr(not(feature = "v1_24"), allow(dead_code))]
    seen: Vec<Seen>,
    /// Each visible object's mask cut to its box, with a GRAY8 video meta (segmentation Mtds).
    #[cfg(feature = "v1_26")]
    crops: Vec<Option<gst::Buffer>>,
}

impl LastObjects {
    /// `seen`: every object's times, this buffer's included (an object missing there, which
    /// cannot happen after [`super::prompts::Objects::observe`], gets `time`).
    pub fn new(r: &FrameResult, seen: &BTreeMap<u32, Seen>, time: gst::ClockTime) -> Self {
        Self {
            frame: r.frame_index,
            objects: r.objects.clone(),
            masks: r
                .objects
                .iter()
                .map(|o| gst::Buffer::from_slice(o.mask.data.clone()))
                .collect(),
            seen: r
                .objects
                .iter()
                .map(|o| {
                    seen.get(&o.id).copied().unwrap_or(Seen {
                        first: time,
                        last: time,
                    })
                })
                .collect(),
            #[cfg(feature = "v1_26")]
            crops: r
                .objects
                .iter()
                .map(|o| o.bbox.filter(|_| o.visible).and_then(|b| crop(&o.mask, b)))
                .collect(),
        }
    }
}

/// The probability that the object is in the frame (the sigmoid of its score logit): the
/// confidence of its object-detection Mtd.
#[cfg_attr(not(feature = "v1_24"), allow(dead_code))]
pub fn presence(score: f32) -> f32 {
    1.0 / (1.0 + (-score).exp())
}

/// `mask` cut to `[x0, y0, x1, y1]` (inclusive) as a GRAY8 buffer with a video meta (rows
/// without padding); `None` when the box is not inside the mask.
#[cfg(feature = "v1_26")]
fn crop(mask: &edgetam_tracker::Mask, [x0, y0, x1, y1]: [usize; 4]) -> Option<gst::Buffer> {
    if x1 < x0 || y1 < y0 || x1 >= mask.width || y1 >= mask.height {
        return None;
    }
    let (w, h) = (x1 - x0 + 1, y1 - y0 + 1);
    let mut data = Vec::with_capacity(w * h);
    for y in y0..=y1 {
        let row = y * mask.width;
        data.extend_from_slice(mask.data.get(row + x0..=row + x1)?);
    }
    let mut buf = gst::Buffer::from_mut_slice(data);
    gst_video::VideoMeta::add_full(
        buf.get_mut()?,
        gst_video::VideoFrameFlags::empty(),
        gst_video::VideoFormat::Gray8,
        u32::try_from(w).ok()?,
        u32::try_from(h).ok()?,
        &[0],
        &[i32::try_from(w).ok()?],
    )
    .ok()?;
    Some(buf)
}

/// A detector label per object id (objects the element started from a detection).
pub type Labels = BTreeMap<u32, String>;

/// The label an object's results carry: its detector's class, else `edgetam`.
pub fn label(labels: &Labels, obj: u32) -> &str {
    labels.get(&obj).map_or(results::ROI_TYPE, String::as_str)
}

fn rect([x0, y0, x1, y1]: [usize; 4]) -> (u32, u32, u32, u32) {
    (
        x0 as u32,
        y0 as u32,
        (x1 - x0 + 1) as u32,
        (y1 - y0 + 1) as u32,
    )
}

/// One ROI meta per visible object of `last` (`stale` on buffers the tracker did not see); with
/// `v1_24` also the analytics Mtds (`sources`: upstream object-detection Mtd ids of this
/// buffer and the object each prompted or matched). Returns what could not be attached.
pub fn attach(
    buf: &mut gst::BufferRef,
    last: &LastObjects,
    stale: bool,
    labels: &Labels,
    sources: &[(u32, u32)],
) -> Vec<String> {
    for (o, mask) in last.objects.iter().zip(&last.masks) {
        let Some(bbox) = o.bbox.filter(|_| o.visible) else {
            continue;
        };
        let param = gst::Structure::builder(results::PARAM_NAME)
            .field("id", o.id)
            .field("score", o.score)
            .field("visible", o.visible)
            .field("area", o.area as u64)
            .field("mask", mask.clone())
            .field("mask-width", o.mask.width as u32)
            .field("mask-height", o.mask.height as u32)
            .field("frame", last.frame)
            .field("stale", stale)
            .field("label", label(labels, o.id))
            .build();
        let mut meta =
            gst_video::VideoRegionOfInterestMeta::add(buf, results::ROI_TYPE, rect(bbox));
        meta.set_id(i32::try_from(o.id).unwrap_or(i32::MAX));
        meta.add_param(param);
    }
    #[cfg(feature = "v1_24")]
    return analytics::add(buf, last, labels, sources);
    #[cfg(not(feature = "v1_24"))]
    {
        let _ = sources;
        Vec::new()
    }
}

/// What the element decided about one buffer's detections.
pub type Decisions = Vec<(Detection, Decision)>;

/// The `edgetam-tracking` message of a tracked buffer.
#[allow(clippy::too_many_arguments)]
pub fn message(
    src: &gst::Element,
    running_time: Option<gst::ClockTime>,
    pts: Option<gst::ClockTime>,
    index: u64,
    r: &FrameResult,
    elapsed: Duration,
    labels: &Labels,
    seen: &BTreeMap<u32, Seen>,
    decisions: &Decisions,
) -> gst::Message {
    let objects: Vec<glib::SendValue> = r
        .objects
        .iter()
        .map(|o| {
            let (x, y, w, h) = o.bbox.map(rect).unwrap_or_default();
            gst::Structure::builder(results::OBJECT_NAME)
                .field("id", o.id)
                .field("score", o.score)
                .field("visible", o.visible)
                .field("area", o.area as u64)
                .field("x", x)
                .field("y", y)
                .field("width", w)
                .field("height", h)
                .field("label", label(labels, o.id))
                .field(
                    "first-seen",
                    seen.get(&o.id).map_or(u64::MAX, |s| s.first.nseconds()),
                )
                .field(
                    "last-seen",
                    seen.get(&o.id).map_or(u64::MAX, |s| s.last.nseconds()),
                )
                .build()
                .to_send_value()
        })
        .collect();
    let detections: Vec<glib::SendValue> = decisions
        .iter()
        .map(|(d, decision)| {
            let [x0, y0, x1, y1] = d.bbox;
            let iou = match decision {
                Decision::Matched { iou, .. } => f64::from(*iou),
                _ => 0.0,
            };
            let px = |v: f32| v.max(0.0).round() as u32;
            gst::Structure::builder(results::DETECTION_NAME)
                .field("x", px(x0))
                .field("y", px(y0))
                .field("width", px(x1 - x0))
                .field("height", px(y1 - y0))
                .field("label", d.label.as_str())
                .field("confidence", d.confidence.unwrap_or(-1.0))
                .field("decision", decision.name())
                .field("object", decision.object())
                .field("iou", iou)
                .build()
                .to_send_value()
        })
        .collect();
    let ns = |t: Option<gst::ClockTime>| t.map_or(u64::MAX, gst::ClockTime::nseconds);
    let s = gst::Structure::builder(results::MESSAGE_NAME)
        .field("running-time", ns(running_time))
        .field("pts", ns(pts))
        .field("frame", index)
        .field("tracker-frame", r.frame_index)
        .field(
            "processing-time",
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        )
        .field("objects", gst::Array::from_values(objects))
        .field("detections", gst::Array::from_values(detections))
        .build();
    gst::message::Element::builder(s).src(src).build()
}

#[cfg(feature = "v1_24")]
mod analytics {
    //! Analytics Mtds (GStreamer >= 1.24), in the buffer's relation meta (upstream's when it has
    //! one, so consumers, which read the first, see the detector's Mtds and these together).
    //! Per object: a tracking Mtd (tracking id = object id, first / last seen, lost when not
    //! visible); per visible object also an object-detection Mtd (type = its label, its box,
    //! confidence = [`super::presence`]) with `od RELATE_TO tracking`, and with `v1_26` a
    //! segmentation Mtd (the mask cut to the box, located at the box) with `od RELATE_TO
    //! segmentation`. An upstream detection that prompted or matched the object:
    //! `detection RELATE_TO tracking`.
    use gst::glib;
    use gst_analytics::prelude::*;
    use gst_analytics::{
        AnalyticsMetaRefMutExt, AnalyticsRelationMeta, AnalyticsTrackingMtd, RelTypes,
    };

    use super::{label, presence, Labels, LastObjects};

    pub(super) fn add(
        buf: &mut gst::BufferRef,
        last: &LastObjects,
        labels: &Labels,
        sources: &[(u32, u32)],
    ) -> Vec<String> {
        let mut errors = Vec::new();
        if last.objects.is_empty() {
            return errors;
        }
        if buf.meta::<AnalyticsRelationMeta>().is_none() {
            AnalyticsRelationMeta::add(buf);
        }
        for (i, o) in last.objects.iter().enumerate() {
            if let Err(e) = add_object(buf, last, i, labels, sources) {
                errors.push(format!("analytics Mtds of object {}: {e}", o.id));
            }
        }
        errors
    }

    fn add_object(
        buf: &mut gst::BufferRef,
        last: &LastObjects,
        i: usize,
        labels: &Labels,
        sources: &[(u32, u32)],
    ) -> Result<(), glib::BoolError> {
        let (o, seen) = (&last.objects[i], last.seen[i]);
        // Taken again per object: a tracking Mtd's update borrows the meta to the end.
        let mut meta = buf
            .meta_mut::<AnalyticsRelationMeta>()
            .ok_or_else(|| glib::bool_error!("no relation meta"))?;
        let trk = meta.add_tracking_mtd(u64::from(o.id), seen.first)?.id();
        let visible = o.bbox.filter(|_| o.visible);
        if let Some([x0, y0, x1, y1]) = visible {
            let (x, y) = (x0 as i32, y0 as i32);
            let (w, h) = ((x1 - x0 + 1) as i32, (y1 - y0 + 1) as i32);
            let quark = glib::Quark::from_str(label(labels, o.id));
            let od = meta.add_od_mtd(quark, x, y, w, h, presence(o.score))?.id();
            meta.set_relation(RelTypes::RELATE_TO, od, trk)?;
            #[cfg(feature = "v1_26")]
            if let Some(mask) = last.crops[i].clone() {
                use crate::segmentation::{add_segmentation_mtd, MaskLocation, SegmentationType};
                let location = MaskLocation {
                    x,
                    y,
                    w: w as u32,
                    h: h as u32,
                };
                // Mask values: 0 outside the object, 1 inside.
                let seg = add_segmentation_mtd(
                    &mut meta,
                    mask,
                    SegmentationType::Instance,
                    &[0, 1],
                    location,
                )?;
                meta.set_relation(RelTypes::RELATE_TO, od, seg)?;
            }
        }
        for &(detection, _) in sources.iter().filter(|(_, obj)| *obj == o.id) {
            meta.set_relation(RelTypes::RELATE_TO, detection, trk)?;
        }
        let mut t = meta
            .mtd_mut::<AnalyticsTrackingMtd>(trk)
            .ok_or_else(|| glib::bool_error!("tracking Mtd {trk} not found"))?;
        t.update_last_seen(seen.last)?;
        if visible.is_none() {
            t.set_lost()?;
        }
        Ok(())
    }
}
