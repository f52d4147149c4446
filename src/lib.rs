//! edgetam: real-time EdgeTAM video object tracking in Rust.
//!
//! This facade re-exports the workspace crates; see the README for status of each part.
pub use edgetam_pipeline as pipeline;
pub use edgetam_tracker as tracker;

pub mod draw;
mod names;

/// Keep freed activation buffers in the heap (glibc): see [`tracker::keep_freed_memory`].
pub use edgetam_tracker::keep_freed_memory;
pub use edgetam_tracker::pin_default_threads;
pub use names::natural_cmp;
