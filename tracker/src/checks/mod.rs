//! Stage checks against fixtures.
