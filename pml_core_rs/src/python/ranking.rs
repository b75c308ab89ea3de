//! The pyo3 glue of the ranking: the `RankParams` and `RankTable` classes and `rank_query`.

use pyo3::prelude::*;
use rustc_hash::FxHashMap;

use super::errors::invalid_arg;
use super::index::PyHnswIndex;
use super::lexical::PyLexicalIndex;
use super::{count_arg, f32_vector, str_list, Recovering};
use crate::{index, ranking};

/// The formula's parameters (`RankingConfig`), converted once per server configuration.
#[pyclass(name = "RankParams", module = "pml_server._core", frozen)]
pub(super) struct PyRankParams {
    inner: ranking::Params,
}

#[pymethods]
impl PyRankParams {
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (*, semantic_weight, lexical_weight, lexical_half_score, prior_successes,
        prior_failures, expected_success_rate, reliability_prior_strength, usage_weight,
        usage_saturation, recency_full_days,
        recency_half_life_days, recency_floor, superseded_penalty, step_weight = 0.3,
        step_profile_weight = 0.8, step_gate = 1.0, step_coverage_weight = 0.6,
        step_order_weight = 0.2))]
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
        step_profile_weight: f64,
        step_gate: f64,
        step_coverage_weight: f64,
        step_order_weight: f64,
    ) -> PyResult<Self> {
        // Each parameter named once: the struct and the array checked for finiteness.
        macro_rules! params_and_values {
            ($($field:ident),* $(,)?) => {
                (ranking::Params { $($field),* }, [$($field),*])
            };
        }
        let (inner, values) = params_and_values!(
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
            step_profile_weight,
            step_gate,
            step_coverage_weight,
            step_order_weight,
        );
        if values.iter().any(|v| !v.is_finite()) {
            return Err(invalid_arg("params", "every parameter must be finite"));
        }
        if !(expected_success_rate > 0.0 && expected_success_rate <= 1.0) {
            return Err(invalid_arg(
                "params",
                "expected_success_rate must be in (0, 1]",
            ));
        }
        for (field, value) in [
            ("step_weight", step_weight),
            ("step_profile_weight", step_profile_weight),
            ("step_coverage_weight", step_coverage_weight),
            ("step_order_weight", step_order_weight),
            ("step_gate", step_gate),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(invalid_arg(field, "must be in [0, 1]"));
            }
        }
        Ok(PyRankParams { inner })
    }
}

/// Python handle of one tenant's ranking table (`ranking::RankTable`): updates take the write
/// lock, `rank_query` reads it without the GIL.
#[pyclass(name = "RankTable", module = "pml_server._core", frozen)]
pub(super) struct PyRankTable {
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
    /// without a row), for a request whose
    /// `STEP_NEIGHBOURS` nearest intents are `hit_ids` with `hit_scores`, whose analysed words
    /// are `words` (in the order of first use; `ordered`: the request states an order) and
    /// whose vector is `query` (its tool-profile fit reads `ann`'s vectors;
    /// `companion`: `ann` is the cross-lingual companion's index, whose profiles are kept
    /// apart): the factors the core's ranking applies (both parts gated by the hits' expected
    /// step count), for the Python ranking path.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (hit_ids, hit_scores, pattern_ids, words, params, ann, query,
        companion = false, parts = None, part_weights = Vec::new(), ordered = false))]
    fn step_factors(
        &self,
        py: Python<'_>,
        hit_ids: Vec<u64>,
        hit_scores: Vec<f32>,
        pattern_ids: Vec<String>,
        words: Vec<String>,
        params: &PyRankParams,
        ann: Option<&PyHnswIndex>,
        query: &Bound<'_, PyAny>,
        companion: bool,
        parts: Option<&Bound<'_, PyAny>>,
        part_weights: Vec<f64>,
        ordered: bool,
    ) -> PyResult<Vec<f64>> {
        if hit_ids.len() != hit_scores.len() {
            return Err(invalid_arg("hit_scores", "must hold one score per hit id"));
        }
        let query = f32_vector("query", query)?;
        let parts = part_vectors(parts, &part_weights, query.len())?;
        let words = ranking::RequestWords::new(words, ordered);
        Ok(py.detach(|| {
            let space = if companion {
                ranking::ProfileSpace::Companion
            } else {
                ranking::ProfileSpace::Primary
            };
            if let Some(ann) = ann {
                refresh_profiles(&self.inner, ann, &params.inner, space);
            }
            let table = self.inner.read();
            // without `ann` the profiles are not in `query`'s space: every profile factor is 1
            let weight = if ann.is_some() {
                ranking::space::profile_weight(space, params.inner.step_profile_weight)
            } else {
                0.0
            };
            let hits: Vec<index::Hit> = hit_ids
                .iter()
                .zip(&hit_scores)
                .map(|(&id, &score)| index::Hit { id, score })
                .collect();
            // the parts are read in the space of `query` (`Space::with_parts`)
            let parts = parts.as_deref().filter(|_| ann.is_some());
            let mut steps = ranking::StepFit::new(
                &table,
                &hits,
                &words,
                &params.inner,
                ranking::ProfileFit::in_space(&query, weight, space),
                parts.map(|vectors| ranking::RequestParts {
                    vectors,
                    weights: &part_weights,
                }),
            );
            pattern_ids
                .iter()
                .map(|p| {
                    table
                        .row_of_pattern(p)
                        .map_or(1.0, |s| steps.factor(&table, table.row(s)))
                })
                .collect()
        }))
    }

    /// Some tool profile is out of date (the next query with the tenant's index brings it up to
    /// date).
    fn profiles_stale(&self) -> bool {
        self.inner.read().profiles_stale()
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

    /// Each set of tools the workflows showed following a step whose tools are `previous`:
    /// (its capability ids, the (successes, last use in ms) of each workflow that taught it),
    /// from at most `limit` workflows (`ranking::followers`).
    #[allow(clippy::type_complexity)]
    fn followers(
        &self,
        py: Python<'_>,
        previous: Vec<String>,
        limit: i64,
    ) -> PyResult<Vec<(Vec<String>, Vec<(i64, i64)>)>> {
        let limit = count_arg("limit", limit)?;
        let previous: Vec<&str> = previous.iter().map(String::as_str).collect();
        Ok(py.detach(|| {
            let table = self.inner.read();
            ranking::followers(&table, &previous, limit)
                .into_iter()
                .map(|t| (t.capabilities, t.workflows))
                .collect()
        }))
    }

    /// The capabilities standing for a step whose tools are `previous`, in call order
    /// (`ranking::step_capabilities`).
    fn step_capabilities(&self, py: Python<'_>, previous: Vec<String>) -> Vec<String> {
        let previous: Vec<&str> = previous.iter().map(String::as_str).collect();
        py.detach(|| ranking::step_capabilities(&self.inner.read(), &previous))
    }

    /// The previous step's vector for a follow-up request (`ranking::step_profile`): the mean
    /// of its tools' profiles in `ann`'s space (`companion`: the cross-lingual companion's,
    /// whose profiles are kept apart), brought up to date first; None when no tool has one.
    #[pyo3(signature = (previous, ann, companion = false))]
    fn step_profile(
        &self,
        py: Python<'_>,
        previous: Vec<String>,
        ann: &PyHnswIndex,
        companion: bool,
    ) -> Option<Vec<f32>> {
        let space = if companion {
            ranking::ProfileSpace::Companion
        } else {
            ranking::ProfileSpace::Primary
        };
        py.detach(|| {
            refresh_stale_profiles(&self.inner, ann, space);
            ranking::step_profile(&self.inner.read(), &previous, space)
        })
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
        let filters =
            ranking::Filters::without_match(min_success, include_flagged, available_tools, tags);
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

type PartsTuple = (f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64);
type RankedTuple = (String, String, PartsTuple);
/// (pattern id, capability id, rule, detail, score parts) of a candidate `explain` lists.
type FilteredTuple = (String, String, &'static str, String, PartsTuple);

/// (match, semantic, lexical, success, usage, recency, superseded penalty, total,
/// reliability, steps, transition): the order of `ScoreParts`' fields.
fn parts_tuple(p: &ranking::ScoreParts) -> PartsTuple {
    (
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
    )
}

fn ranking_tuples(ranking: ranking::Ranking) -> (Vec<RankedTuple>, Vec<FilteredTuple>) {
    let suggestions = ranking
        .suggestions
        .into_iter()
        .map(|r| {
            let parts = parts_tuple(&r.parts);
            (r.pattern_id, r.capability_id, parts)
        })
        .collect();
    let filtered = ranking
        .filtered
        .into_iter()
        .map(|f| {
            let parts = parts_tuple(&f.parts);
            (
                f.pattern_id,
                f.capability_id,
                f.rule.name(),
                f.detail,
                parts,
            )
        })
        .collect();
    (suggestions, filtered)
}

/// One Suggest query ranked in the core (`ranking::query`), the GIL released throughout:
/// (the top `k` as (pattern id, capability id, score parts), the candidates
/// `explain` lists as (pattern id, capability id, rule, detail, score parts); empty without
/// it). Score parts: `parts_tuple`. `words`: the request's analysed words in the order of
/// their first use (`ranking.plans.text_words_in_order`), for the step fit; `ordered`: the
/// request states an order (`ranking.plans.states_order`), for its order fit. `transitions`:
/// the session signal's factor by capability id (docs/ranking.md, Sessions).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (table, ann, lexical, query, terms, limit, k, params, now_ms, *, min_match,
    min_success, include_flagged, available_tools, tags, own_min_success = false,
    words = Vec::new(), transitions = None, explain = false, primary = true,
    foreign_ann = None, foreign_query = None, foreign_ids = Vec::new(), parts = None,
    part_weights = Vec::new(), ordered = false))]
pub(super) fn rank_query(
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
    explain: bool,
    primary: bool,
    foreign_ann: Option<&PyHnswIndex>,
    foreign_query: Option<&Bound<'_, PyAny>>,
    mut foreign_ids: Vec<u64>,
    parts: Option<&Bound<'_, PyAny>>,
    part_weights: Vec<f64>,
    ordered: bool,
) -> PyResult<(Vec<RankedTuple>, Vec<FilteredTuple>)> {
    let words = ranking::RequestWords::new(words, ordered);
    let query = f32_vector("query", query)?;
    // intents recorded in another language, read by the companion (docs/ranking.md, Other
    // languages): its index and the request's vector in its space, both or neither
    let foreign_query = match (foreign_ann, foreign_query) {
        (Some(_), Some(q)) => Some(f32_vector("foreign_query", q)?),
        (None, None) => None,
        (Some(_), None) => return Err(invalid_arg("foreign_query", "required with foreign_ann")),
        (None, Some(_)) => return Err(invalid_arg("foreign_ann", "required with foreign_query")),
    };
    // the parts are in the space the profiles are read in: the companion's when the scoring
    // mixes two (`Space::profiles`)
    let dim = foreign_query.as_ref().map_or(query.len(), Vec::len);
    let parts = part_vectors(parts, &part_weights, dim)?;
    foreign_ids.sort_unstable();
    foreign_ids.dedup();
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
            // the profiles of the space the query reads them in (`ranking::Space::profiles`)
            match (primary, foreign_ann) {
                (_, Some(other)) => refresh_profiles(
                    &table.inner,
                    other,
                    &params.inner,
                    ranking::ProfileSpace::Companion,
                ),
                (true, None) => refresh_profiles(
                    &table.inner,
                    ann,
                    &params.inner,
                    ranking::ProfileSpace::Primary,
                ),
                // a request in another language: `ann` is the companion's index
                (false, None) => refresh_profiles(
                    &table.inner,
                    ann,
                    &params.inner,
                    ranking::ProfileSpace::Companion,
                ),
            }
            let table = table.inner.read();
            let primary_ann = ann.inner.read();
            let other_ann = foreign_ann.map(|f| f.inner.read());
            let space = match (&other_ann, &foreign_query) {
                (Some(other), Some(other_query)) => ranking::Space::mixed(
                    &primary_ann,
                    &query,
                    ranking::Foreign::new(other, other_query, &foreign_ids),
                ),
                _ if primary => ranking::Space::one(&primary_ann, &query),
                _ => ranking::Space::companion(&primary_ann, &query),
            }
            .with_parts(parts.as_deref().map(|vectors| ranking::RequestParts {
                vectors,
                weights: &part_weights,
            }));
            let permitted = if ranking::restricts(&filters, own_min_success) {
                ranking::permitted(&table, &filters, &params.inner)
            } else {
                None
            };
            let retrieve = if explain {
                ranking::retrieve_explained
            } else {
                ranking::retrieve_for
            };
            let found = retrieve(
                &table,
                &space,
                &lexical.inner.read(),
                &terms,
                limit,
                permitted.as_ref(),
            )?;
            ranking::rank_retrieved(
                &table,
                &space,
                &found,
                k,
                &filters,
                &params.inner,
                now_ms,
                &words,
                explain,
            )
        })
        .map_err(PyErr::from)?;
    Ok(ranking_tuples(ranked))
}

/// What usually comes next (`ranking::rank_next`, docs/ranking.md, Sessions), the GIL
/// released: the rankable patterns among `pattern_ids` scored by their capability's
/// transition weight in `weights`, with every filter but `min_match`; the answer as
/// `rank_query`'s.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (table, pattern_ids, weights, k, params, now_ms, *, min_success,
    include_flagged, available_tools, tags, explain = false))]
pub(super) fn rank_next(
    py: Python<'_>,
    table: &PyRankTable,
    pattern_ids: Vec<String>,
    weights: std::collections::HashMap<String, f64>,
    k: i64,
    params: &PyRankParams,
    now_ms: i64,
    min_success: f64,
    include_flagged: bool,
    available_tools: Option<Vec<String>>,
    tags: Vec<String>,
    explain: bool,
) -> PyResult<(Vec<RankedTuple>, Vec<FilteredTuple>)> {
    let k = count_arg("k", k)?;
    let weights: FxHashMap<String, f64> = weights.into_iter().collect();
    let filters =
        ranking::Filters::without_match(min_success, include_flagged, available_tools, tags);
    let ranked = py.detach(|| {
        let table = table.inner.read();
        ranking::rank_next(
            &table,
            &pattern_ids,
            &weights,
            k,
            &filters,
            &params.inner,
            now_ms,
            explain,
        )
    });
    Ok(ranking_tuples(ranked))
}

/// A pattern's semantic part from its intents' cosines (`formula::pattern_semantic`); 0.0
/// without any.
#[pyfunction]
pub(super) fn pattern_semantic(mut cosines: Vec<f64>) -> f64 {
    ranking::formula::pattern_semantic(&mut cosines).unwrap_or(0.0)
}

/// Whether two names are one tool, with or without its server's namespace
/// (`tool_names::same_tool`).
#[pyfunction]
pub(super) fn same_tool(a: &str, b: &str) -> bool {
    crate::tool_names::same_tool(a, b)
}

/// The formula's recency factor (`formula::recency_factor`).
#[pyfunction]
pub(super) fn recency_factor(last_used_ms: i64, now_ms: i64, params: &PyRankParams) -> f64 {
    ranking::formula::recency_factor(last_used_ms, now_ms, &params.inner)
}

/// (s + a) / (s + f + a + b): the Beta(a, b) posterior mean after s successes and f
/// failures (`formula::beta_mean`), the success estimate's.
#[pyfunction]
pub(super) fn beta_mean(
    successes: i64,
    failures: i64,
    prior_successes: f64,
    prior_failures: f64,
) -> f64 {
    ranking::formula::beta_mean(successes, failures, prior_successes, prior_failures)
}

/// Bring the table's tool profiles of `space` up to date (docs/ranking.md, Steps, "Tool
/// profiles"; Other languages) from `ann`, that space's index, before a query reads them: only
/// after a write (or, in the companion's space, the first time), costing the changed tools'
/// intents. The table's lock is taken before the index's, as every query does.
fn refresh_profiles(
    table: &Recovering<ranking::RankTable>,
    ann: &PyHnswIndex,
    params: &ranking::Params,
    space: ranking::ProfileSpace,
) {
    // the profiles are read by their factor and by the request parts' coverage
    // (docs/ranking.md, Steps, "Request parts' coverage")
    if params.step_profile_weight > 0.0 || params.step_coverage_weight > 0.0 {
        refresh_stale_profiles(table, ann, space);
    }
}

/// Bring the table's tool profiles of `space` up to date from `ann` if a write made them
/// stale (`refresh_profiles` when a query reads them; `step_profile` always).
fn refresh_stale_profiles(
    table: &Recovering<ranking::RankTable>,
    ann: &PyHnswIndex,
    space: ranking::ProfileSpace,
) {
    let stale = |t: &ranking::RankTable| match space {
        ranking::ProfileSpace::Primary => t.profiles_stale(),
        ranking::ProfileSpace::Companion => t.companion_profiles_stale(),
    };
    if !stale(&table.read()) {
        return;
    }
    let mut table = table.write();
    let ann = ann.inner.read();
    match space {
        ranking::ProfileSpace::Primary => table.refresh_profiles(&ann),
        ranking::ProfileSpace::Companion => table.refresh_companion_profiles(&ann),
    }
}

/// The request parts' vectors, one after the other (docs/ranking.md, Steps, "Request parts'
/// coverage"): `parts` a sequence of vectors of the query's dimension, one per weight of
/// `weights` (finite, at least 0), at most `MAX_REQUEST_PARTS`.
fn part_vectors(
    parts: Option<&Bound<'_, PyAny>>,
    weights: &[f64],
    dim: usize,
) -> PyResult<Option<Vec<f32>>> {
    let Some(parts) = parts else {
        if !weights.is_empty() {
            return Err(invalid_arg("part_weights", "given without parts"));
        }
        return Ok(None);
    };
    let rows: Vec<Bound<'_, PyAny>> = parts
        .try_iter()
        .map_err(|_| invalid_arg("parts", "must be a sequence of vectors"))?
        .collect::<PyResult<_>>()?;
    if rows.len() != weights.len() {
        return Err(invalid_arg("part_weights", "must hold one weight per part"));
    }
    if rows.len() > ranking::steps::MAX_REQUEST_PARTS {
        return Err(invalid_arg("parts", "too many parts"));
    }
    if weights.iter().any(|w| !w.is_finite() || *w < 0.0) {
        return Err(invalid_arg(
            "part_weights",
            "every weight must be finite and >= 0",
        ));
    }
    let mut out = Vec::with_capacity(rows.len() * dim);
    for row in &rows {
        let v = f32_vector("parts", row)?;
        if v.len() != dim {
            return Err(invalid_arg(
                "parts",
                "every part must have the query's dimension",
            ));
        }
        out.extend(v);
    }
    Ok(Some(out))
}
