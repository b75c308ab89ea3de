//! The canonical form that `code_hash` is computed over: a stream of length-prefixed tokens
//! after a header naming the normalizer version and the language. Length prefixes make the
//! stream unambiguous whatever bytes a token holds, and let segments be sorted as bytes.

use crate::hashing::sha256_tagged;

/// Token tags, so a placeholder or a renamed variable can never equal source text.
pub const TAG_STRING_PARAM: &[u8] = b"\x01S";
pub const TAG_NUMBER_PARAM: &[u8] = b"\x01N";
pub const TAG_LOCAL: u8 = 0x02;
pub const TAG_CODE_STRING: u8 = 0x03;
pub const TAG_OPEN: u8 = 0x04;
pub const TAG_CLOSE: &[u8] = b"\x05";

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
        // u32 is enough: inputs are capped far below 4 GiB.
        self.buf
            .extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(bytes);
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

    pub fn hash(&self) -> String {
        sha256_tagged(&self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_unambiguous() {
        let mut a = Canonical::new(1, "js", "tree", 0);
        a.token(b"ab");
        a.token(b"c");
        let mut b = Canonical::new(1, "js", "tree", 0);
        b.token(b"a");
        b.token(b"bc");
        assert_ne!(a.hash(), b.hash());
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
