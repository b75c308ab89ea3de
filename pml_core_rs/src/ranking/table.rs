//! One tenant's ranking table: for each pattern what Suggest's formula and filters read (its
//! counters, capability, tools, tags, retention marks) and the intent ids whose vectors stand
//! for it in the vector index. Kept in step with the store by the engine (every capture,
//! deletion, mark and the restore at open), so a query is ranked without reading the store.
//!
//! Tool names and tags are interned once per table: they repeat across patterns, and a filter
//! compares small integers instead of strings. Interned names are never dropped (a tenant's
//! vocabulary of tools and tags is bounded by its history); capability ids, one per group,
//! are kept in their rows instead, so a deleted capability leaves nothing behind. Rows of
//! deleted patterns are freed and their slots reused.

use crate::tool_names::{same_tool_as_any, tool_part};
use std::collections::{HashMap, HashSet};

use rustc_hash::{FxHashMap, FxHashSet};

use super::formula::Counts;
use crate::index::HnswIndex;

/// Index of an interned name.
pub type NameId = u32;

/// What the engine knows of a pattern; a row ranks once both halves are set.
#[derive(Clone, Debug, Default)]
pub struct Row {
    pub pattern_id: Box<str>,
    /// From the pattern record: capability, tools and retention marks.
    pub capability: Option<Box<str>>,
    pub tools: Box<[NameId]>,
    /// The same tools in the order the pattern first runs each (docs/ranking.md, Steps,
    /// "Order of the steps").
    pub sequence: Box<[NameId]>,
    /// The grouping signature (`capture.rules.tool_signature`): the tools in call order,
    /// consecutive repeats collapsed; the patterns of one capability share it.
    pub signature: Box<[NameId]>,
    pub flagged: bool,
    /// From the counters record (with `counts.superseded` from the pattern record).
    pub counts: Counts,
    pub tags: Box<[NameId]>,
    pub has_counters: bool,
    /// The pattern's intents in the vector index.
    pub intents: Vec<u64>,
}

impl Row {
    /// Both the pattern record and its counters are known: the row can be ranked.
    pub fn is_rankable(&self) -> bool {
        self.capability.is_some() && self.has_counters
    }

    fn is_empty(&self) -> bool {
        self.capability.is_none() && !self.has_counters && self.intents.is_empty()
    }
}

#[derive(Clone, Debug)]
pub struct RankTable {
    rows: Vec<Row>,
    free: Vec<u32>,
    row_of: HashMap<Box<str>, u32>,
    /// Keyed by intent ids, which the engine assigns (never caller input): the fast Fx hash.
    intent_row: FxHashMap<u64, u32>,
    names: Vec<String>,
    name_id: HashMap<String, NameId>,
    /// The analysed words of each tool name (`ranking.plans.tool_words`), by name id; empty
    /// for tags and for tools set without words.
    words: Vec<Box<[Box<str>]>>,
    /// Each name's tool part (`tool_names::tool_part`: `create_issue` for
    /// `mcp__github__create_issue`), by name id, read by `tool_ids` on every filtered query.
    parts: Vec<Box<str>>,
    /// The tools each analysed name word belongs to.
    word_tools: HashMap<Box<str>, Vec<NameId>>,
    /// The tool profiles in the primary index's space (docs/ranking.md, Steps, "Tool
    /// profiles"), always kept.
    profiles: ProfileSet,
    /// The same in the cross-lingual companion's space (docs/ranking.md, Other languages,
    /// "Tool profiles in the companion's space"): kept from a tenant's first request ranked
    /// there on.
    companion: ProfileSet,
    /// The rows calling each tool.
    tool_rows: FxHashMap<NameId, FxHashSet<u32>>,
    /// The rows whose tools are exactly each set (sorted ids; docs/ranking.md, Sessions,
    /// "Workflows": the capabilities a workflow teaches are found by their tools).
    set_rows: FxHashMap<Box<[NameId]>, FxHashSet<u32>>,
}

/// Which vectors a set of tool profiles is the mean of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileSpace {
    /// The primary index's (the tenant's own vectors).
    Primary,
    /// The cross-lingual companion's (a request in another language).
    Companion,
}

/// One space's tool profiles: each tool's unit mean of the vectors of every intent of every
/// pattern calling it (a tool without one has none), with what keeps them up to date.
#[derive(Clone, Debug, Default)]
struct ProfileSet {
    /// Written to by the table's changes (the primary set always; the companion's once its
    /// first refresh summed every tool).
    kept: bool,
    profiles: FxHashMap<NameId, Box<[f32]>>,
    /// Each profiled tool's sum of intent vectors and how many were added.
    sums: FxHashMap<NameId, (Box<[f64]>, usize)>,
    /// Tools that lost an intent or a row since the last refresh: summed again in full.
    dirty: FxHashSet<NameId>,
    /// (intent, tool) pairs gained since the last refresh: added to the tool's sum.
    pending: Vec<(u64, NameId)>,
}

impl ProfileSet {
    fn kept() -> Self {
        ProfileSet {
            kept: true,
            ..ProfileSet::default()
        }
    }

    fn stale(&self) -> bool {
        !self.kept || !self.dirty.is_empty() || !self.pending.is_empty()
    }

    fn mark(&mut self, tool: NameId) {
        if self.kept {
            self.dirty.insert(tool);
        }
    }

    fn gain(&mut self, pairs: impl Iterator<Item = (u64, NameId)>) {
        if self.kept {
            self.pending.extend(pairs);
        }
    }

    fn memory_bytes(&self) -> usize {
        self.profiles
            .values()
            .map(|p| 24 + 12 * p.len())
            .sum::<usize>()
            + 12 * self.pending.capacity()
    }
}

impl Default for RankTable {
    fn default() -> Self {
        RankTable {
            rows: Vec::new(),
            free: Vec::new(),
            row_of: HashMap::new(),
            intent_row: FxHashMap::default(),
            names: Vec::new(),
            name_id: HashMap::new(),
            words: Vec::new(),
            parts: Vec::new(),
            word_tools: HashMap::new(),
            profiles: ProfileSet::kept(),
            companion: ProfileSet::default(),
            tool_rows: FxHashMap::default(),
            set_rows: FxHashMap::default(),
        }
    }
}

impl RankTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Patterns with a row (rankable or not yet).
    pub fn len(&self) -> usize {
        self.row_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.row_of.is_empty()
    }

    pub fn intent_count(&self) -> usize {
        self.intent_row.len()
    }

    fn intern(&mut self, name: &str) -> NameId {
        if let Some(&id) = self.name_id.get(name) {
            return id;
        }
        let id = self.names.len() as NameId;
        self.names.push(name.to_owned());
        self.words.push(Box::default());
        self.parts.push(tool_part(name).unwrap_or_default().into());
        self.name_id.insert(name.to_owned(), id);
        id
    }

    /// The id of a name already interned (a name no row ever had is None).
    pub fn name_id(&self, name: &str) -> Option<NameId> {
        self.name_id.get(name).copied()
    }

    /// The ids of every name a row has that is one of `tools`, with or without its server's
    /// namespace (`tool_names::same_tool`: docs/ranking.md, Context filters). Only a name whose
    /// tool part (kept at interning) is an offered name's is compared; names no row has are not
    /// listed.
    pub fn tool_ids(&self, tools: &[String]) -> Vec<NameId> {
        let mut ids: Vec<NameId> = tools.iter().filter_map(|t| self.name_id(t)).collect();
        let exact: HashSet<NameId> = ids.iter().copied().collect();
        // one tool has one last segment: only stored names ending in an offered one's are asked
        let parts: HashSet<&str> = tools.iter().filter_map(|t| tool_part(t)).collect();
        let asked = self
            .names
            .iter()
            .zip(&self.parts)
            .enumerate()
            .filter(|&(id, (_, part))| {
                !exact.contains(&(id as NameId)) && parts.contains(part.as_ref())
            })
            .map(|(id, (name, _))| (id, name.as_ref()));
        ids.extend(
            same_tool_as_any(tools, asked)
                .into_iter()
                .map(|id| id as NameId),
        );
        ids
    }

    pub fn name(&self, id: NameId) -> &str {
        &self.names[id as usize]
    }

    /// The tools whose name has this analysed word.
    pub fn tools_named_by(&self, word: &str) -> &[NameId] {
        self.word_tools.get(word).map_or(&[], |t| t.as_slice())
    }

    /// The rows calling a tool (rankable or not), in no particular order.
    pub fn rows_calling(&self, tool: NameId) -> impl Iterator<Item = u32> + '_ {
        self.tool_rows.get(&tool).into_iter().flatten().copied()
    }

    /// The rows whose tools are exactly `tools` (sorted ids), in no particular order.
    pub fn rows_with_tools(&self, tools: &[NameId]) -> impl Iterator<Item = u32> + '_ {
        self.set_rows.get(tools).into_iter().flatten().copied()
    }

    /// The analysed words of a tool's name (empty when never given).
    pub fn tool_words(&self, id: NameId) -> &[Box<str>] {
        &self.words[id as usize]
    }

    fn interned(&mut self, names: &[String]) -> Box<[NameId]> {
        let mut ids: Vec<NameId> = names.iter().map(|n| self.intern(n)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_boxed_slice()
    }

    fn slot_for(&mut self, pattern_id: &str) -> u32 {
        if let Some(&slot) = self.row_of.get(pattern_id) {
            return slot;
        }
        let row = Row {
            pattern_id: pattern_id.into(),
            ..Row::default()
        };
        let slot = match self.free.pop() {
            Some(slot) => {
                self.rows[slot as usize] = row;
                slot
            }
            None => {
                self.rows.push(row);
                (self.rows.len() - 1) as u32
            }
        };
        self.row_of.insert(pattern_id.into(), slot);
        slot
    }

    fn release_if_empty(&mut self, slot: u32) {
        let row = &mut self.rows[slot as usize];
        if row.is_empty() {
            self.row_of.remove(&*row.pattern_id);
            *row = Row::default();
            self.free.push(slot);
        }
    }

    /// The pattern record's part: capability, tools and retention marks. `tool_words`, when
    /// given, holds each tool's analysed name words, in the order of `tools`.
    pub fn set_pattern(
        &mut self,
        pattern_id: &str,
        capability_id: &str,
        tools: &[String],
        tool_words: &[Vec<String>],
        flagged: bool,
        superseded: bool,
    ) {
        for (tool, words) in tools.iter().zip(tool_words) {
            let id = self.intern(tool) as usize;
            if self.words[id].is_empty() && !words.is_empty() {
                let mut own: Vec<Box<str>> = words.iter().map(|w| w.as_str().into()).collect();
                own.sort_unstable();
                own.dedup();
                for w in &own {
                    self.word_tools
                        .entry(w.clone())
                        .or_default()
                        .push(id as NameId);
                }
                self.words[id] = own.into_boxed_slice();
            }
        }
        // each tool once, in the order the pattern first runs it; the row's set is the same
        // ids sorted
        let mut sequence: Vec<NameId> = Vec::with_capacity(tools.len());
        for tool in tools {
            let id = self.intern(tool);
            if !sequence.contains(&id) {
                sequence.push(id);
            }
        }
        let mut signature: Vec<NameId> = tools.iter().map(|t| self.intern(t)).collect();
        signature.dedup();
        let mut sorted = sequence.clone();
        sorted.sort_unstable();
        let slot = self.slot_for(pattern_id);
        self.retool(slot, sorted.into_boxed_slice());
        let row = &mut self.rows[slot as usize];
        row.sequence = sequence.into_boxed_slice();
        row.signature = signature.into_boxed_slice();
        row.capability = Some(capability_id.into());
        row.flagged = flagged;
        row.counts.superseded = superseded;
    }

    /// The counters record's part: success, failure and usage counts, last use, tags.
    pub fn set_counters(
        &mut self,
        pattern_id: &str,
        successes: i64,
        failures: i64,
        usage: i64,
        last_used_ms: i64,
        tags: &[String],
    ) {
        let tags = self.interned(tags);
        let slot = self.slot_for(pattern_id);
        let row = &mut self.rows[slot as usize];
        let superseded = row.counts.superseded;
        row.counts = Counts {
            successes,
            failures,
            usage,
            last_used_ms,
            superseded,
        };
        row.tags = tags;
        row.has_counters = true;
    }

    /// Forget the pattern's record and counters (deleted); its intents stay linked until the
    /// vector index lets them go (`unlink_intents`), but the row no longer ranks.
    pub fn remove_pattern(&mut self, pattern_id: &str) -> bool {
        let Some(&slot) = self.row_of.get(pattern_id) else {
            return false;
        };
        self.retool(slot, Box::default());
        let row = &mut self.rows[slot as usize];
        row.capability = None;
        row.signature = Box::default();
        row.flagged = false;
        row.counts = Counts::default();
        row.tags = Box::default();
        row.has_counters = false;
        self.release_if_empty(slot);
        true
    }

    /// The intent now stands for the pattern in the vector index (a replay does nothing).
    pub fn link_intent(&mut self, intent_id: u64, pattern_id: &str) {
        if self.intent_row.contains_key(&intent_id) {
            return; // an intent never changes pattern
        }
        let slot = self.slot_for(pattern_id);
        let intents = &mut self.rows[slot as usize].intents;
        if intents.capacity() == 0 {
            // most patterns keep one intent: no room for four (16 bytes a pattern)
            intents.reserve_exact(1);
        }
        intents.push(intent_id);
        self.intent_row.insert(intent_id, slot);
        let tools = &self.rows[slot as usize].tools;
        self.profiles.gain(tools.iter().map(|&t| (intent_id, t)));
        self.companion.gain(tools.iter().map(|&t| (intent_id, t)));
    }

    /// The intents left the vector index (unknown ids do nothing).
    pub fn unlink_intents(&mut self, intent_ids: &[u64]) {
        for id in intent_ids {
            if let Some(slot) = self.intent_row.remove(id) {
                self.rows[slot as usize].intents.retain(|i| i != id);
                self.touch(slot);
                self.release_if_empty(slot);
            }
        }
    }

    /// The pattern an intent stands for.
    pub fn pattern_of_intent(&self, intent_id: u64) -> Option<&str> {
        let slot = self.intent_row.get(&intent_id)?;
        Some(&self.rows[*slot as usize].pattern_id)
    }

    /// The intents standing for a pattern (empty if none).
    pub fn intents_of(&self, pattern_id: &str) -> &[u64] {
        match self.row_of.get(pattern_id) {
            Some(&slot) => &self.rows[slot as usize].intents,
            None => &[],
        }
    }

    /// The row of the pattern an intent stands for.
    pub fn row_of_intent(&self, intent_id: u64) -> Option<u32> {
        self.intent_row.get(&intent_id).copied()
    }

    pub fn row_of_pattern(&self, pattern_id: &str) -> Option<u32> {
        self.row_of.get(pattern_id).copied()
    }

    /// Every row (free slots are empty rows, never rankable).
    pub fn rows(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter()
    }

    pub fn row(&self, slot: u32) -> &Row {
        &self.rows[slot as usize]
    }

    /// Give a row new tools (the same ones change nothing): a tool it leaves is summed again,
    /// one it joins gains its intents.
    fn retool(&mut self, slot: u32, tools: Box<[NameId]>) {
        let old = std::mem::take(&mut self.rows[slot as usize].tools);
        if old == tools {
            self.rows[slot as usize].tools = old;
            return;
        }
        if let Some(rows) = self.set_rows.get_mut(&old) {
            rows.remove(&slot);
            if rows.is_empty() {
                self.set_rows.remove(&old);
            }
        }
        if !tools.is_empty() {
            self.set_rows.entry(tools.clone()).or_default().insert(slot);
        }
        for t in old.iter() {
            if let Some(rows) = self.tool_rows.get_mut(t) {
                rows.remove(&slot);
                if rows.is_empty() {
                    self.tool_rows.remove(t);
                }
            }
            self.profiles.mark(*t);
            self.companion.mark(*t);
        }
        for &t in tools.iter() {
            self.tool_rows.entry(t).or_default().insert(slot);
            if !old.contains(&t) {
                let intents = &self.rows[slot as usize].intents;
                self.profiles.gain(intents.iter().map(|&i| (i, t)));
                self.companion.gain(intents.iter().map(|&i| (i, t)));
            }
        }
        self.rows[slot as usize].tools = tools;
    }

    /// The row lost an intent: its tools' profiles are summed again.
    fn touch(&mut self, slot: u32) {
        for &t in self.rows[slot as usize].tools.iter() {
            self.profiles.mark(t);
            self.companion.mark(t);
        }
    }

    /// Some tool profile is out of date (`refresh_profiles` brings it up to date).
    pub fn profiles_stale(&self) -> bool {
        self.profiles.stale()
    }

    /// Some tool profile of the companion's space is out of date, or never summed
    /// (`refresh_companion_profiles`).
    pub fn companion_profiles_stale(&self) -> bool {
        self.companion.stale()
    }

    /// A tool's profile: unit length, `dim` values (None: no intent of its patterns in the
    /// vector index).
    pub fn profile(&self, tool: NameId) -> Option<&[f32]> {
        self.profile_in(ProfileSpace::Primary, tool)
    }

    /// A tool's profile in `space` (None: no intent of its patterns has a vector there, or the
    /// companion's profiles were never summed).
    /// Every profiled tool and its profile in `space`, in no set order.
    pub fn profiles_of(&self, space: ProfileSpace) -> impl Iterator<Item = (NameId, &[f32])> {
        let set = match space {
            ProfileSpace::Primary => &self.profiles,
            ProfileSpace::Companion => &self.companion,
        };
        set.profiles.iter().map(|(&t, p)| (t, &p[..]))
    }

    pub fn profile_in(&self, space: ProfileSpace, tool: NameId) -> Option<&[f32]> {
        let set = match space {
            ProfileSpace::Primary => &self.profiles,
            ProfileSpace::Companion => &self.companion,
        };
        set.profiles.get(&tool).map(|p| &p[..])
    }

    /// Bring the profiles up to date from the vectors `ann` holds (docs/ranking.md, Steps,
    /// "Tool profiles"): each intent gained since the last call is added to its tools' sums
    /// (one vector addition per tool); a tool that lost an intent or a row is summed again in
    /// full (its intents).
    pub fn refresh_profiles(&mut self, ann: &HnswIndex) {
        self.refresh_profiles_with(ann.dim(), |id, acc| ann.add_vector_into(id, acc));
    }

    /// `refresh_profiles` with `add(id, acc)` adding intent `id`'s unit vector (`dim` values)
    /// into `acc`, false when it has none.
    pub fn refresh_profiles_with(&mut self, dim: usize, add: impl FnMut(u64, &mut [f64]) -> bool) {
        let mut set = std::mem::take(&mut self.profiles);
        self.refresh_set(&mut set, dim, add, false);
        self.profiles = set;
    }

    /// The tool profiles in the companion's space from the vectors its index `ann` holds
    /// (docs/ranking.md, Other languages): the first call sums every tool, later ones only
    /// what changed, as `refresh_profiles`. The companion's vectors are computed after the
    /// intents are linked (service/_companion.py), so an intent without one yet is added when
    /// a later call finds it.
    pub fn refresh_companion_profiles(&mut self, ann: &HnswIndex) {
        self.refresh_companion_profiles_with(ann.dim(), |id, acc| ann.add_vector_into(id, acc));
    }

    /// `refresh_companion_profiles` with `add` as `refresh_profiles_with`'s.
    pub fn refresh_companion_profiles_with(
        &mut self,
        dim: usize,
        add: impl FnMut(u64, &mut [f64]) -> bool,
    ) {
        let mut set = std::mem::take(&mut self.companion);
        if !set.kept {
            set.kept = true;
            set.dirty.extend(self.tool_rows.keys().copied());
        }
        self.refresh_set(&mut set, dim, add, true);
        self.companion = set;
    }

    /// Bring `set` up to date: tools dirty summed in full, pending pairs added. `retry`: an
    /// intent still linked whose vector is missing is added by a later call (the companion's
    /// vectors arrive after the link); otherwise it has left the index and is dropped.
    fn refresh_set(
        &self,
        set: &mut ProfileSet,
        dim: usize,
        mut add: impl FnMut(u64, &mut [f64]) -> bool,
        retry: bool,
    ) {
        if !set.stale() {
            return;
        }
        let mut later: Vec<(u64, NameId)> = Vec::new();
        let mut dirty: Vec<NameId> = set.dirty.drain().collect();
        dirty.sort_unstable();
        let mut changed: FxHashSet<NameId> = FxHashSet::default();
        for &t in &dirty {
            let mut sum = vec![0.0f64; dim].into_boxed_slice();
            let mut n = 0;
            if let Some(slots) = self.tool_rows.get(&t) {
                let mut ordered: Vec<u32> = slots.iter().copied().collect();
                ordered.sort_unstable(); // the same sum whatever the set's order
                for slot in ordered {
                    for &i in &self.rows[slot as usize].intents {
                        if add(i, &mut sum) {
                            n += 1;
                        } else if retry {
                            later.push((i, t));
                        }
                    }
                }
            }
            set.sums.insert(t, (sum, n));
            changed.insert(t);
        }
        for (i, t) in std::mem::take(&mut set.pending) {
            // summed in full above, or no longer the intent's: nothing to add
            let Some(&slot) = self.intent_row.get(&i) else {
                continue;
            };
            if dirty.binary_search(&t).is_ok() || !self.rows[slot as usize].tools.contains(&t) {
                continue;
            }
            let (sum, n) = set
                .sums
                .entry(t)
                .or_insert_with(|| (vec![0.0f64; dim].into_boxed_slice(), 0));
            if sum.len() != dim {
                continue;
            }
            if add(i, sum) {
                *n += 1;
                changed.insert(t);
            } else if retry {
                later.push((i, t));
            }
        }
        set.pending = later;
        for t in changed {
            let unit = set.sums.get(&t).and_then(|(sum, n)| {
                let norm = sum.iter().map(|x| x * x).sum::<f64>().sqrt();
                (*n > 0 && norm > 0.0 && norm.is_finite()).then(|| {
                    sum.iter()
                        .map(|&x| (x / norm) as f32)
                        .collect::<Box<[f32]>>()
                })
            });
            match unit {
                Some(unit) => {
                    set.profiles.insert(t, unit);
                }
                None => {
                    set.profiles.remove(&t);
                    set.sums.remove(&t);
                }
            }
        }
    }

    /// Heap bytes held, approximately (the benchmark's per-intent memory).
    pub fn memory_bytes(&self) -> usize {
        let rows: usize = self
            .rows
            .iter()
            .map(|r| {
                std::mem::size_of::<Row>()
                    + r.pattern_id.len()
                    + r.capability.as_ref().map_or(0, |c| c.len())
                    + 4 * (r.tools.len() + r.sequence.len() + r.signature.len() + r.tags.len())
                    + 8 * r.intents.capacity()
            })
            .sum();
        let maps = (self.row_of.capacity() * (std::mem::size_of::<Box<str>>() + 4))
            + self.row_of.keys().map(|k| k.len()).sum::<usize>()
            + self.intent_row.capacity() * 12;
        let names: usize = self
            .names
            .iter()
            .map(|n| 2 * n.capacity() + 28)
            .sum::<usize>()
            + self.parts.iter().map(|p| 16 + p.len()).sum::<usize>();
        let words: usize = self
            .words
            .iter()
            .map(|w| 16 + w.iter().map(|x| 16 + x.len()).sum::<usize>())
            .sum();
        let index: usize = self
            .word_tools
            .iter()
            .map(|(w, t)| 48 + w.len() + 4 * t.capacity())
            .sum();
        let profiles: usize = self.profiles.memory_bytes()
            + self.companion.memory_bytes()
            + self
                .tool_rows
                .values()
                .map(|r| 40 + 5 * r.capacity())
                .sum::<usize>()
            + self
                .set_rows
                .iter()
                .map(|(k, r)| 56 + 4 * k.len() + 5 * r.capacity())
                .sum::<usize>();
        rows + maps + names + words + index + profiles
    }
}

/// The dot product of two rows (of equal length; a longer one's tail is ignored): eight f32
/// lanes the compiler vectorises, summed in a fixed order, so every call gives the same bits.
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut lanes = [0.0f32; 8];
    let mut x = a.chunks_exact(8);
    let mut y = b.chunks_exact(8);
    for (u, v) in (&mut x).zip(&mut y) {
        for k in 0..8 {
            lanes[k] += u[k] * v[k];
        }
    }
    let mut sum: f32 = lanes.iter().sum();
    for (u, v) in x.remainder().iter().zip(y.remainder()) {
        sum += u * v;
    }
    f64::from(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic unit-ish vector per (intent, space).
    fn vector(id: u64, salt: u64, dim: usize) -> Vec<f64> {
        (0..dim as u64)
            .map(|d| (((id * 31 + d * 17 + salt * 7) % 13) as f64) - 6.0)
            .collect()
    }

    fn filled() -> RankTable {
        let mut table = RankTable::new();
        for id in 0..12u64 {
            let pattern = format!("p{}", id / 2);
            table.link_intent(id, &pattern);
            let tools = vec![format!("t{}", id % 3), format!("t{}", (id / 2) % 4)];
            table.set_pattern(&pattern, "c", &tools, &[], false, false);
        }
        table
    }

    /// The companion's profiles are kept apart from the primary's, summed in full at their
    /// first refresh, and an intent whose companion vector arrives later is added then: the
    /// same profiles as a table whose vectors were all there (docs/ranking.md, Other languages,
    /// "Tool profiles in the companion's space").
    #[test]
    fn companion_profiles_follow_vectors_that_arrive_late() {
        let dim = 5;
        let mut late = filled();
        let mut whole = filled();
        late.refresh_profiles_with(dim, |id, acc| {
            acc.iter_mut()
                .zip(vector(id, 0, dim))
                .for_each(|(a, v)| *a += v);
            true
        });
        assert!(late.profile(late.name_id("t0").unwrap()).is_some());
        assert!(late.companion_profiles_stale(), "never summed");
        let t0 = late.name_id("t0").unwrap();
        assert!(late.profile_in(ProfileSpace::Companion, t0).is_none());
        // intents 3 and 8 have no companion vector yet
        fn present(id: u64) -> bool {
            id != 3 && id != 8
        }
        fn add(have: fn(u64) -> bool, dim: usize) -> impl FnMut(u64, &mut [f64]) -> bool {
            move |id, acc| {
                if !have(id) {
                    return false;
                }
                acc.iter_mut()
                    .zip(vector(id, 1, dim))
                    .for_each(|(a, v)| *a += v);
                true
            }
        }
        late.refresh_companion_profiles_with(dim, add(present, dim));
        assert!(late.companion_profiles_stale(), "two vectors still missing");
        // a later capture and a deletion while they are missing
        late.link_intent(12, "p1");
        whole.link_intent(12, "p1");
        late.unlink_intents(&[5]);
        whole.unlink_intents(&[5]);
        late.refresh_companion_profiles_with(dim, add(|_| true, dim));
        assert!(!late.companion_profiles_stale());
        whole.refresh_companion_profiles_with(dim, add(|_| true, dim));
        for tool in ["t0", "t1", "t2", "t3"] {
            let t = late.name_id(tool).unwrap();
            let (a, b) = (
                late.profile_in(ProfileSpace::Companion, t).unwrap(),
                whole.profile_in(ProfileSpace::Companion, t).unwrap(),
            );
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() < 1e-6, "{tool}: {a:?} != {b:?}");
            }
            // the primary profiles are another space's
            assert_ne!(late.profile(t).unwrap(), a);
        }
    }
}
