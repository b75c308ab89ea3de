//! Searching the graph: greedy descent on the upper levels, best-first beam search (`ef`) on a
//! level, and the exact scan used when an `allow` filter leaves only a few candidates.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::distance::{prefetch, prefetch_u32, Kernel};
use super::graph::{Graph, Scored, NO_NODE};
use super::visited::with_visited;

/// How many candidates ahead of the one being scored to prefetch.
const PREFETCH_AHEAD: usize = 2;

/// Walk down from the entry point to `stop_level + 1`, always moving to the closest neighbour.
pub fn greedy_descent(
    graph: &Graph,
    kernel: &Kernel,
    query: &[f32],
    stop_level: usize,
) -> Option<Scored> {
    if graph.entry == NO_NODE {
        return None;
    }
    let mut best = Scored {
        dist: kernel.distance(query, graph.vector(graph.entry)),
        slot: graph.entry,
    };
    for level in (stop_level + 1..=graph.max_level).rev() {
        let mut improved = true;
        while improved {
            improved = false;
            for &next in graph.links(best.slot, level) {
                let dist = kernel.distance(query, graph.vector(next));
                if dist < best.dist {
                    best = Scored { dist, slot: next };
                    improved = true;
                }
            }
        }
    }
    Some(best)
}

/// Best-first search of one level from `entries`, keeping the `ef` closest nodes that pass
/// `accept`. Nodes that fail `accept` (tombstones, filtered out) are still walked through, so
/// the graph stays connected for the search. Returns the kept nodes, closest first.
pub fn search_level(
    graph: &Graph,
    kernel: &Kernel,
    query: &[f32],
    entries: &[Scored],
    level: usize,
    ef: usize,
    accept: impl Fn(u32) -> bool,
) -> Vec<Scored> {
    with_visited(graph.slots(), |visited| {
        let mut frontier: BinaryHeap<Reverse<Scored>> = BinaryHeap::with_capacity(ef * 4);
        let mut kept: BinaryHeap<Scored> = BinaryHeap::with_capacity(ef + 1);
        for &entry in entries {
            if visited.first_visit(entry.slot) {
                frontier.push(Reverse(entry));
                if accept(entry.slot) {
                    kept.push(entry);
                    if kept.len() > ef {
                        kept.pop();
                    }
                }
            }
        }
        let mut bound = if kept.len() >= ef {
            kept.peek().map_or(f32::INFINITY, |s| s.dist)
        } else {
            f32::INFINITY
        };
        // Unvisited neighbours of the node being expanded, gathered first so their vectors can
        // be prefetched a few ahead of the distance computations.
        let mut fresh: Vec<u32> = Vec::with_capacity(graph.capacity(level));
        while let Some(Reverse(current)) = frontier.pop() {
            // Stop once the closest unexplored node is farther than the worst kept one; while
            // fewer than `ef` nodes passed the filter, keep walking (the bound is infinite).
            if current.dist > bound {
                break;
            }
            if let Some(Reverse(next)) = frontier.peek() {
                prefetch_u32(graph.links_block(next.slot, level));
            }
            fresh.clear();
            fresh.extend(
                graph
                    .links(current.slot, level)
                    .iter()
                    .copied()
                    .filter(|&n| visited.first_visit(n)),
            );
            for &slot in fresh.iter().take(PREFETCH_AHEAD) {
                prefetch(graph.vector(slot));
            }
            for (i, &next) in fresh.iter().enumerate() {
                if let Some(&ahead) = fresh.get(i + PREFETCH_AHEAD) {
                    prefetch(graph.vector(ahead));
                }
                let dist = kernel.distance(query, graph.vector(next));
                if dist < bound || kept.len() < ef {
                    let scored = Scored { dist, slot: next };
                    frontier.push(Reverse(scored));
                    if accept(next) {
                        kept.push(scored);
                        if kept.len() > ef {
                            kept.pop();
                        }
                        if kept.len() >= ef {
                            bound = kept.peek().map_or(f32::INFINITY, |s| s.dist);
                        }
                    }
                }
            }
        }
        kept.into_sorted_vec()
    })
}

/// Exact top-`k` over the given slots (closest first).
pub fn exact_top_k(
    graph: &Graph,
    kernel: &Kernel,
    query: &[f32],
    slots: &[u32],
    k: usize,
) -> Vec<Scored> {
    let mut scored: Vec<Scored> = slots
        .iter()
        .map(|&slot| Scored {
            dist: kernel.distance(query, graph.vector(slot)),
            slot,
        })
        .collect();
    if scored.len() > k {
        scored.select_nth_unstable(k);
        scored.truncate(k);
    }
    scored.sort_unstable();
    scored
}
