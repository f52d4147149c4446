//! Fixed-capacity, slot-recycling memory ring for EdgeTAM's per-object memories and object pointers.
//!
//! **Status: not implemented yet.** The video-tracking issue fills this crate in; until then it
//! deliberately exports nothing, so no caller can mistake it for a working memory bank.
