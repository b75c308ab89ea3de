//! The pyo3 glue of the HNSW index: the `HnswIndex` class.

use numpy::{IntoPyArray, PyArray1};
use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use super::errors::invalid_arg;
use super::{count_arg, f32_matrix, f32_vector, u64_vector, Recovering};
use crate::index;

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

/// Python handle of an HNSW index: searches share a read lock and run in parallel without the
/// GIL; writes take the write lock. The GIL is released around every call that does work.
///
/// A compaction (docs/ranking.md, Retention) holds no lock while it works: it copies the index
/// under the read lock, compacts the copy, then, under the write lock, replays on it the ids
/// written meanwhile (`journal`) and puts it in place. A search or write waits for a copy or
/// a swap, never for the compaction itself.
#[pyclass(name = "HnswIndex", module = "pml_server._core", frozen)]
pub(super) struct PyHnswIndex {
    pub(super) inner: Recovering<index::HnswIndex>,
    /// While a compaction works on a copy: the ids written since the copy, in order.
    journal: Mutex<Option<Vec<u64>>>,
}

/// Ends a compaction's journal however the compaction ends (a panic included).
struct JournalOpen<'a>(&'a Mutex<Option<Vec<u64>>>);

impl Drop for JournalOpen<'_> {
    fn drop(&mut self) {
        *lock(self.0) = None;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl PyHnswIndex {
    fn of(inner: index::HnswIndex) -> Self {
        PyHnswIndex {
            inner: Recovering::new(inner),
            journal: Mutex::new(None),
        }
    }

    /// Note `ids` as written, while the caller holds the write lock.
    fn written(&self, ids: &[u64]) {
        if let Some(journal) = lock(&self.journal).as_mut() {
            journal.extend_from_slice(ids);
        }
    }

    /// Compact a copy and put it in place (see the type); `only_if_worn`: only when
    /// tombstones make up enough of the graph. Returns whether it compacted. One compaction
    /// at a time: a call while another runs returns false.
    fn compact_aside(&self, only_if_worn: bool) -> bool {
        let (mut copy, _open) = {
            let live = self.inner.read();
            let mut journal = lock(&self.journal);
            let wanted = if only_if_worn {
                live.is_worn()
            } else {
                live.tombstones() > 0
            };
            if journal.is_some() || !wanted {
                return false;
            }
            *journal = Some(Vec::new());
            (live.clone(), JournalOpen(&self.journal))
        };
        copy.compact();
        let mut live = self.inner.write();
        let touched = lock(&self.journal).take().unwrap_or_default();
        copy.catch_up(&live, &touched);
        *live = copy;
        true
    }
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
        Ok(PyHnswIndex::of(inner))
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

    /// Whether every search without `allow` scans every live vector exactly (a search
    /// setting, not kept in snapshots).
    #[getter]
    fn get_exact(&self) -> bool {
        self.inner.read().exact()
    }

    #[setter]
    fn set_exact(&self, py: Python<'_>, value: bool) {
        py.detach(|| self.inner.write().set_exact(value));
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
                let mut live = self.inner.write();
                self.written(id_chunk);
                live.add_normalized_parallel(id_chunk, row_chunk, threads)?;
            }
            Ok::<(), crate::error::CoreError>(())
        })
        .map_err(PyErr::from)
    }

    /// Remove ids; returns how many were present. With `compact`, a graph then worn by its
    /// tombstones is compacted aside (`compact_aside`) before this returns; without, the
    /// caller compacts later (`compact_if_worn`).
    #[pyo3(signature = (ids, *, compact = true))]
    fn remove(&self, py: Python<'_>, ids: &Bound<'_, PyAny>, compact: bool) -> PyResult<usize> {
        let ids = u64_vector("ids", ids)?;
        Ok(py.detach(|| {
            let removed = {
                let mut live = self.inner.write();
                self.written(&ids);
                live.remove_keeping_tombstones(&ids)
            };
            if compact && removed > 0 {
                self.compact_aside(true);
            }
            removed
        }))
    }

    /// Compact aside when tombstones make up enough of the graph; returns whether it did.
    fn compact_if_worn(&self, py: Python<'_>) -> bool {
        py.detach(|| self.compact_aside(true))
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

    /// Rebuild the graph without removed nodes (also happens on its own when they pile up), on
    /// a copy (`compact_aside`; nothing while another compaction runs).
    fn compact(&self, py: Python<'_>) {
        py.detach(|| self.compact_aside(false));
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
        Ok(PyHnswIndex::of(inner))
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
