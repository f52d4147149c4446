//! Single-frame EdgeTAM (in progress).
pub struct EdgeTam;
pub struct Prompt;
pub struct Segmentation;
