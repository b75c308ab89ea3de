//! All pyo3 glue of `pml_server._core`, and nothing else: argument conversion, GIL release
//! around every heavy call, and the single mapping from `CoreError` to Python exceptions.
//! The Python-visible API is documented by hand in `pml_server/_core.pyi`.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::hashing;

create_exception!(
    _core,
    CoreError,
    PyException,
    "Base of every error raised by pml's Rust core."
);
create_exception!(
    _core,
    InvalidArgumentError,
    CoreError,
    "An argument the core cannot use; the message names it."
);
create_exception!(
    _core,
    CorruptDataError,
    CoreError,
    "Serialized bytes that are truncated, corrupted or of an unknown version."
);
create_exception!(
    _core,
    InputTooLargeError,
    CoreError,
    "An input larger or deeper than the core accepts."
);

/// The one conversion from the core's error type to Python exceptions.
fn to_py_err(err: crate::error::CoreError) -> PyErr {
    let message = err.to_string();
    match err {
        crate::error::CoreError::InvalidArgument { .. } => InvalidArgumentError::new_err(message),
        crate::error::CoreError::Corrupt(_) => CorruptDataError::new_err(message),
        crate::error::CoreError::TooLarge(_) => InputTooLargeError::new_err(message),
    }
}

/// `sha256:<hex>` of `data`, computed without the GIL.
#[pyfunction]
fn sha256_tagged(py: Python<'_>, data: &Bound<'_, PyBytes>) -> String {
    let bytes = data.as_bytes();
    py.detach(|| hashing::sha256_tagged(bytes))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("CoreError", py.get_type::<CoreError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("CorruptDataError", py.get_type::<CorruptDataError>())?;
    m.add("InputTooLargeError", py.get_type::<InputTooLargeError>())?;
    m.add_function(wrap_pyfunction!(sha256_tagged, m)?)?;
    let _ = to_py_err; // used by the normalizer and index bindings
    Ok(())
}
