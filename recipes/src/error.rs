//! The crate's one error type.

use std::fmt;

use dsipc_std::Error;

/// Why a recipe's session gave no result.
#[derive(Debug)]
#[non_exhaustive]
pub enum RecipeError {
    /// The runtime refused, or the connection to it failed.
    Ipc(Error),
    /// The runtime streamed more than the recipe's bound ([`crate::Collect::max_bytes`]):
    /// the session was closed there.
    TooLarge {
        /// The bound, in bytes.
        max_bytes: u64,
    },
    /// The session ended without a whole answer (late, cut, a stream that did not parse),
    /// said in words naming the process.
    Failed(String),
}

impl fmt::Display for RecipeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecipeError::Ipc(e) => e.fmt(f),
            RecipeError::TooLarge { max_bytes } => write!(
                f,
                "the runtime streamed more than {} MiB for this session (the bound): stopped",
                max_bytes >> 20
            ),
            RecipeError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for RecipeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecipeError::Ipc(e) => Some(e),
            _ => None,
        }
    }
}

impl From<Error> for RecipeError {
    fn from(e: Error) -> Self {
        RecipeError::Ipc(e)
    }
}
