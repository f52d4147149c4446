//! GStreamer plugin `edgetam` with the `edgetamtrack` element.
//!
//! **Status: not implemented yet.** The element is built on `edgetam-pipeline` by the GStreamer
//! issue; until then this crate registers nothing (and so links no GStreamer library).
