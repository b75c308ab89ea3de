//! What follows a step, learned from workflows (docs/ranking.md, Sessions, "Workflows"): a
//! stored pattern that runs the previous step's last tool and then other tools has shown, once
//! per successful run, that its next tool follows that step, and so does the rest of its
//! steps. Each such pattern teaches the capability whose tools are exactly its next tool, and
//! the capability whose tools are exactly the rest of its steps (when that is more than one
//! tool), a count of its successes seen at its last use: the unit and the aging of a session's
//! transition (`pml_server.ranking.transitions`), with which the service sums them.

use rustc_hash::FxHashMap;

use super::table::{NameId, ProfileSpace, RankTable};
use crate::tool_names::same_tool;

/// A set of tools the workflows taught to follow the previous step: the capabilities whose
/// tools are exactly it, and the (successes, last use in ms) of each workflow that taught it.
/// Grouped by set, not one row per capability and workflow: a set that thousands of
/// capabilities run (an agent's `search`) taught by 256 workflows is one group of its
/// capabilities and 256 counts, not 256 times the capabilities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taught {
    pub capabilities: Vec<String>,
    pub workflows: Vec<(i64, i64)>,
}

/// The rows calling a tool named `tool`, with or without its server's namespace (the stored
/// names `tool_names::same_tool` matches, as `available_tools` are read), each once, and
/// those names' ids.
fn rows_calling_named(table: &RankTable, tool: &str) -> (Vec<u32>, Vec<NameId>) {
    let ids = table.tool_ids(&[tool.to_owned()]);
    let mut rows: Vec<u32> = ids.iter().flat_map(|&id| table.rows_calling(id)).collect();
    rows.sort_unstable();
    rows.dedup();
    (rows, ids)
}

/// The capabilities standing for a step whose tools are `previous` (in call order): those of
/// the patterns whose grouping signature is the step's (its tools, consecutive repeats
/// collapsed), each tool with or without its server's namespace (`tool_names::same_tool`),
/// else, for a step of several tools, those whose only tool is its last; each once, sorted.
/// One pass over the rows calling the last tool.
pub fn step_capabilities(table: &RankTable, previous: &[&str]) -> Vec<String> {
    let Some(&last) = previous.last() else {
        return Vec::new();
    };
    let mut signature = previous.to_vec();
    signature.dedup();
    let (rows, _) = rows_calling_named(table, last);
    let with_signature = |wanted: &[&str]| -> Vec<String> {
        let mut found: Vec<String> = rows
            .iter()
            .map(|&slot| table.row(slot))
            .filter(|row| {
                row.signature.len() == wanted.len()
                    && row
                        .signature
                        .iter()
                        .zip(wanted)
                        .all(|(&id, name)| same_tool(table.name(id), name))
            })
            .filter_map(|row| row.capability.as_deref().map(str::to_owned))
            .collect();
        found.sort_unstable();
        found.dedup();
        found
    };
    let found = with_signature(&signature);
    if found.is_empty() && previous.len() > 1 {
        return with_signature(&[last]);
    }
    found
}

/// The previous step's place among the requests (docs/ranking.md, Sessions, "Follow-up
/// requests"): the mean of the profiles in `space` of the tools it ran (`previous`, each with
/// or without its server's namespace, `tool_names::same_tool`; a name met twice counts once),
/// unit length; None when none of them has a profile there. The profiles must be up to date
/// (`RankTable::refresh_profiles`).
pub fn step_profile(
    table: &RankTable,
    previous: &[String],
    space: ProfileSpace,
) -> Option<Vec<f32>> {
    let mut ids = table.tool_ids(previous);
    ids.sort_unstable();
    ids.dedup();
    let mut sum: Vec<f64> = Vec::new();
    for id in ids {
        let Some(profile) = table.profile_in(space, id) else {
            continue;
        };
        if sum.is_empty() {
            sum = vec![0.0; profile.len()];
        }
        for (s, &p) in sum.iter_mut().zip(profile) {
            *s += f64::from(p);
        }
    }
    let norm = sum.iter().map(|s| s * s).sum::<f64>().sqrt();
    if !(norm.is_finite() && norm > 0.0) {
        return None;
    }
    Some(sum.iter().map(|s| (s / norm) as f32).collect())
}

/// What follows a step whose tools are `previous` (in the order it called them), taught by
/// at most `limit` workflows (those with the most successes; ties by pattern id): each set of
/// tools taught, in the order first taught, with its capabilities and the workflows that
/// taught it. Its last tool is a stored one with or without its server's namespace
/// (`tool_names::same_tool`); a step whose last tool no pattern calls has none. One pass over
/// the rows calling that tool, and for each set of tools taught, one look-up of the rows with
/// exactly those tools. A capability's tools are one set, so it is in one group at most.
pub fn followers(table: &RankTable, previous: &[&str], limit: usize) -> Vec<Taught> {
    let Some(&last) = previous.last() else {
        return Vec::new();
    };
    let (rows, last) = rows_calling_named(table, last);
    // (fewest successes last, then pattern id): the order workflows are kept in
    type Kept<'t> = (std::cmp::Reverse<i64>, &'t str, u32, usize);
    let mut workflows: Vec<Kept<'_>> = rows
        .into_iter()
        .filter_map(|slot| {
            let row = table.row(slot);
            let usable = row.is_rankable() && !row.flagged && row.counts.successes > 0;
            let at = row.sequence.iter().position(|t| last.contains(t))?;
            let key = std::cmp::Reverse(row.counts.successes);
            (usable && at + 1 < row.sequence.len()).then_some((key, &*row.pattern_id, slot, at + 1))
        })
        .collect();
    if workflows.len() > limit {
        workflows.select_nth_unstable(limit);
        workflows.truncate(limit);
    }
    workflows.sort_unstable();
    let mut group_of: FxHashMap<Box<[NameId]>, usize> = FxHashMap::default();
    let mut out: Vec<Taught> = Vec::new();
    for (_, _, slot, next) in workflows {
        let row = table.row(slot);
        let rest = &row.sequence[next..];
        let sets = if rest.len() > 1 {
            vec![&rest[..1], rest]
        } else {
            vec![rest]
        };
        for tools in sets {
            let mut set: Box<[NameId]> = tools.into();
            set.sort_unstable();
            let group = *group_of.entry(set).or_insert_with_key(|set| {
                let capabilities = capabilities_with(table, set);
                out.push(Taught {
                    capabilities: capabilities.into_iter().map(str::to_owned).collect(),
                    workflows: Vec::new(),
                });
                out.len() - 1
            });
            out[group]
                .workflows
                .push((row.counts.successes, row.counts.last_used_ms));
        }
    }
    out.retain(|taught| !taught.capabilities.is_empty());
    out
}

/// The capabilities of the rankable, unflagged patterns whose tools are exactly `tools`
/// (sorted ids), each once, in pattern id order.
fn capabilities_with<'t>(table: &'t RankTable, tools: &[NameId]) -> Vec<&'t str> {
    let mut rows: Vec<u32> = table
        .rows_with_tools(tools)
        .filter(|&slot| {
            let row = table.row(slot);
            row.is_rankable() && !row.flagged
        })
        .collect();
    rows.sort_by_key(|&slot| &*table.row(slot).pattern_id);
    let mut out: Vec<&str> = Vec::new();
    for slot in rows {
        let capability = table.row(slot).capability.as_deref().unwrap_or_default();
        if !out.contains(&capability) {
            out.push(capability);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two tools' patterns, each intent's vector one axis (intent `i` on axis `i % 3`).
    fn table() -> RankTable {
        let mut table = RankTable::new();
        for (id, pattern, tool) in [(0u64, "p0", "read"), (1, "p0", "read"), (2, "p1", "write")] {
            table.link_intent(id, pattern);
            table.set_pattern(pattern, "c", &[tool.to_owned()], &[], false, false);
        }
        table.refresh_profiles_with(3, |id, acc| {
            acc[(id % 3) as usize] += 1.0;
            true
        });
        table
    }

    fn names(tools: &[&str]) -> Vec<String> {
        tools.iter().map(|t| (*t).to_owned()).collect()
    }

    /// The previous step's vector is its tool's profile, or the unit mean of its tools'
    /// profiles, a tool named twice counting once; None when no tool has a profile
    /// (docs/ranking.md, Sessions, "Follow-up requests").
    #[test]
    fn a_steps_profile_is_the_unit_mean_of_its_tools_profiles() {
        let table = table();
        let read = step_profile(&table, &names(&["read"]), ProfileSpace::Primary).unwrap();
        let h = std::f32::consts::FRAC_1_SQRT_2;
        assert!((read[0] - h).abs() < 1e-6 && (read[1] - h).abs() < 1e-6 && read[2] == 0.0);
        let both = step_profile(&table, &names(&["read", "write"]), ProfileSpace::Primary);
        let twice = step_profile(
            &table,
            &names(&["read", "write", "read"]),
            ProfileSpace::Primary,
        );
        assert_eq!(both, twice);
        let both = both.unwrap();
        let norm: f32 = both.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-6);
        // (h, h, 0) + (0, 0, 1), normalized: each axis of `read` weighs h / sqrt(2)
        assert!((both[2] - h).abs() < 1e-6 && (both[0] - 0.5).abs() < 1e-6);
        assert_eq!(
            step_profile(&table, &names(&["delete"]), ProfileSpace::Primary),
            None
        );
        assert_eq!(step_profile(&table, &[], ProfileSpace::Primary), None);
        // the companion's profiles were never summed
        assert_eq!(
            step_profile(&table, &names(&["read"]), ProfileSpace::Companion),
            None
        );
    }
}
