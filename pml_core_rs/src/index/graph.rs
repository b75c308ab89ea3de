//! Storage layout of the graph. Vectors live as IEEE half precision (`half.rs`) in one contiguous
//! array of 64-byte lines (slot-major, each row padded to whole lines, so a 384-d vector is
//! exactly 12 cache lines and no SIMD load straddles two lines; a plain `Vec` from the
//! allocator starts 16 bytes into a line, which made every vector touch one line more and half
//! the loads split), level-0
//! neighbour lists in one flat `Vec<u32>` with a fixed stride of `1 + m0` (count, then ids), so a
//! search touches two predictable arrays instead of chasing per-node allocations. The few nodes
//! that reach upper levels keep a small flat list per node for those levels.

use super::half::{f16_from_f32, f16_to_f32};

/// Marks "no node" (empty graph entry point).
pub const NO_NODE: u32 = u32::MAX;
/// Highest level a node may get; with m >= 2 reaching it is astronomically unlikely.
pub const MAX_LEVEL: usize = 24;
/// Half-precision values per cache line.
pub const LINE_VALUES: usize = 32;

/// One cache line of vector data (f16 bits); the alignment is what the layout is for.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Line(pub [u16; LINE_VALUES]);

/// A scored candidate: `dist` is the graph distance (1 - cosine), `slot` the node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scored {
    pub dist: f32,
    pub slot: u32,
}

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    /// Distances are finite (vectors are normalized and checked), `total_cmp` keeps it a total
    /// order anyway; the slot breaks ties so results are deterministic.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.dist
            .total_cmp(&other.dist)
            .then(self.slot.cmp(&other.slot))
    }
}

/// Nodes, vectors and links. Slots are dense `0..len`; a removed node stays as a tombstone
/// (still routable, never returned) until compaction rebuilds the graph without it.
#[derive(Clone, Debug)]
pub struct Graph {
    pub dim: usize,
    /// Maximum links per node on levels >= 1 (and links chosen for a new node on every level).
    pub m: usize,
    /// Maximum links per node on level 0 (2 * m, as in the HNSW paper).
    pub m0: usize,
    /// Lines per vector row (`dim` rounded up to whole lines; the padding stays zero).
    pub row_lines: usize,
    pub vectors: Vec<Line>,
    pub ids: Vec<u64>,
    pub levels: Vec<u8>,
    pub deleted: Vec<bool>,
    pub deleted_count: usize,
    /// Level-0 lists, stride `1 + m0`: `[count, id_0 .. id_{m0-1}]`.
    pub links0: Vec<u32>,
    /// Per node, levels 1..=level, stride `1 + m` each.
    pub upper: Vec<Vec<u32>>,
    pub entry: u32,
    pub max_level: usize,
}

impl Graph {
    pub fn new(dim: usize, m: usize) -> Self {
        Graph {
            dim,
            m,
            m0: 2 * m,
            row_lines: dim.div_ceil(LINE_VALUES),
            vectors: Vec::new(),
            ids: Vec::new(),
            levels: Vec::new(),
            deleted: Vec::new(),
            deleted_count: 0,
            links0: Vec::new(),
            upper: Vec::new(),
            entry: NO_NODE,
            max_level: 0,
        }
    }

    /// Number of slots, tombstones included.
    pub fn slots(&self) -> usize {
        self.ids.len()
    }

    pub fn live(&self) -> usize {
        self.slots() - self.deleted_count
    }

    /// A node's stored row: `dim` f16 values (`half.rs`).
    #[inline]
    pub fn vector(&self, slot: u32) -> &[u16] {
        let start = slot as usize * self.row_lines;
        let row = &self.vectors[start..start + self.row_lines];
        // SAFETY: `Line` is `repr(C)` over `[u16; 32]` with no padding between lines, so the
        // row is `row_lines * 32 >= dim` initialized values, borrowed for as long as `self`.
        unsafe { std::slice::from_raw_parts(row.as_ptr().cast::<u16>(), self.dim) }
    }

    /// A node's stored row widened to f32 (exact), to search with it as a query.
    pub fn widened(&self, slot: u32) -> Vec<f32> {
        self.vector(slot).iter().map(|&h| f16_to_f32(h)).collect()
    }

    /// Capacity of a node's list on `level`.
    #[inline]
    pub fn capacity(&self, level: usize) -> usize {
        if level == 0 {
            self.m0
        } else {
            self.m
        }
    }

    #[inline]
    pub fn links(&self, slot: u32, level: usize) -> &[u32] {
        if level == 0 {
            let base = slot as usize * (1 + self.m0);
            let count = self.links0[base] as usize;
            &self.links0[base + 1..base + 1 + count]
        } else {
            let base = (level - 1) * (1 + self.m);
            let list = &self.upper[slot as usize][base..base + 1 + self.m];
            &list[1..1 + list[0] as usize]
        }
    }

    /// The raw list block (count first) of a node on `level`, for prefetching.
    #[inline]
    pub fn links_block(&self, slot: u32, level: usize) -> &[u32] {
        if level == 0 {
            let base = slot as usize * (1 + self.m0);
            &self.links0[base..base + 1 + self.m0]
        } else {
            &self.upper[slot as usize]
        }
    }

    pub fn set_links(&mut self, slot: u32, level: usize, neighbours: &[u32]) {
        assert!(
            neighbours.len() <= self.capacity(level),
            "neighbour list over capacity"
        );
        let list = if level == 0 {
            let base = slot as usize * (1 + self.m0);
            &mut self.links0[base..base + 1 + self.m0]
        } else {
            let base = (level - 1) * (1 + self.m);
            &mut self.upper[slot as usize][base..base + 1 + self.m]
        };
        list[0] = neighbours.len() as u32;
        list[1..1 + neighbours.len()].copy_from_slice(neighbours);
    }

    /// Make room for `rows` more nodes (amortized, like `Vec::reserve`).
    pub fn reserve(&mut self, rows: usize) {
        self.vectors.reserve(rows * self.row_lines);
        self.ids.reserve(rows);
        self.levels.reserve(rows);
        self.deleted.reserve(rows);
        self.links0.reserve(rows * (1 + self.m0));
        self.upper.reserve(rows);
        self.advise_huge_pages();
    }

    /// `reserve` for a graph whose final size is known (compaction, loading).
    pub fn reserve_exact(&mut self, rows: usize) {
        self.vectors.reserve_exact(rows * self.row_lines);
        self.ids.reserve_exact(rows);
        self.levels.reserve_exact(rows);
        self.deleted.reserve_exact(rows);
        self.links0.reserve_exact(rows * (1 + self.m0));
        self.upper.reserve_exact(rows);
        self.advise_huge_pages();
    }

    /// Ask for 2 MiB pages under the two arrays a search reads at random. With 4 KiB pages a
    /// 100k x 384 index spans 38k pages, far more than the TLB holds, so nearly every vector a
    /// search scores also costs a page walk; Linux in its default `madvise` mode only uses
    /// huge pages where asked. A hint: memory contents and results never change.
    fn advise_huge_pages(&self) {
        advise_huge_pages(&self.vectors);
        advise_huge_pages(&self.links0);
    }

    /// Append a node with empty lists, its vector rounded to half precision; returns its slot.
    pub fn push_node(&mut self, id: u64, vector: &[f32], level: usize) -> u32 {
        debug_assert_eq!(vector.len(), self.dim);
        let row: Vec<u16> = vector.iter().map(|&x| f16_from_f32(x)).collect();
        self.push_row(id, &row, level)
    }

    /// `push_node` for a row already in half precision (compaction, loading).
    pub fn push_row(&mut self, id: u64, row: &[u16], level: usize) -> u32 {
        debug_assert_eq!(row.len(), self.dim);
        let slot = self.slots() as u32;
        let capacities = (self.vectors.capacity(), self.links0.capacity());
        let start = self.vectors.len();
        self.vectors
            .resize(start + self.row_lines, Line([0; LINE_VALUES]));
        for (line, chunk) in self.vectors[start..]
            .iter_mut()
            .zip(row.chunks(LINE_VALUES))
        {
            line.0[..chunk.len()].copy_from_slice(chunk);
        }
        self.ids.push(id);
        self.levels.push(level as u8);
        self.deleted.push(false);
        self.links0.resize(self.links0.len() + 1 + self.m0, 0);
        self.upper.push(vec![0; level * (1 + self.m)]);
        if capacities != (self.vectors.capacity(), self.links0.capacity()) {
            self.advise_huge_pages();
        }
        slot
    }

    /// Heap bytes held by the graph (vectors, links, per-node metadata).
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        self.vectors.capacity() * size_of::<Line>()
            + self.ids.capacity() * size_of::<u64>()
            + self.levels.capacity()
            + self.deleted.capacity()
            + self.links0.capacity() * size_of::<u32>()
            + self.upper.capacity() * size_of::<Vec<u32>>()
            + self
                .upper
                .iter()
                .map(|l| l.capacity() * size_of::<u32>())
                .sum::<usize>()
    }
}

/// `madvise(MADV_HUGEPAGE)` over the whole pages inside `v`'s allocation, when it is large
/// enough for a huge page to fit (smaller arrays are cheap to map either way).
fn advise_huge_pages<T>(v: &Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        const HUGE_PAGE: usize = 2 << 20;
        const PAGE: usize = 4096;
        let bytes = v.capacity() * std::mem::size_of::<T>();
        if bytes < 2 * HUGE_PAGE {
            return;
        }
        let start = (v.as_ptr() as usize).next_multiple_of(PAGE);
        let end = (v.as_ptr() as usize + bytes) / PAGE * PAGE;
        if end > start {
            // SAFETY: the range lies inside the live allocation of `v`; MADV_HUGEPAGE changes
            // only how the kernel backs those pages, never their contents. A failure (an old
            // kernel, huge pages disabled) just leaves the small pages, so it is ignored.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = v;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_round_trip_on_every_level() {
        let mut g = Graph::new(2, 4);
        let a = g.push_node(7, &[1.0, 0.0], 2);
        let b = g.push_node(8, &[0.0, 1.0], 0);
        g.set_links(a, 0, &[b]);
        g.set_links(a, 2, &[b, b]);
        assert_eq!(g.links(a, 0), &[b]);
        assert_eq!(g.links(a, 1), &[] as &[u32]);
        assert_eq!(g.links(a, 2), &[b, b]);
        assert_eq!(g.links(b, 0), &[] as &[u32]);
        assert_eq!(g.widened(b), &[0.0, 1.0]);
    }

    #[test]
    fn vectors_are_line_aligned_and_padded() {
        let mut g = Graph::new(40, 4);
        // small integers are exact in half precision
        let a: Vec<f32> = (0..40).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..40).map(|i| -(i as f32)).collect();
        g.push_node(1, &a, 0);
        g.push_node(2, &b, 0);
        assert_eq!(g.row_lines, 2);
        assert_eq!(g.widened(0), a);
        assert_eq!(g.widened(1), b);
        assert_eq!(g.vector(1).as_ptr() as usize % 64, 0);
        // The padding of row 0 is zero, so it cannot leak into a dot product.
        assert!(g.vectors[1].0[8..].iter().all(|&x| x == 0));
    }

    #[test]
    #[should_panic(expected = "over capacity")]
    fn over_capacity_is_refused() {
        let mut g = Graph::new(1, 2);
        let a = g.push_node(1, &[1.0], 1);
        g.set_links(a, 1, &[0, 0, 0]);
    }

    #[test]
    fn scored_orders_by_distance_then_slot() {
        let mut v = [
            Scored { dist: 0.5, slot: 2 },
            Scored { dist: 0.1, slot: 9 },
            Scored { dist: 0.5, slot: 1 },
        ];
        v.sort();
        assert_eq!(v.iter().map(|s| s.slot).collect::<Vec<_>>(), [9, 1, 2]);
    }
}
