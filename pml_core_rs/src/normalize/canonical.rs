//! The canonical form that `code_hash` is computed over: a stream of length-prefixed tokens
//! after a header naming the normalizer version and the language. Length prefixes make the
//! stream unambiguous whatever bytes a token holds, and let segments be sorted as bytes.

use std::collections::{HashMap, HashSet};

use crate::hashing::sha256_tagged;

/// Token tags, so a placeholder or a renamed variable can never equal source text.
pub const TAG_STRING_PARAM: &[u8] = b"\x01S";
pub const TAG_NUMBER_PARAM: &[u8] = b"\x01N";
pub const TAG_LOCAL: u8 = 0x02;
pub const TAG_CODE_STRING: u8 = 0x03;
pub const TAG_OPEN: u8 = 0x04;
pub const TAG_CLOSE: &[u8] = b"\x05";
/// A variable name that becomes `TAG_LOCAL <n>` if the snippet binds it (`resolve_names`).
pub const TAG_NAME: u8 = 0x06;
/// Prefix of a plain token whose text starts with a tag byte, so text never poses as a tag.
const ESCAPE: u8 = 0x07;

pub struct Canonical {
    buf: Vec<u8>,
    scratch: Vec<u8>,
}

impl Canonical {
    /// `mode` is "tree" or "tokens" so a fallback result never collides with a parsed one.
    pub fn new(version: u32, language: &str, mode: &str, capacity: usize) -> Self {
        let mut canonical = Canonical {
            buf: Vec::with_capacity(capacity + 64),
            scratch: Vec::new(),
        };
        canonical.token(b"pml-normalize");
        canonical.token(version.to_string().as_bytes());
        canonical.token(language.as_bytes());
        canonical.token(mode.as_bytes());
        canonical
    }

    pub fn token(&mut self, bytes: &[u8]) {
        if bytes.first().is_some_and(|&b| b <= ESCAPE) {
            self.tagged(ESCAPE, bytes);
            return;
        }
        // u32 is enough: inputs are capped far below 4 GiB.
        self.buf
            .extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(bytes);
    }

    /// One of the fixed tag tokens (`TAG_STRING_PARAM`, `TAG_CLOSE`...), written unescaped.
    pub fn marker(&mut self, tag: &'static [u8]) {
        self.buf
            .extend_from_slice(&(tag.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(tag);
    }

    /// A token made of a one-byte tag and a body.
    pub fn tagged(&mut self, tag: u8, body: &[u8]) {
        self.buf
            .extend_from_slice(&((body.len() + 1) as u32).to_le_bytes());
        self.buf.push(tag);
        self.buf.extend_from_slice(body);
    }

    /// Current length, used to mark where a segment starts.
    pub fn position(&self) -> usize {
        self.buf.len()
    }

    /// Drop everything written from `position` on (a token that turned out to be optional).
    pub fn truncate(&mut self, position: usize) {
        self.buf.truncate(position);
    }

    /// Reorder the segments that start at `starts` (ascending; the last one runs to the end
    /// of the buffer). Each segment has a flag: unsortable segments keep their order and come
    /// first, sortable ones follow in byte order. Used for object keys and keyword arguments.
    pub fn sort_segments(&mut self, starts: &[(usize, bool)]) {
        if starts.len() < 2 || !starts.iter().any(|&(_, sortable)| sortable) {
            return;
        }
        let end = self.buf.len();
        let base = starts[0].0;
        let mut segments: Vec<(bool, usize, usize)> = starts
            .iter()
            .enumerate()
            .map(|(i, &(start, sortable))| {
                let stop = starts.get(i + 1).map_or(end, |next| next.0);
                (sortable, start, stop)
            })
            .collect();
        let buf = &self.buf;
        segments.sort_by(|a, b| {
            a.0.cmp(&b.0).then_with(|| {
                if a.0 {
                    buf[a.1..a.2].cmp(&buf[b.1..b.2])
                } else {
                    a.1.cmp(&b.1)
                }
            })
        });
        self.scratch.clear();
        for &(_, start, stop) in &segments {
            self.scratch.extend_from_slice(&self.buf[start..stop]);
        }
        self.buf.truncate(base);
        self.buf.extend_from_slice(&self.scratch);
    }

    /// Rewrite every `TAG_NAME` token: a name in `bound` becomes `TAG_LOCAL <n>`, numbered by
    /// first occurrence, so consistent renaming of local variables does not change the hash;
    /// any other name becomes its plain text.
    pub fn resolve_names(&mut self, bound: &HashSet<&str>) {
        let mut locals: HashMap<&[u8], usize> = HashMap::new();
        let mut out = Vec::with_capacity(self.buf.len());
        let buf = &self.buf;
        let mut at = 0;
        while at + 4 <= buf.len() {
            let len = u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]) as usize;
            let body = &buf[at + 4..at + 4 + len];
            at += 4 + len;
            if body.first() != Some(&TAG_NAME) {
                out.extend_from_slice(&(len as u32).to_le_bytes());
                out.extend_from_slice(body);
                continue;
            }
            let name = &body[1..];
            let is_bound = std::str::from_utf8(name).is_ok_and(|n| bound.contains(n));
            if is_bound {
                let next = locals.len();
                let mut digits = DecimalDigits::default();
                let index = digits.format(*locals.entry(name).or_insert(next));
                out.extend_from_slice(&((index.len() + 1) as u32).to_le_bytes());
                out.push(TAG_LOCAL);
                out.extend_from_slice(index);
            } else {
                out.extend_from_slice(&(name.len() as u32).to_le_bytes());
                out.extend_from_slice(name);
            }
        }
        self.buf = out;
    }

    pub fn hash(&self) -> String {
        sha256_tagged(&self.buf)
    }
}

/// Decimal text of a number without a heap allocation (one per variable reference otherwise).
#[derive(Default)]
struct DecimalDigits([u8; 20]);

impl DecimalDigits {
    fn format(&mut self, mut value: usize) -> &[u8] {
        let mut at = self.0.len();
        loop {
            at -= 1;
            self.0[at] = b'0' + (value % 10) as u8;
            value /= 10;
            if value == 0 {
                return &self.0[at..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_digits_match_to_string() {
        for value in [0, 7, 10, 99, 100, 12_345, usize::MAX] {
            let mut digits = DecimalDigits::default();
            assert_eq!(digits.format(value), value.to_string().as_bytes());
        }
    }

    #[test]
    fn tokens_are_unambiguous() {
        let mut a = Canonical::new(1, "js", "tree", 0);
        a.token(b"ab");
        a.token(b"c");
        let mut b = Canonical::new(1, "js", "tree", 0);
        b.token(b"a");
        b.token(b"bc");
        assert_ne!(a.hash(), b.hash());
        // Text that starts with a tag byte cannot pose as a tagged token.
        let mut text = Canonical::new(1, "js", "tree", 0);
        text.token(b"\x06x");
        let mut name = Canonical::new(1, "js", "tree", 0);
        name.tagged(TAG_NAME, b"x");
        assert_ne!(text.hash(), name.hash());
    }

    #[test]
    fn sorting_makes_order_irrelevant() {
        let build = |first: &[u8], second: &[u8]| {
            let mut c = Canonical::new(1, "js", "tree", 0);
            c.token(b"{");
            let s1 = c.position();
            c.token(first);
            let s2 = c.position();
            c.token(second);
            c.sort_segments(&[(s1, true), (s2, true)]);
            c.token(b"}");
            c.hash()
        };
        assert_eq!(build(b"x", b"y"), build(b"y", b"x"));
        let unsorted = |first: &[u8], second: &[u8]| {
            let mut c = Canonical::new(1, "js", "tree", 0);
            let s1 = c.position();
            c.token(first);
            let s2 = c.position();
            c.token(second);
            c.sort_segments(&[(s1, false), (s2, false)]);
            c.hash()
        };
        assert_ne!(unsorted(b"x", b"y"), unsorted(b"y", b"x"));
    }
}
