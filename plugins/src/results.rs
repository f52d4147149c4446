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
//!
//! Buffers the element did not track (skipped in `live-mode`, or a failed frame) carry no
//! `edgetam` metas.
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
//! `height` (`guint`; all 0 when the mask is empty).
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
