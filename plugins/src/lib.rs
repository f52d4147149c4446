//! GStreamer plugin `edgetam` with the element `edgetamtrack`: EdgeTAM video object tracking
//! inside GStreamer pipelines.
//!
//! ```text
//! gst-launch-1.0 v4l2src ! videoconvert ! edgetamtrack model=/models/edgetam \
//!     prompts="obj=1;frame=0;box=200,120,420,380" overlay=mask ! videoconvert ! autovideosink
//! ```
//!
//! See [`edgetamtrack`] for the element (properties, signals, the custom event) and [`results`]
//! for what it attaches to buffers and posts on the bus. Build it as a shared library
//! (`libgstedgetam.so`) and point `GST_PLUGIN_PATH` at its folder, or link the rlib and call
//! [`plugin_register_static`].

use gst::glib;

pub mod convert;
pub mod edgetamtrack;
pub mod overlay;
pub mod results;
#[cfg(feature = "v1_26")]
pub mod segmentation;

pub use edgetamtrack::{EdgeTamTrack, Overlay, TestFault};

/// The element's string parsing exactly as the element runs it, for the fuzz targets in
/// `fuzz/` (not a supported API): the `prompts` property, the `add-prompt` signal and the
/// prompt event's spec, the `add-points` signal, `prompt-roi-types` and `device`.
#[doc(hidden)]
pub mod fuzzing {
    use edgetam_tracker::ObjectPrompt;

    use crate::edgetamtrack::{detector, prompts};

    /// `mask=PATH` is decoded from `mask` instead of reading the file system.
    fn mask_reader(
        mask: &[u8],
    ) -> impl Fn(&std::path::Path) -> Result<edgetam_tracker::Mask, edgetam_pipeline::MaskFileError> + '_
    {
        move |path| edgetam_pipeline::decode_mask(mask, path)
    }

    /// The `prompts` property as the element's start parses it.
    pub fn prompts_property(
        text: &str,
        mask: &[u8],
    ) -> Result<Vec<(u64, u32, ObjectPrompt)>, String> {
        prompts::schedule(text, &mask_reader(mask)).map_err(|e| e.to_string())
    }

    /// One spec of the `add-prompt` signal or the prompt event.
    pub fn prompt_spec(text: &str, mask: &[u8]) -> Result<(u32, ObjectPrompt), String> {
        prompts::parse_spec(text, &mask_reader(mask)).map_err(|e| e.to_string())
    }

    /// The `add-points` signal's points string.
    pub fn add_points(obj: u32, text: &str) -> Result<ObjectPrompt, String> {
        prompts::parse_points(obj, text)
    }

    /// The `prompt-roi-types` property.
    pub fn roi_types(text: &str) -> Vec<String> {
        detector::parse_types(text)
    }

    /// The `device` property.
    pub fn device(text: &str) -> Result<(), String> {
        edgetam_tracker::parse_device(text)
            .map(drop)
            .map_err(|e| e.to_string())
    }

    /// The `spec` field of a custom event's structure, as the element's event handler gets it.
    pub enum EventField<'a> {
        Missing,
        Str(&'a str),
        Int(i32),
    }

    /// A custom downstream event with structure `name` (a valid structure name: the element
    /// only ever sees built structures) and `field`, read as the element reads prompt events:
    /// `None` when it is not a prompt event. Needs `gst::init()`.
    pub fn prompt_event(name: &str, field: EventField) -> Option<Result<String, String>> {
        let b = gst::Structure::builder(name);
        let s = match field {
            EventField::Missing => b.build(),
            EventField::Str(v) => b.field(crate::results::PROMPT_EVENT_SPEC, v).build(),
            EventField::Int(v) => b.field(crate::results::PROMPT_EVENT_SPEC, v).build(),
        };
        let event = gst::event::CustomDownstream::new(s);
        prompts::event_spec(event.structure()?).map(|r| r.map(str::to_owned))
    }
}

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    // The process set-up every front end runs (`edgetam_tracker::process_setup`: the compute
    // threads' settings where the environment leaves them unset, candle's idle spinning being
    // 8-10 % of a frame on 2 cores; glibc malloc keeping freed activation buffers). Plugins load
    // before streaming starts, the earliest point an element gets; the model's first op comes
    // later, in `start` (whose model load would run it too, once per process).
    edgetam_tracker::process_setup();
    edgetamtrack::register(plugin)
}

gst::plugin_define!(
    edgetam,
    env!("CARGO_PKG_DESCRIPTION"),
    plugin_init,
    env!("CARGO_PKG_VERSION"),
    // The project is MIT OR Apache-2.0; GStreamer knows a fixed list of licences (LGPL, GPL,
    // MPL, BSD, MIT/X11, ...) and shows "unknown" for anything else, so the MIT half is named.
    "MIT/X11",
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_NAME"),
    env!("CARGO_PKG_REPOSITORY")
);
