//! Video-path stage checks: not implemented yet (video-tracking issue).
