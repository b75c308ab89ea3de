//! Suggest's ranking in the core: the formula (`formula`), the per-tenant table of what it
//! reads (`table`), and one query ranked from the indexes and the table (`query`).
//! docs/ranking.md documents the formula; `testing/ranking_oracle` is the Python reference
//! the tests check it against (production ranks only here).

pub mod followers;
pub mod formula;
pub mod permitted;
pub mod query;
pub mod space;
pub mod steps;
pub mod table;

pub use followers::{followers, step_capabilities, step_profile, Taught};
pub use formula::{gated_step, score, step_gate, Counts, Params, ScoreParts};
pub use permitted::{permitted, restricts, retrieve_explained, retrieve_for, Permitted};
pub use query::{
    lexical_hits, rank_next, rank_retrieved, retrieve, score_retrieved, Candidate, Filtered,
    Filters, Ranked, Ranking, Retrieved, Rule,
};
pub use space::{Foreign, Space};
pub use steps::{
    expected_steps, order_factor, step_evidence, PartCoverage, ProfileFit, RequestParts,
    RequestWords, StepEvidence, StepFit,
};
pub use table::{ProfileSpace, RankTable};

#[cfg(test)]
mod tests;
