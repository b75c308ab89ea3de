//! What follows a step, learned from workflows (docs/ranking.md, Sessions, "Workflows"): a
//! stored pattern that runs the previous step's last tool and then other tools has shown, once
//! per successful run, that its next tool follows that step, and so does the rest of its
//! steps. Each such pattern teaches the capability whose tools are exactly its next tool, and
//! the capability whose tools are exactly the rest of its steps (when that is more than one
//! tool), a count of its successes seen at its last use: the unit and the aging of a session's
//! transition (`pml_server.ranking.transitions`), with which the service sums them.

use rustc_hash::FxHashMap;

use super::table::{NameId, RankTable};

/// A capability that followed the previous step in a workflow: its id, that workflow's
/// successes and its last use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Follower {
    pub capability: String,
    pub count: i64,
    pub last_used_ms: i64,
}

/// The followers of a step whose tools are `previous` (in the order it called them), taught
/// by at most `limit` workflows (those with the most successes; ties by pattern id). A step
/// whose last tool no pattern calls has none. One pass over the rows calling that tool, and
/// for each set of tools taught, one look-up of the rows with exactly those tools.
pub fn followers(table: &RankTable, previous: &[&str], limit: usize) -> Vec<Follower> {
    let Some(last) = previous.last().and_then(|t| table.name_id(t)) else {
        return Vec::new();
    };
    // (fewest successes last, then pattern id): the order workflows are kept in
    type Kept<'t> = (std::cmp::Reverse<i64>, &'t str, u32, usize);
    let mut workflows: Vec<Kept<'_>> = table
        .rows_calling(last)
        .filter_map(|slot| {
            let row = table.row(slot);
            let usable = row.is_rankable() && !row.flagged && row.counts.successes > 0;
            let at = row.sequence.iter().position(|&t| t == last)?;
            let key = std::cmp::Reverse(row.counts.successes);
            (usable && at + 1 < row.sequence.len()).then_some((key, &*row.pattern_id, slot, at + 1))
        })
        .collect();
    if workflows.len() > limit {
        workflows.select_nth_unstable(limit);
        workflows.truncate(limit);
    }
    workflows.sort_unstable();
    let mut with_tools: FxHashMap<Box<[NameId]>, Vec<&str>> = FxHashMap::default();
    let mut out = Vec::new();
    for (_, _, slot, next) in workflows {
        let row = table.row(slot);
        let rest = &row.sequence[next..];
        let mut taught: Vec<&str> = Vec::new();
        let sets = if rest.len() > 1 {
            vec![&rest[..1], rest]
        } else {
            vec![rest]
        };
        for tools in sets {
            let mut set: Box<[NameId]> = tools.into();
            set.sort_unstable();
            let found = with_tools
                .entry(set)
                .or_insert_with_key(|set| capabilities_with(table, set));
            for &capability in found.iter() {
                if !taught.contains(&capability) {
                    taught.push(capability);
                }
            }
        }
        out.extend(taught.into_iter().map(|capability| Follower {
            capability: capability.to_owned(),
            count: row.counts.successes,
            last_used_ms: row.counts.last_used_ms,
        }));
    }
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
