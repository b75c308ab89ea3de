//! The one error type of the core. `python/errors.rs` converts it to Python in a single place
//! (`impl From<CoreError> for PyErr`): each variant becomes one class of pml's Python error
//! tree (`pml_server/domain/errors.py`), its fields passed as the exception's attributes.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum CoreError {
    /// The caller passed something the core cannot work with (wrong shape, bad parameter).
    #[error("invalid argument `{field}`: {reason}")]
    InvalidArgument { field: String, reason: String },
    /// Serialized bytes that are truncated, corrupted or of an unknown version.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// An input larger or deeper than the core accepts.
    #[error("input too large: `{field}` {reason}")]
    TooLarge { field: String, reason: String },
}

pub type CoreResult<T> = Result<T, CoreError>;
