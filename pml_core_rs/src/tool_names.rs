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
/// answered by hash look-ups of its segments' suffixes rather than compared with every offered
/// name: a thousand offered names against ten thousand stored ones that all end in the same
/// segment is one pass over each (docs/ranking.md, Context filters).
pub fn same_tool_as_any<'n>(
    offered: &[String],
    names: impl IntoIterator<Item = (usize, &'n str)>,
) -> Vec<usize> {
    use std::collections::HashSet;
    let exact: HashSet<&str> = offered.iter().map(String::as_str).collect();
    let segs: Vec<Vec<&str>> = offered
        .iter()
        .map(|t| segments(t))
        .filter(|s| !s.is_empty())
        .collect();
    // an offered name as long as or shorter than a stored one is a suffix of its segments;
    // a longer one ends with all of them
    let whole: HashSet<&[&str]> = segs.iter().map(Vec::as_slice).collect();
    let ends: HashSet<&[&str]> = segs
        .iter()
        .flat_map(|s| (0..s.len()).map(move |i| &s[i..]))
        .collect();
    names
        .into_iter()
        .filter(|&(_, name)| {
            let s = segments(name);
            exact.contains(name)
                || (!s.is_empty()
                    && (ends.contains(s.as_slice())
                        || (1..s.len()).any(|i| whole.contains(&s[i..]))))
        })
        .map(|(i, _)| i)
        .collect()
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

    proptest::proptest! {
        #[test]
        fn same_tool_as_any_is_same_tool_with_any(
            offered in proptest::collection::vec("(mcp|[ab]{0,2})([:/.]|__)?([ab]{0,2})([:/.]|__)?[ab_]{0,3}", 0..6),
            names in proptest::collection::vec("(mcp|[ab]{0,2})([:/.]|__)?([ab]{0,2})([:/.]|__)?[ab_]{0,3}", 0..8),
        ) {
            let pairwise: Vec<usize> = names
                .iter()
                .enumerate()
                .filter(|(_, n)| offered.iter().any(|t| same_tool(t, n)))
                .map(|(i, _)| i)
                .collect();
            let indexed = same_tool_as_any(&offered, names.iter().map(String::as_str).enumerate());
            proptest::prop_assert_eq!(indexed, pairwise);
        }
    }
}
