//! The `edgetamtrack` element: a `GstVideoFilter` that tracks objects with EdgeTAM on every
//! buffer it can and attaches the results to it.
//!
//! # Properties
//!
//! Every property, with its type, range, default and a one-line blurb, is declared once in
//! `edgetamtrack/settings.rs` (the `ParamSpec`s): `gst-inspect-1.0 edgetamtrack` prints them.
//! `prompts` takes the CLI's prompt syntax (`edgetam_pipeline::PromptSpec`), several specs
//! joined by `|`; `prompt-source` adds objects from upstream detections (see [`detector`]).
//!
//! # Processing model
//!
//! * The model loads in the READY->PAUSED change (`start`); a missing or bad model, a bad
//!   `device` or a bad `prompts` value fails that state change with an element error naming
//!   what is wrong. Elements of one process with the same model, device and precision share one
//!   loaded model (each keeps its own tracking state).
//! * Buffers go into an [`edgetam_pipeline::Pipeline`] as they arrive; up to `max-in-flight` of
//!   them are in it at once and they leave in input order, so with encoder-ahead the next
//!   buffer's image encoder overlaps the current one's tracking. Without `live-mode` the
//!   streaming thread waits when `max-in-flight` buffers are in flight; a flush discards what is
//!   pending, EOS drains it, a state change to READY stops the threads.
//! * `live-mode=true` never makes the streaming thread wait for the tracker: a buffer is tracked
//!   when the tracker is free and its result can be out within the element's latency budget
//!   (the buffer's running time + upstream's minimum latency + the latency the element reports,
//!   which is its longest recent processing time plus one frame), and downstream QoS does not
//!   report it late; every other buffer passes on untracked, in order, behind the tracked ones.
//!   Untracked buffers carry the last known objects marked `stale` (so overlays and consumers
//!   keep showing the objects between tracked buffers instead of flickering; `frame` says which
//!   tracked buffer they come from). A tracked buffer leaves at the first input after its result
//!   is in, or at EOS.
//! * The element runs in place; with `overlay=none` it never writes pixels (GStreamer's
//!   passthrough mode cannot take metas).
//! * A new resolution in the caps resets tracking (every object forgotten, `prompts` entries
//!   for later buffers dropped) with an element warning; 4:2:0 formats (NV12, I420) need even
//!   sides (odd ones fail negotiation with an element error).
//! * LATENCY queries answer upstream's latency plus the element's (the longest time one of the
//!   last 16 tracked buffers spent in the element, plus a frame in live mode); when it grows by
//!   more than 20 % (or first becomes known) the element posts a LATENCY message.
//!
//! # Signals (action signals, return `TRUE` when queued)
//!
//! * `add-box (guint obj, gdouble x0, gdouble y0, gdouble x1, gdouble y1)`
//! * `add-points (guint obj, gchararray points)` with `points` = `x,y,label` triples joined by
//!   `;` (label 1 = object, 0 = background), e.g. `"120,80,1;300,40,0"`
//! * `add-prompt (gchararray spec)`: one spec in the CLI syntax (box and points combined, or a
//!   mask file; `frame=` ignored)
//! * `remove-object (guint obj)`, `reset ()`
//!
//! They apply from the next buffer on (before the element starts: from its first buffer).
//! A prompt the tracker rejects on that buffer (outside the frame) is reported as an element
//! warning. See [`crate::results`] for metas, messages and the custom prompt event.

use gst::glib;
use gst::prelude::*;

mod containment;
pub mod detector;
mod flow;
mod imp;
mod lifecycle;
mod live;
mod output;
mod output_thread;
pub(crate) mod prompts;
mod settings;
mod shared_model;
mod signals;
mod state;
mod timing;

glib::wrapper! {
    /// The `edgetamtrack` element.
    pub struct EdgeTamTrack(ObjectSubclass<imp::EdgeTamTrack>)
        @extends gst_video::VideoFilter, gst_base::BaseTransform, gst::Element, gst::Object;
}

/// A fault the element's own tests inject to check that failures become element errors and
/// never hang or abort (not a supported API).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestFault {
    /// The tracking pipeline's worker panics on the frame with this id.
    WorkerPanicAt(u64),
    /// The live-mode output thread panics in its next round.
    OutputThreadPanic,
    /// The next action signal's handler panics.
    SignalPanic,
    /// The next property read or write panics.
    PropertyPanic,
}

impl EdgeTamTrack {
    /// Injects `fault` (see [`TestFault`]; the worker fault applies from the next start).
    #[doc(hidden)]
    pub fn inject_fault(&self, fault: TestFault) {
        use gst::subclass::prelude::ObjectSubclassIsExt;
        self.imp().inject_fault(fault);
    }
}

/// What the element draws into frames (GLib flags `GstEdgeTamOverlay`; none by default).
#[glib::flags(name = "GstEdgeTamOverlay")]
pub enum Overlay {
    /// Draw nothing (the pixels are not touched).
    #[flags_value(name = "Draw nothing", nick = "none")]
    NONE = 0,
    /// Tint each object's mask with its color (`overlay-alpha`).
    #[flags_value(name = "Tint each object's mask", nick = "mask")]
    MASK = 0b001,
    /// Paint each mask's boundary.
    #[flags_value(name = "Outline each object's mask", nick = "contour")]
    CONTOUR = 0b010,
    /// Outline each object's box.
    #[flags_value(name = "Outline each object's box", nick = "box")]
    BOX = 0b100,
}

/// Numeric precision of the model's heaviest products (GLib enum `GstEdgeTamPrecision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, glib::Enum)]
#[enum_type(name = "GstEdgeTamPrecision")]
pub enum Precision {
    /// Exact f32.
    #[default]
    #[enum_value(name = "f32: exact", nick = "f32")]
    F32,
    /// bf16 products with f32 accumulation (CPUs with AVX512-BF16).
    #[enum_value(
        name = "bf16: fast mode, bf16 products with f32 accumulation",
        nick = "bf16"
    )]
    Bf16,
}

impl From<Precision> for edgetam_tracker::Precision {
    fn from(p: Precision) -> Self {
        match p {
            Precision::F32 => edgetam_tracker::Precision::F32,
            Precision::Bf16 => edgetam_tracker::Precision::Bf16,
        }
    }
}

/// Where objects come from (GLib enum `GstEdgeTamPromptSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, glib::Enum)]
#[enum_type(name = "GstEdgeTamPromptSource")]
pub enum PromptSource {
    /// The `prompts` property, the signals and the prompt event only.
    #[default]
    #[enum_value(name = "Property, signals and events", nick = "property")]
    Property,
    /// Also upstream `GstVideoRegionOfInterestMeta` boxes (a detector such as facedetect).
    #[enum_value(name = "Upstream region-of-interest metas", nick = "roi-meta")]
    RoiMeta,
    /// Also upstream object-detection Mtds of an analytics relation meta (GStreamer >= 1.24
    /// builds, feature `v1_24`).
    #[enum_value(name = "Upstream analytics object detections", nick = "analytics")]
    Analytics,
}

/// Registers `edgetamtrack` with `plugin`, and its flag and enum types as plugin API.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    for t in [
        Overlay::static_type(),
        Precision::static_type(),
        PromptSource::static_type(),
    ] {
        t.mark_as_plugin_api(gst::PluginAPIFlags::empty());
    }
    gst::Element::register(
        Some(plugin),
        "edgetamtrack",
        gst::Rank::NONE,
        EdgeTamTrack::static_type(),
    )
}
