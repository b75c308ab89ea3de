//! Inserting a batch of nodes on several threads. Most of an insert is its `ef_construction`
//! searches; linking is short. So the batch's searches run in parallel on the graph as it was
//! before the batch (read-only), then the nodes are linked one by one in batch order. A node's
//! candidates are what its search found plus, computed exactly, every earlier node of the batch
//! (which its search could not see): it ends up with the neighbours a one-by-one insert would
//! find, or closer ones. The levels are drawn in batch order and the searches do not depend on
//! the thread schedule, so the same batch always builds the same graph.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::distance::Kernel;
use super::graph::{Graph, Scored, NO_NODE};
use super::half::{f16_from_f32, f16_to_f32};
use super::insert::{add_back_link, select_diverse};
use super::search::{greedy_descent, search_level};

/// What `link_node`'s searches find for `query` (a node of `level`) on each level it shares
/// with the graph, closest first; index = level.
fn search_candidates(
    graph: &Graph,
    kernel: &Kernel,
    query: &[f32],
    level: usize,
    ef_construction: usize,
) -> Vec<Vec<Scored>> {
    let mut out = vec![Vec::new(); level + 1];
    let Some(start) = greedy_descent(graph, kernel, query, level) else {
        return out;
    };
    let mut entries = vec![start];
    for lvl in (0..=level.min(graph.max_level)).rev() {
        let found = search_level(graph, kernel, query, &entries, lvl, ef_construction, |_| {
            true
        });
        if !found.is_empty() {
            entries.clone_from(&found);
        }
        out[lvl] = found;
    }
    out
}

/// The candidates of every row of `rows` (row-major, `graph.dim` columns), on up to `threads`
/// threads; `levels[i]` is row i's level.
fn search_all(
    graph: &Graph,
    kernel: &Kernel,
    rows: &[f32],
    levels: &[usize],
    ef_construction: usize,
    threads: usize,
) -> Vec<Vec<Vec<Scored>>> {
    let queries: Vec<&[f32]> = rows.chunks_exact(graph.dim).collect();
    let next = AtomicUsize::new(0);
    let mut out: Vec<Vec<Vec<Scored>>> = vec![Vec::new(); queries.len()];
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.clamp(1, queries.len().max(1)))
            .map(|_| {
                scope.spawn(|| {
                    // A shared counter rather than fixed shares: on a loaded machine one
                    // thread is often descheduled (as in `search_batch`).
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(query) = queries.get(i) else { break };
                        let found =
                            search_candidates(graph, kernel, query, levels[i], ef_construction);
                        done.push((i, found));
                    }
                    done
                })
            })
            .collect();
        for worker in workers {
            for (i, found) in worker.join().expect("insert search worker panicked") {
                out[i] = found;
            }
        }
    });
    out
}

/// Push and link the rows of `rows` as new nodes with the given ids and levels (ids not in the
/// graph, vectors normalized). Returns their slots, in order.
pub fn insert_batch(
    graph: &mut Graph,
    kernel: &Kernel,
    ids: &[u64],
    rows: &[f32],
    levels: &[usize],
    ef_construction: usize,
    threads: usize,
) -> Vec<u32> {
    // The searches use each row as it will be stored (rounded to half precision), as
    // `link_node` does one node at a time.
    let stored: Vec<f32> = rows.iter().map(|&x| f16_to_f32(f16_from_f32(x))).collect();
    let found = search_all(graph, kernel, &stored, levels, ef_construction, threads);
    let first = graph.slots() as u32;
    for ((&id, row), &level) in ids.iter().zip(rows.chunks_exact(graph.dim)).zip(levels) {
        graph.push_node(id, row, level);
    }
    let slots: Vec<u32> = (first..first + ids.len() as u32).collect();
    for (k, (&slot, mut per_level)) in slots.iter().zip(found).enumerate() {
        link_with_candidates(
            graph,
            kernel,
            slot,
            &mut per_level,
            &slots[..k],
            ef_construction,
        );
    }
    slots
}

fn link_with_candidates(
    graph: &mut Graph,
    kernel: &Kernel,
    slot: u32,
    per_level: &mut [Vec<Scored>],
    earlier: &[u32],
    ef_construction: usize,
) {
    let level = graph.levels[slot as usize] as usize;
    let query = graph.widened(slot);
    for (lvl, found) in per_level.iter_mut().enumerate().rev() {
        let mut candidates = std::mem::take(found);
        for &other in earlier {
            if graph.levels[other as usize] as usize >= lvl {
                candidates.push(Scored {
                    dist: kernel.distance(&query, graph.vector(other)),
                    slot: other,
                });
            }
        }
        candidates.sort_unstable();
        candidates.truncate(ef_construction);
        let chosen: Vec<u32> = select_diverse(graph, kernel, &candidates, graph.m)
            .iter()
            .map(|s| s.slot)
            .collect();
        graph.set_links(slot, lvl, &chosen);
        for &neighbour in &chosen {
            add_back_link(graph, kernel, neighbour, slot, lvl);
        }
    }
    if graph.entry == NO_NODE || level > graph.max_level {
        graph.entry = slot;
        graph.max_level = level;
    }
}
