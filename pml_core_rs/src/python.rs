//! All pyo3 glue of `pml_server._core`, and nothing else: argument conversion, GIL release
//! around every heavy call, and the single mapping from `CoreError` to Python exceptions.
//! The Python-visible API is documented by hand in `pml_server/_core.pyi`.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::types::PyString;

use crate::hashing;
use crate::normalize;

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

/// One placeholder of a normalized template (see `normalize::Param`).
#[pyclass(name = "Param", module = "pml_server._core", frozen, get_all, eq)]
#[derive(Clone, PartialEq)]
struct PyParam {
    name: String,
    json_type: String,
    value_json: String,
    start: usize,
    end: usize,
    secret: bool,
}

#[pymethods]
impl PyParam {
    fn __repr__(&self) -> String {
        format!(
            "Param(name={:?}, json_type={:?}, value_json={:?}, start={}, end={}, secret={})",
            self.name,
            self.json_type,
            if self.secret {
                "[REDACTED]"
            } else {
                &self.value_json
            },
            self.start,
            self.end,
            if self.secret { "True" } else { "False" }
        )
    }
}

/// The result of `normalize` (see `normalize::Normalized`).
#[pyclass(name = "Normalized", module = "pml_server._core", frozen, get_all, eq)]
#[derive(Clone, PartialEq)]
struct PyNormalized {
    language: String,
    template: String,
    code_hash: String,
    params: Vec<PyParam>,
    tool_calls: Vec<String>,
    parse_ok: bool,
    fallback_reason: String,
    schema_json: String,
}

#[pymethods]
impl PyNormalized {
    fn __repr__(&self) -> String {
        format!(
            "Normalized(language={:?}, code_hash={:?}, params={}, tool_calls={:?}, parse_ok={})",
            self.language,
            self.code_hash,
            self.params.len(),
            self.tool_calls,
            if self.parse_ok { "True" } else { "False" }
        )
    }
}

impl From<normalize::Normalized> for PyNormalized {
    fn from(n: normalize::Normalized) -> Self {
        let params = n
            .params
            .into_iter()
            .map(|p| PyParam {
                name: p.name,
                json_type: p.json_type.as_str().to_owned(),
                value_json: p.value_json,
                start: p.start,
                end: p.end,
                secret: p.secret,
            })
            .collect();
        PyNormalized {
            language: n.language,
            template: n.template,
            code_hash: n.code_hash,
            params,
            tool_calls: n.tool_calls,
            parse_ok: n.parse_ok,
            fallback_reason: n.fallback_reason,
            schema_json: n.schema_json,
        }
    }
}

/// The UTF-8 view of `code`; a lone surrogate cannot be parsed, so it is a named error.
fn code_as_str<'a>(code: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    code.to_str().map_err(|_| {
        InvalidArgumentError::new_err(
            "invalid argument `code`: not encodable as UTF-8 (it contains a lone surrogate)",
        )
    })
}

/// Normalize agent code: template, parameters, tool calls and the pattern hash (GIL released).
#[pyfunction]
#[pyo3(name = "normalize")]
fn normalize_code(
    py: Python<'_>,
    code: &Bound<'_, PyString>,
    language: &str,
) -> PyResult<PyNormalized> {
    let code = code_as_str(code)?;
    let result = py.detach(|| normalize::normalize(code, language));
    result.map(PyNormalized::from).map_err(to_py_err)
}

/// Parse only, with the parser `normalize` uses (benchmark baseline; GIL released).
#[pyfunction]
fn parse_only(py: Python<'_>, code: &Bound<'_, PyString>, language: &str) -> PyResult<bool> {
    let code = code_as_str(code)?;
    py.detach(|| normalize::parse_only(code, language))
        .map_err(to_py_err)
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
    m.add("NORMALIZER_VERSION", normalize::NORMALIZER_VERSION)?;
    m.add("NORMALIZE_MAX_INPUT_BYTES", normalize::MAX_INPUT_BYTES)?;
    m.add_class::<PyParam>()?;
    m.add_class::<PyNormalized>()?;
    m.add_function(wrap_pyfunction!(normalize_code, m)?)?;
    m.add_function(wrap_pyfunction!(parse_only, m)?)?;
    Ok(())
}
