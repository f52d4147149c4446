//! What the element attaches to buffers and posts on the bus (names in [`crate::results`]).

use std::collections::BTreeMap;
use std::time::Duration;

use edgetam_tracker::{FrameResult, ObjectResult};
use gst::glib;
use gst::prelude::*;

use super::detector::{Decision, Detection};
use crate::results;

/// The latest tracked buffer's objects, kept for the stale metas of untracked buffers.
#[derive(Debug, Clone)]
pub struct LastObjects {
    /// The tracker's frame index of that buffer.
    pub frame: u64,
    pub objects: Vec<ObjectResult>,
    /// Each object's mask as a buffer (shared by every buffer that carries it).
    masks: Vec<gst::Buffer>,
}

impl LastObjects {
    pub fn new(r: &FrameResult) -> Self {
        Self {
            frame: r.frame_index,
            objects: r.objects.clone(),
            masks: r
                .objects
                .iter()
                .map(|o| gst::Buffer::from_slice(o.mask.data.clone()))
                .collect(),
        }
    }
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

/// One ROI meta per visible object of `last` (`stale` on buffers the tracker did not see).
pub fn attach(buf: &mut gst::BufferRef, last: &LastObjects, stale: bool, labels: &Labels) {
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
    analytics::add(buf, &last.objects, labels);
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
    //! Analytics relation meta (GStreamer >= 1.24): per visible object one object-detection
    //! Mtd (type = the object's label, the box, confidence = sigmoid of the object score) and
    //! one tracking Mtd (tracking id = object id), related to each other with `RELATE_TO`.
    use gst_analytics::prelude::*;
    use gst_analytics::{AnalyticsRelationMeta, RelTypes};

    pub(super) fn add(
        buf: &mut gst::BufferRef,
        objects: &[edgetam_tracker::ObjectResult],
        labels: &super::Labels,
    ) {
        let visible: Vec<_> = objects
            .iter()
            .filter(|o| o.visible)
            .filter_map(|o| Some((o, o.bbox?)))
            .collect();
        if visible.is_empty() {
            return;
        }
        let mut meta = AnalyticsRelationMeta::add(buf);
        for (o, [x0, y0, x1, y1]) in visible {
            let quark = gst::glib::Quark::from_str(super::label(labels, o.id));
            let conf = 1.0 / (1.0 + (-o.score).exp());
            let (w, h) = ((x1 - x0 + 1) as i32, (y1 - y0 + 1) as i32);
            let od = match meta.add_od_mtd(quark, x0 as i32, y0 as i32, w, h, conf) {
                Ok(m) => m.id(),
                Err(_) => continue,
            };
            let trk = match meta.add_tracking_mtd(u64::from(o.id), gst::ClockTime::ZERO) {
                Ok(m) => m.id(),
                Err(_) => continue,
            };
            let _ = meta.set_relation(RelTypes::RELATE_TO, od, trk);
        }
    }
}
