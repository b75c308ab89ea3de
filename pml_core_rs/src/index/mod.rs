//! HNSW approximate nearest-neighbour index over cosine similarity (Malkov & Yashunin), written
//! for this workload: per-tenant indexes of 384..1024-d embeddings, updated on every capture and
//! deletion, searched with an optional id filter.
//!
//! Vectors are stored in half precision (`half`: half the memory of f32, scores within
//! `half::MAX_SCORE_ERROR` of the exact f32 cosine, every score computed the same way).
//!
//! Layout: `graph` (storage), `distance` (SIMD kernels), `visited` (per-thread visited set),
//! `search`, `insert`, `maintenance` (remove / compaction), `serialize` (versioned bytes).
//! This type is not synchronized; the Python handle wraps it in an `RwLock` so searches run in
//! parallel and writes are exclusive.

mod batch_insert;
mod distance;
mod graph;
pub mod half;
mod insert;
mod maintenance;
mod search;
mod serialize;
mod visited;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{CoreError, CoreResult};
use distance::Kernel;
use graph::{Graph, Scored};
use insert::LevelRng;
use rustc_hash::FxHashMap;

pub use distance::normalize;

/// Largest accepted dimension and `m`: far above real embeddings, low enough that a typo
/// cannot make one node allocate gigabytes.
pub const MAX_DIM: usize = 65_536;
pub const MAX_M: usize = 256;
/// Fixed seed: the same inserts in the same order build the same graph.
const LEVEL_SEED: u64 = 0x706d_6c5f_686e_7377;
/// With an `allow` filter, an exact scan is used when at most this many allowed ids are live
/// (and above it when the scan is still cheaper than a filtered graph walk; see `search`).
pub const EXACT_SCAN_MIN: usize = 1024;
/// Below this many live nodes a batch is inserted one node at a time even when threads are
/// offered: small graphs are cheap to extend, and their shape then never depends on batching.
pub const PARALLEL_INSERT_MIN_NODES: usize = 1024;

/// Construction and search parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub m: usize,
    pub ef_construction: usize,
    pub ef_search: usize,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            m: 16,
            ef_construction: 200,
            ef_search: 64,
        }
    }
}

/// One search hit: the caller's id and the cosine similarity (higher is closer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    pub id: u64,
    pub score: f32,
}

#[derive(Clone)]
pub struct HnswIndex {
    graph: Graph,
    kernel: Kernel,
    ef_construction: usize,
    ef_search: usize,
    /// Every search without an `allow` list scans every live vector exactly (the engine's
    /// `vector_index = "exact"`: exact recall, the same ranking call; docs/ranking.md,
    /// Pipeline). A search setting, like `ef_search`, not kept in snapshots.
    exact: bool,
    // Keyed by engine-assigned intent ids, never a caller's choice: the fast Fx hash.
    slot_of: FxHashMap<u64, u32>,
    rng: LevelRng,
}

fn invalid(field: &str, reason: impl Into<String>) -> CoreError {
    CoreError::InvalidArgument {
        field: field.to_string(),
        reason: reason.into(),
    }
}

fn check_ef(field: &str, ef: usize) -> CoreResult<()> {
    if ef == 0 || ef > 1_000_000 {
        return Err(invalid(field, format!("must be in 1..=1000000, got {ef}")));
    }
    Ok(())
}

impl HnswIndex {
    pub fn new(dim: usize, params: Params) -> CoreResult<Self> {
        if dim == 0 || dim > MAX_DIM {
            return Err(invalid(
                "dim",
                format!("must be in 1..={MAX_DIM}, got {dim}"),
            ));
        }
        if params.m < 2 || params.m > MAX_M {
            return Err(invalid(
                "m",
                format!("must be in 2..={MAX_M}, got {}", params.m),
            ));
        }
        check_ef("ef_construction", params.ef_construction)?;
        check_ef("ef_search", params.ef_search)?;
        Ok(HnswIndex {
            graph: Graph::new(dim, params.m),
            kernel: Kernel::detect(),
            ef_construction: params.ef_construction,
            ef_search: params.ef_search,
            exact: false,
            slot_of: FxHashMap::default(),
            rng: LevelRng { state: LEVEL_SEED },
        })
    }

    pub fn dim(&self) -> usize {
        self.graph.dim
    }

    pub fn m(&self) -> usize {
        self.graph.m
    }

    pub fn ef_construction(&self) -> usize {
        self.ef_construction
    }

    pub fn ef_search(&self) -> usize {
        self.ef_search
    }

    pub fn set_ef_construction(&mut self, ef: usize) -> CoreResult<()> {
        check_ef("ef_construction", ef)?;
        self.ef_construction = ef;
        Ok(())
    }

    /// Whether every unfiltered search is an exact scan.
    pub fn exact(&self) -> bool {
        self.exact
    }

    pub fn set_exact(&mut self, exact: bool) {
        self.exact = exact;
    }

    pub fn set_ef_search(&mut self, ef: usize) -> CoreResult<()> {
        check_ef("ef_search", ef)?;
        self.ef_search = ef;
        Ok(())
    }

    /// Name of the distance kernel in use ("avx2+fma+f16c" or "scalar").
    pub fn kernel_name(&self) -> &'static str {
        self.kernel.name()
    }

    /// Live (searchable) vectors.
    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slot_of.is_empty()
    }

    /// Removed nodes still held as tombstones (released by `compact`).
    pub fn tombstones(&self) -> usize {
        self.graph.deleted_count
    }

    pub fn contains(&self, id: u64) -> bool {
        self.slot_of.contains_key(&id)
    }

    /// Add the stored (unit, f16) vector of `id` into `acc` (`dim` values); false when the
    /// index does not hold it. The tool profiles of the ranking table (docs/ranking.md, Steps)
    /// are summed from these.
    pub fn add_vector_into(&self, id: u64, acc: &mut [f64]) -> bool {
        let Some(&slot) = self.slot_of.get(&id) else {
            return false;
        };
        for (a, &h) in acc.iter_mut().zip(self.graph.vector(slot)) {
            *a += f64::from(half::f16_to_f32(h));
        }
        true
    }

    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.graph.memory_bytes()
            + self.slot_of.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
    }

    /// Check and normalize row-major `data` of `dim` columns (no index needed, so callers can
    /// do it before taking a lock). The error names `field` and the first bad row.
    pub fn normalize_rows(dim: usize, field: &str, data: &[f32]) -> CoreResult<Vec<f32>> {
        if dim == 0 || data.len() % dim != 0 {
            return Err(invalid(
                field,
                format!(
                    "expected rows of dimension {dim}, got {} values",
                    data.len()
                ),
            ));
        }
        let mut out = data.to_vec();
        for (row, chunk) in out.chunks_exact_mut(dim).enumerate() {
            normalize(chunk).ok_or_else(|| {
                invalid(
                    field,
                    format!(
                        "row {row} is zero or has non-finite values (cosine needs a direction)"
                    ),
                )
            })?;
        }
        Ok(out)
    }

    fn normalized(&self, field: &str, vector: &[f32]) -> CoreResult<Vec<f32>> {
        if vector.len() != self.graph.dim {
            return Err(invalid(
                field,
                format!(
                    "expected dimension {}, got {}",
                    self.graph.dim,
                    vector.len()
                ),
            ));
        }
        Self::normalize_rows(self.graph.dim, field, vector)
    }

    /// Add `ids.len()` vectors given row-major in `vectors`; re-adding an id replaces it. The
    /// whole batch is checked before anything changes, so a bad row leaves the index untouched.
    pub fn add(&mut self, ids: &[u64], vectors: &[f32]) -> CoreResult<()> {
        self.check_batch(ids, vectors)?;
        let rows = Self::normalize_rows(self.graph.dim, "vectors", vectors)?;
        self.add_normalized(ids, &rows)
    }

    /// Shape check shared by `add` and callers that normalize first.
    pub fn check_batch(&self, ids: &[u64], vectors: &[f32]) -> CoreResult<()> {
        let dim = self.graph.dim;
        if vectors.len() != ids.len() * dim {
            return Err(invalid(
                "vectors",
                format!(
                    "expected {} rows of dimension {dim} (one per id), got {} values",
                    ids.len(),
                    vectors.len()
                ),
            ));
        }
        if self.graph.slots() + ids.len() >= graph::NO_NODE as usize {
            return Err(CoreError::TooLarge {
                field: "ids".into(),
                reason: "would make the index exceed 2^32 - 1 nodes".into(),
            });
        }
        Ok(())
    }

    /// Make room for `rows` more nodes. Callers that add a large batch in chunks reserve the
    /// whole batch first: growth is then sized to the batch instead of doubling chunk by chunk
    /// (which can leave the storage at twice its size). Growth stays amortized (`Vec::reserve`),
    /// so one-row adds do not copy the storage each time.
    pub fn reserve(&mut self, rows: usize) {
        self.graph.reserve(rows);
        self.slot_of.reserve(rows);
    }

    /// `add` for rows already produced by `normalize_rows`.
    pub fn add_normalized(&mut self, ids: &[u64], rows: &[f32]) -> CoreResult<()> {
        self.check_batch(ids, rows)?;
        let dim = self.graph.dim;
        self.reserve(ids.len());
        for (&id, vector) in ids.iter().zip(rows.chunks_exact(dim)) {
            if let Some(old) = self.slot_of.remove(&id) {
                self.graph.deleted[old as usize] = true;
                self.graph.deleted_count += 1;
            }
            let level = self.rng.level(self.graph.m);
            let slot = self.graph.push_node(id, vector, level);
            insert::link_node(&mut self.graph, &self.kernel, slot, self.ef_construction);
            self.slot_of.insert(id, slot);
        }
        self.compact_if_worn();
        Ok(())
    }

    /// `add_normalized` with the batch's searches on up to `threads` threads (`batch_insert`).
    /// Single rows, small graphs and batches that repeat or replace an id go one by one.
    pub fn add_normalized_parallel(
        &mut self,
        ids: &[u64],
        rows: &[f32],
        threads: usize,
    ) -> CoreResult<()> {
        self.check_batch(ids, rows)?;
        let mut seen = HashSet::with_capacity(ids.len());
        let fresh = ids
            .iter()
            .all(|id| seen.insert(*id) && !self.slot_of.contains_key(id));
        if threads <= 1 || ids.len() < 2 || self.graph.live() < PARALLEL_INSERT_MIN_NODES || !fresh
        {
            return self.add_normalized(ids, rows);
        }
        self.reserve(ids.len());
        let levels: Vec<usize> = ids.iter().map(|_| self.rng.level(self.graph.m)).collect();
        let slots = batch_insert::insert_batch(
            &mut self.graph,
            &self.kernel,
            ids,
            rows,
            &levels,
            self.ef_construction,
            threads,
        );
        for (&id, slot) in ids.iter().zip(slots) {
            self.slot_of.insert(id, slot);
        }
        self.compact_if_worn();
        Ok(())
    }

    /// Top `k` by cosine similarity, best first. `ef` overrides `ef_search` for this call;
    /// `allow` restricts the results to those ids (exact when few of them are live).
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        ef: Option<usize>,
        allow: Option<&[u64]>,
    ) -> CoreResult<Vec<Hit>> {
        let query = self.normalized("query", query)?;
        self.search_normalized(&query, k, ef, allow)
    }

    /// `search` for each row of `queries` (row-major, `dim` columns), on up to `threads` threads.
    pub fn search_batch(
        &self,
        queries: &[f32],
        k: usize,
        ef: Option<usize>,
        allow: Option<&[u64]>,
        threads: usize,
    ) -> CoreResult<Vec<Vec<Hit>>> {
        let dim = self.graph.dim;
        let normalized = Self::normalize_rows(dim, "queries", queries)?;
        let rows: Vec<&[f32]> = normalized.chunks_exact(dim).collect();
        let threads = threads.clamp(1, rows.len().max(1));
        if threads == 1 {
            return rows
                .iter()
                .map(|q| self.search_normalized(q, k, ef, allow))
                .collect();
        }
        // Threads take the next query from a shared counter instead of a fixed half each: on a
        // shared machine one thread is often descheduled, and a static split would then wait
        // for its whole half (hnswlib's ParallelFor does the same).
        let next = AtomicUsize::new(0);
        let out: Vec<Option<CoreResult<Vec<Hit>>>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(q) = rows.get(i) else { break };
                            done.push((i, self.search_normalized(q, k, ef, allow)));
                        }
                        done
                    })
                })
                .collect();
            let mut out: Vec<Option<CoreResult<Vec<Hit>>>> = Vec::new();
            out.resize_with(rows.len(), || None);
            for worker in workers {
                for (i, result) in worker.join().expect("search worker panicked") {
                    out[i] = Some(result);
                }
            }
            out
        });
        out.into_iter()
            .map(|r| r.expect("every query was searched"))
            .collect()
    }

    fn search_normalized(
        &self,
        query: &[f32],
        k: usize,
        ef: Option<usize>,
        allow: Option<&[u64]>,
    ) -> CoreResult<Vec<Hit>> {
        if let Some(ef) = ef {
            check_ef("ef", ef)?;
        }
        if k == 0 || self.is_empty() {
            return Ok(Vec::new());
        }
        let ef = ef.unwrap_or(self.ef_search).max(k);
        let found = match allow {
            None if self.exact => {
                let slots: Vec<u32> = (0..self.graph.slots() as u32)
                    .filter(|&slot| !self.graph.deleted[slot as usize])
                    .collect();
                search::exact_top_k(&self.graph, &self.kernel, query, &slots, k)
            }
            None => self.graph_search(query, k, ef, |slot| !self.graph.deleted[slot as usize]),
            Some(allow) => self.filtered_search(query, k, ef, allow),
        };
        Ok(found
            .into_iter()
            .map(|s| Hit {
                id: self.graph.ids[s.slot as usize],
                score: 1.0 - s.dist,
            })
            .collect())
    }

    fn graph_search(
        &self,
        query: &[f32],
        k: usize,
        ef: usize,
        accept: impl Fn(u32) -> bool,
    ) -> Vec<Scored> {
        let Some(start) = search::greedy_descent(&self.graph, &self.kernel, query, 0) else {
            return Vec::new();
        };
        let mut found =
            search::search_level(&self.graph, &self.kernel, query, &[start], 0, ef, accept);
        found.truncate(k);
        found
    }

    /// A filtered graph walk needs about 1/p times the work of an unfiltered one when a
    /// fraction p of the nodes is allowed, while a scan costs one distance per allowed node;
    /// the scan wins below roughly sqrt(work * live), so switch there (as Qdrant does by
    /// cardinality), and never below `EXACT_SCAN_MIN`, which makes small sets exact. The
    /// work of a walk is taken as ef * m0 / 4 distances: at 10k intents a scan of 5,000
    /// allowed ones took 5.5 ms and the filtered walk 1.4 ms (docs/ranking.md, Context
    /// filters inside retrieval), so ef * m0 * 2 had switched far too late.
    fn filtered_search(&self, query: &[f32], k: usize, ef: usize, allow: &[u64]) -> Vec<Scored> {
        let mut slots: Vec<u32> = allow
            .iter()
            .filter_map(|id| self.slot_of.get(id).copied())
            .collect();
        slots.sort_unstable();
        slots.dedup();
        let walk_cost = (ef * self.graph.m0 / 4) as f64;
        let threshold = ((walk_cost * self.len() as f64).sqrt() as usize).max(EXACT_SCAN_MIN);
        if slots.len() <= threshold {
            return search::exact_top_k(&self.graph, &self.kernel, query, &slots, k);
        }
        let mut allowed = vec![0u64; self.graph.slots().div_ceil(64)];
        for &slot in &slots {
            allowed[slot as usize / 64] |= 1 << (slot % 64);
        }
        // Tombstones never carry an allowed bit: `slots` came from the live id map.
        self.graph_search(query, k, ef, |slot| {
            allowed[slot as usize / 64] & (1 << (slot % 64)) != 0
        })
    }
}

#[cfg(test)]
mod tests;
