//! The checks' error and result types, below every check (each imports them; `mod.rs` only
//! re-exports them).

/// Why a check could not run: an unusable fixture, or the model failing on the fixture's inputs.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A reference fixture is unusable or does not match what a check compares it with.
    #[error("fixture check: {0}")]
    Fixture(String),
    /// The model (or loading it) failed.
    #[error(transparent)]
    Model(#[from] crate::Error),
}

impl From<candle_core::Error> for CheckError {
    fn from(e: candle_core::Error) -> Self {
        Self::Model(crate::Error::Tensor(e))
    }
}

/// Result of a check.
pub type Result<T, E = CheckError> = std::result::Result<T, E>;
