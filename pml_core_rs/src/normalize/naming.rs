//! Placeholder names: `$UPPER_SNAKE` from the literal's context, made unique in source order.

use std::collections::{HashMap, HashSet};

/// `readFile` -> `READ_FILE`, `HTTPServer` -> `HTTP_SERVER`, `api-key` -> `API_KEY`.
/// Non-ASCII or punctuation becomes `_`; runs of `_` collapse; an empty result is `None`.
pub fn upper_snake(name: &str) -> Option<String> {
    let chars: Vec<char> = name.chars().collect();
    let mut out = String::with_capacity(name.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_alphanumeric() {
            if c.is_ascii_uppercase() && i > 0 {
                let prev = chars[i - 1];
                let next_is_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
                let boundary = prev.is_ascii_lowercase()
                    || prev.is_ascii_digit()
                    || (prev.is_ascii_uppercase() && next_is_lower);
                if boundary && !out.ends_with('_') {
                    out.push('_');
                }
            }
            out.push(c.to_ascii_uppercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() {
        return None;
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    Some(out)
}

/// Hands out `$BASE`, then `$BASE_2`, `$BASE_3`, ... skipping any name already taken.
#[derive(Default)]
pub struct NameAllocator {
    taken: HashSet<String>,
    /// Next suffix to try per base, so n repeats of one name cost O(n), not O(n^2).
    next_suffix: HashMap<String, usize>,
}

impl NameAllocator {
    pub fn allocate(&mut self, base: &str) -> String {
        let first = format!("${base}");
        if self.taken.insert(first.clone()) {
            return first;
        }
        let next = self.next_suffix.entry(base.to_owned()).or_insert(2);
        loop {
            let candidate = format!("${base}_{next}");
            *next += 1;
            if self.taken.insert(candidate.clone()) {
                return candidate;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_snake_cases() {
        assert_eq!(upper_snake("path").as_deref(), Some("PATH"));
        assert_eq!(upper_snake("maxResults").as_deref(), Some("MAX_RESULTS"));
        assert_eq!(upper_snake("HTTPServer").as_deref(), Some("HTTP_SERVER"));
        assert_eq!(upper_snake("read_file").as_deref(), Some("READ_FILE"));
        assert_eq!(upper_snake("api-key").as_deref(), Some("API_KEY"));
        assert_eq!(upper_snake("file2Name").as_deref(), Some("FILE2_NAME"));
        assert_eq!(upper_snake("0").as_deref(), Some("_0"));
        assert_eq!(upper_snake("données").as_deref(), Some("DONN_ES"));
        assert_eq!(upper_snake("--"), None);
    }

    #[test]
    fn repeated_names_get_suffixes() {
        let mut names = NameAllocator::default();
        assert_eq!(names.allocate("PATH"), "$PATH");
        assert_eq!(names.allocate("PATH"), "$PATH_2");
        assert_eq!(names.allocate("PATH_2"), "$PATH_2_2");
        assert_eq!(names.allocate("PATH"), "$PATH_3");
    }
}
