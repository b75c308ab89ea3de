//! Removal and compaction. A removed id leaves the id map at once (so it can never be returned)
//! while its node stays in the graph as a routable tombstone: cutting it out immediately would
//! break the paths that ran through it. Once tombstones make up a third of the nodes, the graph
//! is rebuilt from the live vectors, which frees their memory and restores search quality; the
//! rebuild costs about one fresh build of the survivors, amortized over that many removals.

use super::graph::Graph;
use super::{insert, HnswIndex};

/// Rebuild when tombstones reach this fraction of all nodes...
const WORN_FRACTION: f64 = 1.0 / 3.0;
/// ...and there are at least this many (tiny indexes are cheap either way).
const WORN_MIN: usize = 16;

impl HnswIndex {
    /// Remove the given ids; returns how many were present. Unknown ids are ignored.
    pub fn remove(&mut self, ids: &[u64]) -> usize {
        let mut removed = 0;
        for id in ids {
            if let Some(slot) = self.slot_of.remove(id) {
                self.graph.deleted[slot as usize] = true;
                self.graph.deleted_count += 1;
                removed += 1;
            }
        }
        if removed > 0 {
            self.compact_if_worn();
        }
        removed
    }

    pub(super) fn compact_if_worn(&mut self) {
        let dead = self.graph.deleted_count;
        if dead >= WORN_MIN && dead as f64 >= WORN_FRACTION * self.graph.slots() as f64 {
            self.compact();
        }
    }

    /// Rebuild the graph from the live vectors only, dropping every tombstone.
    pub fn compact(&mut self) {
        if self.graph.deleted_count == 0 {
            return;
        }
        let fresh = Graph::new(self.graph.dim, self.graph.m);
        let old = std::mem::replace(&mut self.graph, fresh);
        self.slot_of.clear();
        let live = old.live();
        self.graph.vectors.reserve_exact(live * old.dim);
        self.graph.ids.reserve_exact(live);
        self.graph.links0.reserve_exact(live * (1 + old.m0));
        for slot in 0..old.slots() as u32 {
            if old.deleted[slot as usize] {
                continue;
            }
            let id = old.ids[slot as usize];
            let level = self.rng.level(self.graph.m);
            let new_slot = self.graph.push_node(id, old.vector(slot), level);
            insert::link_node(
                &mut self.graph,
                &self.kernel,
                new_slot,
                self.ef_construction,
            );
            self.slot_of.insert(id, new_slot);
        }
        self.slot_of.shrink_to_fit();
    }
}
