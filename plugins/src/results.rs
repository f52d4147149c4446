//! What `edgetamtrack` produces, as names an application can match on.
//!
//! # Buffer metas (every buffer the element tracked)
//!
//! One `GstVideoRegionOfInterestMeta` per **visible** object (object score > 0 and a non-empty
//! mask): `roi_type` [`ROI_TYPE`] (`"edgetam"`), `id` = the object id, `x, y, w, h` = the
//! mask's tight box in frame pixels. It carries one param structure named [`PARAM_NAME`]
//! (`"edgetam"`) with:
//!
//! | field | type | what |
//! |---|---|---|
//! | `id` | `guint` | the object id |
//! | `score` | `gfloat` | object-score logit (visible when > 0) |
//! | `visible` | `gboolean` | always true on a meta (invisible objects get no meta) |
//! | `area` | `guint64` | pixels in the mask |
//! | `mask` | `GstBuffer` | the object's mask: `mask-width x mask-height` bytes, row-major, no padding, **0 = outside, 1 = inside** (exactly the library's `Mask`) |
//! | `mask-width`, `mask-height` | `guint` | the frame's size (the mask covers the whole frame) |
//! | `frame` | `guint64` | the tracker's frame index (since the last reset) |
//! | `stale` | `gboolean` | true on buffers the tracker did not see (live mode) |
//! | `label` | `gchararray` | the detector's class when a detection started the object, else `edgetam` |
//!
//! Buffers the element passed untracked in `live-mode` carry the last tracked buffer's objects
//! with `stale = true` (and `frame` naming that buffer); a buffer that failed to track carries
//! none.
//!
//! # Analytics metas (features `v1_24`, `v1_26`)
//!
//! Built with `v1_24` (GStreamer >= 1.24), each buffer with objects also carries one
//! `GstAnalyticsRelationMeta` (upstream's when the buffer came with one) holding, per object
//! the tracker has, a tracking Mtd: tracking id = object id, first seen = running time of the
//! first tracked buffer whose result has it, last seen = running time of the latest tracked
//! buffer on which it was visible, lost = not visible on this buffer. Per visible object also
//! an object-detection Mtd (object type = its `label`, the ROI meta's rectangle, confidence =
//! the sigmoid of `score`) with `od RELATE_TO tracking`, and with `v1_26` (GStreamer >= 1.26) a
//! segmentation Mtd with `od RELATE_TO segmentation`: instance type, region ids `[0, 1]`, the
//! mask cut to the box as a GRAY8 buffer with a `GstVideoMeta` (0 outside, 1 inside), located
//! at the box (read it with `gstedgetam::segmentation`). An upstream object-detection Mtd that
//! prompted or matched an object (`prompt-source=analytics`) relates to its tracking Mtd
//! (`detection RELATE_TO tracking`). Running times of buffers without a timestamp are 0.
//!
//! # Bus messages (`post-messages=true`)
//!
//! An element message [`MESSAGE_NAME`] (`"edgetam-tracking"`) per tracked buffer:
//! `running-time` (`guint64` ns, the buffer's running time, `GST_CLOCK_TIME_NONE` if unknown),
//! `pts` (`guint64` ns or `GST_CLOCK_TIME_NONE`), `frame` (`guint64`, buffers seen by the element
//! since it started, 0-based), `tracker-frame` (`guint64`, the tracker's frame index),
//! `processing-time` (`guint64` ns) and `objects`, a `GstValueArray` of structures named
//! [`OBJECT_NAME`] (`"object"`), one per tracked object, visible or not: `id` (`guint`),
//! `score` (`gfloat`), `visible` (`gboolean`), `area` (`guint64`), `x`, `y`, `width`,
//! `height` (`guint`; all 0 when the mask is empty), `label` (`gchararray`), `first-seen`,
//! `last-seen` (`guint64` ns, as in the tracking Mtds above); and `detections`, the decision
//! on each upstream detection (see [`crate::edgetamtrack::detector`]).
//!
//! # Custom event (runtime prompts)
//!
//! A custom event (downstream into the sink pad, e.g. `gst::event::CustomDownstream`, or
//! upstream into the src pad, `gst::event::CustomUpstream`) whose structure is named
//! [`PROMPT_EVENT`] (`"edgetam-prompt"`) with a string field `spec` in the CLI's prompt syntax
//! (`obj=1;box=10,20,50,60`, `obj=2;point=5,6,1;point=9,9,0`; `frame=` is ignored) adds or
//! refines that object's prompt from the next buffer on. The element consumes the event.

/// `roi_type` of the element's `GstVideoRegionOfInterestMeta`s.
pub const ROI_TYPE: &str = "edgetam";
/// Name of the param structure on each ROI meta.
pub const PARAM_NAME: &str = "edgetam";
/// Name of the element messages posted with `post-messages=true`.
pub const MESSAGE_NAME: &str = "edgetam-tracking";
/// Name of the per-object structures in a message's `objects` array.
pub const OBJECT_NAME: &str = "object";
/// Name of the per-detection structures in a message's `detections` array.
pub const DETECTION_NAME: &str = "detection";
/// Structure name of the custom prompt event.
pub const PROMPT_EVENT: &str = "edgetam-prompt";
/// Field of the custom prompt event holding the prompt spec.
pub const PROMPT_EVENT_SPEC: &str = "spec";

/// A custom event carrying `spec` (one prompt in the CLI syntax) for the element: send it
/// downstream with `pad.send_event` / `element.send_event` (it travels upstream from a sink, or
/// downstream from a source, in order with the buffers).
pub fn prompt_event_downstream(spec: &str) -> gst::Event {
    gst::event::CustomDownstream::new(prompt_structure(spec))
}

/// The same as [`prompt_event_downstream`], for sending from downstream (e.g. a sink's pad).
pub fn prompt_event_upstream(spec: &str) -> gst::Event {
    gst::event::CustomUpstream::new(prompt_structure(spec))
}

fn prompt_structure(spec: &str) -> gst::Structure {
    gst::Structure::builder(PROMPT_EVENT)
        .field(PROMPT_EVENT_SPEC, spec)
        .build()
}
