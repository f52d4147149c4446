//! Frame-queue pipeline (blocking and async APIs, encoder-ahead producer thread).
//!
//! **Status: not implemented yet.** It builds on the streaming tracker of the video-tracking issue;
//! until then this crate deliberately exports nothing.
