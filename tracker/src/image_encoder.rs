//! Stage module: in progress.
