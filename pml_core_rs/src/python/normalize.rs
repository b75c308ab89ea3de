//! The pyo3 glue of normalization and hashing: `normalize`, `prepare_captures`, `parse_only`,
//! `redact_name`, `sha256_tagged` and the classes of a normalized snippet
//! (`Normalized`, `Param`, `Step`, `StepArgument`).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};

use super::errors::{invalid_arg, CoreError};
use crate::{hashing, normalize};

/// `sha256:<hex>` of `data`, computed without the GIL.
#[pyfunction]
pub(super) fn sha256_tagged(py: Python<'_>, data: &Bound<'_, PyBytes>) -> String {
    let bytes = data.as_bytes();
    py.detach(|| hashing::sha256_tagged(bytes))
}

/// One placeholder of a normalized template (see `normalize::Param`).
#[pyclass(name = "Param", module = "pml_server._core", frozen, get_all, eq)]
#[derive(Clone, PartialEq)]
pub(super) struct PyParam {
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

/// One argument of a step (see `normalize::StepArgument`); `sources` are (step, path) pairs.
#[pyclass(
    name = "StepArgument",
    module = "pml_server._core",
    frozen,
    get_all,
    eq
)]
#[derive(Clone, PartialEq)]
pub(super) struct PyStepArgument {
    name: String,
    kind: String,
    parameters: Vec<String>,
    sources: Vec<(usize, String)>,
}

#[pymethods]
impl PyStepArgument {
    fn __repr__(&self) -> String {
        format!(
            "StepArgument(name={:?}, kind={:?}, parameters={:?}, sources={:?})",
            self.name, self.kind, self.parameters, self.sources
        )
    }
}

/// One tool call of a snippet with its arguments and data flow (see `normalize::Step`).
#[pyclass(name = "Step", module = "pml_server._core", frozen, get_all, eq)]
#[derive(Clone, PartialEq)]
pub(super) struct PyStep {
    tool: String,
    arguments: Vec<PyStepArgument>,
    depends_on: Vec<usize>,
    flow_known: bool,
}

#[pymethods]
impl PyStep {
    fn __repr__(&self) -> String {
        format!(
            "Step(tool={:?}, arguments={}, depends_on={:?}, flow_known={})",
            self.tool,
            self.arguments.len(),
            self.depends_on,
            if self.flow_known { "True" } else { "False" }
        )
    }
}

impl From<normalize::Step> for PyStep {
    fn from(step: normalize::Step) -> Self {
        PyStep {
            tool: step.tool,
            arguments: step
                .arguments
                .into_iter()
                .map(|a| PyStepArgument {
                    name: a.name,
                    kind: a.kind.as_str().to_owned(),
                    parameters: a.parameters,
                    sources: a.sources.into_iter().map(|s| (s.step, s.path)).collect(),
                })
                .collect(),
            depends_on: step.depends_on,
            flow_known: step.flow_known,
        }
    }
}

/// The result of `normalize` (see `normalize::Normalized`).
#[pyclass(name = "Normalized", module = "pml_server._core", frozen, get_all, eq)]
#[derive(Clone, PartialEq)]
pub(super) struct PyNormalized {
    language: String,
    template: String,
    code_hash: String,
    params: Vec<PyParam>,
    tool_calls: Vec<String>,
    parse_ok: bool,
    fallback_reason: String,
    schema_json: String,
    redacted_code: String,
    steps: Vec<PyStep>,
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
            redacted_code: n.redacted_code,
            steps: n.steps.into_iter().map(PyStep::from).collect(),
        }
    }
}

/// The UTF-8 view of `code`; a lone surrogate cannot be parsed, so it is a named error.
fn code_as_str<'a>(code: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    code.to_str().map_err(|_| {
        invalid_arg(
            "code",
            "not encodable as UTF-8 (it contains a lone surrogate)",
        )
    })
}

/// Normalize agent code: template, parameters, tool calls and the pattern hash (GIL released).
#[pyfunction]
#[pyo3(name = "normalize", signature = (code, language, *, with_steps = true))]
pub(super) fn normalize_code(
    py: Python<'_>,
    code: &Bound<'_, PyString>,
    language: &str,
    with_steps: bool,
) -> PyResult<PyNormalized> {
    let code = code_as_str(code)?;
    let result = py.detach(|| normalize::normalize_with(code, language, with_steps));
    result.map(PyNormalized::from).map_err(PyErr::from)
}

/// One record of `prepare_captures`, read under the GIL: its code (a lone surrogate refuses
/// the record, as `normalize` does), language and free texts.
fn capture_input(item: &Bound<'_, PyAny>) -> PyResult<normalize::CaptureInput> {
    let (code, language, texts): (Bound<'_, PyString>, String, Vec<String>) = item.extract()?;
    Ok(normalize::CaptureInput {
        code: code_as_str(&code)?.to_owned(),
        language,
        texts,
    })
}

/// `normalize` of each record's code and the redaction of its free texts (rule 7b), for a
/// whole batch with the GIL released once: per item `(code, language, texts)`, either
/// `(Normalized, redacted texts)` or the exception that refuses that item alone.
#[pyfunction]
pub(super) fn prepare_captures(
    py: Python<'_>,
    items: &Bound<'_, PyList>,
) -> PyResult<Vec<Py<PyAny>>> {
    let mut inputs = Vec::with_capacity(items.len());
    let mut refused: Vec<Option<PyErr>> = Vec::with_capacity(items.len());
    for item in items.iter() {
        match capture_input(&item) {
            Ok(input) => {
                inputs.push(input);
                refused.push(None);
            }
            Err(err) => refused.push(Some(err)),
        }
    }
    let mut prepared = py.detach(|| normalize::prepare_many(&inputs)).into_iter();
    let mut out = Vec::with_capacity(refused.len());
    for early in refused {
        let outcome = match early {
            Some(err) => Err(err),
            None => match prepared.next() {
                Some(result) => result.map_err(PyErr::from),
                None => Err(CoreError::new_err("prepare_captures lost a result")),
            },
        };
        out.push(match outcome {
            Ok(p) => (PyNormalized::from(p.normalized), p.texts)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            Err(err) => err.into_value(py).into_any(),
        });
    }
    Ok(out)
}

/// `name` (a tool's, a tag, an identifier a caller gives) with its credentials redacted by
/// the rules for names (`normalize::redact_name`; GIL released): the same object when there
/// are none. A name with a lone surrogate (not UTF-8) is read with its
/// surrogates replaced by U+FFFD, and given back so only when it had a credential to lose.
#[pyfunction]
pub(super) fn redact_name<'py>(
    py: Python<'py>,
    name: &Bound<'py, PyString>,
) -> Bound<'py, PyString> {
    let lossy;
    let text = match name.to_str() {
        Ok(text) => text,
        Err(_) => {
            lossy = name.to_string_lossy();
            &*lossy
        }
    };
    match py.detach(|| normalize::redact_name(text)) {
        std::borrow::Cow::Borrowed(_) => name.clone(),
        std::borrow::Cow::Owned(redacted) => PyString::new(py, &redacted),
    }
}

/// Parse only, with the parser `normalize` uses (benchmark baseline; GIL released).
#[pyfunction]
pub(super) fn parse_only(
    py: Python<'_>,
    code: &Bound<'_, PyString>,
    language: &str,
) -> PyResult<bool> {
    let code = code_as_str(code)?;
    py.detach(|| normalize::parse_only(code, language))
        .map_err(PyErr::from)
}
