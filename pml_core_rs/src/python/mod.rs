//! All pyo3 glue of `pml_server._core`, and nothing else: argument conversion, GIL release
//! around every heavy call, and the single mapping from `CoreError` to Python exceptions.
//! The Python-visible API is documented by hand in `pml_server/_core.pyi`.
//!
//! One module per domain of the core (as huggingface/tokenizers lays out its bindings):
//! `errors` (the exception classes and the one `From<CoreError> for PyErr`), `normalize`
//! (normalization and hashing), `index` (HNSW), `lexical` (BM25) and `ranking`. This file
//! holds the shared argument converters, the `Recovering` lock and the module registration.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use numpy::{AllowTypeChange, PyArrayLike1, PyArrayLike2};
use pyo3::prelude::*;

mod errors;
mod index;
mod lexical;
mod normalize;
mod ranking;

use errors::{invalid_arg, CoreArgumentError, CoreError, CorruptDataError, InputTooLargeError};

/// A non-negative integer argument, or `CoreArgumentError` naming it.
fn count_arg(field: &str, value: i64) -> PyResult<usize> {
    usize::try_from(value).map_err(|_| invalid_arg(field, format!("must be >= 0, got {value}")))
}

/// Copy any array-like of numbers into `(row-major f32 values, rows, columns)`.
fn f32_matrix(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<(Vec<f32>, usize, usize)> {
    let array: PyArrayLike2<'_, f32, AllowTypeChange> = obj
        .extract()
        .map_err(|e| invalid_arg(field, format!("expected a 2-D float32 array ({e})")))?;
    let view = array.as_array();
    let (rows, cols) = view.dim();
    Ok((view.iter().copied().collect(), rows, cols))
}

fn f32_vector(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<f32>> {
    let array: PyArrayLike1<'_, f32, AllowTypeChange> = obj
        .extract()
        .map_err(|e| invalid_arg(field, format!("expected a 1-D float32 array ({e})")))?;
    Ok(array.as_array().iter().copied().collect())
}

fn u64_vector(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    let array: PyArrayLike1<'_, u64, AllowTypeChange> = obj
        .extract()
        .map_err(|e| invalid_arg(field, format!("expected a 1-D uint64 array ({e})")))?;
    Ok(array.as_array().iter().copied().collect())
}

/// A `RwLock` whose poisoning is recovered instead of propagated: a panic cannot leave an
/// index half-written in a way that matters more than losing it would, and Python must keep
/// working. Every Python handle (`index`, `lexical`, `ranking`) holds its core state in one.
struct Recovering<T>(RwLock<T>);

impl<T> Recovering<T> {
    fn new(value: T) -> Self {
        Recovering(RwLock::new(value))
    }
    fn read(&self) -> RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }
    fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// A list of str, or `CoreArgumentError` naming the field.
fn str_list(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    obj.extract()
        .map_err(|e| invalid_arg(field, format!("expected a list of str ({e})")))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("STEP_NEIGHBOURS", crate::ranking::steps::STEP_NEIGHBOURS)?;
    m.add(
        "MAX_REQUEST_PARTS",
        crate::ranking::steps::MAX_REQUEST_PARTS,
    )?;
    m.add(
        "COMPANION_PROFILE_BOOST",
        crate::ranking::space::COMPANION_PROFILE_BOOST,
    )?;
    m.add("CoreError", py.get_type::<CoreError>())?;
    m.add("CoreArgumentError", py.get_type::<CoreArgumentError>())?;
    m.add("CorruptDataError", py.get_type::<CorruptDataError>())?;
    m.add("InputTooLargeError", py.get_type::<InputTooLargeError>())?;
    m.add_function(wrap_pyfunction!(normalize::sha256_tagged, m)?)?;
    m.add_class::<index::PyHnswIndex>()?;
    m.add_class::<lexical::PyLexicalIndex>()?;
    m.add_class::<ranking::PyRankParams>()?;
    m.add_class::<ranking::PyRankTable>()?;
    m.add_function(wrap_pyfunction!(ranking::rank_query, m)?)?;
    m.add_function(wrap_pyfunction!(ranking::rank_next, m)?)?;
    m.add_function(wrap_pyfunction!(ranking::pattern_semantic, m)?)?;
    m.add_function(wrap_pyfunction!(ranking::recency_factor, m)?)?;
    m.add_function(wrap_pyfunction!(ranking::same_tool, m)?)?;
    m.add_function(wrap_pyfunction!(ranking::beta_mean, m)?)?;
    m.add("HNSW_SCORE_ERROR", crate::index::half::MAX_SCORE_ERROR)?;
    m.add("NORMALIZER_VERSION", crate::normalize::NORMALIZER_VERSION)?;
    m.add(
        "NORMALIZE_MAX_INPUT_BYTES",
        crate::normalize::MAX_INPUT_BYTES,
    )?;
    m.add_class::<normalize::PyParam>()?;
    m.add_class::<normalize::PyNormalized>()?;
    m.add_class::<normalize::PyStep>()?;
    m.add_class::<normalize::PyStepArgument>()?;
    m.add_function(wrap_pyfunction!(normalize::normalize_code, m)?)?;
    m.add_function(wrap_pyfunction!(normalize::parse_only, m)?)?;
    m.add_function(wrap_pyfunction!(normalize::prepare_captures, m)?)?;
    m.add_function(wrap_pyfunction!(normalize::redact_name, m)?)?;
    m.add("MIN_SECRET_CHARS", crate::normalize::MIN_SECRET_CHARS)?;
    m.add("NORMALIZE_MAX_PARAMS", crate::normalize::MAX_PARAMS)?;
    Ok(())
}
