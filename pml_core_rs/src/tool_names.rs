//! One tool, written with or without its server's namespace (docs/capture.md, rule 4;
//! docs/ranking.md, Context filters): pml reads `mcp.github.create_issue(...)` as
//! `github:create_issue`, clients report the call as `create_issue` or (Claude Code)
//! `mcp__github__create_issue`, and others write `github/create_issue` or
//! `github.create_issue`.

/// A name's segments: split at `:`, `__`, `/` and `.`, empty ones dropped, and a leading `mcp`
/// dropped when more follow.
fn segments(name: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = name;
    while !rest.is_empty() {
        let cut = rest
            .char_indices()
            .find(|&(i, c)| matches!(c, ':' | '/' | '.') || rest[i..].starts_with("__"));
        match cut {
            Some((i, c)) => {
                parts.push(&rest[..i]);
                let width = if c == '_' { 2 } else { 1 };
                rest = &rest[i + width..];
            }
            None => {
                parts.push(rest);
                rest = "";
            }
        }
    }
    parts.retain(|p| !p.is_empty());
    if parts.len() > 1 && parts[0].eq_ignore_ascii_case("mcp") {
        parts.remove(0);
    }
    parts
}

/// The last segment of a name (`create_issue` for `mcp__github__create_issue`), if any.
pub fn tool_part(name: &str) -> Option<&str> {
    segments(name).last().copied()
}

/// Whether `a` and `b` name the same tool: equal, or the segments of one end the other's
/// (`create_issue`, `github:create_issue` and `mcp__github__create_issue` are one tool;
/// `gitlab:create_issue` and `github:create_issue` are two).
pub fn same_tool(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (sa, sb) = (segments(a), segments(b));
    let (short, long) = if sa.len() <= sb.len() {
        (sa, sb)
    } else {
        (sb, sa)
    };
    !short.is_empty() && long[long.len() - short.len()..] == short[..]
}

/// Which of `names` (index, name) are the same tool as one of `offered` (`same_tool`), each
/// answered by one walk of its segments down a trie of the offered ones rather than compared
/// with every offered name: a thousand offered names against ten thousand stored ones that all
/// end in the same segment is one pass over each (docs/ranking.md, Context filters).
pub fn same_tool_as_any<'n>(
    offered: &[String],
    names: impl IntoIterator<Item = (usize, &'n str)>,
) -> Vec<usize> {
    use std::collections::HashSet;
    let exact: HashSet<&str> = offered.iter().map(String::as_str).collect();
    let ends = EndsTrie::new(offered);
    names
        .into_iter()
        .filter(|&(_, name)| exact.contains(name) || ends.ends_alike(&segments(name)))
        .map(|(i, _)| i)
        .collect()
}

#[cfg(test)]
thread_local! {
    /// Segments hashed to build and walk an `EndsTrie` (tests: the work is linear).
    static SEGMENTS_HASHED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One segment hashed into or looked up in an `EndsTrie` (counted in tests).
fn hashed() {
    #[cfg(test)]
    SEGMENTS_HASHED.with(|n| n.set(n.get() + 1));
}

/// The offered names' segments, last first, as a trie: a path from the root is a suffix of an
/// offered name's segments, and a node marked `whole` ends an offered name. It is built and
/// walked in time linear in the names' lengths: a set of every suffix of every offered name
/// hashed each suffix whole, quadratic in its segments (1,024 offered names of 127 segments,
/// `a:a:...:a`, took 0.35 s a Suggest).
struct EndsTrie<'o> {
    children: Vec<std::collections::HashMap<&'o str, usize>>,
    whole: Vec<bool>,
}

impl<'o> EndsTrie<'o> {
    fn new(offered: &'o [String]) -> Self {
        let mut trie = EndsTrie {
            children: vec![Default::default()],
            whole: vec![false],
        };
        for name in offered {
            let segs = segments(name);
            if segs.is_empty() {
                continue;
            }
            let mut node = 0;
            for seg in segs.into_iter().rev() {
                hashed();
                node = match trie.children[node].get(seg) {
                    Some(&next) => next,
                    None => {
                        let next = trie.whole.len();
                        trie.children.push(Default::default());
                        trie.whole.push(false);
                        trie.children[node].insert(seg, next);
                        next
                    }
                };
            }
            trie.whole[node] = true;
        }
        trie
    }

    /// Whether a name of segments `s` is one tool with an offered name (`same_tool` but
    /// equality): `s` ends an offered name's segments, or an offered name's are a shorter end
    /// of `s`.
    fn ends_alike(&self, s: &[&str]) -> bool {
        if s.is_empty() {
            return false;
        }
        let mut node = 0;
        for (depth, seg) in s.iter().rev().enumerate() {
            hashed();
            match self.children[node].get(seg) {
                Some(&next) => node = next,
                None => return false,
            }
            if depth + 1 < s.len() && self.whole[node] {
                return true;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_is_itself_under_or_without_its_namespace() {
        for (a, b) in [
            ("github:create_issue", "create_issue"),
            ("github:create_issue", "mcp__github__create_issue"),
            ("github/create_issue", "MCP__github__create_issue"),
            ("files.read", "files:read"),
            ("mcp", "github:mcp"),
            ("read_file", "read_file"),
        ] {
            assert!(same_tool(a, b) && same_tool(b, a), "{a} {b}");
        }
        for (a, b) in [
            ("github:create_issue", "gitlab:create_issue"),
            ("issue", "github:create_issue"),
            ("mcp__github__x", "gitlab:x"),
            ("read_file", "read_files"),
            ("", "x"),
        ] {
            assert!(!same_tool(a, b) && !same_tool(b, a), "{a} {b}");
        }
        assert_eq!(tool_part("mcp__github__create_issue"), Some("create_issue"));
        assert_eq!(segments("a___b"), vec!["a", "_b"]);
    }

    #[test]
    fn offered_and_stored_names_of_many_segments_are_matched_in_linear_work() {
        // 1,024 offered names of 127 segments and as many stored: a set of every suffix of
        // every name hashed each suffix whole, about 64 segments a segment (0.35 s a Suggest
        // for the offered ones alone); here each segment is hashed about once
        let deep = |tag: &str, n: usize| format!("{}{tag}{n}", "a:".repeat(126));
        let offered: Vec<String> = (0..1024).map(|n| deep("x", n)).collect();
        let mut stored: Vec<String> = (0..1024).map(|n| deep("y", n)).collect();
        stored.push(format!("srv:{}", offered[7])); // under a namespace
        stored.push("a:x7".to_owned()); // an end of offered[7]
        stored.push("b:x7".to_owned()); // another namespace
        let segments_in = |names: &[String]| names.iter().map(|n| segments(n).len()).sum::<usize>();
        SEGMENTS_HASHED.with(|n| n.set(0));
        let found = same_tool_as_any(&offered, stored.iter().map(String::as_str).enumerate());
        let work = SEGMENTS_HASHED.with(std::cell::Cell::get);
        assert_eq!(found, vec![1024, 1025]);
        let names = segments_in(&offered) + segments_in(&stored);
        assert!(work <= 2 * names, "{work} segments hashed for {names}");
    }

    proptest::proptest! {
        #[test]
        fn deep_names_match_as_same_tool_says(
            offered in proptest::collection::vec(proptest::collection::vec("(mcp|a|b|)", 0..9), 0..6),
            names in proptest::collection::vec(proptest::collection::vec("(mcp|a|b|)", 0..9), 0..8),
            separator in "(:|/|\\.|__)",
        ) {
            // names of up to 8 segments of a tiny alphabet: many shared ends, at every depth
            let join = |parts: &Vec<String>| parts.join(&separator);
            let offered: Vec<String> = offered.iter().map(join).collect();
            let names: Vec<String> = names.iter().map(join).collect();
            let (indexed, pairwise) = indexed_and_pairwise(&offered, &names);
            proptest::prop_assert_eq!(indexed, pairwise);
        }

        #[test]
        fn same_tool_as_any_is_same_tool_with_any(
            offered in proptest::collection::vec("(mcp|[ab]{0,2})([:/.]|__)?([ab]{0,2})([:/.]|__)?[ab_]{0,3}", 0..6),
            names in proptest::collection::vec("(mcp|[ab]{0,2})([:/.]|__)?([ab]{0,2})([:/.]|__)?[ab_]{0,3}", 0..8),
        ) {
            let (indexed, pairwise) = indexed_and_pairwise(&offered, &names);
            proptest::prop_assert_eq!(indexed, pairwise);
        }
    }

    /// The names `same_tool_as_any` finds, and those `same_tool` finds pair by pair.
    fn indexed_and_pairwise(offered: &[String], names: &[String]) -> (Vec<usize>, Vec<usize>) {
        let pairwise = names
            .iter()
            .enumerate()
            .filter(|(_, n)| offered.iter().any(|t| same_tool(t, n)))
            .map(|(i, _)| i)
            .collect();
        let indexed = same_tool_as_any(offered, names.iter().map(String::as_str).enumerate());
        (indexed, pairwise)
    }
}
