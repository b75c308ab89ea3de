//! JSON Schema of a template's inputs, inferred from its parameters.

use super::Param;

/// `{"type":"object","properties":{"$PATH":{"type":"string","format":"path"}},...}`.
/// Property names are the placeholder names exactly as in `Param.name`; a secret parameter is
/// `writeOnly` so tools that render the schema know not to echo its value. `formats[i]` is
/// the `format_hint` of parameter `i`'s string value (`None` for numbers and secrets).
///
/// Written directly rather than through `serde_json::Value` (a tree of maps per snippet that
/// cost more than the hash); the bytes are those serde_json wrote: compact, object keys in
/// byte order, placeholder names unique (`NameAllocator` guarantees it).
pub fn infer_schema(params: &[Param], formats: &[Option<&'static str>]) -> String {
    let mut by_name: Vec<usize> = (0..params.len()).collect();
    by_name.sort_by(|&a, &b| params[a].name.cmp(&params[b].name));
    let mut out = String::with_capacity(64 + params.len() * 48);
    out.push_str(r#"{"additionalProperties":false,"properties":{"#);
    for (n, &i) in by_name.iter().enumerate() {
        let param = &params[i];
        if n > 0 {
            out.push(',');
        }
        push_json_string(&mut out, &param.name);
        out.push_str(":{");
        if let Some(format) = formats.get(i).copied().flatten() {
            out.push_str(r#""format":"#);
            push_json_string(&mut out, format);
            out.push(',');
        }
        out.push_str(r#""type":"#);
        push_json_string(&mut out, param.json_type.as_str());
        if param.secret {
            out.push_str(r#","writeOnly":true"#);
        }
        out.push('}');
    }
    out.push_str(r#"},"required":["#);
    for (n, param) in params.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        push_json_string(&mut out, &param.name);
    }
    out.push_str(r#"],"type":"object"}"#);
    out
}

/// The format hint a string parameter contributes to the schema (none for a secret: its
/// value must not shape anything stored).
pub fn string_format(value: Option<&str>, secret: bool) -> Option<&'static str> {
    if secret {
        return None;
    }
    value.and_then(format_hint)
}

/// `value` as a JSON string literal, escaped exactly as serde_json escapes it.
fn push_json_string(out: &mut String, value: &str) {
    if value.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(value); // nothing to escape: the common case, placeholder names
        out.push('"');
        return;
    }
    // serde_json writes a `&str` infallibly; the fallback keeps this panic-free anyway.
    out.push_str(&serde_json::to_string(value).unwrap_or_else(|_| "\"\"".to_owned()));
}

/// A `format` hint when the value's shape shows it: `date-time`, `date`, `email`, `uri`, `path`.
pub fn format_hint(value: &str) -> Option<&'static str> {
    if value.is_empty() || value.len() > 4096 || value.contains(char::is_whitespace) {
        return None;
    }
    if is_date_time(value) {
        Some("date-time")
    } else if is_date(value) {
        Some("date")
    } else if is_email(value) {
        Some("email")
    } else if is_uri(value) {
        Some("uri")
    } else if is_path(value) {
        Some("path")
    } else {
        None
    }
}

fn digits(b: &[u8]) -> bool {
    !b.is_empty() && b.iter().all(u8::is_ascii_digit)
}

/// `YYYY-MM-DD`.
fn is_date(value: &str) -> bool {
    is_date_bytes(value.as_bytes())
}

fn is_date_bytes(b: &[u8]) -> bool {
    b.len() == 10
        && digits(&b[0..4])
        && b[4] == b'-'
        && digits(&b[5..7])
        && b[7] == b'-'
        && digits(&b[8..10])
}

/// RFC 3339: `YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)`.
fn is_date_time(value: &str) -> bool {
    let b = value.as_bytes();
    if b.len() < 20 || !is_date_bytes(&b[..10]) || !matches!(b[10], b'T' | b't') {
        return false;
    }
    let time = &b[11..];
    if !(digits(&time[0..2])
        && time[2] == b':'
        && digits(&time[3..5])
        && time[5] == b':'
        && digits(&time[6..8]))
    {
        return false;
    }
    let mut rest = &time[8..];
    if rest.first() == Some(&b'.') {
        let frac = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if frac == 0 {
            return false;
        }
        rest = &rest[1 + frac..];
    }
    matches!(rest, [b'Z' | b'z'])
        || (rest.len() == 6
            && matches!(rest[0], b'+' | b'-')
            && digits(&rest[1..3])
            && rest[3] == b':'
            && digits(&rest[4..6]))
}

fn is_email(value: &str) -> bool {
    let Some((local, domain)) = value.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !value.contains('/')
}

/// `scheme://...` or `mailto:`/`urn:`/`data:` forms.
fn is_uri(value: &str) -> bool {
    if let Some((scheme, rest)) = value.split_once("://") {
        let mut chars = scheme.chars();
        return chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            && !rest.is_empty();
    }
    ["mailto:", "urn:", "data:"]
        .iter()
        .any(|p| value.starts_with(p) && value.len() > p.len())
}

/// File extensions common enough in agent code to call a bare `name.ext` a path.
const FILE_EXTENSIONS: &[&str] = &[
    "json", "jsonl", "ndjson", "csv", "tsv", "txt", "md", "py", "js", "mjs", "ts", "tsx", "jsx",
    "yaml", "yml", "toml", "xml", "html", "htm", "css", "png", "jpg", "jpeg", "gif", "webp", "svg",
    "pdf", "log", "sh", "sql", "db", "sqlite", "zip", "gz", "tar", "tgz", "parquet", "xlsx", "xls",
    "docx", "doc", "pptx", "ini", "cfg", "conf", "env", "lock", "rs", "go", "java", "c", "h",
    "cpp", "rb", "mp3", "mp4", "wav", "bin", "pkl", "npy", "ipynb",
];

fn is_path(value: &str) -> bool {
    let b = value.as_bytes();
    if value.starts_with('/')
        || value.starts_with("./")
        || value.starts_with("../")
        || value.starts_with("~/")
        || (b.len() > 2
            && b[0].is_ascii_alphabetic()
            && b[1] == b':'
            && matches!(b[2], b'\\' | b'/'))
    {
        return true;
    }
    if value.contains("://") || value.contains('@') {
        return false;
    }
    let file_name = value.rsplit(['/', '\\']).next().unwrap_or(value);
    let has_extension = file_name.rsplit_once('.').is_some_and(|(stem, ext)| {
        !stem.is_empty() && FILE_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str())
    });
    has_extension
        || (value.contains('/') && value.split('/').filter(|s| !s.is_empty()).count() >= 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints() {
        assert_eq!(format_hint("a.json"), Some("path"));
        assert_eq!(format_hint("/tmp/x"), Some("path"));
        assert_eq!(format_hint("data/in/report.CSV"), Some("path"));
        assert_eq!(format_hint("https://example.com/x?q=1"), Some("uri"));
        assert_eq!(format_hint("ann@example.org"), Some("email"));
        assert_eq!(format_hint("2024-05-01T10:00:00Z"), Some("date-time"));
        assert_eq!(
            format_hint("2024-05-01T10:00:00.123+02:00"),
            Some("date-time")
        );
        assert_eq!(format_hint("2024-05-01"), Some("date"));
        assert_eq!(format_hint("hello"), None);
        assert_eq!(format_hint("hello world.json"), None);
        assert_eq!(format_hint("1.5"), None);
        assert_eq!(format_hint("example.com"), None);
        assert_eq!(format_hint("Ľħ򺳻󒝕𘱺򾀙ìd÷xxxxxxxxxxxxx"), None);
    }
}
