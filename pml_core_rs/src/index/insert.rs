//! Inserting a node: pick its level, descend to it, then on each level from there down find
//! `ef_construction` candidates, keep a diverse subset (the HNSW neighbour heuristic) and link
//! both ways, shrinking any neighbour list that overflows with the same heuristic.

use super::distance::Kernel;
use super::graph::{Graph, Scored, MAX_LEVEL, NO_NODE};
use super::search::{greedy_descent, search_level};

/// SplitMix64: a tiny deterministic generator for node levels (reproducible builds, no deps).
#[derive(Clone, Copy, Debug)]
pub struct LevelRng {
    pub state: u64,
}

impl LevelRng {
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Level with P(level >= l) = m^-l, the distribution of the HNSW paper (mult = 1 / ln m).
    pub fn level(&mut self, m: usize) -> usize {
        // A uniform draw in (0, 1]: never 0, so the logarithm stays finite.
        let unit = ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        let level = (-unit.ln() / (m as f64).ln()).floor();
        (level as usize).min(MAX_LEVEL)
    }
}

/// Keep at most `limit` of `candidates` (sorted closest first to the base node): a candidate is
/// kept only if it is closer to the base than to every candidate already kept, which spreads
/// links across directions instead of spending them all inside one cluster.
pub fn select_diverse(
    graph: &Graph,
    kernel: &Kernel,
    candidates: &[Scored],
    limit: usize,
) -> Vec<Scored> {
    let mut kept: Vec<Scored> = Vec::with_capacity(limit);
    for &cand in candidates {
        if kept.len() >= limit {
            break;
        }
        let vector = graph.vector(cand.slot);
        let diverse = kept
            .iter()
            .all(|k| kernel.distance_rows(vector, graph.vector(k.slot)) >= cand.dist);
        if diverse {
            kept.push(cand);
        }
    }
    kept
}

/// Link the freshly pushed node `slot` into the graph.
pub fn link_node(graph: &mut Graph, kernel: &Kernel, slot: u32, ef_construction: usize) {
    let level = graph.levels[slot as usize] as usize;
    if graph.entry == NO_NODE {
        graph.entry = slot;
        graph.max_level = level;
        return;
    }
    let query = graph.widened(slot);
    let Some(start) = greedy_descent(graph, kernel, &query, level) else {
        return;
    };
    let mut entries = vec![start];
    for lvl in (0..=level.min(graph.max_level)).rev() {
        let found = search_level(
            graph,
            kernel,
            &query,
            &entries,
            lvl,
            ef_construction,
            |_| true,
        );
        let chosen = select_diverse(graph, kernel, &found, graph.m);
        let chosen_slots: Vec<u32> = chosen.iter().map(|s| s.slot).collect();
        graph.set_links(slot, lvl, &chosen_slots);
        for &neighbour in &chosen_slots {
            add_back_link(graph, kernel, neighbour, slot, lvl);
        }
        if !found.is_empty() {
            entries = found;
        }
    }
    if level > graph.max_level {
        graph.entry = slot;
        graph.max_level = level;
    }
}

/// Strengthen `slot`'s level-0 links after compaction thinned them: search level 0 from the
/// entry point (or another node when `slot` is the entry), re-select among the results and the
/// links it still has, and link both ways.
pub fn relink_level0(graph: &mut Graph, kernel: &Kernel, slot: u32, ef_construction: usize) {
    let start = if graph.entry != slot {
        graph.entry
    } else {
        u32::from(slot == 0)
    };
    if start as usize >= graph.slots() || start == slot {
        return;
    }
    let query = graph.widened(slot);
    let entry = Scored {
        dist: kernel.distance(&query, graph.vector(start)),
        slot: start,
    };
    let mut found = search_level(graph, kernel, &query, &[entry], 0, ef_construction, |_| {
        true
    });
    for &kept in graph.links(slot, 0) {
        if !found.iter().any(|s| s.slot == kept) {
            found.push(Scored {
                dist: kernel.distance(&query, graph.vector(kept)),
                slot: kept,
            });
        }
    }
    found.retain(|s| s.slot != slot);
    found.sort_unstable();
    let chosen: Vec<u32> = select_diverse(graph, kernel, &found, graph.m0)
        .iter()
        .map(|s| s.slot)
        .collect();
    graph.set_links(slot, 0, &chosen);
    for &neighbour in &chosen {
        add_back_link(graph, kernel, neighbour, slot, 0);
    }
}

/// Make `from` point to `to` on `level`; when its list is full, re-select the best diverse set
/// among the old neighbours plus the new one.
pub fn add_back_link(graph: &mut Graph, kernel: &Kernel, from: u32, to: u32, level: usize) {
    let existing = graph.links(from, level);
    if existing.contains(&to) {
        return;
    }
    let capacity = graph.capacity(level);
    if existing.len() < capacity {
        let mut list = existing.to_vec();
        list.push(to);
        graph.set_links(from, level, &list);
        return;
    }
    let base = graph.vector(from);
    let mut candidates: Vec<Scored> = existing
        .iter()
        .chain(std::iter::once(&to))
        .map(|&slot| Scored {
            dist: kernel.distance_rows(base, graph.vector(slot)),
            slot,
        })
        .collect();
    candidates.sort_unstable();
    let kept: Vec<u32> = select_diverse(graph, kernel, &candidates, capacity)
        .iter()
        .map(|s| s.slot)
        .collect();
    graph.set_links(from, level, &kept);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_follow_the_geometric_distribution() {
        let mut rng = LevelRng { state: 1 };
        let draws: Vec<usize> = (0..100_000).map(|_| rng.level(16)).collect();
        let above0 = draws.iter().filter(|&&l| l >= 1).count() as f64 / draws.len() as f64;
        // P(level >= 1) = 1/16.
        assert!((above0 - 1.0 / 16.0).abs() < 0.005, "{above0}");
        assert!(draws.iter().all(|&l| l <= MAX_LEVEL));
    }

    #[test]
    fn diverse_selection_skips_redundant_neighbours() {
        let mut g = Graph::new(2, 4);
        let base = g.push_node(0, &[1.0, 0.0], 0);
        // Two almost identical vectors in one direction, one in another.
        let a = g.push_node(1, &[0.9, 0.435_889_9], 0);
        let b = g.push_node(2, &[0.89, 0.455_960_5], 0);
        let c = g.push_node(3, &[0.8, -0.6], 0);
        let k = Kernel::scalar();
        let mut cands: Vec<Scored> = [a, b, c]
            .iter()
            .map(|&s| Scored {
                dist: k.distance_rows(g.vector(base), g.vector(s)),
                slot: s,
            })
            .collect();
        cands.sort();
        let kept: Vec<u32> = select_diverse(&g, &k, &cands, 3)
            .iter()
            .map(|s| s.slot)
            .collect();
        assert_eq!(kept, vec![a, c]);
    }
}
