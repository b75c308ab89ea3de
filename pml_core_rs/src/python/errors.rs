//! The pyo3 glue of the core's errors: pml's Python exception classes, the one conversion
//! from `CoreError` to them, and `invalid_arg` for Python-side argument problems.

use pyo3::import_exception;
use pyo3::prelude::*;

// The core's exceptions are pml's Python error tree (`pml_server/domain/errors.py`): a core
// argument error IS a `pml_server.domain.errors.InvalidArgumentError` with `field` and
// `reason` attributes, so the API maps it to INVALID_ARGUMENT naming the field, and nothing
// reads a message to recover it. `_core` exposes the same classes under the same names.
import_exception!(pml_server.domain.errors, CoreError);
import_exception!(pml_server.domain.errors, CoreArgumentError);
import_exception!(pml_server.domain.errors, CorruptDataError);
import_exception!(pml_server.domain.errors, InputTooLargeError);

/// The one conversion from the core's error type to Python exceptions (as pyca/cryptography
/// does): each variant's fields become the exception's constructor arguments (attributes).
impl From<crate::error::CoreError> for PyErr {
    fn from(err: crate::error::CoreError) -> PyErr {
        use crate::error::CoreError as E;
        match err {
            E::InvalidArgument { field, reason } => CoreArgumentError::new_err((field, reason)),
            E::Corrupt(reason) => CorruptDataError::new_err((reason,)),
            E::TooLarge { field, reason } => InputTooLargeError::new_err((field, reason)),
        }
    }
}

/// `CoreArgumentError` for a Python-side argument problem (shape, dtype, sign).
pub(super) fn invalid_arg(field: &str, reason: impl std::fmt::Display) -> PyErr {
    crate::error::CoreError::InvalidArgument {
        field: field.to_string(),
        reason: reason.to_string(),
    }
    .into()
}
