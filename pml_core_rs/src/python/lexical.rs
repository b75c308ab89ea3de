//! The pyo3 glue of the BM25 index: the `LexicalIndex` class.

use pyo3::prelude::*;

use super::{count_arg, str_list, Recovering};
use crate::lexical;

/// Python handle of the BM25 index (`lexical::LexicalIndex`): searches share a read lock and
/// run in parallel without the GIL; updates take the write lock. Callers pass term lists
/// (tokenized in Python); every call releases the GIL around the index work.
#[pyclass(name = "LexicalIndex", module = "pml_server._core", frozen)]
pub(super) struct PyLexicalIndex {
    pub(super) inner: Recovering<lexical::LexicalIndex>,
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
