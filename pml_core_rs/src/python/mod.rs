//! All pyo3 glue of `pml_server._core`, and nothing else: argument conversion, GIL release
//! around every heavy call, and the single mapping from `CoreError` to Python exceptions.
//! The Python-visible API is documented by hand in `pml_server/_core.pyi`.

use pyo3::import_exception;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3::types::PyString;

use crate::hashing;
use crate::normalize;

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use numpy::{AllowTypeChange, IntoPyArray, PyArray1, PyArrayLike1, PyArrayLike2};
use pyo3::types::PyList;
use rustc_hash::FxHashSet;

use crate::index;
use crate::lexical;
use crate::ranking;

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

/// `sha256:<hex>` of `data`, computed without the GIL.
#[pyfunction]
fn sha256_tagged(py: Python<'_>, data: &Bound<'_, PyBytes>) -> String {
    let bytes = data.as_bytes();
    py.detach(|| hashing::sha256_tagged(bytes))
}

/// `CoreArgumentError` for a Python-side argument problem (shape, dtype, sign).
fn invalid_arg(field: &str, reason: impl std::fmt::Display) -> PyErr {
    crate::error::CoreError::InvalidArgument {
        field: field.to_string(),
        reason: reason.to_string(),
    }
    .into()
}

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

type SearchResult<'py> = (Bound<'py, PyArray1<u64>>, Bound<'py, PyArray1<f32>>);

fn hits_to_arrays(py: Python<'_>, hits: Vec<index::Hit>) -> SearchResult<'_> {
    let ids: Vec<u64> = hits.iter().map(|h| h.id).collect();
    let scores: Vec<f32> = hits.iter().map(|h| h.score).collect();
    (ids.into_pyarray(py), scores.into_pyarray(py))
}

/// Rows written per exclusive lock hold in `add`: long batches let searches run in between.
const ADD_ROWS_PER_LOCK: usize = 256;
/// Most threads one `add` may insert with (a typo must not spawn thousands).
const MAX_INSERT_THREADS: usize = 64;

/// A `RwLock` whose poisoning is recovered instead of propagated: a panic cannot leave an
/// index half-written in a way that matters more than losing it would, and Python must keep
/// working. Every Python handle below holds its core state in one.
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

/// Python handle of an HNSW index: searches share a read lock and run in parallel without the
/// GIL; writes take the write lock. The GIL is released around every call that does work.
#[pyclass(name = "HnswIndex", module = "pml_server._core", frozen)]
struct PyHnswIndex {
    inner: Recovering<index::HnswIndex>,
}

#[pymethods]
impl PyHnswIndex {
    #[new]
    #[pyo3(signature = (dim, *, m = 16, ef_construction = 200, ef_search = 64))]
    fn new(dim: i64, m: i64, ef_construction: i64, ef_search: i64) -> PyResult<Self> {
        let params = index::Params {
            m: count_arg("m", m)?,
            ef_construction: count_arg("ef_construction", ef_construction)?,
            ef_search: count_arg("ef_search", ef_search)?,
        };
        let inner = index::HnswIndex::new(count_arg("dim", dim)?, params).map_err(PyErr::from)?;
        Ok(PyHnswIndex {
            inner: Recovering::new(inner),
        })
    }

    #[getter]
    fn dim(&self) -> usize {
        self.inner.read().dim()
    }

    #[getter]
    fn m(&self) -> usize {
        self.inner.read().m()
    }

    #[getter]
    fn get_ef_construction(&self) -> usize {
        self.inner.read().ef_construction()
    }

    #[setter]
    fn set_ef_construction(&self, py: Python<'_>, value: i64) -> PyResult<()> {
        let value = count_arg("ef_construction", value)?;
        py.detach(|| self.inner.write().set_ef_construction(value))
            .map_err(PyErr::from)
    }

    #[getter]
    fn get_ef_search(&self) -> usize {
        self.inner.read().ef_search()
    }

    #[setter]
    fn set_ef_search(&self, py: Python<'_>, value: i64) -> PyResult<()> {
        let value = count_arg("ef_search", value)?;
        py.detach(|| self.inner.write().set_ef_search(value))
            .map_err(PyErr::from)
    }

    /// Name of the distance kernel picked for this CPU ("avx2+fma" or "scalar").
    #[getter]
    fn kernel(&self) -> &'static str {
        self.inner.read().kernel_name()
    }

    #[pyo3(signature = (ids, vectors, threads=1))]
    fn add(
        &self,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        vectors: &Bound<'_, PyAny>,
        threads: usize,
    ) -> PyResult<()> {
        if !(1..=MAX_INSERT_THREADS).contains(&threads) {
            return Err(invalid_arg(
                "threads",
                format!("must be in 1..={MAX_INSERT_THREADS}, got {threads}"),
            ));
        }
        let ids = u64_vector("ids", ids)?;
        let (values, rows, cols) = f32_matrix("vectors", vectors)?;
        if rows != ids.len() {
            return Err(invalid_arg(
                "vectors",
                format!("has {rows} rows but ids has {} entries", ids.len()),
            ));
        }
        let dim = self.inner.read().dim();
        if cols != dim {
            return Err(invalid_arg(
                "vectors",
                format!("expected dimension {dim}, got {cols}"),
            ));
        }
        py.detach(|| {
            // Validate the whole batch before the first write, then insert in short lock holds.
            let rows = index::HnswIndex::normalize_rows(dim, "vectors", &values)?;
            self.inner.write().reserve(ids.len());
            for (id_chunk, row_chunk) in ids
                .chunks(ADD_ROWS_PER_LOCK)
                .zip(rows.chunks(ADD_ROWS_PER_LOCK * dim))
            {
                self.inner
                    .write()
                    .add_normalized_parallel(id_chunk, row_chunk, threads)?;
            }
            Ok::<(), crate::error::CoreError>(())
        })
        .map_err(PyErr::from)
    }

    fn remove(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<usize> {
        let ids = u64_vector("ids", ids)?;
        Ok(py.detach(|| self.inner.write().remove(&ids)))
    }

    fn contains(&self, id: u64) -> bool {
        self.inner.read().contains(id)
    }

    fn __contains__(&self, id: u64) -> bool {
        self.inner.read().contains(id)
    }

    #[pyo3(signature = (query, k, ef = None, allow = None))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
        k: i64,
        ef: Option<i64>,
        allow: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<SearchResult<'py>> {
        let query = f32_vector("query", query)?;
        let k = count_arg("k", k)?;
        let ef = ef.map(|e| count_arg("ef", e)).transpose()?;
        let allow = allow.map(|a| u64_vector("allow", a)).transpose()?;
        let hits = py
            .detach(|| self.inner.read().search(&query, k, ef, allow.as_deref()))
            .map_err(PyErr::from)?;
        Ok(hits_to_arrays(py, hits))
    }

    #[pyo3(signature = (queries, k, ef = None, allow = None, *, num_threads = 1))]
    fn search_batch<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: i64,
        ef: Option<i64>,
        allow: Option<&Bound<'py, PyAny>>,
        num_threads: i64,
    ) -> PyResult<Bound<'py, PyList>> {
        let (values, _, cols) = f32_matrix("queries", queries)?;
        let dim = self.inner.read().dim();
        if cols != dim {
            return Err(invalid_arg(
                "queries",
                format!("expected dimension {dim}, got {cols}"),
            ));
        }
        let k = count_arg("k", k)?;
        let ef = ef.map(|e| count_arg("ef", e)).transpose()?;
        let allow = allow.map(|a| u64_vector("allow", a)).transpose()?;
        let threads = count_arg("num_threads", num_threads)?.max(1);
        let results = py
            .detach(|| {
                self.inner
                    .read()
                    .search_batch(&values, k, ef, allow.as_deref(), threads)
            })
            .map_err(PyErr::from)?;
        let items: Vec<SearchResult<'py>> = results
            .into_iter()
            .map(|hits| hits_to_arrays(py, hits))
            .collect();
        PyList::new(py, items)
    }

    /// Rebuild the graph without removed nodes (also happens on its own when they pile up).
    fn compact(&self, py: Python<'_>) {
        py.detach(|| self.inner.write().compact());
    }

    fn memory_bytes(&self) -> usize {
        self.inner.read().memory_bytes()
    }

    fn __len__(&self) -> usize {
        self.inner.read().len()
    }

    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = py.detach(|| self.inner.read().to_bytes());
        PyBytes::new(py, &bytes)
    }

    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Self> {
        let inner = py
            .detach(|| index::HnswIndex::from_bytes(data))
            .map_err(PyErr::from)?;
        Ok(PyHnswIndex {
            inner: Recovering::new(inner),
        })
    }

    fn __repr__(&self) -> String {
        let index = self.inner.read();
        format!(
            "HnswIndex(dim={}, m={}, ef_construction={}, ef_search={}, len={})",
            index.dim(),
            index.m(),
            index.ef_construction(),
            index.ef_search(),
            index.len()
        )
    }
}

/// Python handle of the BM25 index (`lexical::LexicalIndex`): searches share a read lock and
/// run in parallel without the GIL; updates take the write lock. Callers pass term lists
/// (tokenized in Python); every call releases the GIL around the index work.
#[pyclass(name = "LexicalIndex", module = "pml_server._core", frozen)]
struct PyLexicalIndex {
    inner: Recovering<lexical::LexicalIndex>,
}

/// A list of str, or `CoreArgumentError` naming the field.
fn str_list(field: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    obj.extract()
        .map_err(|e| invalid_arg(field, format!("expected a list of str ({e})")))
}

#[pymethods]
impl PyLexicalIndex {
    #[new]
    #[pyo3(signature = (k1 = 1.2, b = 0.75))]
    fn new(k1: f64, b: f64) -> PyResult<Self> {
        let inner = lexical::LexicalIndex::new(k1, b).map_err(PyErr::from)?;
        Ok(PyLexicalIndex {
            inner: Recovering::new(inner),
        })
    }

    #[getter]
    fn k1(&self) -> f64 {
        self.inner.read().k1()
    }

    #[getter]
    fn b(&self) -> f64 {
        self.inner.read().b()
    }

    fn add(&self, py: Python<'_>, doc_id: &str, terms: &Bound<'_, PyAny>) -> PyResult<()> {
        let terms = str_list("terms", terms)?;
        py.detach(|| self.inner.write().add(doc_id, &terms))
            .map_err(PyErr::from)
    }

    fn add_terms(&self, py: Python<'_>, doc_id: &str, terms: &Bound<'_, PyAny>) -> PyResult<()> {
        let terms = str_list("terms", terms)?;
        py.detach(|| self.inner.write().add_terms(doc_id, &terms))
            .map_err(PyErr::from)
    }

    fn remove_terms(&self, py: Python<'_>, doc_id: &str, terms: &Bound<'_, PyAny>) -> PyResult<()> {
        let terms = str_list("terms", terms)?;
        py.detach(|| self.inner.write().remove_terms(doc_id, &terms));
        Ok(())
    }

    fn remove(&self, py: Python<'_>, doc_id: &str) -> bool {
        py.detach(|| self.inner.write().remove(doc_id))
    }

    /// Number the documents in `order` first, in that order (`lexical::renumber`).
    fn renumber(&self, py: Python<'_>, order: &Bound<'_, PyAny>) -> PyResult<()> {
        let order = str_list("order", order)?;
        py.detach(|| self.inner.write().renumber(&order));
        Ok(())
    }

    /// `exhaustive` scans every posting (no pruning; same results): the benchmarks' baseline.
    #[pyo3(signature = (terms, limit, *, exhaustive = false))]
    fn search(
        &self,
        py: Python<'_>,
        terms: &Bound<'_, PyAny>,
        limit: i64,
        exhaustive: bool,
    ) -> PyResult<Vec<(String, f64)>> {
        let terms = str_list("terms", terms)?;
        let limit = count_arg("limit", limit)?;
        Ok(py.detach(|| {
            let index = self.inner.read();
            if exhaustive {
                index.search_exhaustive(&terms, limit)
            } else {
                index.search(&terms, limit)
            }
        }))
    }

    /// `search` among the listed documents alone (scanning every posting of the terms).
    fn search_among(
        &self,
        py: Python<'_>,
        terms: &Bound<'_, PyAny>,
        limit: i64,
        allowed: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<(String, f64)>> {
        let terms = str_list("terms", terms)?;
        let limit = count_arg("limit", limit)?;
        let allowed = str_list("allowed", allowed)?;
        Ok(py.detach(|| {
            let allowed: std::collections::HashSet<&str> =
                allowed.iter().map(String::as_str).collect();
            self.inner
                .read()
                .search_among(&terms, limit, |doc| allowed.contains(doc))
        }))
    }

    fn __len__(&self) -> usize {
        self.inner.read().len()
    }

    fn __contains__(&self, doc_id: &Bound<'_, PyAny>) -> bool {
        doc_id
            .extract::<&str>()
            .is_ok_and(|id| self.inner.read().contains(id))
    }

    fn __repr__(&self) -> String {
        let index = self.inner.read();
        format!(
            "LexicalIndex(k1={}, b={}, len={})",
            index.k1(),
            index.b(),
            index.len()
        )
    }
}

/// The formula's parameters (`RankingConfig`), converted once per server configuration.
#[pyclass(name = "RankParams", module = "pml_server._core", frozen)]
struct PyRankParams {
    inner: ranking::Params,
}

#[pymethods]
impl PyRankParams {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (*, semantic_weight, lexical_weight, lexical_half_score, prior_successes,
        prior_failures, expected_success_rate, reliability_prior_strength, usage_weight,
        usage_saturation, recency_full_days,
        recency_half_life_days, recency_floor, superseded_penalty, step_weight = 0.3))]
    fn new(
        semantic_weight: f64,
        lexical_weight: f64,
        lexical_half_score: f64,
        prior_successes: f64,
        prior_failures: f64,
        expected_success_rate: f64,
        reliability_prior_strength: f64,
        usage_weight: f64,
        usage_saturation: f64,
        recency_full_days: f64,
        recency_half_life_days: f64,
        recency_floor: f64,
        superseded_penalty: f64,
        step_weight: f64,
    ) -> PyResult<Self> {
        let inner = ranking::Params {
            semantic_weight,
            lexical_weight,
            lexical_half_score,
            prior_successes,
            prior_failures,
            expected_success_rate,
            reliability_prior_strength,
            usage_weight,
            usage_saturation,
            recency_full_days,
            recency_half_life_days,
            recency_floor,
            superseded_penalty,
            step_weight,
        };
        let values = [
            semantic_weight,
            lexical_weight,
            lexical_half_score,
            prior_successes,
            prior_failures,
            expected_success_rate,
            reliability_prior_strength,
            usage_weight,
            usage_saturation,
            recency_full_days,
            recency_half_life_days,
            recency_floor,
            superseded_penalty,
            step_weight,
        ];
        if values.iter().any(|v| !v.is_finite()) {
            return Err(invalid_arg("params", "every parameter must be finite"));
        }
        if !(expected_success_rate > 0.0 && expected_success_rate <= 1.0) {
            return Err(invalid_arg(
                "params",
                "expected_success_rate must be in (0, 1]",
            ));
        }
        if !(0.0..=1.0).contains(&step_weight) {
            return Err(invalid_arg("step_weight", "must be in [0, 1]"));
        }
        Ok(PyRankParams { inner })
    }
}

/// Python handle of one tenant's ranking table (`ranking::RankTable`): updates take the write
/// lock, `rank_query` reads it without the GIL.
#[pyclass(name = "RankTable", module = "pml_server._core", frozen)]
struct PyRankTable {
    inner: Recovering<ranking::RankTable>,
}

#[pymethods]
impl PyRankTable {
    #[new]
    fn new() -> Self {
        PyRankTable {
            inner: Recovering::new(ranking::RankTable::new()),
        }
    }

    #[pyo3(signature = (pattern_id, capability_id, tools, flagged, superseded, tool_words = None))]
    fn set_pattern(
        &self,
        pattern_id: &str,
        capability_id: &str,
        tools: &Bound<'_, PyAny>,
        flagged: bool,
        superseded: bool,
        tool_words: Option<Vec<Vec<String>>>,
    ) -> PyResult<()> {
        let tools = str_list("tools", tools)?;
        let tool_words = tool_words.unwrap_or_default();
        if !tool_words.is_empty() && tool_words.len() != tools.len() {
            return Err(invalid_arg(
                "tool_words",
                "must hold one word list per tool",
            ));
        }
        self.inner.write().set_pattern(
            pattern_id,
            capability_id,
            &tools,
            &tool_words,
            flagged,
            superseded,
        );
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn set_counters(
        &self,
        pattern_id: &str,
        successes: i64,
        failures: i64,
        usage: i64,
        last_used_ms: i64,
        tags: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let tags = str_list("tags", tags)?;
        self.inner.write().set_counters(
            pattern_id,
            successes,
            failures,
            usage,
            last_used_ms,
            &tags,
        );
        Ok(())
    }

    /// The step factor (docs/ranking.md, Steps) of each of `pattern_ids` (1.0 for a pattern
    /// without a rankable row) for a request whose `STEP_NEIGHBOURS` nearest intents are
    /// `hit_ids` with `hit_scores` and whose analysed words are `words`: the factors the
    /// core's ranking applies, for the Python ranking path.
    fn step_factors(
        &self,
        py: Python<'_>,
        hit_ids: Vec<u64>,
        hit_scores: Vec<f32>,
        pattern_ids: Vec<String>,
        words: Vec<String>,
        params: &PyRankParams,
    ) -> PyResult<Vec<f64>> {
        if hit_ids.len() != hit_scores.len() {
            return Err(invalid_arg("hit_scores", "must hold one score per hit id"));
        }
        let words: FxHashSet<String> = words.into_iter().collect();
        Ok(py.detach(|| {
            let table = self.inner.read();
            let hits: Vec<index::Hit> = hit_ids
                .iter()
                .zip(&hit_scores)
                .map(|(&id, &score)| index::Hit { id, score })
                .collect();
            let evidence = ranking::step_evidence(&table, &hits, &words, &params.inner);
            pattern_ids
                .iter()
                .map(|p| {
                    table
                        .row_of_pattern(p)
                        .map_or(1.0, |s| evidence.factor(&table.row(s).tools))
                })
                .collect()
        }))
    }

    fn remove_pattern(&self, pattern_id: &str) -> bool {
        self.inner.write().remove_pattern(pattern_id)
    }

    fn link_intent(&self, intent_id: u64, pattern_id: &str) {
        self.inner.write().link_intent(intent_id, pattern_id);
    }

    fn unlink_intents(&self, py: Python<'_>, intent_ids: Vec<u64>) {
        py.detach(|| self.inner.write().unlink_intents(&intent_ids));
    }

    /// The pattern an intent stands for, if linked.
    fn pattern_of(&self, intent_id: u64) -> Option<String> {
        self.inner
            .read()
            .pattern_of_intent(intent_id)
            .map(str::to_owned)
    }

    /// The intents linked to a pattern, in link order.
    fn intents_of(&self, pattern_id: &str) -> Vec<u64> {
        self.inner.read().intents_of(pattern_id).to_vec()
    }

    fn memory_bytes(&self) -> usize {
        self.inner.read().memory_bytes()
    }

    /// The patterns the context filters permit, as (pattern ids, their intents), or None
    /// when they permit every rankable pattern (`ranking::permitted`).
    #[pyo3(signature = (params, *, min_success, include_flagged, available_tools, tags))]
    fn permitted(
        &self,
        py: Python<'_>,
        params: &PyRankParams,
        min_success: f64,
        include_flagged: bool,
        available_tools: Option<Vec<String>>,
        tags: Vec<String>,
    ) -> Option<(Vec<String>, Vec<u64>)> {
        let filters = ranking::Filters {
            min_match: 0.0,
            min_success,
            include_flagged,
            available_tools,
            tags,
            ..ranking::Filters::default()
        };
        py.detach(|| {
            let table = self.inner.read();
            ranking::permitted(&table, &filters, &params.inner).map(|p| {
                let ids = p.pattern_ids(&table).into_iter().map(str::to_owned);
                (ids.collect(), p.intents)
            })
        })
    }

    fn __len__(&self) -> usize {
        self.inner.read().len()
    }
}

type RankedTuple = (
    String,
    String,
    (f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64),
    Vec<u64>,
);

/// One Suggest query ranked in the core (`ranking::query`), the GIL released throughout:
/// the top `k` as (pattern id, capability id, (match, semantic, lexical, success, usage,
/// recency, superseded penalty, total, reliability, steps, transition), intent ids). `words`:
/// the request's analysed words (`ranking.plans.text_words`), for the step fit. `transitions`:
/// the session signal's factor by capability id (docs/ranking.md, Sessions).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (table, ann, lexical, query, terms, limit, k, params, now_ms, *, min_match,
    min_success, include_flagged, available_tools, tags, own_min_success = false,
    words = Vec::new(), transitions = None))]
fn rank_query(
    py: Python<'_>,
    table: &PyRankTable,
    ann: &PyHnswIndex,
    lexical: &PyLexicalIndex,
    query: &Bound<'_, PyAny>,
    terms: &Bound<'_, PyAny>,
    limit: i64,
    k: i64,
    params: &PyRankParams,
    now_ms: i64,
    min_match: f64,
    min_success: f64,
    include_flagged: bool,
    available_tools: Option<Vec<String>>,
    tags: Vec<String>,
    own_min_success: bool,
    words: Vec<String>,
    transitions: Option<std::collections::HashMap<String, f64>>,
) -> PyResult<Vec<RankedTuple>> {
    let words: FxHashSet<String> = words.into_iter().collect();
    let query = f32_vector("query", query)?;
    let terms = str_list("terms", terms)?;
    let limit = count_arg("limit", limit)?;
    let k = count_arg("k", k)?;
    let filters = ranking::Filters {
        min_match,
        min_success,
        include_flagged,
        available_tools,
        tags,
        transitions: transitions.unwrap_or_default().into_iter().collect(),
    };
    let ranked = py
        .detach(|| {
            // The table is read first and held throughout, each index under its own lock
            // after it (writers hold one lock at a time, so no cycle). The context filters'
            // allow-list comes first (docs/ranking.md, Context filters).
            let table = table.inner.read();
            let permitted = if ranking::restricts(&filters, own_min_success) {
                ranking::permitted(&table, &filters, &params.inner)
            } else {
                None
            };
            let found = ranking::retrieve_for(
                &table,
                &ann.inner.read(),
                &lexical.inner.read(),
                &query,
                &terms,
                limit,
                permitted.as_ref(),
            )?;
            let ann = ann.inner.read();
            ranking::rank_retrieved(
                &table,
                &ann,
                &query,
                &found,
                k,
                &filters,
                &params.inner,
                now_ms,
                &words,
            )
        })
        .map_err(PyErr::from)?;
    Ok(ranked
        .into_iter()
        .map(|r| {
            let p = r.parts;
            let parts = (
                p.matched,
                p.semantic,
                p.lexical,
                p.success,
                p.usage,
                p.recency,
                p.penalty,
                p.total,
                p.reliability,
                p.steps,
                p.transition,
            );
            (r.pattern_id, r.capability_id, parts, r.intent_ids)
        })
        .collect())
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

/// One argument of a step (see `normalize::StepArgument`); `sources` are (step, path) pairs.
#[pyclass(
    name = "StepArgument",
    module = "pml_server._core",
    frozen,
    get_all,
    eq
)]
#[derive(Clone, PartialEq)]
struct PyStepArgument {
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
struct PyStep {
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
struct PyNormalized {
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
fn normalize_code(
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
fn prepare_captures(py: Python<'_>, items: &Bound<'_, PyList>) -> PyResult<Vec<Py<PyAny>>> {
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

/// Parse only, with the parser `normalize` uses (benchmark baseline; GIL released).
#[pyfunction]
fn parse_only(py: Python<'_>, code: &Bound<'_, PyString>, language: &str) -> PyResult<bool> {
    let code = code_as_str(code)?;
    py.detach(|| normalize::parse_only(code, language))
        .map_err(PyErr::from)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("STEP_NEIGHBOURS", ranking::steps::STEP_NEIGHBOURS)?;
    m.add("CoreError", py.get_type::<CoreError>())?;
    m.add("CoreArgumentError", py.get_type::<CoreArgumentError>())?;
    m.add("CorruptDataError", py.get_type::<CorruptDataError>())?;
    m.add("InputTooLargeError", py.get_type::<InputTooLargeError>())?;
    m.add_function(wrap_pyfunction!(sha256_tagged, m)?)?;
    m.add_class::<PyHnswIndex>()?;
    m.add_class::<PyLexicalIndex>()?;
    m.add_class::<PyRankParams>()?;
    m.add_class::<PyRankTable>()?;
    m.add_function(wrap_pyfunction!(rank_query, m)?)?;
    m.add("HNSW_SCORE_ERROR", crate::index::half::MAX_SCORE_ERROR)?;
    m.add("NORMALIZER_VERSION", normalize::NORMALIZER_VERSION)?;
    m.add("NORMALIZE_MAX_INPUT_BYTES", normalize::MAX_INPUT_BYTES)?;
    m.add_class::<PyParam>()?;
    m.add_class::<PyNormalized>()?;
    m.add_class::<PyStep>()?;
    m.add_class::<PyStepArgument>()?;
    m.add_function(wrap_pyfunction!(normalize_code, m)?)?;
    m.add_function(wrap_pyfunction!(parse_only, m)?)?;
    m.add_function(wrap_pyfunction!(prepare_captures, m)?)?;
    m.add("MIN_SECRET_CHARS", normalize::MIN_SECRET_CHARS)?;
    m.add("NORMALIZE_MAX_PARAMS", normalize::MAX_PARAMS)?;
    Ok(())
}
