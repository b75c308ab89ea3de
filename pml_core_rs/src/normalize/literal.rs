//! Decoding of string and number literals into their values (what a parameter holds).
//!
//! A literal we cannot decode exactly (f-strings, byte strings, `\N{...}` names, BigInt,
//! complex numbers, non-finite floats) is not a parameter: it stays code, so the hash still
//! depends on it and nothing is lost.

/// The JSON type of a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JsonType {
    String,
    Integer,
    Number,
}

impl JsonType {
    pub fn as_str(self) -> &'static str {
        match self {
            JsonType::String => "string",
            JsonType::Integer => "integer",
            JsonType::Number => "number",
        }
    }
}

/// Decode a JavaScript/TypeScript string literal including its quotes (`'..'`, `".."`, or a
/// template literal without substitutions `` `..` ``).
pub fn decode_js_string(raw: &str) -> Option<String> {
    let quote = raw.chars().next()?;
    if !matches!(quote, '"' | '\'' | '`') || raw.len() < 2 || !raw.ends_with(quote) {
        return None;
    }
    let body = &raw[1..raw.len() - 1];
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    let mut pending_high: Option<u32> = None;
    while let Some(c) = chars.next() {
        if c != '\\' {
            flush_surrogate(&mut out, &mut pending_high);
            out.push(c);
            continue;
        }
        let escaped = chars.next()?;
        let code: Option<u32> = match escaped {
            'n' => Some(0x0A),
            'r' => Some(0x0D),
            't' => Some(0x09),
            'b' => Some(0x08),
            'f' => Some(0x0C),
            'v' => Some(0x0B),
            '0'..='7' => {
                let mut value = escaped.to_digit(8)?;
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) if value * 8 + d <= 0xFF => {
                            value = value * 8 + d;
                            chars.next();
                        }
                        _ => break,
                    }
                }
                Some(value)
            }
            'x' => Some(take_hex(&mut chars, 2)?),
            'u' => {
                if chars.peek() == Some(&'{') {
                    chars.next();
                    let mut value: u32 = 0;
                    let mut digits = 0;
                    loop {
                        let d = chars.next()?;
                        if d == '}' {
                            break;
                        }
                        value = value.checked_mul(16)?.checked_add(d.to_digit(16)?)?;
                        digits += 1;
                    }
                    if digits == 0 || value > 0x10FFFF {
                        return None;
                    }
                    Some(value)
                } else {
                    Some(take_hex(&mut chars, 4)?)
                }
            }
            // Line continuation: the backslash and the line break vanish.
            '\n' | '\u{2028}' | '\u{2029}' => None,
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                None
            }
            other => Some(other as u32),
        };
        let Some(code) = code else { continue };
        push_code_unit(&mut out, &mut pending_high, code);
    }
    flush_surrogate(&mut out, &mut pending_high);
    Some(out)
}

/// JS strings are UTF-16: join `\uD83D\uDE00` pairs; a lone surrogate becomes U+FFFD.
fn push_code_unit(out: &mut String, pending_high: &mut Option<u32>, code: u32) {
    if (0xDC00..0xE000).contains(&code) {
        if let Some(high) = pending_high.take() {
            let joined = 0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00);
            out.push(char::from_u32(joined).unwrap_or('\u{FFFD}'));
        } else {
            out.push('\u{FFFD}');
        }
        return;
    }
    flush_surrogate(out, pending_high);
    if (0xD800..0xDC00).contains(&code) {
        *pending_high = Some(code);
    } else {
        out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
    }
}

fn flush_surrogate(out: &mut String, pending_high: &mut Option<u32>) {
    if pending_high.take().is_some() {
        out.push('\u{FFFD}');
    }
}

fn take_hex(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, count: usize) -> Option<u32> {
    let mut value = 0u32;
    for _ in 0..count {
        value = value * 16 + chars.next()?.to_digit(16)?;
    }
    Some(value)
}

/// Decode a Python string literal with its prefix and quotes. An f-string without a
/// replacement field is the string it spells (`f"a.json"`, `f"{{x}}"` is `{x}`: docs/
/// normalization.md, Parameters). `None` for byte strings, t-strings, f-strings with a field and
/// escapes we do not decode exactly (`\N{...}`).
pub fn decode_py_string(raw: &str) -> Option<String> {
    let prefix_len = raw.find(['"', '\'']).filter(|&i| i <= 3)?;
    let prefix = raw[..prefix_len].to_ascii_lowercase();
    if prefix.chars().any(|c| !matches!(c, 'r' | 'u' | 'f')) {
        return None;
    }
    let raw_mode = prefix.contains('r');
    if prefix.contains('f') {
        return decode_py_string(&format!(
            "{}{}",
            prefix.replace('f', ""),
            &raw[prefix_len..]
        ))
        .and_then(|s| without_field(&s));
    }
    let rest = &raw[prefix_len..];
    let quote = if rest.starts_with("\"\"\"") || rest.starts_with("'''") {
        &rest[..3]
    } else {
        &rest[..1]
    };
    if rest.len() < 2 * quote.len() || !rest.ends_with(quote) {
        return None;
    }
    let body = &rest[quote.len()..rest.len() - quote.len()];
    if raw_mode {
        return Some(body.to_owned());
    }
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let escaped = chars.next()?;
        let code = match escaped {
            '\n' => continue,
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                continue;
            }
            '\\' | '\'' | '"' => escaped as u32,
            'a' => 0x07,
            'b' => 0x08,
            'f' => 0x0C,
            'n' => 0x0A,
            'r' => 0x0D,
            't' => 0x09,
            'v' => 0x0B,
            '0'..='7' => {
                let mut value = escaped.to_digit(8)?;
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                value
            }
            'x' => take_hex(&mut chars, 2)?,
            'u' => take_hex(&mut chars, 4)?,
            'U' => take_hex(&mut chars, 8)?,
            'N' => return None,
            other => {
                // Python keeps unknown escapes verbatim, backslash included.
                out.push('\\');
                other as u32
            }
        };
        out.push(char::from_u32(code)?);
    }
    Some(out)
}

/// The text of a decoded f-string body with no replacement field: `{{` and `}}` are braces,
/// any other brace opens or closes a field (None).
fn without_field(body: &str) -> Option<String> {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if matches!(c, '{' | '}') && chars.next() != Some(c) {
            return None;
        }
        out.push(c);
    }
    Some(out)
}

/// Parse a number literal (`negative` when a unary minus was folded into it). Returns the
/// JSON type and the value as JSON text; `None` for literals that stay code.
pub fn parse_number(raw: &str, negative: bool, python: bool) -> Option<(JsonType, String)> {
    let cleaned: String = raw.chars().filter(|&c| c != '_').collect();
    let lower = cleaned.to_ascii_lowercase();
    if lower.ends_with('n') || lower.ends_with('j') || lower.ends_with('l') {
        return None; // BigInt, complex, Python 2 long: no exact JSON value
    }
    let sign = if negative { "-" } else { "" };
    let radix = match lower.get(..2) {
        Some("0x") => Some(16),
        Some("0o") => Some(8),
        Some("0b") => Some(2),
        _ => None,
    };
    if let Some(radix) = radix {
        let value = u128::from_str_radix(&lower[2..], radix).ok()?;
        return Some((JsonType::Integer, format!("{sign}{value}")));
    }
    let is_float = lower.contains(['.', 'e']);
    if !is_float {
        if lower.is_empty() || !lower.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if !python && lower.len() > 1 && lower.starts_with('0') {
            return None; // legacy octal `010` in sloppy-mode JS
        }
        let value: u128 = lower.parse().ok()?;
        return Some((JsonType::Integer, format!("{sign}{value}")));
    }
    let value: f64 = lower.parse().ok()?;
    if !value.is_finite() {
        return None;
    }
    let value = if negative { -value } else { value };
    Some((JsonType::Number, serde_json::to_string(&value).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn js_strings_decode() {
        assert_eq!(decode_js_string(r#""a.json""#).as_deref(), Some("a.json"));
        assert_eq!(decode_js_string("'it\\'s'").as_deref(), Some("it's"));
        assert_eq!(
            decode_js_string(r#""\x41\u0042\u{43}\n""#).as_deref(),
            Some("ABC\n")
        );
        assert_eq!(
            decode_js_string(r#""\uD83D\uDE00""#).as_deref(),
            Some("\u{1F600}")
        );
        assert_eq!(decode_js_string(r#""\uD83D""#).as_deref(), Some("\u{FFFD}"));
        assert_eq!(decode_js_string("`plain`").as_deref(), Some("plain"));
        assert_eq!(decode_js_string("\"a\\\nb\"").as_deref(), Some("ab"));
        assert_eq!(decode_js_string("\"bad\\u12\""), None);
    }

    #[test]
    fn python_strings_decode() {
        assert_eq!(decode_py_string("'a.json'").as_deref(), Some("a.json"));
        assert_eq!(decode_py_string(r#"r"C:\dir""#).as_deref(), Some("C:\\dir"));
        assert_eq!(
            decode_py_string(r#""\d\x41\101""#).as_deref(),
            Some("\\dAA")
        );
        assert_eq!(
            decode_py_string("'''multi\nline'''").as_deref(),
            Some("multi\nline")
        );
        assert_eq!(decode_py_string("u'x'").as_deref(), Some("x"));
        assert_eq!(decode_py_string("b'x'"), None);
        assert_eq!(decode_py_string("f'{x}'"), None);
        assert_eq!(decode_py_string("f'a.json'").as_deref(), Some("a.json"));
        assert_eq!(
            decode_py_string(r#"Rf"C:\{{d}}""#).as_deref(),
            Some("C:\\{d}")
        );
        assert_eq!(decode_py_string("f'a}'"), None);
        assert_eq!(decode_py_string("t'a'"), None);
        assert_eq!(decode_py_string(r#""\N{BULLET}""#), None);
    }

    #[test]
    fn numbers_parse() {
        let int = |s: &str| parse_number(s, false, false);
        assert_eq!(int("5"), Some((JsonType::Integer, "5".into())));
        assert_eq!(int("1_000"), Some((JsonType::Integer, "1000".into())));
        assert_eq!(int("0x1F"), Some((JsonType::Integer, "31".into())));
        assert_eq!(int("2.5"), Some((JsonType::Number, "2.5".into())));
        assert_eq!(int("1e3"), Some((JsonType::Number, "1000.0".into())));
        assert_eq!(
            parse_number("5", true, true),
            Some((JsonType::Integer, "-5".into()))
        );
        assert_eq!(int("10n"), None);
        assert_eq!(parse_number("1j", false, true), None);
        assert_eq!(int("1e999"), None);
        assert_eq!(int("010"), None);
    }
}
