//! Credential detection. A flagged parameter is stored by later layers only as `[REDACTED]`,
//! so this errs on the side of flagging: a false positive loses an example value, a false
//! negative leaks a credential.

/// Words of an UPPER_SNAKE context name that mark its value as a credential, each split into
/// its `_`-separated words (matched against the name's words).
const SECRET_WORDS: &[&[&str]] = &[
    &["PASSWORD"],
    &["PASSWD"],
    &["PASSPHRASE"],
    &["SECRET"],
    &["TOKEN"],
    &["APIKEY"],
    &["CREDENTIAL"],
    &["CREDENTIALS"],
    &["AUTHORIZATION"],
    &["AUTH"],
    &["COOKIE"],
    &["SESSIONID"],
    &["PRIVATE", "KEY"],
    &["ACCESS", "KEY"],
    &["API", "KEY"],
    &["SECRET", "KEY"],
    &["SIGNING", "KEY"],
    &["CLIENT", "SECRET"],
];

/// Well-known credential prefixes and the minimum total length that makes them a token.
const TOKEN_PREFIXES: &[(&str, usize)] = &[
    ("sk-", 20),
    ("sk_live_", 16),
    ("sk_test_", 16),
    ("rk_live_", 16),
    ("ghp_", 30),
    ("gho_", 30),
    ("ghu_", 30),
    ("ghs_", 30),
    ("ghr_", 30),
    ("github_pat_", 30),
    ("glpat-", 20),
    ("xoxb-", 15),
    ("xoxp-", 15),
    ("xoxa-", 15),
    ("xoxs-", 15),
    ("xapp-", 15),
    ("AKIA", 20),
    ("ASIA", 20),
    ("AIza", 35),
    ("hf_", 30),
    ("npm_", 36),
    ("pypi-", 50),
    ("SG.", 40),
    ("shpat_", 30),
    ("Bearer ", 20),
    ("Basic ", 16),
    ("-----BEGIN", 30),
];

/// Whether a context name (already UPPER_SNAKE, without `$`) says its value is a credential:
/// `password`, `apiKey`, `auth_token`, `client_secret`... but not `max_tokens` or `author`.
pub fn is_secret_name(upper_snake: &str) -> bool {
    // Allocation-free: this runs for every parameter. A secret matches when the name's words,
    // from some word on, start with the secret's words.
    let mut from = upper_snake.split('_').filter(|w| !w.is_empty());
    loop {
        let here = from.clone();
        let Some(word) = from.next() else {
            return false;
        };
        let matches_here = SECRET_WORDS.iter().any(|secret| {
            secret.first() == Some(&word) && {
                let mut words = here.clone();
                secret.iter().all(|part| words.next() == Some(part))
            }
        });
        if matches_here {
            return true;
        }
    }
}

/// Whether a string value looks like a credential by itself.
pub fn is_secret_value(value: &str) -> bool {
    let value = value.trim();
    if TOKEN_PREFIXES
        .iter()
        .any(|(prefix, min_len)| value.starts_with(prefix) && value.len() >= *min_len)
    {
        let head = &value.as_bytes()[..value.len().min(64)];
        return !head.iter().any(u8::is_ascii_whitespace)
            || value.starts_with("Bearer ")
            || value.starts_with("Basic ")
            || value.starts_with("-----BEGIN");
    }
    is_jwt(value) || is_high_entropy_token(value)
}

/// `eyJ...`.`...`.`...`: three base64url segments, the first a JSON object.
fn is_jwt(value: &str) -> bool {
    let segments: Vec<&str> = value.split('.').collect();
    segments.len() == 3
        && value.starts_with("eyJ")
        && segments[..2].iter().all(|s| s.len() >= 4)
        && segments.iter().all(|s| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'=')
        })
}

/// A long run of token characters with letters, digits and high Shannon entropy, such as a
/// random API key. UUIDs are identifiers, not secrets, and are excluded.
fn is_high_entropy_token(value: &str) -> bool {
    let bytes = value.as_bytes();
    if bytes.len() < 24 || bytes.len() > 512 || is_uuid(value) {
        return false;
    }
    let token_chars = bytes
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'_' | b'-'));
    let has_digit = bytes.iter().any(u8::is_ascii_digit);
    let has_alpha = bytes.iter().any(u8::is_ascii_alphabetic);
    // A path or a snake_case identifier is not a key: keys rarely have long lowercase words.
    let separators = bytes
        .iter()
        .filter(|&&b| matches!(b, b'/' | b'_' | b'-'))
        .count();
    if !token_chars || !has_digit || !has_alpha || separators * 6 > bytes.len() {
        return false;
    }
    shannon_entropy(bytes) >= 3.5
}

fn is_uuid(value: &str) -> bool {
    let b = value.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == b'-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

fn shannon_entropy(bytes: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for &b in bytes {
        counts[b as usize] += 1;
    }
    let n = bytes.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for name in [
            "PASSWORD",
            "DB_PASSWORD",
            "API_KEY",
            "APIKEY",
            "ACCESS_TOKEN",
            "TOKEN",
            "CLIENT_SECRET",
            "AUTH",
            "PRIVATE_KEY",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["MAX_TOKENS", "AUTHOR", "PATH", "KEY", "LIMIT", "TOKENIZER"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn values() {
        for value in [
            "sk-proj-abcdefghijklmnopqrstuvwx",
            "ghp_0123456789abcdefghijklmnopqrstuvwxyz",
            "AKIAIOSFODNN7EXAMPLE",
            "xoxb-1234-5678-abcdefgh",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
            "Bearer abc.def.ghi-jkl-mno",
            "q8Zr3VxT0pLk2WmN7sYb4HdJ9fGc",
        ] {
            assert!(is_secret_value(value), "{value}");
        }
        for value in [
            "a.json",
            "/home/user/reports/2024/summary.csv",
            "550e8400-e29b-41d4-a716-446655440000",
            "hello world this is a long sentence 123",
            "read_file_and_parse_json_2",
            "sk-",
            "https://example.com/api/v1/items",
        ] {
            assert!(!is_secret_value(value), "{value}");
        }
    }
}
