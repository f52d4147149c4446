//! Streaming tracking: one [`tracker::Tracker`] per stream, each object's step on a frame
//! ([`object_step`]), its prompts and results.

pub(crate) mod object_step;
pub(crate) mod tracker;
