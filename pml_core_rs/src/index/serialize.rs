//! Versioned binary form of an index (Python stores the bytes; Rust does no I/O).
//!
//! Layout, all little-endian: magic `PMLHNSW\0`, u32 version, header (dim, m, ef_construction,
//! ef_search: u32; slots: u64; entry, max_level: u32; rng state: u64), per slot (id u64, level
//! u8, deleted u8), the vectors (slots * dim f16 in version 2; f32 in version 1, which loads
//! rounded to half precision, the graph unchanged), level-0 lists (count u32 + ids), upper lists
//! per slot and level (count u32 + ids), then a SHA-256 of everything before it. The checksum
//! catches truncation and bit rot; every field is still validated after it, so even bytes with
//! a matching checksum can only load as a well-formed graph or fail with `Corrupt`.

use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};

use super::distance::Kernel;
use super::graph::{Graph, MAX_LEVEL, NO_NODE};
use super::half::{self, f16_from_f32};
use super::insert::LevelRng;
use super::{check_ef, HnswIndex, MAX_DIM, MAX_M};
use crate::error::{CoreError, CoreResult};

const MAGIC: &[u8; 8] = b"PMLHNSW\0";
const VERSION: u32 = 2;
/// Version 1 stored f32 vectors; still read, so a store's snapshot survives the upgrade.
const VERSION_F32: u32 = 1;
const CHECKSUM_LEN: usize = 32;

fn corrupt(reason: impl Into<String>) -> CoreError {
    CoreError::Corrupt(format!("HNSW index bytes: {}", reason.into()))
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn list(&mut self, list: &[u32]) {
        self.u32(list.len() as u32);
        for &v in list {
            self.u32(v);
        }
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> CoreResult<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.data.len())
            .ok_or_else(|| corrupt("truncated"))?;
        let out = &self.data[self.pos..end];
        self.pos = end;
        Ok(out)
    }
    fn u8(&mut self) -> CoreResult<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> CoreResult<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn u64(&mut self) -> CoreResult<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    /// A neighbour list of at most `capacity` entries, each a valid slot.
    fn list(&mut self, capacity: usize, slots: usize) -> CoreResult<Vec<u32>> {
        let count = self.u32()? as usize;
        if count > capacity {
            return Err(corrupt(format!("neighbour list of {count} > {capacity}")));
        }
        (0..count)
            .map(|_| {
                let v = self.u32()?;
                if v as usize >= slots {
                    return Err(corrupt(format!("neighbour {v} out of range")));
                }
                Ok(v)
            })
            .collect()
    }
}

impl HnswIndex {
    pub fn to_bytes(&self) -> Vec<u8> {
        let g = &self.graph;
        let mut w = Writer(Vec::with_capacity(64 + g.memory_bytes()));
        w.0.extend_from_slice(MAGIC);
        w.u32(VERSION);
        w.u32(g.dim as u32);
        w.u32(g.m as u32);
        w.u32(self.ef_construction as u32);
        w.u32(self.ef_search as u32);
        w.u64(g.slots() as u64);
        w.u32(g.entry);
        w.u32(g.max_level as u32);
        w.u64(self.rng.state);
        for slot in 0..g.slots() {
            w.u64(g.ids[slot]);
            w.u8(g.levels[slot]);
            w.u8(u8::from(g.deleted[slot]));
        }
        for slot in 0..g.slots() as u32 {
            for &h in g.vector(slot) {
                w.0.extend_from_slice(&h.to_le_bytes());
            }
        }
        for slot in 0..g.slots() as u32 {
            for level in 0..=g.levels[slot as usize] as usize {
                w.list(g.links(slot, level));
            }
        }
        let digest = Sha256::digest(&w.0);
        w.0.extend_from_slice(&digest);
        w.0
    }

    pub fn from_bytes(data: &[u8]) -> CoreResult<Self> {
        if data.len() < MAGIC.len() + 4 + CHECKSUM_LEN {
            return Err(corrupt("too short"));
        }
        if &data[..MAGIC.len()] != MAGIC {
            return Err(corrupt("not an HNSW index (bad magic)"));
        }
        let (body, checksum) = data.split_at(data.len() - CHECKSUM_LEN);
        let mut r = Reader {
            data: body,
            pos: MAGIC.len(),
        };
        let version = r.u32()?;
        if version != VERSION && version != VERSION_F32 {
            return Err(corrupt(format!("unsupported version {version}")));
        }
        let value_bytes = if version == VERSION_F32 { 4 } else { 2 };
        if Sha256::digest(body).as_slice() != checksum {
            return Err(corrupt("checksum mismatch (truncated or modified)"));
        }
        let dim = r.u32()? as usize;
        let m = r.u32()? as usize;
        let ef_construction = r.u32()? as usize;
        let ef_search = r.u32()? as usize;
        if dim == 0 || dim > MAX_DIM || !(2..=MAX_M).contains(&m) {
            return Err(corrupt(format!("bad dim {dim} or m {m}")));
        }
        check_ef("ef_construction", ef_construction).map_err(|e| corrupt(e.to_string()))?;
        check_ef("ef_search", ef_search).map_err(|e| corrupt(e.to_string()))?;
        let slots = usize::try_from(r.u64()?).map_err(|_| corrupt("slot count"))?;
        // Every slot needs at least 10 metadata bytes + its vector: bound before allocating.
        let min_per_slot = 10 + value_bytes * dim + 4;
        if slots >= NO_NODE as usize || slots.saturating_mul(min_per_slot) > body.len() {
            return Err(corrupt(format!("slot count {slots} does not fit the data")));
        }
        let entry = r.u32()?;
        let max_level = r.u32()? as usize;
        let rng = LevelRng { state: r.u64()? };

        let mut graph = Graph::new(dim, m);
        graph.reserve_exact(slots);
        let mut meta = Vec::with_capacity(slots);
        for _ in 0..slots {
            let id = r.u64()?;
            let level = r.u8()?;
            let deleted = match r.u8()? {
                0 => false,
                1 => true,
                other => return Err(corrupt(format!("bad deleted flag {other}"))),
            };
            if level as usize > MAX_LEVEL {
                return Err(corrupt(format!("level {level} > {MAX_LEVEL}")));
            }
            meta.push((id, level, deleted));
        }
        let raw = r.take(slots * dim * value_bytes)?;
        let rows: Vec<u16> = if version == VERSION_F32 {
            let values: Vec<f32> = raw
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
                .collect();
            if values.iter().any(|x| !x.is_finite()) {
                return Err(corrupt("non-finite vector value"));
            }
            values.into_iter().map(f16_from_f32).collect()
        } else {
            raw.chunks_exact(2)
                .map(|b| u16::from_le_bytes(b.try_into().expect("2 bytes")))
                .collect()
        };
        // (a version 1 value beyond the half range would round to infinity: caught here too)
        if !rows.iter().all(|&h| half::is_finite(h)) {
            return Err(corrupt("non-finite vector value"));
        }
        let mut slot_of = FxHashMap::with_capacity_and_hasher(slots, Default::default());
        for (slot, (id, level, deleted)) in meta.into_iter().enumerate() {
            graph.push_row(id, &rows[slot * dim..(slot + 1) * dim], level as usize);
            if deleted {
                graph.deleted[slot] = true;
                graph.deleted_count += 1;
            } else if slot_of.insert(id, slot as u32).is_some() {
                return Err(corrupt(format!("id {id} is live twice")));
            }
        }
        for slot in 0..slots as u32 {
            for level in 0..=graph.levels[slot as usize] as usize {
                let list = r.list(graph.capacity(level), slots)?;
                // Searches index a neighbour's list at the same level: it must have one.
                if list
                    .iter()
                    .any(|&n| (graph.levels[n as usize] as usize) < level)
                {
                    return Err(corrupt(format!("link on level {level} to a lower node")));
                }
                graph.set_links(slot, level, &list);
            }
        }
        if r.pos != body.len() {
            return Err(corrupt("trailing bytes"));
        }
        if slots == 0 {
            if entry != NO_NODE {
                return Err(corrupt("entry point in an empty graph"));
            }
        } else if entry as usize >= slots
            || graph.levels[entry as usize] as usize != max_level
            || graph.levels.iter().any(|&l| l as usize > max_level)
        {
            return Err(corrupt("entry point does not match the top level"));
        }
        graph.entry = entry;
        graph.max_level = if slots == 0 { 0 } else { max_level };
        Ok(HnswIndex {
            graph,
            kernel: Kernel::detect(),
            ef_construction,
            ef_search,
            exact: false,
            slot_of,
            rng,
        })
    }
}
