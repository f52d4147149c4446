//! Video-path stage: not implemented yet (video-tracking issue).
