//! Unit tests of the whole index on small synthetic data (the Python suite covers the large,
//! clustered and concurrent cases).

use super::*;

/// Deterministic pseudo-random clustered vectors: `clusters` centres plus small noise.
fn clustered(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f32> {
    let mut rng = LevelRng { state: seed };
    let mut unit = move || (rng.next_u64() >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0;
    let centres: Vec<f32> = (0..clusters * dim).map(|_| unit()).collect();
    let mut out = Vec::with_capacity(n * dim);
    for i in 0..n {
        let c = i % clusters;
        for d in 0..dim {
            out.push(centres[c * dim + d] + 0.3 * unit());
        }
    }
    out
}

fn exact(index: &HnswIndex, data: &[f32], ids: &[u64], query: &[f32], k: usize) -> Vec<u64> {
    let dim = index.dim();
    let mut q = query.to_vec();
    normalize(&mut q).unwrap();
    let mut scored: Vec<(f32, u64)> = ids
        .iter()
        .enumerate()
        .filter(|(_, id)| index.contains(**id))
        .map(|(row, &id)| {
            let mut v = data[row * dim..(row + 1) * dim].to_vec();
            normalize(&mut v).unwrap();
            (v.iter().zip(&q).map(|(a, b)| a * b).sum(), id)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    scored.into_iter().take(k).map(|(_, id)| id).collect()
}

fn build(n: usize, dim: usize) -> (HnswIndex, Vec<f32>, Vec<u64>) {
    let data = clustered(n, dim, 20, 7);
    let ids: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
    let mut index = HnswIndex::new(dim, Params::default()).unwrap();
    index.add(&ids, &data).unwrap();
    (index, data, ids)
}

#[test]
fn recall_on_clustered_data() {
    let (index, data, ids) = build(3000, 32);
    let queries = clustered(100, 32, 20, 99);
    let mut hits = 0;
    for q in queries.chunks_exact(32) {
        let want = exact(&index, &data, &ids, q, 10);
        let got: Vec<u64> = index
            .search(q, 10, None, None)
            .unwrap()
            .iter()
            .map(|h| h.id)
            .collect();
        hits += got.iter().filter(|id| want.contains(id)).count();
    }
    let recall = hits as f64 / 1000.0;
    assert!(recall >= 0.95, "recall {recall}");
}

#[test]
fn scores_are_cosine_and_sorted() {
    let mut index = HnswIndex::new(2, Params::default()).unwrap();
    index
        .add(&[1, 2, 3], &[1.0, 0.0, 0.0, 5.0, 1.0, 1.0])
        .unwrap();
    let hits = index.search(&[2.0, 0.0], 3, None, None).unwrap();
    let ids: Vec<u64> = hits.iter().map(|h| h.id).collect();
    assert_eq!(ids, [1, 3, 2]);
    // 1 and 0 are exact in half precision; 1/sqrt(2) is stored rounded
    assert!((hits[0].score - 1.0).abs() < 1e-6);
    let half_error = (hits[1].score - std::f32::consts::FRAC_1_SQRT_2).abs();
    assert!(half_error > 0.0 && half_error < half::MAX_SCORE_ERROR);
    assert!(hits[2].score.abs() < 1e-6);
}

#[test]
fn removed_ids_never_return_and_compaction_keeps_quality() {
    let (mut index, data, ids) = build(2000, 16);
    let removed: Vec<u64> = ids.iter().copied().filter(|id| id % 2 == 0).collect();
    assert_eq!(index.remove(&removed), removed.len());
    assert_eq!(index.remove(&removed), 0);
    assert_eq!(index.len(), ids.len() - removed.len());
    // Half of the nodes were removed: more than the worn fraction, so compaction already ran.
    assert_eq!(index.tombstones(), 0);
    let queries = clustered(50, 16, 20, 5);
    let mut hits = 0;
    for q in queries.chunks_exact(16) {
        let got: Vec<u64> = index
            .search(q, 10, None, None)
            .unwrap()
            .iter()
            .map(|h| h.id)
            .collect();
        assert!(got.iter().all(|id| id % 2 == 1));
        let want = exact(&index, &data, &ids, q, 10);
        hits += got.iter().filter(|id| want.contains(id)).count();
    }
    assert!(hits as f64 / 500.0 >= 0.95);
}

#[test]
fn re_add_replaces_the_vector() {
    let mut index = HnswIndex::new(2, Params::default()).unwrap();
    index.add(&[1, 2], &[1.0, 0.0, 0.0, 1.0]).unwrap();
    index.add(&[1], &[0.0, 1.0]).unwrap();
    assert_eq!(index.len(), 2);
    let hits = index.search(&[1.0, 0.0], 2, None, None).unwrap();
    assert_eq!(hits.len(), 2);
    assert!(hits.iter().all(|h| h.score.abs() < 1e-6));
}

#[test]
fn small_allow_sets_are_exact() {
    let (index, data, ids) = build(3000, 16);
    let allowed: Vec<u64> = ids.iter().copied().filter(|id| id % 7 == 0).collect();
    let queries = clustered(20, 16, 20, 11);
    for q in queries.chunks_exact(16) {
        let got: Vec<u64> = index
            .search(q, 10, None, Some(&allowed))
            .unwrap()
            .iter()
            .map(|h| h.id)
            .collect();
        let allowed_rows: Vec<u64> = ids.iter().copied().filter(|id| id % 7 == 0).collect();
        let mut want = exact(&index, &data, &ids, q, ids.len());
        want.retain(|id| allowed_rows.contains(id));
        want.truncate(10);
        assert_eq!(got, want);
    }
}

#[test]
fn bad_input_names_the_field() {
    let mut index = HnswIndex::new(4, Params::default()).unwrap();
    let field = |e: CoreError| match e {
        CoreError::InvalidArgument { field, .. } => field,
        other => panic!("{other}"),
    };
    assert_eq!(field(index.add(&[1], &[0.0; 4]).unwrap_err()), "vectors");
    assert_eq!(field(index.add(&[1], &[1.0; 3]).unwrap_err()), "vectors");
    assert_eq!(
        field(index.add(&[1], &[f32::NAN, 1.0, 1.0, 1.0]).unwrap_err()),
        "vectors"
    );
    assert_eq!(
        field(index.search(&[1.0; 3], 1, None, None).unwrap_err()),
        "query"
    );
    assert_eq!(
        field(index.search(&[1.0; 4], 1, Some(0), None).unwrap_err()),
        "ef"
    );
    assert_eq!(
        field(HnswIndex::new(0, Params::default()).err().unwrap()),
        "dim"
    );
    let params = Params {
        m: 1,
        ..Params::default()
    };
    assert_eq!(field(HnswIndex::new(4, params).err().unwrap()), "m");
    assert!(index.is_empty());
}

#[test]
fn bytes_round_trip_and_corruption_is_detected() {
    let (mut index, _, ids) = build(500, 8);
    index.remove(&ids[..10]);
    let bytes = index.to_bytes();
    let copy = HnswIndex::from_bytes(&bytes).unwrap();
    assert_eq!(copy.to_bytes(), bytes);
    let q = [0.5f32; 8];
    assert_eq!(
        index.search(&q, 10, None, None).unwrap(),
        copy.search(&q, 10, None, None).unwrap()
    );
    for cut in [0, 5, 12, bytes.len() / 2, bytes.len() - 1] {
        assert!(matches!(
            HnswIndex::from_bytes(&bytes[..cut]),
            Err(CoreError::Corrupt(_))
        ));
    }
    for pos in (0..bytes.len()).step_by(bytes.len() / 97 + 1) {
        let mut bad = bytes.clone();
        bad[pos] ^= 0x40;
        assert!(
            matches!(HnswIndex::from_bytes(&bad), Err(CoreError::Corrupt(_))),
            "{pos}"
        );
    }
}

#[test]
fn empty_index_round_trips_and_searches() {
    let index = HnswIndex::new(3, Params::default()).unwrap();
    let copy = HnswIndex::from_bytes(&index.to_bytes()).unwrap();
    assert!(copy
        .search(&[1.0, 0.0, 0.0], 5, None, None)
        .unwrap()
        .is_empty());
}

/// Every live node can be reached from the entry point on level 0.
fn all_reachable(index: &HnswIndex) -> bool {
    let g = &index.graph;
    if g.slots() == 0 {
        return true;
    }
    let mut seen = vec![false; g.slots()];
    let mut stack = vec![g.entry];
    seen[g.entry as usize] = true;
    while let Some(s) = stack.pop() {
        for &n in g.links(s, 0) {
            if !seen[n as usize] {
                seen[n as usize] = true;
                stack.push(n);
            }
        }
    }
    (0..g.slots()).all(|s| g.deleted[s] || seen[s])
}

fn hits_at_10(index: &HnswIndex, data: &[f32], ids: &[u64], queries: &[f32]) -> usize {
    let dim = index.dim();
    queries
        .chunks_exact(dim)
        .map(|q| {
            let want = exact(index, data, ids, q, 10);
            index
                .search(q, 10, None, None)
                .unwrap()
                .iter()
                .filter(|h| want.contains(&h.id))
                .count()
        })
        .sum()
}

#[test]
fn compaction_repairs_links_and_keeps_everything_reachable() {
    let (mut index, data, ids) = build(3000, 16);
    let removed: Vec<u64> = ids.iter().copied().filter(|id| (id / 3) % 10 < 6).collect();
    index.remove(&removed);
    index.compact();
    assert_eq!(index.tombstones(), 0);
    assert_eq!(index.graph.slots(), index.len());
    assert!(all_reachable(&index));
    // Quality: close to a fresh build over the survivors, and above the recall bar.
    let (kept_ids, kept_data): (Vec<u64>, Vec<f32>) = {
        let mut kept_ids = Vec::new();
        let mut kept_data = Vec::new();
        for (row, &id) in ids.iter().enumerate() {
            if index.contains(id) {
                kept_ids.push(id);
                kept_data.extend_from_slice(&data[row * 16..(row + 1) * 16]);
            }
        }
        (kept_ids, kept_data)
    };
    let mut fresh = HnswIndex::new(16, Params::default()).unwrap();
    fresh.add(&kept_ids, &kept_data).unwrap();
    let queries = clustered(50, 16, 20, 17);
    let compacted = hits_at_10(&index, &data, &ids, &queries);
    let rebuilt = hits_at_10(&fresh, &kept_data, &kept_ids, &queries);
    assert!(compacted as f64 / 500.0 >= 0.95, "{compacted}");
    assert!(
        compacted + 10 >= rebuilt,
        "compacted {compacted} vs rebuilt {rebuilt}"
    );
}

#[test]
fn removing_everything_then_adding_again() {
    let (mut index, data, ids) = build(200, 8);
    assert_eq!(index.remove(&ids[1..]), ids.len() - 1);
    assert_eq!(index.len(), 1);
    let hits = index.search(&data[..8], 5, None, None).unwrap();
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), [ids[0]]);
    index.remove(&ids[..1]);
    index.compact();
    assert!(index.is_empty());
    assert!(index.search(&data[..8], 5, None, None).unwrap().is_empty());
    index.add(&ids[..50], &data[..50 * 8]).unwrap();
    assert_eq!(index.len(), 50);
    assert!(all_reachable(&index));
}

/// An index of `base` rows inserted one by one, then `batch`-row batches added with `threads`.
fn grown_in_batches(
    data: &[f32],
    ids: &[u64],
    dim: usize,
    base: usize,
    batch: usize,
    threads: usize,
) -> HnswIndex {
    let mut index = HnswIndex::new(dim, Params::default()).unwrap();
    index.add(&ids[..base], &data[..base * dim]).unwrap();
    let rows = normalize_rows_for_test(dim, &data[base * dim..]);
    for (id_chunk, row_chunk) in ids[base..].chunks(batch).zip(rows.chunks(batch * dim)) {
        index
            .add_normalized_parallel(id_chunk, row_chunk, threads)
            .unwrap();
    }
    index
}

fn normalize_rows_for_test(dim: usize, data: &[f32]) -> Vec<f32> {
    HnswIndex::normalize_rows(dim, "vectors", data).unwrap()
}

#[test]
fn parallel_batches_keep_recall_and_reachability() {
    let dim = 32;
    let n = 4000;
    let data = clustered(n, dim, 20, 11);
    let ids: Vec<u64> = (0..n as u64).map(|i| i * 5 + 2).collect();
    let queries = clustered(100, dim, 20, 77);
    let one_by_one = grown_in_batches(&data, &ids, dim, 2000, 64, 1);
    let parallel = grown_in_batches(&data, &ids, dim, 2000, 64, 2);
    assert_eq!(parallel.len(), n);
    assert!(all_reachable(&parallel));
    let serial_hits = hits_at_10(&one_by_one, &data, &ids, &queries);
    let parallel_hits = hits_at_10(&parallel, &data, &ids, &queries);
    // 1000 hits possible: batching may move a few, never many.
    assert!(
        parallel_hits + 10 >= serial_hits,
        "{parallel_hits} vs {serial_hits}"
    );
    assert!(parallel_hits >= 950, "{parallel_hits}");
}

#[test]
fn parallel_batches_build_the_same_graph_whatever_the_threads() {
    let dim = 16;
    let n = 2500;
    let data = clustered(n, dim, 10, 5);
    let ids: Vec<u64> = (0..n as u64).collect();
    let two = grown_in_batches(&data, &ids, dim, 1500, 50, 2);
    let four = grown_in_batches(&data, &ids, dim, 1500, 50, 4);
    assert_eq!(two.to_bytes(), four.to_bytes());
}

#[test]
fn a_batch_that_replaces_an_id_goes_one_by_one() {
    let (mut index, data, ids) = build(1500, 8);
    let rows = normalize_rows_for_test(8, &data[..16]);
    index
        .add_normalized_parallel(&[ids[0], 999_999], &rows, 2)
        .unwrap();
    assert_eq!(index.len(), 1501);
    assert_eq!(index.tombstones(), 1);
}

#[test]
fn scores_stay_within_the_half_precision_bound_of_exact_cosine() {
    // 384-d unit vectors, as the server stores them: every score against the stored (rounded)
    // rows is within `MAX_SCORE_ERROR` of the f32 cosine, and on average far closer
    let dim = 384;
    let data = clustered(500, dim, 10, 11);
    let ids: Vec<u64> = (0..500).collect();
    let mut index = HnswIndex::new(dim, Params::default()).unwrap();
    index.add(&ids, &data).unwrap();
    let rows = HnswIndex::normalize_rows(dim, "data", &data).unwrap();
    let queries = HnswIndex::normalize_rows(dim, "q", &clustered(20, dim, 10, 12)).unwrap();
    let (mut worst, mut total, mut count) = (0.0f64, 0.0f64, 0usize);
    for q in queries.chunks_exact(dim) {
        for hit in index.search(q, 500, None, Some(&ids)).unwrap() {
            let row = &rows[hit.id as usize * dim..(hit.id as usize + 1) * dim];
            let want: f64 = q
                .iter()
                .zip(row)
                .map(|(a, b)| f64::from(*a) * f64::from(*b))
                .sum();
            let err = (f64::from(hit.score) - want).abs();
            worst = worst.max(err);
            total += err;
            count += 1;
        }
    }
    assert_eq!(count, 20 * 500);
    assert!(worst < f64::from(half::MAX_SCORE_ERROR), "worst {worst}");
    assert!(
        total / (count as f64) < 5e-5,
        "mean {}",
        total / count as f64
    );
}

#[test]
fn a_version_1_snapshot_loads_rounded_to_half_precision() {
    let dim = 40;
    let data = clustered(60, dim, 3, 5);
    let ids: Vec<u64> = (0..60).collect();
    let mut index = HnswIndex::new(dim, Params::default()).unwrap();
    index.add(&ids, &data).unwrap();
    index.remove(&[3, 4]);
    let v1 = version_1_bytes(&index);
    let loaded = HnswIndex::from_bytes(&v1).unwrap();
    assert_eq!(loaded.to_bytes(), index.to_bytes());
}

/// `index` written in the version 1 layout (f32 vectors): the stored rows widened.
fn version_1_bytes(index: &HnswIndex) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let current = index.to_bytes();
    let g = &index.graph;
    let header = 8 + 4 + 4 * 4 + 8 + 4 + 4 + 8;
    let meta = header + g.slots() * 10;
    let vectors = g.slots() * g.dim * 2;
    let mut out = current[..meta].to_vec();
    out[8..12].copy_from_slice(&1u32.to_le_bytes());
    for slot in 0..g.slots() as u32 {
        for x in g.widened(slot) {
            out.extend_from_slice(&x.to_le_bytes());
        }
    }
    out.extend_from_slice(&current[meta + vectors..current.len() - 32]);
    let digest = Sha256::digest(&out);
    out.extend_from_slice(&digest);
    out
}

#[test]
fn a_copy_compacted_aside_catches_up_with_the_writes_made_meanwhile() {
    let (mut live, data, ids) = build(600, 16);
    let gone: Vec<u64> = ids.iter().copied().filter(|id| id % 2 == 0).collect();
    assert_eq!(live.remove_keeping_tombstones(&gone), gone.len());
    assert!(live.is_worn());
    assert_eq!(live.tombstones(), gone.len()); // left for the caller to compact
    let mut copy = live.clone();
    // meanwhile: one id removed, one added, one re-added with another vector
    let (removed, replaced) = (ids[2], ids[4]); // both kept above
    live.remove_keeping_tombstones(&[removed]);
    let extra = clustered(2, 16, 2, 11);
    live.add(&[9_999, replaced], &extra).unwrap();
    live.set_ef_search(77).unwrap();
    copy.compact();
    assert_eq!(copy.tombstones(), 0);
    copy.catch_up(&live, &[removed, 9_999, replaced]);
    assert_eq!(copy.len(), live.len());
    assert!(!copy.contains(removed) && copy.contains(9_999) && copy.contains(replaced));
    assert_eq!(copy.ef_search(), 77);
    for (row, id) in [(0, 9_999u64), (1, replaced)] {
        let found = copy
            .search(&extra[row * 16..(row + 1) * 16], 1, None, None)
            .unwrap();
        assert_eq!(found[0].id, id);
        assert!(found[0].score > 0.999);
    }
    for (row, &id) in ids
        .iter()
        .enumerate()
        .filter(|(_, id)| live.contains(**id))
        .take(50)
    {
        if id == replaced {
            continue;
        }
        let found = copy
            .search(&data[row * 16..(row + 1) * 16], 1, None, None)
            .unwrap();
        assert_eq!(found[0].id, id);
    }
}
