//! Suggest's ranking in the core: the formula (`formula`), the per-tenant table of what it
//! reads (`table`), and one query ranked from the indexes and the table (`query`).
//! docs/ranking.md documents the formula; `pml_server/ranking` is its Python reference.

pub mod formula;
pub mod permitted;
pub mod query;
pub mod steps;
pub mod table;

pub use formula::{gated_step, score, step_gate, Counts, Params, ScoreParts};
pub use permitted::{permitted, restricts, retrieve_for, Permitted};
pub use query::{
    expected_steps, lexical_hits, rank_retrieved, retrieve, semantic_hits, Filters, Ranked,
    Retrieved,
};
pub use steps::{step_evidence, StepEvidence};
pub use table::RankTable;

#[cfg(test)]
mod tests;
