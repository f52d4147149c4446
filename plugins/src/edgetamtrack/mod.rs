//! The `edgetamtrack` element: a `GstVideoFilter` (in-place `GstBaseTransform`) that tracks
//! objects with EdgeTAM on every buffer.
//!
//! # Properties
//!
//! | property | type | default | what |
//! |---|---|---|---|
//! | `model` | string | none (required) | a folder with `config.json` + `model.safetensors`, or an `edgetam.pt` |
//! | `device` | string | `cpu` | `cpu` or `cuda:N` (CUDA needs a CUDA build) |
//! | `prompts` | string | none | initial objects in the CLI's syntax, several joined by `\|`: `obj=1;frame=0;box=x0,y0,x1,y1`, `obj=2;point=x,y,1;point=x,y,0`, `obj=3;frame=10;mask=PATH`; `frame=` counts buffers since the element started |
//! | `encoder-ahead` | bool | false | run the image encoder on its own thread (see below) |
//! | `overlay` | flags `none`/`mask`/`contour`/`box` (combine with `+`) | `none` | what to draw into the frames |
//! | `overlay-alpha` | double 0..1 | 0.5 | weight of the object color in the mask tint |
//! | `max-objects` | uint 1..1024 | 16 | prompts for further new objects are refused (warning) |
//! | `live-mode` | bool | false | skip tracking late buffers instead of adding latency (see below) |
//! | `post-messages` | bool | false | post an `edgetam-tracking` element message per tracked buffer |
//! | `fps` | double, read-only | 0 | frames the element tracks per second of processing (last 30) |
//! | `latency` | uint64 ns, read-only | 0 | the processing latency the element reports in LATENCY queries |
//!
//! The inherited `qos` property (`GstBaseTransform`; off by default here) also works: with
//! it, buffers that downstream QoS reports as too late are dropped entirely before tracking (the
//! standard video-filter behaviour), whereas `live-mode` keeps every buffer and only skips the
//! tracking.
//!
//! # Processing model
//!
//! * The model loads in the READY→PAUSED change (`start`); a missing or bad model, a bad
//!   `device` or a bad `prompts` value fails that state change with an element error naming
//!   what is wrong.
//! * Each buffer is pushed into an [`edgetam_pipeline::Pipeline`] and the element waits for its
//!   result in `transform_ip` (synchronous: buffer order and metas are trivially right, and
//!   nothing is pending at a flush or EOS: both pass straight through; prompts queued by
//!   signals or events wait for the next buffer, also across a flush).
//! * `encoder-ahead=true` builds the pipeline with its encoder thread: the image encoder runs
//!   on a thread of its own, but since the element holds one buffer at a time there is no
//!   overlap between frames; results are identical either way.
//! * Passthrough: `GstBaseTransform`'s passthrough mode hands out buffers that cannot take
//!   metas, so the element always runs in place; with `overlay=none` it only maps the pixels
//!   for reading, and the buffer is made writable (when upstream still holds it) by a shallow
//!   copy that shares the pixel memory, so no pixel is copied or written.
//! * `live-mode=true`: a buffer is skipped (passed on unchanged, without `edgetam` metas or a
//!   message; the tracker does not see it) when it is already more than one frame duration
//!   old on the pipeline clock when it arrives, or when downstream QoS says it will be late.
//! * A new resolution in the caps resets tracking (every object forgotten, `prompts` entries
//!   for later buffers dropped) with an element warning; 4:2:0 formats (NV12, I420) need even
//!   sides (odd ones fail negotiation with an element error).
//! * LATENCY queries answer upstream's latency plus the element's processing latency (the
//!   longest of the last 16 tracked buffers); when it grows by more than 20 % (or first becomes
//!   known) the element posts a LATENCY message so the pipeline re-queries.
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

mod imp;

glib::wrapper! {
    /// The `edgetamtrack` element.
    pub struct EdgeTamTrack(ObjectSubclass<imp::EdgeTamTrack>)
        @extends gst_video::VideoFilter, gst_base::BaseTransform, gst::Element, gst::Object;
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

/// Registers `edgetamtrack` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "edgetamtrack",
        gst::Rank::NONE,
        EdgeTamTrack::static_type(),
    )
}
