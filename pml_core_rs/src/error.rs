//! The one error type of the core. `python.rs` maps each variant to the Python exception
//! tree in a single place.

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
    #[error("input too large: {0}")]
    TooLarge(String),
}

pub type CoreResult<T> = Result<T, CoreError>;
