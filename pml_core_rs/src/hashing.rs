//! Content hashing: the `sha256:<hex>` identifiers used across pml.

use sha2::{Digest, Sha256};

/// Prefix of every hash string, so the algorithm can change without ambiguity.
pub const HASH_PREFIX: &str = "sha256:";

/// `sha256:<64 lowercase hex>` of `data`.
pub fn sha256_tagged(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    let mut out = String::with_capacity(HASH_PREFIX.len() + 64);
    out.push_str(HASH_PREFIX);
    out.push_str(&hex::encode(digest));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        // FIPS 180-2 test vector for "abc".
        assert_eq!(
            sha256_tagged(b"abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn distinct_inputs_distinct_hashes() {
        assert_ne!(sha256_tagged(b"a"), sha256_tagged(b"b"));
        assert_eq!(sha256_tagged(b"").len(), HASH_PREFIX.len() + 64);
    }
}
