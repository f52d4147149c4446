//! EdgeTAM model.
