//! Streaming tracking: one [`tracker::Tracker`] per stream, each object's step on a frame
//! ([`object_step`]), what users hand in ([`prompts`]) and get back ([`results`]).

pub(crate) mod object_step;
pub(crate) mod prompts;
pub(crate) mod results;
pub(crate) mod tracker;
