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

pub use edgetamtrack::{EdgeTamTrack, Overlay};

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    // The compute threads' settings (core count, candle's idle spinning: 8-10 % of a frame on
    // 2 cores) where the environment leaves them unset. Plugins load before streaming starts,
    // the earliest point an element gets; the model's first op comes later, in `start`.
    edgetam_tracker::pin_default_threads();
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
