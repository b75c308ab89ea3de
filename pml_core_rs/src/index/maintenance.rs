//! Removal and compaction. A removed id leaves the id map at once (so it can never be returned)
//! while its node stays in the graph as a routable tombstone: cutting it out immediately would
//! break the paths that ran through it. Once tombstones make up a third of the nodes the graph is
//! compacted: every live node that linked to a tombstone re-selects its neighbours among its
//! live ones plus the tombstone's live neighbours (so paths through the removed node survive
//! as direct links), then the tombstones are dropped and the slots renumbered. That costs a few
//! distance computations per affected link, far less than rebuilding, and frees the memory.

use rustc_hash::{FxHashMap, FxHashSet};

use super::graph::{Graph, Scored, NO_NODE};
use super::{insert, HnswIndex};

/// Compact when tombstones reach this fraction of all nodes...
const WORN_FRACTION: f64 = 1.0 / 3.0;
/// ...and there are at least this many (tiny indexes are cheap either way).
const WORN_MIN: usize = 16;

impl HnswIndex {
    /// Remove the given ids; returns how many were present. Unknown ids are ignored.
    pub fn remove(&mut self, ids: &[u64]) -> usize {
        let removed = self.remove_keeping_tombstones(ids);
        if removed > 0 {
            self.compact_if_worn();
        }
        removed
    }

    /// `remove` without compacting: a caller that must not hold the index for a compaction
    /// compacts a copy instead (`is_worn`, `compact`, `catch_up`).
    pub fn remove_keeping_tombstones(&mut self, ids: &[u64]) -> usize {
        let mut removed = 0;
        for id in ids {
            if let Some(slot) = self.slot_of.remove(id) {
                self.graph.deleted[slot as usize] = true;
                self.graph.deleted_count += 1;
                removed += 1;
            }
        }
        removed
    }

    /// Whether tombstones make up enough of the graph to compact it.
    pub fn is_worn(&self) -> bool {
        let dead = self.graph.deleted_count;
        dead >= WORN_MIN && dead as f64 >= WORN_FRACTION * self.graph.slots() as f64
    }

    pub(super) fn compact_if_worn(&mut self) {
        if self.is_worn() {
            self.compact();
        }
    }

    /// Bring this index, a copy of `live` compacted aside, up to `live`: every id of
    /// `touched` (those `live`'s writes changed since the copy, in order) ends as `live` holds
    /// it (gone, or its vector), and the search settings are `live`'s.
    pub fn catch_up(&mut self, live: &HnswIndex, touched: &[u64]) {
        let mut seen = FxHashSet::default();
        for &id in touched {
            if !seen.insert(id) {
                continue;
            }
            self.remove_keeping_tombstones(&[id]);
            if let Some(&slot) = live.slot_of.get(&id) {
                let row = live.graph.widened(slot); // f16 -> f32 -> f16 keeps every bit
                self.add_normalized(&[id], &row)
                    .expect("a row of an index of the same dimension");
            }
        }
        self.ef_construction = live.ef_construction;
        self.ef_search = live.ef_search;
        self.exact = live.exact;
        self.rng = live.rng;
    }

    /// Drop every tombstone from the graph, repairing the links that went through them.
    pub fn compact(&mut self) {
        if self.graph.deleted_count == 0 {
            return;
        }
        repair_links_around_tombstones(&mut self.graph, &self.kernel);
        let (graph, thin) = without_tombstones(&self.graph);
        self.graph = graph;
        // Repair only reuses links that existed; a node left with fewer than `m` level-0 links
        // (its neighbourhood was mostly removed) searches for new ones, as an insert would.
        for slot in thin {
            insert::relink_level0(&mut self.graph, &self.kernel, slot, self.ef_construction);
        }
        self.slot_of = self
            .graph
            .ids
            .iter()
            .enumerate()
            .map(|(slot, &id)| (id, slot as u32))
            .collect::<FxHashMap<_, _>>();
    }
}

/// For each live node and level whose list holds a tombstone, choose new neighbours among the
/// live entries plus the tombstones' live neighbours, with the insert heuristic.
fn repair_links_around_tombstones(graph: &mut Graph, kernel: &super::distance::Kernel) {
    let mut candidates: Vec<u32> = Vec::new();
    for slot in 0..graph.slots() as u32 {
        if graph.deleted[slot as usize] {
            continue;
        }
        for level in 0..=graph.levels[slot as usize] as usize {
            let list = graph.links(slot, level);
            if !list.iter().any(|&n| graph.deleted[n as usize]) {
                continue;
            }
            candidates.clear();
            for &n in list {
                if graph.deleted[n as usize] {
                    candidates.extend(
                        graph
                            .links(n, level)
                            .iter()
                            .copied()
                            .filter(|&m| m != slot && !graph.deleted[m as usize]),
                    );
                } else {
                    candidates.push(n);
                }
            }
            candidates.sort_unstable();
            candidates.dedup();
            let base = graph.vector(slot);
            let mut scored: Vec<Scored> = candidates
                .iter()
                .map(|&n| Scored {
                    dist: kernel.distance_rows(base, graph.vector(n)),
                    slot: n,
                })
                .collect();
            scored.sort_unstable();
            let kept: Vec<u32> =
                insert::select_diverse(graph, kernel, &scored, graph.capacity(level))
                    .iter()
                    .map(|s| s.slot)
                    .collect();
            graph.set_links(slot, level, &kept);
        }
    }
}

/// Copy of `graph` with the tombstones dropped and the slots renumbered densely; also returns
/// the new slots left with fewer than `m` level-0 links (only when more than one node is live).
fn without_tombstones(graph: &Graph) -> (Graph, Vec<u32>) {
    let mut renumber = vec![NO_NODE; graph.slots()];
    let mut out = Graph::new(graph.dim, graph.m);
    let live = graph.live();
    out.reserve_exact(live);
    for slot in 0..graph.slots() as u32 {
        if !graph.deleted[slot as usize] {
            let level = graph.levels[slot as usize] as usize;
            renumber[slot as usize] =
                out.push_row(graph.ids[slot as usize], graph.vector(slot), level);
        }
    }
    let mut thin = Vec::new();
    let mut mapped: Vec<u32> = Vec::new();
    for old in 0..graph.slots() as u32 {
        let new = renumber[old as usize];
        if new == NO_NODE {
            continue;
        }
        for level in 0..=graph.levels[old as usize] as usize {
            mapped.clear();
            // Repair removed every tombstone from live lists; the filter is a safety net.
            mapped.extend(
                graph
                    .links(old, level)
                    .iter()
                    .map(|&n| renumber[n as usize])
                    .filter(|&n| n != NO_NODE),
            );
            out.set_links(new, level, &mapped);
        }
        if live > 1 && out.links(new, 0).len() < graph.m {
            thin.push(new);
        }
    }
    // New entry point: the first live node of the highest level.
    let top = out
        .levels
        .iter()
        .enumerate()
        .max_by_key(|(i, l)| (**l, std::cmp::Reverse(*i)));
    if let Some((slot, &level)) = top {
        out.entry = slot as u32;
        out.max_level = level as usize;
    }
    (out, thin)
}
