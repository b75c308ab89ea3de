//! Credential detection. A flagged parameter is stored by later layers only as `[REDACTED]`,
//! so this errs on the side of flagging: a false positive loses an example value, a false
//! negative leaks a credential.

use super::naming::upper_snake;

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
    // an Azure storage connection string's `AccountKey=`
    &["ACCOUNT", "KEY"],
    &["SIGNING", "KEY"],
    &["HMAC", "KEY"],
    &["ENCRYPTION", "KEY"],
    &["MASTER", "KEY"],
    // Azure API Management's `Ocp-Apim-Subscription-Key` header
    &["SUBSCRIPTION", "KEY"],
    &["CLIENT", "SECRET"],
    // a bearer token given alone (`bearer=...`); `bearer_format` describes one (`PATH_WORDS`)
    &["BEARER"],
    &["PASSCODE"],
    // openssl's password sources: `-passin pass:...`, `-passout pass:...`
    &["PASSIN"],
    &["PASSOUT"],
];

/// Endings of one word of a name that mark it as a credential's too: `PGPASSWORD`,
/// `DBPASSWD` (an environment variable's name often runs its words together).
const SECRET_ENDINGS: &[&str] = &["PASSWORD", "PASSWD", "PASSPHRASE"];

/// Short words that name a credential only as a name's last word: `DB_PASS`, `--pass`,
/// `MYSQL_PWD`, `"pwd"`, an ODBC string's `Pwd=` (a password), but not `PASS_RATE` or
/// `PASS_COUNT`. A value of the bare name `PWD` that is a path (`PWD=/home/bob`, the shell's
/// working directory in an environment dump) is kept in free text (`is_path_value`).
const SECRET_LAST_WORDS: &[&str] = &["PASS", "PWD"];

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

/// Functions that take a password by position, and its index among the arguments: the login
/// calls of Python's standard library (`smtplib`, `imaplib`, `ftplib`, `poplib`), LDAP's
/// simple bind, and `ftplib.FTP(host, user, passwd)` (docs/normalization.md, Secrets). A
/// keyword argument is named already (`login(user=u, password="...")`). Code's parser reads
/// them (`tree.rs`); free text quoting such a call too (`password_argument_at`).
pub const PASSWORD_ARGUMENTS: &[(&str, usize)] = &[
    ("login", 1),
    ("simple_bind", 1),
    ("simple_bind_s", 1),
    ("pass_", 0),
    ("FTP", 2),
    ("FTP_TLS", 2),
    // JDBC's `DriverManager.getConnection(url, user, password)` (node-jdbc's too)
    ("getConnection", 2),
    // PHP's `new PDO($dsn, $user, $password)`
    ("PDO", 2),
];

/// A JDBC connection's credentials given as a `[user, password]` list: the function, the
/// list's index among its arguments, and its keyword (jaydebeapi's `connect(jclassname, url,
/// driver_args)`); `tree.rs` reads its second item as a password (docs/normalization.md,
/// Secrets).
pub const JDBC_DRIVER_ARGS: (&str, usize, &str) = ("connect", 2, "driver_args");
/// The module whose `connect` that is: called on it, or in a snippet naming it (`import
/// jaydebeapi as jdb`, `from jaydebeapi import connect`).
pub const JDBC_DRIVER_MODULE: &str = "jaydebeapi";

/// Calls that read an environment variable with a default, their second argument: the
/// method and, when it is one, the last name of its receiver (`os.getenv("K", "...")`,
/// `getenv(...)`, `os.environ.get("K", "...")`). The default is the value where the variable
/// is unset, so one given where a credential goes is a secret (`tree.rs`, `env_lookup`;
/// docs/normalization.md, Secrets).
pub const ENV_LOOKUPS: &[(Option<&str>, &str)] = &[(None, "getenv"), (Some("environ"), "get")];

/// Whether a context name (already UPPER_SNAKE, without `$`) says its value is a credential:
/// `password`, `apiKey`, `auth_token`, `client_secret`... but not `max_tokens` or `author`,
/// nor a credential's path (`names_a_path`: `password_file`, `--token-file`).
pub fn is_secret_name(upper_snake: &str) -> bool {
    names_a_credential(upper_snake) && !names_a_path(upper_snake)
}

/// Last words of a name that say its value is where a credential is kept, not the credential
/// (`PASSWORD_FILE`, `TOKEN_PATH`, `--secret-file`): a path is no secret; or what describes
/// one, not the credential (`TOKEN_COUNT`, `TOKEN_TYPE`, `PASSWORD_LENGTH`, `PASSWORD_POLICY`,
/// `AUTH_METHOD`, `AUTH_URL`, `SECRET_NAME`, `SECRET_ARN`): its value is a parameter named as
/// any other, flagged only when the value itself is one by the value rules
/// (docs/normalization.md, Secrets).
const PATH_WORDS: &[&str] = &[
    "FILE", "FILENAME", "PATH", "DIR", "COUNT", "LENGTH", "LEN", "LIMIT", "TYPE", "KIND", "METHOD",
    "URL", "URI", "ENDPOINT", "NAME", "ARN", "POLICY", "TTL", "VERSION", "FORMAT",
];

/// Whether a name's last word is one of `PATH_WORDS`.
pub fn names_a_path(upper_snake: &str) -> bool {
    upper_snake
        .rsplit('_')
        .find(|w| !w.is_empty())
        .is_some_and(|last| PATH_WORDS.contains(&last))
}

/// Last words of a query parameter's name that name a credential there only: the signature of
/// a signed URL (an Azure SAS's `sig`, S3's `X-Amz-Signature`, GCS's `X-Goog-Signature`),
/// which grants access as a token does (`secret_query_value_at`; docs/capture.md, Secrets).
const QUERY_SECRET_WORDS: &[&str] = &["SIG", "SIGNATURE"];

/// Hosts and paths of webhook URLs whose path is their credential: anyone holding the URL may
/// post (`is_credential_shaped`).
const WEBHOOK_URLS: &[&str] = &[
    "hooks.slack.com/services/",
    "discord.com/api/webhooks/",
    "discordapp.com/api/webhooks/",
];

/// Whether a name holds a credential's words (`SECRET_WORDS`, `SECRET_ENDINGS`), its path's
/// too (`PASSWORD_FILE`).
pub fn names_a_credential(upper_snake: &str) -> bool {
    // Allocation-free: this runs for every parameter. A secret matches when the name's words,
    // from some word on, start with the secret's words.
    let mut from = upper_snake.split('_').filter(|w| !w.is_empty());
    loop {
        let here = from.clone();
        let Some(word) = from.next() else {
            return false;
        };
        if SECRET_ENDINGS.iter().any(|end| word.ends_with(end))
            || (SECRET_LAST_WORDS.contains(&word) && from.clone().next().is_none())
        {
            return true;
        }
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
    is_credential_shaped(value)
        || has_secret_pair(value)
        || has_quoted_value_after_name(value)
        || has_prose_password(value)
        || has_secret_field(value)
        || has_password_file_entry(value)
        || is_high_entropy_token(value.trim())
}

/// Whether `value` holds a `.netrc` or `.pgpass` entry's password (`password_file_entry_at`).
fn has_password_file_entry(value: &str) -> bool {
    let bytes = value.as_bytes();
    (0..bytes.len()).any(|i| entry_starts(bytes, i) && password_file_entry_at(bytes, i).is_some())
}

/// Whether a word of a credentials file's entry starts at `i`: after a blank, a quote or such,
/// or an escaped line break or tab (`\n`, as JSON writes a file's lines).
fn entry_starts(bytes: &[u8], i: usize) -> bool {
    is_entry_byte(bytes[i])
        && (i == 0
            || !is_entry_byte(bytes[i - 1])
            || (i >= 2 && bytes[i - 2] == b'\\' && matches!(bytes[i - 1], b'n' | b't' | b'r')))
}

/// The length of the blanks at the start of `bytes`, escaped ones (`\n`, `\t`) included.
fn blanks_at(bytes: &[u8]) -> usize {
    let mut k = 0;
    loop {
        match bytes.get(k..) {
            Some([b, ..]) if b.is_ascii_whitespace() => k += 1,
            Some([b'\\', b'n' | b't' | b'r', ..]) => k += 2,
            _ => return k,
        }
    }
}

fn is_entry_byte(b: u8) -> bool {
    !(b.is_ascii_whitespace()
        || matches!(
            b,
            b'"' | b'\'' | b'`' | b',' | b'{' | b'}' | b'[' | b']' | b'\\'
        ))
}

/// How far before a `.netrc` entry's `password` its `machine` or `default` may be.
const NETRC_WINDOW: usize = 256;

/// The keys of a `.netrc` entry that take a value, `password` aside.
const NETRC_KEYS: &[&[u8]] = &[b"login", b"account", b"port"];

/// Whether a `.netrc` entry starts at `start` and runs in its grammar to the word at `at` (a
/// `password`): `machine NAME` or `default`, then `KEY VALUE` pairs (`NETRC_KEYS`), each word
/// after blanks (escaped ones too: `\n`), the last one ending right before `at`. Prose that
/// merely holds the words (`the machine learning model ... password reset`) is none. Reads at
/// most the bytes between `start` and `at`.
fn netrc_entry_reaches(bytes: &[u8], start: usize, at: usize) -> bool {
    let word_end = |i: usize| {
        i + bytes[i..at]
            .iter()
            .position(|&b| !is_entry_byte(b))
            .unwrap_or(at - i)
    };
    let next = |i: usize| {
        let blanks = blanks_at(&bytes[i..at]);
        (blanks > 0).then_some(i + blanks)
    };
    let first = &bytes[start..word_end(start)];
    let mut i = start + first.len();
    if first == b"machine" {
        let Some(host) = next(i) else { return false };
        i = word_end(host);
        if i == host {
            return false;
        }
    } else if first != b"default" {
        return false;
    }
    loop {
        let Some(key) = next(i) else { return false };
        if key == at {
            return true;
        }
        let key_end = word_end(key);
        if !NETRC_KEYS.contains(&&bytes[key..key_end]) {
            return false;
        }
        let Some(value) = next(key_end) else {
            return false;
        };
        i = word_end(value);
        if i == value {
            return false;
        }
    }
}

/// The byte range of the password of a credentials file's entry starting at `at` (the start
/// of a word): a `.netrc` entry's, the word after `password` when an entry in `.netrc`'s
/// grammar starting within `NETRC_WINDOW` bytes before it runs up to it
/// (`netrc_entry_reaches`: `machine h login bob password pw`),
/// or a `.pgpass` line's, the last of five `:`-separated fields whose second is a port or `*`
/// (`db.internal:5432:app:bob:pw`). Constant cost but for the value scanned
/// (docs/capture.md, Secrets).
fn password_file_entry_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    let end = at
        + bytes[at..]
            .iter()
            .position(|&b| !is_entry_byte(b))
            .unwrap_or(bytes.len() - at);
    let word = &bytes[at..end];
    if word == b"password" || word == b"passwd" {
        let blanks = blanks_at(&bytes[end..]);
        let start = end + blanks;
        let value_end = start
            + bytes[start..]
                .iter()
                .position(|&b| !is_entry_byte(b))
                .unwrap_or(bytes.len() - start);
        let from = at.saturating_sub(NETRC_WINDOW);
        let entry = (from..at)
            .any(|k| (k == 0 || entry_starts(bytes, k)) && netrc_entry_reaches(bytes, k, at));
        return (blanks > 0 && value_end > start && entry).then_some((start, value_end));
    }
    // `.pgpass`: host:port:database:user:password (`\:` escapes a colon)
    let mut fields = [0usize; 5];
    let mut count = 1;
    let mut k = at;
    while k < end {
        if word[k - at] == b'\\' {
            k += 2;
            continue;
        }
        if word[k - at] == b':' {
            if count == 5 {
                return None;
            }
            fields[count] = k + 1;
            count += 1;
        }
        k += 1;
    }
    let port = bytes.get(fields[1]..fields[2].checked_sub(1)?)?;
    let nonempty = |from: usize, to: usize| to > from;
    (count == 5
        && fields[1] > at + 1
        && (port == b"*" || (!port.is_empty() && port.iter().all(u8::is_ascii_digit)))
        && nonempty(fields[2], fields[3] - 1)
        && nonempty(fields[3], fields[4] - 1)
        && end > fields[4])
        .then_some((fields[4], end))
}

/// A known credential prefix, a JWT or a URL with a password (`scheme://user:pass@host`): the
/// rules that never match ordinary code (unlike the entropy rule, which a long camelCase name
/// with a digit can pass).
fn is_credential_shaped(value: &str) -> bool {
    if url_userinfo(value).is_some() || has_secret_query(value) || is_webhook_url(value) {
        return true;
    }
    let value = value.trim();
    // Most tokens of code are short words: none of them can be a credential below.
    if value.len() < SHORTEST_SHAPED {
        return false;
    }
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
    is_jwt(value)
}

/// Whether `value` holds a webhook URL whose path is its credential (`WEBHOOK_URLS`), with at
/// least 16 bytes of path after it.
fn is_webhook_url(value: &str) -> bool {
    WEBHOOK_URLS.iter().any(|url| {
        value.match_indices(url).any(|(at, _)| {
            value.as_bytes()[at + url.len()..]
                .iter()
                .take_while(|&&b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'_' | b'-'))
                .count()
                >= 16
        })
    })
}

/// The shortest value `is_credential_shaped` can flag without a URL: a JWT's
/// `eyJx.xxxx.` (every credential prefix asks for more).
const SHORTEST_SHAPED: usize = 10;

/// `eyJ...`.`...`.`...`: three base64url segments, the first a JSON object.
fn is_jwt(value: &str) -> bool {
    if !value.starts_with("eyJ") {
        return false;
    }
    let mut segments = value.split('.');
    let (Some(header), Some(payload), Some(signature), None) = (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) else {
        return false;
    };
    header.len() >= 4
        && payload.len() >= 4
        && [header, payload, signature].iter().all(|s| {
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

/// The byte range of the first URL user-info holding a password in `text`: in
/// `postgresql://admin:pw@db:5432/prod`, `admin:pw` (docs/capture.md, Secrets). The authority
/// ends at the first `/`, `?`, `#`, whitespace, quote or angle bracket; its user-info is what
/// comes before its last `@` (a password may hold an unescaped `@`), and counts only with a `:`
/// (`ssh://git@host` names a user, not a credential).
fn url_userinfo(text: &str) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let start = from + found + 3;
        if let Some(range) = userinfo_at(bytes, start) {
            return Some(range);
        }
        from = start;
    }
    None
}

/// The password of every URL user-info in `text` (`pw` in `postgresql://admin:pw@db/prod`),
/// and the value of every query parameter named as a credential (`tok` in `?access_token=tok`),
/// as written there, so that the free texts of a record lose it where it appears bare too (an
/// error message quoting it): docs/capture.md, Secrets.
pub fn url_passwords(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("://") {
        let start = from + at + 3;
        match userinfo_at(bytes, start) {
            Some((info_start, info_end)) => {
                let info = &text[info_start..info_end];
                if let Some(colon) = info.find(':') {
                    found.push(&info[colon + 1..]);
                }
                from = info_end;
            }
            None => from = start,
        }
    }
    // A query inside a value found is part of it, as `redact` reads it: listing each one
    // again (`?token=?token=...`) listed a suffix of the text per `?`, quadratic in time and
    // memory (docs/capture.md, Secrets).
    let mut i = 0;
    while i < bytes.len() {
        if matches!(bytes[i], b'?' | b'&') {
            if let Some((start, end)) = secret_query_value_at(bytes, i) {
                found.push(&text[start..end]);
                i = end;
                continue;
            }
        }
        i += 1;
    }
    found
}

/// The user-info with a password of the authority starting at `start`, if any.
fn userinfo_at(bytes: &[u8], start: usize) -> Option<(usize, usize)> {
    let end = bytes[start..]
        .iter()
        .position(|&b| {
            matches!(
                b,
                b'/' | b'?' | b'#' | b'"' | b'\'' | b'`' | b'<' | b'>' | b'\\'
            ) || b.is_ascii_whitespace()
        })
        .map_or(bytes.len(), |n| start + n);
    let at = start + bytes[start..end].iter().rposition(|&b| b == b'@')?;
    let colon = start + bytes[start..at].iter().position(|&b| b == b':')?;
    (at > start && !names_a_value_given_later(&bytes[colon + 1..at])).then_some((start, at))
}

/// Whether `text` writes a URL whose password is a format field or an interpolation of a
/// name (`"pg://bob:%s@db"`, `"pg://bob:{}@db"`): the value formatted into it there is the
/// password (`tree.rs`, `url_password_piece`).
pub fn formats_a_url_password(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let start = from + found + 3;
        let end = bytes[start..]
            .iter()
            .position(|&b| {
                matches!(b, b'/' | b'?' | b'#' | b'"' | b'\'' | b'`') || b.is_ascii_whitespace()
            })
            .map_or(bytes.len(), |n| start + n);
        if let Some(at) = bytes[start..end].iter().rposition(|&b| b == b'@') {
            let info = &bytes[start..start + at];
            if let Some(colon) = info.iter().position(|&b| b == b':') {
                if names_a_value_given_later(&info[colon + 1..]) {
                    return true;
                }
            }
        }
        from = start;
    }
    false
}

/// Whether `text` ends in a URL's authority opened up to its password (`"pg://bob:"`): what
/// is joined next is the password (`tree.rs`, `url_password_piece`).
pub fn opens_a_url_password(text: &str) -> bool {
    text.rfind("://").is_some_and(|at| {
        let authority = &text[at + 3..];
        authority.contains(':')
            && !authority.contains(['/', '?', '#', '@'])
            && !authority.bytes().any(|b| b.is_ascii_whitespace())
    })
}

/// Whether a URL's password as written is only a reference to a value the code supplies:
/// an interpolation or format field of a name (`{pw}`, `{}`, `{cfg.db_password}`,
/// `${pw}`, `%s`, `%(pw)s`), as in `f"pg://bob:{pw}@db"`. Such a password holds no
/// secret, and redacting it would cut the reference out of the stored code. Anything else
/// (a literal, an index, a call) is a password (docs/normalization.md, Secrets).
fn names_a_value_given_later(password: &[u8]) -> bool {
    let name = |inner: &[u8]| {
        inner
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.'))
    };
    match password {
        [b'$', b'{', inner @ .., b'}'] => !inner.is_empty() && name(inner),
        [b'{', inner @ .., b'}'] => name(inner),
        [b'%', b's'] => true,
        [b'%', b'(', inner @ .., b')', b's'] => !inner.is_empty() && name(inner),
        _ => false,
    }
}

/// The byte range of the value of the query parameter starting at `at` (a `?` or `&`) when its
/// name says it is a credential (`is_secret_name`): in
/// `https://api.example.com/items?access_token=abc123&page=2`, `abc123` (docs/capture.md,
/// Secrets). The name is a run of `[A-Za-z0-9_.-]` followed by `=`; the value ends at the next
/// `&`, `#`, whitespace, quote, angle bracket or backslash, and is not empty.
fn secret_query_value_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    if !matches!(bytes.get(at), Some(b'?' | b'&')) {
        return None;
    }
    let name_start = at + 1;
    let name_len = bytes[name_start..]
        .iter()
        .position(|&b| !is_name_byte(b))
        .unwrap_or(bytes.len() - name_start);
    let eq = name_start + name_len;
    if name_len == 0 || bytes.get(eq) != Some(&b'=') {
        return None;
    }
    // The name is ASCII by construction; read before the value, whose end may be far.
    let name = std::str::from_utf8(&bytes[name_start..eq]).ok()?;
    let secret = |n: &str| {
        is_secret_name(n)
            || n.rsplit('_')
                .next()
                .is_some_and(|last| QUERY_SECRET_WORDS.contains(&last))
    };
    if !upper_snake(name).is_some_and(|n| secret(&n)) {
        return None;
    }
    let start = eq + 1;
    let end = word_end(bytes, start, |b| {
        matches!(b, b'&' | b'#' | b'"' | b'\'' | b'`' | b'<' | b'>' | b'\\')
    });
    (end > start).then_some((start, end))
}

pub(super) fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// The end of the unquoted value starting at `start`: the next whitespace or byte `stop` takes,
/// else the end of `bytes`.
pub(super) fn word_end(bytes: &[u8], start: usize, stop: impl Fn(u8) -> bool) -> usize {
    let end = bytes[start..]
        .iter()
        .position(|&b| b.is_ascii_whitespace() || stop(b))
        .map_or(bytes.len(), |n| start + n);
    #[cfg(test)]
    scanned(end - start);
    end
}

// Bytes read by `word_end` and `pem_end` on this thread, for the cost tests below.
#[cfg(test)]
thread_local! {
    static SCANNED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
fn scanned(bytes: usize) {
    SCANNED.with(|c| c.set(c.get() + bytes));
}

/// The byte range of the value of the `name=value` pair whose name starts at `at` when the name
/// says it is a credential (`is_secret_name`): a connection string's `password=pw`
/// (`host=db user=admin password=pw`, `Server=db;Password=pw;`), a shell's `PGPASSWORD=pw`, a
/// flag's `--api-key=pw` (docs/capture.md, Secrets). The name is a whole run of
/// `[A-Za-z0-9_.-]`; a value in quotes runs to the closing quote, any other to the next
/// whitespace, `;`, `&`, quote, angle bracket or backslash; it is not empty. Free text and
/// string values only: in code, `password=pw` is a keyword argument.
fn secret_pair_value_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    if at > 0 && is_name_byte(bytes[at - 1]) {
        return None;
    }
    let name_len = bytes[at..].iter().position(|&b| !is_name_byte(b))?;
    let eq = at + name_len;
    if name_len == 0 || bytes.get(eq) != Some(&b'=') {
        return None;
    }
    // The name first: a value is scanned only for a credential's name, so the cost stays
    // linear in the text (the name is ASCII by construction).
    let name = upper_snake(std::str::from_utf8(&bytes[at..eq]).ok()?)?;
    if !is_secret_name(&name) {
        return None;
    }
    let (start, end) = match bytes.get(eq + 1) {
        Some(&quote @ (b'\'' | b'"')) => {
            let start = eq + 2;
            let close = bytes[start..].iter().position(|&b| b == quote)?;
            (start, start + close)
        }
        // a user and a password (`auth=("bob", "pw")`): the second, when written there;
        // anything else in parentheses is computed
        Some(b'(') => quoted_argument(bytes, eq + 1, 1)?,
        _ => {
            let start = eq + 1;
            let end = word_end(bytes, start, |b| {
                matches!(b, b';' | b'&' | b'"' | b'\'' | b'`' | b'<' | b'>' | b'\\')
            });
            (start, end)
        }
    };
    (end > start && !is_path_value(&name, &bytes[start..end])).then_some((start, end))
}

/// Whether the value of a credential's name is the working directory a shell names `PWD`
/// (`PWD=/home/bob` in an environment dump), not a password: the bare name `PWD` with a
/// value that starts as a path does (`/`, `~/`, `./`), in free text and in a shell's code.
pub(super) fn is_path_value(upper_snake: &str, value: &[u8]) -> bool {
    upper_snake == "PWD"
        && (value.starts_with(b"/") || value.starts_with(b"~/") || value.starts_with(b"./"))
}

/// HTTP authentication schemes: the word after one is the credential (`Basic dXNl...`).
const AUTH_SCHEMES: &[&str] = &["basic", "bearer", "token", "digest", "negotiate", "apikey"];

/// The byte range of the value of the field whose name starts at `at` (its opening quote,
/// when quoted) when the name says it is a credential (`is_secret_name`), written with `:`
/// as JSON, YAML, a Python dict or an HTTP header writes it: `"password": "pw"`, `{'api_key':
/// 'pw'}`, `client_secret: pw`, `X-Api-Key: pw`, `Authorization: Basic dXNl...` (docs/
/// capture.md, Secrets). A quoted value runs to its closing quote past escaped ones (`\"`),
/// or to the text's end when it is cut off there; any other to the next whitespace or one of
/// `,;}]&"'<>\`, and past the word after it when it is an HTTP authentication scheme
/// (`AUTH_SCHEMES`); a list or an object (`"password": {...}`) is none, and so are `name::x`
/// and a `:` after a space (`a ? token : b`).
/// Free text only. Linear: the value is scanned only after a credential's name.
fn secret_field_value_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    let (name, value_at, escapes) = field_at(bytes, at)?;
    if !is_secret_name(&name) {
        return None;
    }
    let (start, end) = field_value(bytes, value_at, escapes)?;
    (!is_path_value(&name, &bytes[start..end])).then_some((start, end))
}

/// `secret_field_value_at` for a name (a tag, a tool's name): a field counts only when its
/// name is quoted (`{"password": "..."}`) or a blank follows its `:` (`password: ...`), as a
/// JSON object, a dict or a header writes one; `auth:login`, `token:refresh` are a tool's
/// namespace and keep their value (docs/capture.md, Secrets).
fn written_field_value_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    let (_, value_at, _) = field_at(bytes, at)?;
    let quoted = matches!(bytes[at], b'"' | b'\'');
    let spaced = value_at > 0 && blank(&bytes[value_at - 1]);
    if quoted || spaced {
        secret_field_value_at(bytes, at)
    } else {
        None
    }
}

/// The name (UPPER_SNAKE) of the field whose name starts at `at` (its opening quote, when
/// quoted), where its value starts (past the `:` and blanks), as `secret_field_value_at`
/// reads a field, and how many backslashes escape its quotes: a JSON text inside a JSON
/// string writes `{\"password\": \"...\"}` (a tool's argument holding a request body, an
/// error quoting one), its name's quotes and its value's escaped alike (docs/capture.md,
/// Secrets). Constant cost: a name is at most 64 bytes, its value is not read.
fn field_at(bytes: &[u8], at: usize) -> Option<(String, usize, usize)> {
    let quote = matches!(bytes[at], b'"' | b'\'').then_some(bytes[at]);
    let escapes = if quote.is_some() {
        bytes[..at]
            .iter()
            .rev()
            .take(MAX_ESCAPES + 1)
            .take_while(|&&b| b == b'\\')
            .count()
    } else {
        0
    };
    if escapes > MAX_ESCAPES {
        return None;
    }
    let name_start = at + usize::from(quote.is_some());
    // an unquoted name right after a `:` is a segment of an ARN or a URN
    // (`arn:aws:secretsmanager:...:secret:prod`), no field's
    if quote.is_none() && at > 0 && (is_name_byte(bytes[at - 1]) || bytes[at - 1] == b':') {
        return None;
    }
    let name_len = bytes[name_start..]
        .iter()
        .take(65)
        .position(|&b| !is_name_byte(b))
        .unwrap_or(bytes.len() - name_start);
    let mut i = name_start + name_len;
    if name_len == 0 || name_len > 64 {
        return None;
    }
    if let Some(quote) = quote {
        let escaped = bytes
            .get(i..i + escapes)
            .is_some_and(|run| run.iter().all(|&b| b == b'\\'));
        if !escaped || bytes.get(i + escapes) != Some(&quote) {
            return None;
        }
        i += escapes + 1;
    }
    // the `:` right after the name (`a ? token : b` is no field)
    if bytes.get(i) != Some(&b':') || bytes.get(i + 1) == Some(&b':') {
        return None;
    }
    // The name is ASCII by construction.
    let name = upper_snake(std::str::from_utf8(&bytes[name_start..name_start + name_len]).ok()?)?;
    i += 1;
    i += bytes[i..].iter().take_while(|b| blank(b)).count();
    Some((name, i, escapes))
}

/// The most backslashes `field_at` reads before a field's quote (a JSON text encoded three
/// times over writes 7).
const MAX_ESCAPES: usize = 7;

fn blank(b: &u8) -> bool {
    matches!(b, b' ' | b'\t')
}

/// The byte range of a field's value starting at `i`, as `secret_field_value_at` describes
/// it, its quotes escaped by `escapes` backslashes as its name's are (`field_at`); a template
/// literal's backticks quote it too (`` password: `${a}...` ``); None for a list, an object or
/// nothing.
fn field_value(bytes: &[u8], i: usize, escapes: usize) -> Option<(usize, usize)> {
    let opens_escaped = escapes > 0
        && bytes
            .get(i..i + escapes)
            .is_some_and(|run| run.iter().all(|&b| b == b'\\'))
        && matches!(bytes.get(i + escapes), Some(b'"' | b'\''));
    if opens_escaped {
        // the value runs to the same quote escaped by as many backslashes: one escaped by
        // more is inside it (`\"pa\\\"ss\"`)
        let q = bytes[i + escapes];
        let start = i + escapes + 1;
        let mut run = 0;
        let mut end = bytes.len();
        for (k, &b) in bytes.iter().enumerate().skip(start) {
            if b == q && run == escapes {
                end = k - escapes;
                break;
            }
            run = if b == b'\\' { run + 1 } else { 0 };
        }
        return (end > start).then_some((start, end));
    }
    let (start, end) = match bytes.get(i)? {
        &q @ (b'"' | b'\'' | b'`') => {
            let start = i + 1;
            let mut end = start;
            while end < bytes.len() && bytes[end] != q {
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            (start, end.min(bytes.len()))
        }
        b'{' | b'[' => return None,
        _ => {
            let stop = |b: u8| {
                matches!(
                    b,
                    b',' | b';' | b'}' | b']' | b'&' | b'"' | b'\'' | b'<' | b'>' | b'\\'
                )
            };
            let end = word_end(bytes, i, stop);
            let scheme = AUTH_SCHEMES
                .iter()
                .any(|s| bytes[i..end].eq_ignore_ascii_case(s.as_bytes()));
            let after = end + bytes[end..].iter().take_while(|b| blank(b)).count();
            let credential_end = word_end(bytes, after, stop);
            if scheme && credential_end > after {
                (i, credential_end)
            } else {
                (i, end)
            }
        }
    };
    (end > start).then_some((start, end))
}

/// The longest credential's name `name_field_at` reads as a field's value.
const MAX_NAMED_VALUE: usize = 64;

/// How far after a field naming a credential (`"name": "DB_PASSWORD"`) its sibling `value`
/// field may start: an entry of a Kubernetes `env` list, an ECS task's `environment`, a
/// tag's `Key`/`Value` is short.
const NAMED_VALUE_WINDOW: usize = 256;

/// Where the value of the field whose name starts at `at` ends when the field is a `name` or
/// a `key` whose value is a name (`{"name": "DB_PASSWORD", ...}`, `- name: API_TOKEN`,
/// `{"Key": "Authorization", ...}`, `"name": "LOG_LEVEL"`), and whether that name is a
/// credential's: the `value` field beside it is then that credential's (`redact`, which pairs
/// them; docs/normalization.md, Secrets). Constant cost: such a value is at most
/// `MAX_NAMED_VALUE` bytes.
fn name_field_at(bytes: &[u8], at: usize) -> Option<(usize, bool)> {
    let (name, i, _) = field_at(bytes, at)?;
    if name != "NAME" && name != "KEY" {
        return None;
    }
    let quote = matches!(bytes.get(i)?, b'"' | b'\'').then_some(bytes[i]);
    let start = i + usize::from(quote.is_some());
    let len = bytes[start..]
        .iter()
        .take(MAX_NAMED_VALUE + 1)
        .position(|&b| !is_name_byte(b))
        .unwrap_or(bytes.len() - start);
    let end = start + len;
    if len == 0 || len > MAX_NAMED_VALUE || quote.is_some_and(|q| bytes.get(end) != Some(&q)) {
        return None;
    }
    let value = upper_snake(std::str::from_utf8(&bytes[start..end]).ok()?)?;
    Some((end, is_secret_name(&value)))
}

/// The value of the `value` field whose name starts at `at`.
fn value_field_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    let (name, i, escapes) = field_at(bytes, at)?;
    if name != "VALUE" {
        return None;
    }
    field_value(bytes, i, escapes)
}

/// The values of the cookies of a `Cookie:` or `Set-Cookie:` header whose name starts at
/// `at`, and the end of its line. Every cookie a client sends is taken for a credential (a
/// session's cookie has no name that says so: `PHPSESSID`, `connect.sid`, `_gh_sess`, `a`),
/// erring towards the secret; of a `Set-Cookie:` header, the cookie's value, not its
/// attributes (`Path=/`, `HttpOnly`). A cookie's name stays (docs/capture.md, Secrets).
/// Linear in the line.
fn cookie_values_at(bytes: &[u8], at: usize) -> Option<(Vec<(usize, usize)>, usize)> {
    if at > 0 && is_name_byte(bytes[at - 1]) {
        return None;
    }
    let starts = |name: &[u8]| {
        bytes
            .get(at..at + name.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(name))
    };
    let set = starts(b"set-cookie:");
    if !set && !starts(b"cookie:") {
        return None;
    }
    let start = at + if set { 11 } else { 7 };
    let end = bytes[start..]
        .iter()
        .position(|&b| matches!(b, b'\n' | b'\r'))
        .map_or(bytes.len(), |n| start + n);
    let mut values = Vec::new();
    let mut from = start;
    while from < end {
        let part_end = bytes[from..end]
            .iter()
            .position(|&b| b == b';')
            .map_or(end, |n| from + n);
        if let Some(eq) = bytes[from..part_end].iter().position(|&b| b == b'=') {
            let value_start = from + eq + 1;
            let value_end = value_start
                + bytes[value_start..part_end]
                    .iter()
                    .rposition(|b| !b.is_ascii_whitespace())
                    .map_or(0, |n| n + 1);
            if value_end > value_start {
                values.push((value_start, value_end));
            }
        }
        if set {
            break;
        }
        from = part_end + 1;
    }
    Some((values, end))
}

/// The byte range of the value of a line `name = value` whose name, at the line's start (past
/// blanks; after an escaped `\n` too), says it is a credential: an INI or TOML file's, a
/// shared credentials file's (`aws_secret_access_key = ...` of `~/.aws/credentials`), an
/// `.env` file's with blanks around `=`. The value runs to the next whitespace, quote, `;`,
/// `#` or backslash; one with a `(` or a constant (`None`, `null`, `true`...) is code. Free text only; constant cost but the value scanned (docs/capture.md,
/// Secrets).
fn line_assignment_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    let mut k = at;
    while k > 0 && matches!(bytes[k - 1], b' ' | b'\t') {
        k -= 1;
    }
    let line_start = k == 0
        || matches!(bytes[k - 1], b'\n' | b'\r')
        || (k >= 2 && bytes[k - 2] == b'\\' && bytes[k - 1] == b'n');
    if !line_start {
        return None;
    }
    let name_len = bytes[at..]
        .iter()
        .take(MAX_VALUE_NAME + 1)
        .position(|&b| !is_name_byte(b))?;
    if name_len == 0 || name_len > MAX_VALUE_NAME {
        return None;
    }
    let mut i = at + name_len;
    i += bytes[i..].iter().take_while(|b| blank(b)).count();
    if bytes.get(i) != Some(&b'=') || bytes.get(i + 1) == Some(&b'=') {
        return None;
    }
    i += 1;
    i += bytes[i..].iter().take_while(|b| blank(b)).count();
    let name = upper_snake(std::str::from_utf8(&bytes[at..at + name_len]).ok()?)?;
    if !is_secret_name(&name) {
        return None;
    }
    let end = word_end(bytes, i, |b| {
        matches!(b, b'"' | b'\'' | b'`' | b';' | b'#' | b'\\')
    });
    let value = &bytes[i..end];
    // code quoted in prose (`token = None`, `password = get_password()`) holds none
    let code = value.contains(&b'(')
        || [
            &b"None"[..],
            b"null",
            b"nil",
            b"true",
            b"false",
            b"undefined",
        ]
        .contains(&value);
    (end > i && !code && !is_path_value(&name, value)).then_some((i, end))
}

/// The longest quoted value `quoted_value_after_name_at` reads: a password is short, and the
/// bound keeps the scan linear on quotes never closed.
const MAX_QUOTED_VALUE: usize = 256;

/// The byte range (its quotes' inside) of a quoted value written after a word naming a
/// credential (`is_secret_name`) or after SQL's `IDENTIFIED BY`, with blanks and maybe one `=`
/// between: SQL's `CREATE ROLE bob PASSWORD '...'`, `SET PASSWORD = '...'`, `CREATE USER
/// 'bob'@'%' IDENTIFIED BY '...'`, prose's "the password '...' was refused" (docs/capture.md,
/// Secrets). The value closes within `MAX_QUOTED_VALUE` bytes; constant cost.
fn quoted_value_after_name_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    if at > 0 && is_name_byte(bytes[at - 1]) {
        return None;
    }
    let len = bytes[at..]
        .iter()
        .take(MAX_VALUE_NAME + 1)
        .position(|&b| !is_name_byte(b))?;
    if len == 0 || len > MAX_VALUE_NAME {
        return None;
    }
    // the separator and the quote first: most words are followed by neither, and are not
    // read as names
    let mut i = at + len;
    i += bytes[i..].iter().take_while(|b| blank(b)).count();
    if bytes.get(i) == Some(&b'=') && bytes.get(i + 1) != Some(&b'=') {
        i += 1;
        i += bytes[i..].iter().take_while(|b| blank(b)).count();
    }
    let quote = *bytes.get(i)?;
    if i == at + len || !matches!(quote, b'\'' | b'"') {
        return None;
    }
    let word = &bytes[at..at + len];
    let named = if word.eq_ignore_ascii_case(b"BY") {
        let before = bytes[..at]
            .iter()
            .rposition(|b| !blank(b))
            .map_or(0, |k| k + 1);
        before < at
            && before >= 10
            && bytes[before - 10..before].eq_ignore_ascii_case(b"IDENTIFIED")
    } else {
        // ASCII by construction
        std::str::from_utf8(word)
            .ok()
            .and_then(upper_snake)
            .is_some_and(|name| is_secret_name(&name))
    };
    if !named {
        return None;
    }
    let start = i + 1;
    let close = bytes[start..]
        .iter()
        .take(MAX_QUOTED_VALUE)
        .position(|&b| b == quote || b == b'\n')?;
    (close > 0 && bytes[start + close] == quote).then_some((start, start + close))
}

/// Words of prose that name a password, in the languages requests come in (docs/ranking.md,
/// Other languages): "my password is ...", "mein Passwort ist ...", "mon mot de passe est ...",
/// "mi contraseña es ...". Compared without ASCII case.
const PROSE_PASSWORD_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "passcode",
    "passwort",
    "kennwort",
    "passe",
    "contraseña",
    "contrasena",
];

/// Words prose writes between a password's name and its value: "password is ...", "password
/// was changed to ...", "Passwort lautet ...", "mot de passe est ...", "contraseña es ...".
const PROSE_LINKS: &[&str] = &[
    "is",
    "was",
    "are",
    "be",
    "been",
    "now",
    "still",
    "set",
    "changed",
    "reset",
    "updated",
    "to",
    "as",
    "becomes",
    "became",
    "remains",
    "will",
    "would",
    "should",
    "must",
    "it's",
    "ist",
    "war",
    "lautet",
    "wurde",
    "bleibt",
    "auf",
    "jetzt",
    "est",
    "était",
    "sera",
    "reste",
    "devient",
    "maintenant",
    "es",
    "era",
    "será",
    "sigue",
    "ahora",
    "is:",
    "was:",
    "ist:",
    "est:",
    "es:",
];

/// Chinese words naming a password ("我的密码是hunter22"): no blank needs to follow them.
const PROSE_PASSWORD_WORDS_CJK: &[&str] = &["密码", "口令"];

/// Chinese links written after them ("密码是", "密码为", "密码：").
const PROSE_LINKS_CJK: &[&str] = &["是", "为", "：", ":"];

/// The most link words `prose_password_at` reads between the name and the value.
const MAX_PROSE_LINKS: usize = 4;

/// The longest word `prose_password_at` compares with a name or a link, in bytes.
const MAX_PROSE_WORD: usize = 24;

/// The longest unquoted value `prose_password_at` reads: a password a person writes in a
/// sentence is short; the bound keeps the scan constant.
const MAX_PROSE_VALUE: usize = 64;

/// The end of the word of prose at `i` (to a blank, or to `stop`), when it is at most `max`
/// bytes long.
fn prose_word_end(bytes: &[u8], i: usize, max: usize, stop: impl Fn(u8) -> bool) -> Option<usize> {
    let len = bytes[i..]
        .iter()
        .take(max + 1)
        .take_while(|&&b| !b.is_ascii_whitespace() && !stop(b))
        .count();
    (len <= max).then_some(i + len)
}

/// The byte range of a password written in prose after its name and link words (docs/capture.md,
/// Secrets): "my password is hunter22", "reset the password to Winter2024!", "the passphrase was
/// 'correct horse'", "mein Passwort ist Sommer2024", "密码是abc12345". A quoted value is one
/// whatever its shape; an unquoted word only when it does not read as a word of the sentence:
/// four bytes or more with a digit or a symbol beside a letter, or four digits or more
/// ("password is incorrect", "password is 8 characters" and "password was reset" are kept).
/// At least one link word: "password hunter22" alone is kept. On one line; constant cost.
fn prose_password_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    let mut i;
    let cjk = bytes[at] >= 0x80;
    if cjk {
        let name = PROSE_PASSWORD_WORDS_CJK
            .iter()
            .find(|w| bytes[at..].starts_with(w.as_bytes()))?;
        i = at + name.len();
        if let Some(link) = PROSE_LINKS_CJK
            .iter()
            .find(|l| bytes[i..].starts_with(l.as_bytes()))
        {
            i += link.len();
        } else {
            return None;
        }
        i += bytes[i..]
            .iter()
            .take_while(|&&b| b == b' ' || b == b'\t')
            .count();
    } else {
        if at > 0 && (is_name_byte(bytes[at - 1]) || bytes[at - 1] >= 0x80) {
            return None;
        }
        let end = prose_word_end(bytes, at, MAX_PROSE_WORD, |b| {
            !b.is_ascii_alphabetic() && b < 0x80
        })?;
        let word = &bytes[at..end];
        if !PROSE_PASSWORD_WORDS
            .iter()
            .any(|w| word.eq_ignore_ascii_case(w.as_bytes()))
        {
            return None;
        }
        i = end;
        let mut links = 0usize;
        loop {
            let gap = bytes[i..]
                .iter()
                .take_while(|&&b| b == b' ' || b == b'\t')
                .count();
            if gap == 0 {
                return None;
            }
            i += gap;
            let Some(end) = prose_word_end(bytes, i, MAX_PROSE_WORD, |_| false) else {
                break;
            };
            let next = &bytes[i..end];
            if links < MAX_PROSE_LINKS
                && PROSE_LINKS
                    .iter()
                    .any(|l| next.eq_ignore_ascii_case(l.as_bytes()))
            {
                links += 1;
                i = end;
                continue;
            }
            break;
        }
        if links == 0 {
            // "password hunter22" reads as a name before a value too rarely to redact by shape
            // ("password reset2"); "password 'x'" is the quoted rule's
            return None;
        }
    }
    let quote = *bytes.get(i)?;
    if matches!(quote, b'\'' | b'"' | b'`') {
        let start = i + 1;
        let close = bytes[start..]
            .iter()
            .take(MAX_QUOTED_VALUE)
            .position(|&b| b == quote || b == b'\n')?;
        return (close > 0 && bytes[start + close] == quote).then_some((start, start + close));
    }
    // a Chinese sentence goes on with no blank: its value is ASCII ("密码是abc12345，谢谢")
    let end = prose_word_end(bytes, i, MAX_PROSE_VALUE, |b| cjk && b >= 0x80)?;
    // the sentence's own punctuation after the value is kept
    let mut value_end = end;
    while value_end > i && matches!(bytes[value_end - 1], b'.' | b',' | b';' | b')') {
        value_end -= 1;
    }
    let value = &bytes[i..value_end];
    let letters = value
        .iter()
        .filter(|b| b.is_ascii_alphabetic() || **b >= 0x80)
        .count();
    let digits = value.iter().filter(|b| b.is_ascii_digit()).count();
    let others = value.len() - letters - digits;
    let chosen = (letters > 0 && digits + others > 0) || digits == value.len();
    (value.len() >= 4 && chosen).then_some((i, value_end))
}

/// Whether `value` holds a password written in prose (`prose_password_at`): a string of code
/// holding "my password is hunter22" is a secret parameter.
fn has_prose_password(value: &str) -> bool {
    let bytes = value.as_bytes();
    (0..bytes.len()).any(|i| {
        (bytes[i].is_ascii_alphabetic() || bytes[i] >= 0xC0)
            && prose_password_at(bytes, i).is_some()
    })
}

/// Whether `value` holds a quoted value after a word naming a credential
/// (`quoted_value_after_name_at`): a string of SQL, `"ALTER USER bob IDENTIFIED BY '...'"`.
fn has_quoted_value_after_name(value: &str) -> bool {
    let bytes = value.as_bytes();
    (0..bytes.len())
        .any(|i| is_name_byte(bytes[i]) && quoted_value_after_name_at(bytes, i).is_some())
}

/// Whether `value` holds a `name=value` pair named as a credential (`password=...`).
fn has_secret_pair(value: &str) -> bool {
    let bytes = value.as_bytes();
    (0..bytes.len()).any(|i| {
        is_name_byte(bytes[i])
            && (i == 0 || !is_name_byte(bytes[i - 1]))
            && secret_pair_value_at(bytes, i).is_some()
    })
}

/// Whether `value` holds a field named as a credential, as free text's field rule reads one
/// (`secret_field_value_at`), with a value written there: a JSON body in a string
/// (`'{"password": "..."}'`), a header line (`"X-Api-Key: ..."`, `"Cookie: sid=..."`). A value
/// that only refers to one the code supplies (`%s`, `{}`, `{pw}`, `${pw}`, `$PW`) or is an
/// HTTP authentication scheme alone (`"Authorization: Bearer "`, joined to a token) is none
/// (docs/normalization.md, Secrets). Linear: a value is scanned only after a credential's name.
fn has_secret_field(value: &str) -> bool {
    let bytes = value.as_bytes();
    (0..bytes.len()).any(|i| {
        let starts = matches!(bytes[i], b'"' | b'\'')
            || (is_name_byte(bytes[i]) && (i == 0 || !is_name_byte(bytes[i - 1])));
        starts
            && secret_field_value_at(bytes, i).is_some_and(|(start, end)| {
                let written = &bytes[start..end];
                !names_a_value_given_later(written)
                    && !written.starts_with(b"$")
                    && !AUTH_SCHEMES
                        .iter()
                        .any(|s| written.eq_ignore_ascii_case(s.as_bytes()))
            })
    })
}

/// Whether `value` holds a query parameter named as a credential (`?api_key=...`).
fn has_secret_query(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes
        .iter()
        .enumerate()
        .any(|(i, &b)| matches!(b, b'?' | b'&') && secret_query_value_at(bytes, i).is_some())
}

/// Whether `text` ends where a credential's value starts, so what is written next (an
/// interpolation) is one: a name that names a credential (`is_secret_name`), then `=` (spaces
/// around it allowed: SQL's `password = `) or `:` right after the name or its closing quote (a
/// field's: `"token": `, `token:`; not `a ? token : b`), then maybe an opening quote or an
/// HTTP auth scheme (`password='`, `Authorization: Bearer `). Reads at most the name's bytes.
pub fn opens_a_secret_value(text: &str) -> bool {
    let mut t = text.trim_end_matches([' ', '\t']);
    if let Some(scheme_at) = t.rfind(' ') {
        if AUTH_SCHEMES
            .iter()
            .any(|s| t[scheme_at + 1..].eq_ignore_ascii_case(s))
        {
            t = t[..scheme_at].trim_end_matches([' ', '\t']);
        }
    }
    let t = t
        .strip_suffix(['"', '\''])
        .unwrap_or(t)
        .trim_end_matches([' ', '\t']);
    let t = if let Some(t) = t.strip_suffix('=') {
        t.trim_end_matches([' ', '\t'])
    } else if let Some(t) = t.strip_suffix(':') {
        t.strip_suffix(['"', '\'']).unwrap_or(t)
    } else {
        return false;
    };
    let name_len = t.bytes().rev().take_while(|&b| is_name_byte(b)).count();
    let name = &t[t.len() - name_len..];
    name_len > 0
        && name_len <= MAX_VALUE_NAME
        && upper_snake(name).is_some_and(|n| is_secret_name(&n))
}

/// The most bytes of a call's arguments `password_argument_at` reads in free text.
const MAX_ARGUMENTS_SCAN: usize = 512;

/// The byte range of the password (its quotes' inside) of a call quoted in free text whose
/// name starts at `at`, when the call's function takes one by position (`PASSWORD_ARGUMENTS`:
/// `login("bob", "pw")`, `smtp.login('bob', 'pw')`, `ftplib.FTP(h, u, "pw")`) and that
/// argument is a quoted string; a name, a call or a keyword argument there is none (it names
/// a value given elsewhere). Arguments split at commas outside quotes and brackets; reads at
/// most `MAX_ARGUMENTS_SCAN` bytes of them (docs/capture.md, Secrets). Also a JDBC
/// connection's `[user, password]` pair (`JDBC_DRIVER_ARGS`), its second item when quoted:
/// named (`driver_args=["bob", "pw"]`) or jaydebeapi's `connect`'s third argument, a
/// `connect` read so when it is called on `jaydebeapi`, the text names that module
/// (`names_jdbc_module`) or its second argument is a quoted `jdbc:` URL, as code's rule reads
/// it (`tree.rs`, `jdbc_driver_args`).
fn password_argument_at(
    bytes: &[u8],
    at: usize,
    names_jdbc_module: bool,
) -> Option<(usize, usize)> {
    if at > 0 && is_name_byte(bytes[at - 1]) {
        return None;
    }
    let name_end = at
        + bytes[at..]
            .iter()
            .take(MAX_VALUE_NAME + 1)
            .position(|&b| !is_name_byte(b))?;
    let name = &bytes[at..name_end];
    let (_, _, keyword) = JDBC_DRIVER_ARGS;
    if name == keyword.as_bytes() {
        let value = name_end + blanks_at(&bytes[name_end..]);
        let open = if bytes.get(value) == Some(&b'=') {
            value + 1 + blanks_at(&bytes[value + 1..])
        } else {
            return None;
        };
        return second_of_pair(bytes, open);
    }
    if bytes.get(name_end) != Some(&b'(') {
        return None;
    }
    let function = name.rsplit(|&b| b == b'.').next()?;
    let (connect, position, _) = JDBC_DRIVER_ARGS;
    if function == connect.as_bytes() {
        let on_module = name
            .strip_suffix(function)
            .and_then(|n| n.strip_suffix(b"."))
            .is_some_and(|receiver| receiver.ends_with(JDBC_DRIVER_MODULE.as_bytes()));
        let jdbc_url = || {
            argument_start(bytes, name_end, 1).is_some_and(|url| {
                matches!(bytes[url], b'"' | b'\'')
                    && bytes
                        .get(url + 1..url + 6)
                        .is_some_and(|s| s.eq_ignore_ascii_case(b"jdbc:"))
            })
        };
        if !(on_module || names_jdbc_module || jdbc_url()) {
            return None;
        }
        return second_of_pair(bytes, argument_start(bytes, name_end, position)?);
    }
    let index = match PASSWORD_ARGUMENTS
        .iter()
        .find(|(f, _)| f.as_bytes() == function)
    {
        Some(&(_, index)) => index,
        // `HTTPBasicAuth("bob", "pw")`, `HTTPDigestAuth(...)`: a user and a password
        None if function.ends_with(b"Auth") => 1,
        None => return None,
    };
    quoted_argument(bytes, name_end, index)
}

/// The byte range (its quotes' inside) of the second item of the list or tuple opened at
/// `open` when it holds two items and that one is a quoted string whole (`["bob", "pw"]`).
fn second_of_pair(bytes: &[u8], open: usize) -> Option<(usize, usize)> {
    let close = match bytes.get(open)? {
        b'[' => b']',
        b'(' => b')',
        _ => return None,
    };
    let (start, end) = quoted_argument(bytes, open, 1)?;
    // the item's closing quote, then the list's end: no third item
    let after = end + 1 + blanks_at(&bytes[end + 1..]);
    (bytes.get(after) == Some(&close)).then_some((start, end))
}

/// Where argument `index` of the arguments opened by the `(` at `open` starts (past blanks),
/// arguments split at commas outside quotes and brackets; reads at most `MAX_ARGUMENTS_SCAN`
/// bytes. None when the arguments end before it.
fn argument_start(bytes: &[u8], open: usize, index: usize) -> Option<usize> {
    let limit = bytes.len().min(open + 1 + MAX_ARGUMENTS_SCAN);
    let (mut i, mut argument, mut depth) = (open + 1, 0usize, 0usize);
    while i < limit {
        if argument == index && depth == 0 {
            let start = i + blanks_at(&bytes[i..limit]);
            return (start < limit && !matches!(bytes[start], b')' | b',')).then_some(start);
        }
        match bytes[i] {
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < limit && bytes[i] != q {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' if depth == 0 => return None,
            b')' | b']' | b'}' => depth -= 1,
            b',' if depth == 0 => argument += 1,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The byte range (its quotes' inside) of argument `index` of the arguments opened by the `(`
/// at `open`, when it is a quoted string whole; arguments split at commas outside quotes and
/// brackets; reads at most `MAX_ARGUMENTS_SCAN` bytes.
fn quoted_argument(bytes: &[u8], open: usize, index: usize) -> Option<(usize, usize)> {
    let name_end = open;
    let limit = bytes.len().min(name_end + 1 + MAX_ARGUMENTS_SCAN);
    let (mut i, mut argument, mut depth) = (name_end + 1, 0usize, 0usize);
    let mut argument_start = i;
    while i < limit {
        match bytes[i] {
            q @ (b'"' | b'\'') => {
                let start = i + 1;
                let mut end = start;
                while end < limit && bytes[end] != q {
                    end += if bytes[end] == b'\\' { 2 } else { 1 };
                }
                if end >= limit {
                    return None;
                }
                let whole = bytes[argument_start..i].iter().all(u8::is_ascii_whitespace);
                if depth == 0 && argument == index && whole {
                    let closes = bytes[end + 1..limit]
                        .iter()
                        .find(|b| !b.is_ascii_whitespace())
                        .is_some_and(|&b| matches!(b, b',' | b')' | b']'));
                    return (closes && end > start).then_some((start, end));
                }
                i = end + 1;
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' if depth == 0 => return None,
            b')' | b']' | b'}' => depth -= 1,
            b',' if depth == 0 => {
                argument += 1;
                argument_start = i + 1;
                if argument > index {
                    return None;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The longest name `opens_a_secret_value` reads.
const MAX_VALUE_NAME: usize = 64;

/// What a credential-shaped token of free text becomes.
pub const REDACTED_TOKEN: &str = "[REDACTED]";

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'_' | b'-' | b'.')
}

/// `text` with every credential-shaped token replaced by `[REDACTED]`: a token (a run of
/// `[A-Za-z0-9+/=_.-]`, trailing dots dropped) that `is_secret_value` flags, the token after
/// `Bearer ` or `Basic `, a URL's user-info when it has a password (`scheme://[REDACTED]@host`),
/// the value of a query parameter named as a credential (`?access_token=[REDACTED]`), the
/// value of a `name=value` pair or of a field (`"password": "..."`, `X-Api-Key: ...`:
/// `secret_field_value_at`) named as one, the `value` after a `name` naming one
/// (`Siblings`), every cookie of a `Cookie:` header (`cookie_values_at`), a
/// credential a command line writes as a shell does (`fallback.rs`, `shell_secret_ranges`),
/// and a whole PEM block (`-----BEGIN` to the `-----` after `-----END`). For free text that no parser reads: error messages, arguments, traces, comments. Linear in
/// the text; borrowed when nothing is found.
pub fn redact_text(text: &str) -> std::borrow::Cow<'_, str> {
    let shell = super::fallback::shell_secret_ranges(text);
    if shell.is_empty() {
        return redact(text, Some(is_secret_value), Rules::Text);
    }
    let mut cut = String::with_capacity(text.len());
    let mut copied = 0;
    for (start, end) in shell {
        cut.push_str(&text[copied..start]);
        cut.push_str(REDACTED_TOKEN);
        copied = end;
    }
    cut.push_str(&text[copied..]);
    std::borrow::Cow::Owned(redact(&cut, Some(is_secret_value), Rules::Text).into_owned())
}

/// `redact_text`'s rules for a name or an identifier a caller gives (a tool's name, a tag; a
/// request id or a language holding one is refused instead): a URL's user-info when it has a
/// password (`scheme://[REDACTED]@host`), the value of a query parameter or of a `name=value`
/// pair named as a credential (`?access_token=[REDACTED]`, `password=[REDACTED]`), a field
/// named as one when written as JSON or a header writes it (`{"password": "..."}`,
/// `apiKey: ...`: `written_field_value_at`), the password a quoted call takes
/// (`password_argument_at`), and a token with a credential's shape (a known prefix, a JWT, a
/// `Bearer` token, a PEM block), written as `redact_text` writes them. Not the entropy rule: a
/// name that merely looks random (a commit hash, `tool_a8f9e0b1...`) is still the name that
/// filters and grouping compare; nor the field rule unquoted and unspaced (`auth:login` is a
/// tool's name). Borrowed when nothing is found (docs/capture.md, Secrets).
pub fn redact_name(name: &str) -> std::borrow::Cow<'_, str> {
    redact(name, Some(is_credential_shaped), Rules::Name)
}

/// `redact_text` for code (a template, the stored code): only credential prefixes, JWTs,
/// `Bearer`/`Basic` tokens and PEM blocks, never the entropy rule, so that identifiers stay.
/// Secret string literals are handled by the normalizer itself (they are parameters).
pub fn redact_code(code: &str) -> std::borrow::Cow<'_, str> {
    redact(code, Some(is_credential_shaped), Rules::Code)
}

/// Which of the rules that read a name before a value `redact` applies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rules {
    /// none (code: a parser reads its `name=value` as a keyword argument)
    Code,
    /// `name=value` pairs, quoted calls' passwords and fields quoted or spaced only (a name or
    /// an identifier: `auth:login` is no field)
    Name,
    /// pairs, fields, cookies, `name`/`value` siblings, and a hex digest kept unless a
    /// credential's word comes before it (free text)
    Text,
}

/// `text` with its URL credentials redacted, and with `flagged`, its PEM blocks, `Bearer` or
/// `Basic` tokens and the tokens `flagged` flags too; by `rules`, the values of `name=value`
/// pairs named as credentials (`secret_pair_value_at`) and the rest of free text's rules.
fn redact(
    text: &str,
    flagged: Option<fn(&str) -> bool>,
    rules: Rules,
) -> std::borrow::Cow<'_, str> {
    let pairs = rules != Rules::Code;
    let fields = rules == Rules::Text;
    let bytes = text.as_bytes();
    // the byte ranges to redact, in order but for a `value` redacted once its `name` after it
    // is read (`Siblings`)
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut i = 0usize;
    let mut siblings = Siblings::default();
    let mut pem_unclosed = false;
    // read once: a text naming jaydebeapi reads its `connect` calls as that module's
    let names_jdbc_module = pairs && text.contains(JDBC_DRIVER_MODULE);
    while i < bytes.len() {
        if bytes[i] == b':' && bytes[i..].starts_with(b"://") {
            // A URL's user-info may hold any character (`admin:Tr0ub4dor&3-horse`): it is
            // replaced whole, before the token rules split it.
            if let Some((from, to)) = userinfo_at(bytes, i + 3) {
                ranges.push((from, to));
                i = to;
                continue;
            }
        }
        if matches!(bytes[i], b'?' | b'&') {
            // A query parameter named as a credential (`?access_token=...`): its value, whatever
            // its shape (docs/capture.md, Secrets).
            if let Some((from, to)) = secret_query_value_at(bytes, i) {
                ranges.push((from, to));
                i = to;
                continue;
            }
        }
        let Some(flagged) = flagged else {
            i += 1; // URL credentials only
            continue;
        };
        if !pem_unclosed && bytes[i] == b'-' && bytes[i..].starts_with(b"-----BEGIN") {
            match pem_end(text, i) {
                Some(end) => {
                    ranges.push((i, end));
                    i = end;
                    continue;
                }
                // no block after this one is closed either: not looked for again, or each
                // `-----BEGIN` of a long run would search the rest of the text
                None => pem_unclosed = true,
            }
        }
        if pairs && is_name_byte(bytes[i]) {
            if let Some((from, to)) = secret_pair_value_at(bytes, i) {
                ranges.push((from, to));
                i = to;
                continue;
            }
        }
        if fields && is_name_byte(bytes[i]) {
            if let Some((values, end)) = cookie_values_at(bytes, i) {
                for (from, to) in values {
                    ranges.push((from, to));
                }
                i = end;
                continue;
            }
        }
        // a word after an escaped line break (`\npassword ...`) starts past its `n`
        let escaped = i >= 1
            && bytes[i - 1] == b'\\'
            && matches!(bytes[i], b'n' | b't' | b'r')
            && i + 1 < bytes.len();
        let entry = if escaped { i + 1 } else { i };
        if fields && entry_starts(bytes, entry) {
            if let Some((from, to)) = password_file_entry_at(bytes, entry) {
                ranges.push((from, to));
                i = to;
                continue;
            }
        }
        if pairs && is_name_byte(bytes[i]) {
            if let Some((from, to)) = password_argument_at(bytes, i, names_jdbc_module) {
                ranges.push((from, to));
                i = to;
                continue;
            }
        }
        if fields && is_name_byte(bytes[entry]) {
            if let Some((from, to)) = line_assignment_at(bytes, entry) {
                ranges.push((from, to));
                i = to;
                continue;
            }
        }
        if fields && is_name_byte(bytes[i]) {
            if let Some((from, to)) = quoted_value_after_name_at(bytes, i) {
                ranges.push((from, to));
                i = to;
                continue;
            }
        }
        if fields && (bytes[i].is_ascii_alphabetic() || bytes[i] >= 0xC0) {
            if let Some((from, to)) = prose_password_at(bytes, i) {
                ranges.push((from, to));
                i = to;
                continue;
            }
        }
        if rules == Rules::Name && (is_name_byte(bytes[i]) || matches!(bytes[i], b'"' | b'\'')) {
            if let Some((from, to)) = written_field_value_at(bytes, i) {
                ranges.push((from, to));
                i = to;
                continue;
            }
        }
        if fields && (is_name_byte(bytes[i]) || matches!(bytes[i], b'"' | b'\'')) {
            if let Some((from, to)) = secret_field_value_at(bytes, i) {
                ranges.push((from, to));
                i = to;
                continue;
            }
            if let Some((end, secret)) = name_field_at(bytes, i) {
                if let Some((from, to)) = siblings.name(i, end, secret) {
                    ranges.push((from, to));
                }
                // a credential's name is no credential; any other is read on as text
                if secret {
                    i = end;
                    continue;
                }
            }
            if let Some((from, to)) = siblings.value(bytes, i) {
                ranges.push((from, to));
                i = to;
                continue;
            }
        }
        if fields {
            siblings.bound(bytes, i);
        }
        if !is_token_byte(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_token_byte(bytes[i]) {
            i += 1;
        }
        let mut end = i;
        while end > start && bytes[end - 1] == b'.' {
            end -= 1;
        }
        let token = &text[start..end];
        let after_scheme = || {
            [&b"Bearer "[..], &b"Basic "[..]]
                .iter()
                .any(|scheme| bytes[..start].ends_with(scheme))
        };
        if (token.len() >= 8 && after_scheme())
            || (flagged(token) && !(fields && is_unnamed_digest(text, start, token)))
        {
            ranges.push((start, end));
        }
    }
    if ranges.is_empty() {
        return std::borrow::Cow::Borrowed(text);
    }
    // a `value` redacted after its `name` may hold ranges found inside it: merged into it
    ranges.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0usize; // bytes of `text` already in `out`
    for (from, to) in ranges {
        if to <= copied {
            continue;
        }
        if from >= copied {
            out.push_str(&text[copied..from]);
            out.push_str(REDACTED_TOKEN);
        }
        copied = to;
    }
    out.push_str(&text[copied..]);
    std::borrow::Cow::Owned(out)
}

/// The lengths of the hex digests free text quotes: MD5, SHA-1 (a git commit), SHA-224,
/// SHA-256, SHA-384, SHA-512.
const DIGEST_LENGTHS: &[usize] = &[32, 40, 56, 64, 96, 128];

/// How far back, on its line, a word naming a credential makes a hex digest one.
const DIGEST_NAME_WINDOW: usize = 48;

/// Whether `token` (at byte `start` of `text`) is a hex digest no credential's word names, so
/// free text keeps it: a commit (`deployed 3f2a9c...`), a checksum (`sha256:9f86d0...`), also
/// as a pair's value (`commit=3f2a...`). Its letters are all lower or all upper case, its
/// length a digest's (`DIGEST_LENGTHS`), and none of the words before it on its line, within
/// `DIGEST_NAME_WINDOW` bytes, names a credential (`token 3f2a...`, `the api key is 3f2a...`
/// are redacted; a hex key is a credential when something says so; docs/capture.md, Secrets).
fn is_unnamed_digest(text: &str, start: usize, token: &str) -> bool {
    let (name, digest) = token.rsplit_once('=').unwrap_or(("", token));
    let hex = DIGEST_LENGTHS.contains(&digest.len())
        && digest.bytes().all(|b| b.is_ascii_hexdigit())
        && !(digest.bytes().any(|b| b.is_ascii_lowercase())
            && digest.bytes().any(|b| b.is_ascii_uppercase()));
    if !hex || !name.bytes().all(is_name_byte) {
        return false;
    }
    let bytes = text.as_bytes();
    let end = start + name.len();
    let mut from = end.saturating_sub(DIGEST_NAME_WINDOW);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    if let Some(line) = bytes[from..end].iter().rposition(|&b| b == b'\n') {
        from += line + 1;
    }
    !upper_snake(&text[from..end]).is_some_and(|words| names_a_credential(&words))
}

/// The pairing of `name` (or `key`) fields with `value` fields in free text, in either order
/// (`{"name": "DB_PASSWORD", "value": "..."}`, `{"value": "...", "name": "DB_PASSWORD"}`,
/// `- value: ...` then `name: API_TOKEN`): a `value` is its credential's when the `name` field
/// next to it, within `NAMED_VALUE_WINDOW` bytes before or after it, names one (`name_field_at`).
/// A `name` read first takes the next `value`; a `value` read first, the next `name`. An
/// object's brace and a YAML list item's `- ` end an entry: a `value` waiting for its `name`,
/// and a `name` that names no credential, are dropped there (a credential's `name` is not, so
/// `{"name": "TOKEN", "meta": {...}, "value": "..."}` is read; docs/normalization.md,
/// Secrets). Constant cost for each field but the value it scans, and a `value` field is not
/// looked for inside another's value.
#[derive(Default)]
struct Siblings {
    /// a `name` read and not yet paired: until where its `value` may start, and whether it
    /// names a credential
    name: Option<(usize, bool)>,
    /// a `value` read and not yet paired: its range, to redact if its `name` names a credential
    value: Option<(usize, usize)>,
    /// the end of the last `value` field read
    read_to: usize,
}

impl Siblings {
    /// A `name` field starts at `at` and its value ends at `end`: the range of the `value`
    /// before it to redact, if it names a credential and one waits for it.
    fn name(&mut self, at: usize, end: usize, secret: bool) -> Option<(usize, usize)> {
        match self.value.take() {
            Some((from, to)) if at <= to + NAMED_VALUE_WINDOW => secret.then_some((from, to)),
            _ => {
                self.name = Some((end + NAMED_VALUE_WINDOW, secret));
                None
            }
        }
    }

    /// The range to redact of a `value` field starting at `at`, if a `name` before it named a
    /// credential; one read first waits for its `name`.
    fn value(&mut self, bytes: &[u8], at: usize) -> Option<(usize, usize)> {
        if at < self.read_to {
            return None;
        }
        let (from, to) = value_field_at(bytes, at)?;
        self.read_to = to;
        match self.name.take() {
            Some((until, secret)) if at < until => secret.then_some((from, to)),
            _ => {
                self.value = Some((from, to));
                None
            }
        }
    }

    /// Byte `at` of the text is read: an entry ends at a brace or a YAML list item's `- `
    /// that starts a line. Linear: the blanks before a `- ` are read once.
    fn bound(&mut self, bytes: &[u8], at: usize) {
        let item = bytes[at] == b'-'
            && bytes.get(at + 1) == Some(&b' ')
            && bytes[..at]
                .iter()
                .rev()
                .find(|b| !blank(b))
                .map_or(true, |&b| b == b'\n');
        if matches!(bytes[at], b'{' | b'}') || item {
            self.value = None;
            self.name = self.name.filter(|&(_, secret)| secret);
        }
    }
}

/// Where a PEM block starting at `start` ends (after the closing `-----`), if it is closed.
fn pem_end(text: &str, start: usize) -> Option<usize> {
    #[cfg(test)]
    scanned(text[start..].find("-----END").unwrap_or(text.len() - start));
    let end_marker = start + text[start..].find("-----END")?;
    let after = end_marker + "-----END".len();
    let close = after + text[after..].find("-----")?;
    Some(close + "-----".len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long run of what opens a credential (`-----BEGIN`, `?name=`) is read once, not once
    /// per opening to the end of the text, and a query value's inner queries are not listed
    /// again (docs/capture.md, Secrets): bytes read, not time, the same on any machine.
    #[test]
    fn long_runs_of_openings_are_read_in_proportion_to_their_size() {
        for unit in [
            "-----BEGIN ",
            "?next=",
            "?token=",
            "&password=",
            "x@y:z=w/?q=",
        ] {
            let text = unit.repeat(20_000);
            SCANNED.with(|c| c.set(0));
            let passwords = url_passwords(&text);
            let _ = redact_text(&text);
            let _ = redact_name(&text);
            let read = SCANNED.with(|c| c.get());
            assert!(
                read <= 8 * text.len(),
                "{unit}: {read} bytes read of {}",
                text.len()
            );
            let listed: usize = passwords.iter().map(|p| p.len()).sum();
            assert!(listed <= text.len(), "{unit}: {listed} bytes listed");
        }
    }

    #[test]
    fn url_passwords_are_each_userinfo_password_as_written() {
        assert_eq!(
            url_passwords(
                "a postgresql://admin:Tr0ub4dor&3@db/x and https://u:p@ss@h?q ssh://git@h"
            ),
            vec!["Tr0ub4dor&3", "p@ss"]
        );
        assert!(url_passwords("https://host/path://x no user-info").is_empty());
        assert_eq!(
            url_passwords("GET https://h/x?page=2&access_token=tok_123&q=1 and ?token=t2"),
            vec!["tok_123", "t2"]
        );
    }

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
            "PGPASSWORD",
            "DBPASSWD",
            "MYSQL_PWD",
            "PASSWORD_FILE_CONTENT",
            "PASS",
            "DB_PASS",
            "PWD",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "MAX_TOKENS",
            "AUTHOR",
            "PATH",
            "KEY",
            "LIMIT",
            "TOKENIZER",
            "PASS_RATE",
            "BYPASS",
            "OLDPWD",
            "PASSWORD_FILE",
            "TOKEN_PATH",
            "SECRET_FILE",
            "POSTGRES_PASSWORD_FILE",
            "CLIENT_SECRET_FILENAME",
        ] {
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
        // The shortest shapes still flagged: a JWT of `SHORTEST_SHAPED` bytes, and no prefix
        // asks for fewer (the length gate must never hide a credential).
        assert!(is_credential_shaped("eyJx.xxxx."));
        assert!(!is_credential_shaped("eyJx.xxx."));
        assert!(!is_credential_shaped("eyJx.xxxx.y.z"));
        assert!(TOKEN_PREFIXES
            .iter()
            .all(|(prefix, min_len)| *min_len >= SHORTEST_SHAPED && prefix.len() <= *min_len));
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

    #[test]
    fn a_string_holding_a_field_named_as_a_credential_is_a_secret() {
        for value in [
            r#"{"user": "bob", "password": "hunter2x"}"#,
            r#"{'api_key':'hunter2x'}"#,
            "X-Api-Key: hunter2x",
            "Cookie: session=hunter2x",
            "Authorization: token hunter2x",
            "client_secret: hunter2x\nscope: all",
        ] {
            assert!(is_secret_value(value), "{value}");
        }
        // kept: a prompt, a format string, an interpolation, a scheme joined to a token, a
        // structure, no credential's name, a path
        for value in [
            "Password: ",
            "token: %s",
            "token: {}",
            "Authorization: Bearer ",
            "Authorization: ${TOKEN}",
            "X-Api-Key: $API_KEY",
            r#"{"password": {"min": 8}}"#,
            r#"{"max_tokens": 512, "author": "bob"}"#,
            "password_file: /etc/pw",
            "Content-Type: application/json",
        ] {
            assert!(!is_secret_value(value), "{value}");
        }
        // linear: a megabyte of fields that name a credential but give no value
        let many = "password: {".repeat(1 << 16);
        assert!(!is_secret_value(&many));
    }

    #[test]
    fn free_text_is_redacted_token_by_token() {
        let key = "sk-live-4f9a8b7c6d5e4f3a2b1c0d9e";
        let text = format!("auth failed for key {key}. retry; header Bearer abcdefgh12345 ok");
        let out = redact_text(&text);
        assert!(!out.contains(key), "{out}");
        assert!(!out.contains("abcdefgh12345"), "{out}");
        assert!(
            out.contains("auth failed for key [REDACTED]. retry"),
            "{out}"
        );
        let pem = "x -----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY----- y";
        assert_eq!(redact_text(pem), "x [REDACTED] y");
    }

    #[test]
    fn free_text_loses_the_value_of_a_field_named_as_a_credential() {
        for (text, redacted) in [
            (r#"{"password": "pw1"}"#, r#"{"password": "[REDACTED]"}"#),
            (r#"{"password":"p\"w, x"}"#, r#"{"password":"[REDACTED]"}"#),
            ("{'api_key': 'pw1'}", "{'api_key': '[REDACTED]'}"),
            (
                "client_secret: pw1\nnext: 1",
                "client_secret: [REDACTED]\nnext: 1",
            ),
            ("X-Api-Key: pw1, more", "X-Api-Key: [REDACTED], more"),
            ("Authorization: Basic dXNl", "Authorization: [REDACTED]"),
            ("authorization: bearer abc x", "authorization: [REDACTED] x"),
            (r#"{"token": "cut off"#, r#"{"token": "[REDACTED]"#),
            // kept: no credential's name, a structure, a path, a name's `::`
            (r#"{"max_tokens": 5}"#, r#"{"max_tokens": 5}"#),
            (r#"{"password": {"a": 1}}"#, r#"{"password": {"a": 1}}"#),
            ("password_file: /etc/pw", "password_file: /etc/pw"),
            ("Password::new()", "Password::new()"),
            ("password:", "password:"),
        ] {
            assert_eq!(redact_text(text), redacted, "{text}");
        }
        // names read a field only quoted or spaced (`written_field_value_at`), code never
        assert_eq!(redact_name("password:pw1"), "password:pw1");
        assert_eq!(redact_name("password: pw1"), "password: [REDACTED]");
        assert_eq!(redact_code("password: pw1"), "password: pw1");
        // linear: a long run of cut-off fields costs one pass
        let many = r#"{"token": "x"#.repeat(20_000);
        assert!(redact_text(&many).starts_with(r#"{"token": "[REDACTED]"#));
    }

    #[test]
    fn free_text_loses_a_field_of_json_inside_a_string_and_a_template_literals_value() {
        for (text, redacted) in [
            // a JSON body inside a JSON string (a tool's argument, an error quoting one)
            (
                r#"{"body": "{\"password\": \"hunter2pass\", \"user\": \"bob\"}"}"#,
                r#"{"body": "{\"password\": \"[REDACTED]\", \"user\": \"bob\"}"}"#,
            ),
            (
                r#"sent {\"api_key\":\"hunter2pass\"} and got 401"#,
                r#"sent {\"api_key\":\"[REDACTED]\"} and got 401"#,
            ),
            // encoded twice: the value ends at its own quote, not at one escaped deeper
            (
                r#"{\\\"token\\\": \\\"hun\\\\\\\"ter2\\\"}"#,
                r#"{\\\"token\\\": \\\"[REDACTED]\\\"}"#,
            ),
            // a template literal's value whole, interpolations and text
            (
                "await mcp.call({password: `${a}hunter2pass`})",
                "await mcp.call({password: `[REDACTED]`})",
            ),
        ] {
            assert_eq!(redact_text(text), redacted, "{text}");
        }
        for kept in [
            r#"{\"user\": \"bob\", \"max_tokens\": 5}"#,
            r#"{\"password_length\": 12}"#,
            "keyboard.press(`Enter`)",
        ] {
            assert_eq!(redact_text(kept), kept);
        }
    }

    #[test]
    fn free_text_loses_a_jdbc_pairs_password() {
        for (text, redacted) in [
            (
                r#"jaydebeapi.connect(d, url, ["bob", "hunter2pass"]) failed"#,
                r#"jaydebeapi.connect(d, url, ["bob", "[REDACTED]"]) failed"#,
            ),
            (
                r#"connect("org.h2.Driver", "jdbc:h2:mem:x", ("bob", 'hunter2pass'))"#,
                r#"connect("org.h2.Driver", "jdbc:h2:mem:x", ("bob", '[REDACTED]'))"#,
            ),
            (
                r#"import jaydebeapi as j; j.connect(d, u, ["bob", "hunter2pass"], jars)"#,
                r#"import jaydebeapi as j; j.connect(d, u, ["bob", "[REDACTED]"], jars)"#,
            ),
            (
                r#"connect(d, url, driver_args = ["bob", "hunter2pass"])"#,
                r#"connect(d, url, driver_args = ["bob", "[REDACTED]"])"#,
            ),
        ] {
            assert_eq!(redact_text(text), redacted, "{text}");
        }
        for kept in [
            r#"sqlite3.connect("a.db", 5, ["a", "b"])"#,
            r#"jaydebeapi.connect(d, url, ["bob", "pw", "x"])"#,
            r#"jaydebeapi.connect(d, url, [user, pw])"#,
            r#"sock.connect(("example.com", 80))"#,
        ] {
            assert_eq!(redact_text(kept), kept);
        }
    }

    #[test]
    fn names_lose_a_quoted_or_spaced_field_and_a_quoted_calls_password() {
        for (name, redacted) in [
            (
                r#"{"password": "hunter2"}"#,
                r#"{"password": "[REDACTED]"}"#,
            ),
            ("apiKey: hunter2", "apiKey: [REDACTED]"),
            (
                r#"jaydebeapi.connect(d, u, ["bob", "hunter2"])"#,
                r#"jaydebeapi.connect(d, u, ["bob", "[REDACTED]"])"#,
            ),
            (
                r#"smtp.login("bob", "hunter2")"#,
                r#"smtp.login("bob", "[REDACTED]")"#,
            ),
        ] {
            assert_eq!(redact_name(name), redacted, "{name}");
        }
        for kept in [
            "auth:login",
            "token:refresh",
            "gmail:get",
            "env: prod",
            "tokens: 5",
        ] {
            assert!(
                matches!(redact_name(kept), std::borrow::Cow::Borrowed(_)),
                "{kept}"
            );
        }
    }

    #[test]
    fn free_text_and_strings_lose_a_quoted_value_after_a_credentials_word_or_identified_by() {
        for (text, redacted) in [
            (
                "ALTER ROLE bob WITH LOGIN PASSWORD 'hunter2pw';",
                "ALTER ROLE bob WITH LOGIN PASSWORD '[REDACTED]';",
            ),
            ("SET PASSWORD = 'hunter2pw'", "SET PASSWORD = '[REDACTED]'"),
            (
                "CREATE USER 'bob'@'%' IDENTIFIED BY 'hunter2pw';",
                "CREATE USER 'bob'@'%' IDENTIFIED BY '[REDACTED]';",
            ),
            (
                "the password \"hunter2pw\" was refused",
                "the password \"[REDACTED]\" was refused",
            ),
        ] {
            assert_eq!(redact_text(text), redacted, "{text}");
            assert!(is_secret_value(text), "{text}");
        }
        for kept in [
            "SELECT name FROM users ORDER BY 'name'",
            "tokens = 'abc'",
            "password_length = '12'",
            "password\n'x'",
        ] {
            assert_eq!(redact_text(kept), kept);
            assert!(!is_secret_value(kept), "{kept}");
        }
        // linear: a long run of quotes never closed
        let many = "password '".repeat(50_000);
        let _ = redact_text(&many);
        assert!(is_secret_value(&"password 'x' ".repeat(2)));
    }

    #[test]
    fn free_text_and_strings_lose_a_password_written_in_prose() {
        for (text, redacted) in [
            ("my password is hunter2", "my password is [REDACTED]"),
            (
                "log in to github; my password is Hunter22!.",
                "log in to github; my password is [REDACTED].",
            ),
            (
                "reset bob's password to Winter2024 please",
                "reset bob's password to [REDACTED] please",
            ),
            (
                "the password was changed to 'correct horse'",
                "the password was changed to '[REDACTED]'",
            ),
            ("Passphrase is: p@ss-w0rd", "Passphrase is: [REDACTED]"),
            (
                "the PIN passcode is 482913",
                "the PIN passcode is [REDACTED]",
            ),
            (
                "mein Passwort ist Sommer2024, danke",
                "mein Passwort ist [REDACTED], danke",
            ),
            (
                "mon mot de passe est soleil42",
                "mon mot de passe est [REDACTED]",
            ),
            ("mi contraseña es gato_99", "mi contraseña es [REDACTED]"),
            ("我的密码是abc12345，谢谢", "我的密码是[REDACTED]，谢谢"),
            ("密码： hunter22", "密码： [REDACTED]"),
        ] {
            assert_eq!(redact_text(text), redacted, "{text}");
            assert!(is_secret_value(text), "{text}");
        }
        for kept in [
            "the password is incorrect",
            "password is 8 characters long",
            "the password was reset yesterday",
            "password reset2 flow",
            "passwords are hunter22",
            "the password policy is v2",
            "Passwort ist falsch",
            "le mot de passe est expiré",
            "密码是错误的",
            "password is",
            "my password is 123",
        ] {
            assert_eq!(redact_text(kept), kept);
            assert!(!is_secret_value(kept), "{kept}");
        }
        // constant cost a word: long runs of names and links
        for unit in [
            "password is ",
            "password ",
            "密码是",
            "password is is is is ",
        ] {
            let _ = redact_text(&unit.repeat(20_000));
        }
    }

    #[test]
    fn free_text_loses_a_password_named_by_a_short_word() {
        for (text, redacted) in [
            ("pass=hunter2x", "pass=[REDACTED]"),
            ("pwd: hunter2x", "pwd: [REDACTED]"),
            ("db_pass=hunter2x ok", "db_pass=[REDACTED] ok"),
            (r#"{"pwd": "hunter2x"}"#, r#"{"pwd": "[REDACTED]"}"#),
            (
                "Driver=x;Uid=bob;Pwd=hunter2x;",
                "Driver=x;Uid=bob;Pwd=[REDACTED];",
            ),
            ("MYSQL_PWD=hunter2x", "MYSQL_PWD=[REDACTED]"),
            // kept: the word not last, the shell's working directory
            ("pass_rate: 0.95, bypass: 1", "pass_rate: 0.95, bypass: 1"),
            ("PWD=/home/bob/x OLDPWD=/tmp", "PWD=/home/bob/x OLDPWD=/tmp"),
            (r#"{"pwd": "/srv/app"}"#, r#"{"pwd": "/srv/app"}"#),
        ] {
            assert_eq!(redact_text(text), redacted, "{text}");
        }
    }

    #[test]
    fn free_text_loses_a_credential_a_quoted_command_line_writes() {
        for (text, redacted) in [
            (
                "mysql -u bob -phunter2x db: access denied",
                "mysql -u bob -p[REDACTED] db: access denied",
            ),
            // the user stays, the password goes
            (
                "ran `curl -u bob:hunter2hunter2 https://x`: 401",
                "ran `curl -u bob:[REDACTED] https://x`: 401",
            ),
            (
                "curl -u 'bob:hunter2 x' https://x; wget --user=ann:pw2x h",
                "curl -u 'bob:[REDACTED]' https://x; wget --user=ann:[REDACTED] h",
            ),
            ("curl --user :hunter2x h", "curl --user :[REDACTED] h"),
            (
                "sshpass -p 'hunter2x' ssh h # exit 5",
                "sshpass -p '[REDACTED]' ssh h # exit 5",
            ),
            ("run --pass hunter2x now", "run --pass [REDACTED] now"),
            ("--password hunter2x", "--password [REDACTED]"),
            (
                "echo hunter2x | docker login -u bob --password-stdin quay.io",
                "echo [REDACTED] | docker login -u bob --password-stdin quay.io",
            ),
            (
                "failed: echo hunter2x | docker login --password-stdin r (`echo pw2x | oras login --password-stdin r`)",
                "failed: echo [REDACTED] | docker login --password-stdin r (`echo [REDACTED] | oras login --password-stdin r`)",
            ),
            (
                "tried echo hunter2x | docker login --password-stdin r",
                "tried echo [REDACTED] | docker login --password-stdin r",
            ),
            (
                r#"{"cmd": "psql \"postgresql://bob:hunter2x@h/db\""}"#,
                r#"{"cmd": "psql \"postgresql://[REDACTED]@h/db\""}"#,
            ),
        ] {
            assert_eq!(redact_text(text), redacted, "{text}");
        }
        for kept in [
            "mkdir -p build && ssh -p 22 h",
            "docker run -u 1000:1000 -p 8080:80 img",
            "psql --password mydb",
            "curl -u bob https://x",
            "curl -u bob: https://x",
            "use --password-stdin quay.io",
            "the -p flag of mysql",
        ] {
            assert!(
                matches!(redact_text(kept), std::borrow::Cow::Borrowed(_)),
                "{kept}: {}",
                redact_text(kept)
            );
        }
    }

    #[test]
    fn free_text_loses_every_cookie_a_header_sends() {
        for (text, redacted) in [
            (
                "Cookie: a=1; session=s3cret; csrftoken=t0ken\nHost: h",
                "Cookie: a=[REDACTED]; session=[REDACTED]; csrftoken=[REDACTED]\nHost: h",
            ),
            (
                "set-cookie: sid=s3cret; Path=/; HttpOnly",
                "set-cookie: sid=[REDACTED]; Path=/; HttpOnly",
            ),
            ("cookie: a=1;b=2 ", "cookie: a=[REDACTED];b=[REDACTED] "),
        ] {
            assert_eq!(redact_text(text), redacted, "{text}");
        }
        assert_eq!(redact_text("a cookie: none"), "a cookie: none");
    }

    #[test]
    fn free_text_loses_a_value_named_by_its_sibling_field() {
        for (text, redacted) in [
            (
                r#"[{"name": "LOG_LEVEL", "value": "debug"}, {"name": "DB_PASSWORD", "value": "hunter2x"}]"#,
                r#"[{"name": "LOG_LEVEL", "value": "debug"}, {"name": "DB_PASSWORD", "value": "[REDACTED]"}]"#,
            ),
            (
                "env:\n- name: API_TOKEN\n  value: abc123\n- name: MODE\n  value: fast",
                "env:\n- name: API_TOKEN\n  value: [REDACTED]\n- name: MODE\n  value: fast",
            ),
            (
                r#"{"Key": "Authorization", "Value": "tok123"}"#,
                r#"{"Key": "Authorization", "Value": "[REDACTED]"}"#,
            ),
            // the value before its name, in JSON and in YAML
            (
                r#"{"value": "hunter2hunter2", "name": "DB_PASSWORD"}"#,
                r#"{"value": "[REDACTED]", "name": "DB_PASSWORD"}"#,
            ),
            (
                "- value: x\n  name: API_TOKEN",
                "- value: [REDACTED]\n  name: API_TOKEN",
            ),
            (
                r#"[{"value": "debug", "name": "LOG_LEVEL"}, {"value": "s3cret", "name": "DB_PASSWORD"}]"#,
                r#"[{"value": "debug", "name": "LOG_LEVEL"}, {"value": "[REDACTED]", "name": "DB_PASSWORD"}]"#,
            ),
            (
                "- value: debug\n  name: MODE\n- value: s3cret\n  key: X-Api-Key\n",
                "- value: debug\n  name: MODE\n- value: [REDACTED]\n  key: X-Api-Key\n",
            ),
            // a value holding a token, redacted whole once
            (
                r#"{"Value": "sk-proj-abcdefghijklmnopqrstuvwx y", "Key": "Authorization"}"#,
                r#"{"Value": "[REDACTED]", "Key": "Authorization"}"#,
            ),
            // each value is its own name's, whichever comes first
            (
                r#"[{"name": "MODE", "value": "fast"}, {"value": "s3cret", "name": "TOKEN"}, {"name": "LOG", "value": "debug"}]"#,
                r#"[{"name": "MODE", "value": "fast"}, {"value": "[REDACTED]", "name": "TOKEN"}, {"name": "LOG", "value": "debug"}]"#,
            ),
            (
                "name: MODE value: fast name: TOKEN value: s3cret",
                "name: MODE value: fast name: TOKEN value: [REDACTED]",
            ),
            (
                r#"[{"name": "TOKEN"}, {"value": "v", "name": "MODE"}, {"value": "s3cret", "name": "PASSWORD"}]"#,
                r#"[{"name": "TOKEN"}, {"value": "[REDACTED]", "name": "MODE"}, {"value": "[REDACTED]", "name": "PASSWORD"}]"#,
            ),
            (
                r#"{"name": "TOKEN", "meta": {"a": 1}, "value": "s3cret"}"#,
                r#"{"name": "TOKEN", "meta": {"a": 1}, "value": "[REDACTED]"}"#,
            ),
            // kept: a value in another entry than its name's
            (
                r#"[{"value": "v"}, {"name": "TOKEN", "value": "s3cret"}]"#,
                r#"[{"value": "v"}, {"name": "TOKEN", "value": "[REDACTED]"}]"#,
            ),
        ] {
            assert_eq!(redact_text(text), redacted, "{text}");
        }
        // the sibling must follow or precede closely
        let far = format!(
            r#"{{"name": "API_TOKEN", "note": "{}", "value": "v1"}}"#,
            "x".repeat(NAMED_VALUE_WINDOW)
        );
        assert_eq!(redact_text(&far), far);
        let far = format!(
            r#"{{"value": "v1", "note": "{}", "name": "API_TOKEN"}}"#,
            "x".repeat(NAMED_VALUE_WINDOW)
        );
        assert_eq!(redact_text(&far), far);
    }

    #[test]
    fn a_password_in_prose_needs_a_marker_or_a_link_word() {
        // `:`, `=`, a flag, a header or a link word after the name ("is", "was changed to")
        // marks a value; a value named nowhere is kept (docs/normalization.md, Secrets)
        assert_eq!(
            redact_text("use hunter2 to log in"),
            "use hunter2 to log in"
        );
        assert_eq!(
            redact_text("my password: hunter2"),
            "my password: [REDACTED]"
        );
    }

    #[test]
    fn free_text_rules_are_linear_on_hostile_text() {
        // each shape repeated to about 1 MB: one pass each (no timing assert; a quadratic
        // scan would not finish in a test's time)
        for unit in [
            "\\\"",
            "\"\\",
            "'\\'\\",
            "- name: API_TOKEN value: ",
            "Cookie: a=1; ",
            "mysql -p",
            "--password ",
            "echo x | ",
            "{\"name\": \"TOKEN\", ",
            "{\"value\": \"x\", ",
            "value:",
            "value: '",
            "- value: x\n  name: TOKEN\n",
            "   - ",
            "{\\\"token\\\": \\\"",
            "\\\\\\\"password\\\\\\\": ",
            "jaydebeapi.connect(d, u, [\"a\", ",
            "driver_args=[\"a\", \"",
            "password: `",
        ] {
            let text = format!("\"{}", unit.repeat((1 << 20) / unit.len()));
            let _ = redact_text(&text);
        }
    }

    #[test]
    fn code_keeps_long_names_but_not_keys() {
        let code =
            "const calculateMonthlyAverage2024x = 1 // ghp_0123456789abcdefghijklmnopqrstuvwxyz";
        let out = redact_code(code);
        assert!(out.contains("calculateMonthlyAverage2024x"), "{out}");
        assert!(!out.contains("ghp_"), "{out}");
        assert!(redact_text("q8Zr3VxT0pLk2WmN7sYb4HdJ9fGc").contains("[REDACTED]"));
    }

    #[test]
    fn a_url_password_that_only_refers_to_a_value_is_kept() {
        for code in [
            "connect(f\"pg://bob:{pw}@db/x\")",
            "connect(`pg://bob:${cfg.db_password}@db/x`)",
            "\"pg://bob:{}@db/x\".format(pw)",
            "\"pg://%s:%s@db\" % (u, pw)",
            "\"pg://bob:%(pw)s@db\" % args",
        ] {
            assert_eq!(redact_code(code), code, "{code}");
            assert_eq!(redact_text(code), code, "{code}");
        }
        // A literal, an index or a call where the password goes is redacted as before.
        for (code, gone) in [
            ("f\"pg://bob:hunter2@db/{name}\"", "hunter2"),
            ("f\"pg://bob:{pw[0]}@db\"", "pw[0]"),
            ("`pg://bob:${get()}x@db`", "get()x"),
            ("\"pg://bob:{pw}2@db\"", "{pw}2"),
        ] {
            assert!(!redact_code(code).contains(gone), "{code}");
        }
        assert!(is_secret_value("pg://bob:hunter2@db"));
        assert!(!is_secret_value("pg://bob:{pw}@db"));
    }

    #[test]
    fn url_passwords_are_redacted_with_their_user() {
        let dsn = "postgresql://admin:Tr0ub4dor&3-horse@db.internal:5432/prod";
        assert!(is_secret_value(dsn));
        for text in [
            format!("connect failed: {dsn} refused"),
            format!("const db = connect(\"{dsn}\") // or {dsn}"),
            "redis://:p@ss@cache:6379/0 and https://u:x@h?q=1#f".to_owned(),
        ] {
            let out = redact_text(&text);
            for secret in ["Tr0ub4dor", "horse", "p@ss", "u:x"] {
                assert!(!out.contains(secret), "{out}");
            }
            assert_eq!(redact_code(&text), out, "code and text agree on URLs");
        }
        assert_eq!(
            redact_text(&format!("at {dsn}.")),
            "at postgresql://[REDACTED]@db.internal:5432/prod."
        );
        for plain in [
            "ssh://git@github.com/a/b",
            "https://example.com/a:b@c",
            "see http://host:8080/x",
            "mailto:me@example.com",
        ] {
            assert!(!is_secret_value(plain), "{plain}");
            assert!(
                matches!(redact_text(plain), std::borrow::Cow::Borrowed(_)),
                "{plain}"
            );
        }
    }

    #[test]
    fn query_parameters_named_as_credentials_are_redacted() {
        let url = "https://api.example.com/v1/items?access_token=qtok_9f8e7d6c5b4a39281706&page=2";
        assert!(is_secret_value(url));
        for value in [
            "https://h/x?api_key=abc1",
            "https://h/x?page=2&apiKey=abc1#top",
            "https://s3.example.com/b/o?X-Amz-Security-Token=FwoGZX&X-Amz-Date=1",
            "a=1&client_secret=shh1",
        ] {
            assert!(is_secret_value(value), "{value}");
        }
        assert_eq!(
            redact_text(&format!("GET {url} failed")),
            "GET https://api.example.com/v1/items?access_token=[REDACTED]&page=2 failed"
        );
        assert_eq!(
            redact_code(&format!("mcp.get({{ url: '{url}' }})")),
            "mcp.get({ url: 'https://api.example.com/v1/items?access_token=[REDACTED]&page=2' })"
        );
        for plain in [
            "https://example.com/api?page=2&max_tokens=5",
            "https://example.com/search?q=token&author=me",
            "https://h/x?token=",
            "a && b ? token : c",
        ] {
            assert!(!is_secret_value(plain), "{plain}");
            assert!(
                matches!(redact_text(plain), std::borrow::Cow::Borrowed(_)),
                "{plain}"
            );
        }
    }

    #[test]
    fn names_lose_credentials_but_not_random_looking_words() {
        let redacted = |name| redact_name(name).into_owned();
        assert_eq!(
            redacted("https://admin:p@ss@tools.internal/x"),
            "https://[REDACTED]@tools.internal/x"
        );
        assert_eq!(
            redacted("db=pg://admin:Tr0ub&3@db/prod"),
            "db=pg://[REDACTED]@db/prod"
        );
        assert_eq!(
            redacted("https://api.example.com/run?access_token=abcdef123456&page=2"),
            "https://api.example.com/run?access_token=[REDACTED]&page=2"
        );
        assert_eq!(
            redacted("a https://u:pw@h/x and pg://v:pw2@db?token=t0k#f, ssh://git@h ?api_key=k"),
            "a https://[REDACTED]@h/x and pg://[REDACTED]@db?token=[REDACTED]#f, ssh://git@h \
             ?api_key=[REDACTED]"
        );
        assert_eq!(
            redacted("café://üser:mötdepässe@hôte/ß?jeton=1&secret=clé€"),
            "café://[REDACTED]@hôte/ß?jeton=1&secret=[REDACTED]"
        );
        // A credential's shape and a pair named as one: a secret is never stored, whatever
        // field carries it.
        for (name, expected) in [
            ("ghp_0123456789abcdefghijklmnopqrstuvwxyz", "[REDACTED]"),
            ("aws:AKIAIOSFODNN7EXAMPLE", "aws:[REDACTED]"),
            ("Bearer abcdefgh12345", "Bearer [REDACTED]"),
            ("password=hunter2", "password=[REDACTED]"),
            ("-----BEGIN X-----\nMIIB\n-----END X-----", "[REDACTED]"),
        ] {
            assert_eq!(redacted(name), expected, "{name}");
        }
        // What free text would lose but a name keeps: random-looking tokens and hashes (the
        // entropy rule), a field's `name:` (a tool's namespace: `auth:login`).
        for kept in [
            "ssh://git@github.com/a/b",
            "https://host:8080/x?page=2&max_tokens=5",
            "gmail:get",
            "auth:login",
            "token:refresh",
            "tool_a8f9e0b1c2d3e4f5a6b7c8d9",
            "commit:a94a8fe5ccb19ba61c4c0873d391e987982fbbd3",
            "q8Zr3VxT0pLk2WmN7sYb4HdJ9fGc",
            "",
        ] {
            assert!(
                matches!(redact_name(kept), std::borrow::Cow::Borrowed(_)),
                "{kept}"
            );
        }
        assert!(redact_text("q8Zr3VxT0pLk2WmN7sYb4HdJ9fGc").contains(REDACTED_TOKEN));
        // The URL rules are redact_text's, written the same way.
        for text in [
            "connect pg://admin:Tr0ub4dor&3-horse@db.internal:5432/prod.",
            "GET https://h/x?page=2&access_token=tok_123&q=1 and ?token=t2",
        ] {
            assert_eq!(redact_name(text), redact_text(text), "{text}");
        }
    }

    #[test]
    fn a_hex_digest_is_kept_unless_a_credentials_word_names_it() {
        let commit = "3f2a9c8e1b7d4f6a0c5e2b9d8a7f6e5d4c3b2a19";
        let sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        for kept in [
            format!("deployed commit {commit} to prod"),
            format!("sha256 of the file is {sha256}"),
            format!("sha256:{sha256}"),
            format!("commit={commit}"),
            format!("git checkout {}", commit.to_uppercase()),
            format!("the token was rotated\nthen deployed {commit}"),
        ] {
            assert_eq!(redact_text(&kept), kept.as_str(), "{kept}");
        }
        for (text, redacted) in [
            (format!("token {commit}"), "token [REDACTED]"),
            (
                format!("the api key is {commit}"),
                "the api key is [REDACTED]",
            ),
            (format!("secret: {sha256}"), "secret: [REDACTED]"),
            (format!("api_token={commit}"), "api_token=[REDACTED]"),
            (
                format!("access key id {sha256}"),
                "access key id [REDACTED]",
            ),
        ] {
            assert_eq!(redact_text(&text), redacted, "{text}");
        }
        // not a digest: mixed case, another length, other letters
        for token in [
            "3F2a9c8e1b7d4f6a0c5e2b9d8a7f6e5d4c3b2a19",
            "3f2a9c8e1b7d4f6a0c5e2b9d8a7f6e5d4c3b2a1",
            "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY",
        ] {
            assert_eq!(redact_text(&format!("commit {token}")), "commit [REDACTED]");
        }
    }

    #[test]
    fn a_text_opens_a_secret_value_where_a_credentials_name_and_its_separator_end_it() {
        for opens in [
            "SELECT 1 WHERE password=",
            "password = '",
            "{\"token\": \"",
            "login(token: \"",
            "api_key:",
            "Authorization: Bearer ",
            "host=db PGPASSWORD=",
        ] {
            assert!(opens_a_secret_value(opens), "{opens}");
        }
        for not in [
            "a ? token : ",
            "password",
            "max_tokens=",
            "password_file=",
            "user=",
            "the password is ",
            "",
        ] {
            assert!(!opens_a_secret_value(not), "{not}");
        }
    }

    #[test]
    fn ordinary_text_is_borrowed_unchanged() {
        let text = "read /home/user/a.json: no such file (errno 2), id 550e8400-e29b-41d4-a716-446655440000";
        assert!(matches!(redact_text(text), std::borrow::Cow::Borrowed(_)));
        assert_eq!(
            redact_text("-----BEGIN never closed"),
            "-----BEGIN never closed"
        );
    }
}
