//! A capture's whole core step in one call: normalize the record's code, then redact every
//! free text of the record (rule 7b: the values the normalizer flagged as secrets, then any
//! credential-shaped token). `prepare_many` does it for a batch so the Python side crosses
//! into the core (and gives the GIL back) once per batch instead of about four times per
//! record; every result is the one `prepare` gives alone.

use crate::error::CoreResult;

use super::secrets::{redact_text, url_passwords, REDACTED_TOKEN};
use super::{normalize_with, Normalized, Param};

/// Flagged values shorter than this (in code points) are left in free text: "a" or "1"
/// would blank ordinary words and numbers.
pub const MIN_SECRET_CHARS: usize = 4;

/// One record's input: its code and language, and the free texts to redact.
pub struct CaptureInput {
    pub code: String,
    pub language: String,
    pub texts: Vec<String>,
}

/// The code normalized and the texts redacted, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    pub normalized: Normalized,
    pub texts: Vec<String>,
}

/// The decoded values of the secret parameters at least `MIN_SECRET_CHARS` long, each once,
/// longest first (a secret containing another is replaced whole), ties in text order so the
/// result never depends on anything but the parameters.
pub fn known_secrets(params: &[Param]) -> Vec<String> {
    ordered(
        params
            .iter()
            .filter(|p| p.secret)
            .map(|p| decoded(&p.value_json))
            .filter(|v| v.chars().count() >= MIN_SECRET_CHARS)
            .collect(),
    )
}

/// `known` with the password of every URL user-info of the code and the texts added (at least
/// `MIN_SECRET_CHARS` long), ordered as `known_secrets` orders: the URL itself is redacted in
/// place, and its password must not stay where it appears bare (docs/capture.md, Secrets).
fn with_url_passwords(known: Vec<String>, input: &CaptureInput) -> Vec<String> {
    let mut found: Vec<String> = std::iter::once(&input.code)
        .chain(&input.texts)
        .flat_map(|text| url_passwords(text))
        .filter(|p| p.chars().count() >= MIN_SECRET_CHARS)
        .map(str::to_owned)
        .collect();
    if found.is_empty() {
        return known;
    }
    found.extend(known);
    ordered(found)
}

/// Longest first, ties in text order, each once.
fn ordered(mut known: Vec<String>) -> Vec<String> {
    known.sort_by(|a, b| {
        b.chars()
            .count()
            .cmp(&a.chars().count())
            .then_with(|| a.cmp(b))
    });
    known.dedup();
    known
}

/// A parameter's value as it appears in text: a JSON string literal decoded, anything else
/// (numbers, booleans, text that is not JSON) as its JSON text.
fn decoded(value_json: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(value_json) {
        Ok(serde_json::Value::String(s)) => s,
        _ => value_json.to_owned(),
    }
}

/// `text` without any of `known` (each replaced by `[REDACTED]`, in order) and without any
/// credential-shaped token.
pub fn redact_with(text: &str, known: &[String]) -> String {
    let mut out = text.to_owned();
    for value in known {
        if out.contains(value.as_str()) {
            out = out.replace(value.as_str(), REDACTED_TOKEN);
        }
    }
    redact_text(&out).into_owned()
}

/// Normalize `input.code`, then redact each of `input.texts` with what it flagged.
pub fn prepare(input: &CaptureInput) -> CoreResult<Prepared> {
    // Captures store no steps (derived on read: docs/normalization.md, Steps).
    let normalized = normalize_with(&input.code, &input.language, false)?;
    let known = with_url_passwords(known_secrets(&normalized.params), input);
    let texts = input.texts.iter().map(|t| redact_with(t, &known)).collect();
    Ok(Prepared { normalized, texts })
}

/// `prepare` for each input, in order; an error refuses its own input only.
pub fn prepare_many(inputs: &[CaptureInput]) -> Vec<CoreResult<Prepared>> {
    inputs.iter().map(prepare).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::JsonType;

    fn param(value_json: &str, secret: bool) -> Param {
        Param {
            name: "$X".into(),
            json_type: JsonType::String,
            value_json: value_json.into(),
            start: 0,
            end: 0,
            secret,
        }
    }

    fn input(code: &str, texts: &[&str]) -> CaptureInput {
        CaptureInput {
            code: code.into(),
            language: "javascript".into(),
            texts: texts.iter().map(|t| (*t).to_owned()).collect(),
        }
    }

    #[test]
    fn known_secrets_are_decoded_long_enough_unique_and_longest_first() {
        let params = [
            param("\"abc\"", true),           // too short
            param("\"hunter2hunter\"", true), // decoded string
            param("\"hunter2\"", true),
            param("\"hunter2\"", true), // repeated: once
            param("\"not-secret\"", false),
            param("123456", true), // not a string: its JSON text
        ];
        assert_eq!(
            known_secrets(&params),
            vec!["hunter2hunter", "hunter2", "123456"]
        );
    }

    #[test]
    fn redact_with_replaces_the_longest_secret_whole_then_credential_tokens() {
        let known = vec!["hunter2hunter".to_owned(), "hunter2".to_owned()];
        assert_eq!(
            redact_with("pw hunter2hunter and hunter2", &known),
            "pw [REDACTED] and [REDACTED]"
        );
        let token = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
        assert_eq!(redact_with(&format!("use {token}"), &[]), "use [REDACTED]");
        assert_eq!(redact_with("plain words", &known), "plain words");
    }

    #[test]
    fn prepare_redacts_the_texts_with_what_the_code_flagged() {
        let code = "const k = \"sk_live_abcdefghijklmnop1234\";\nawait mcp.pay({key: k});";
        let prepared = prepare(&input(
            code,
            &[
                "pay with sk_live_abcdefghijklmnop1234",
                "{\"key\": \"sk_live_abcdefghijklmnop1234\"}",
            ],
        ))
        .unwrap();
        assert_eq!(
            prepared.normalized,
            normalize_with(code, "javascript", false).unwrap()
        );
        assert!(prepared.normalized.params.iter().any(|p| p.secret));
        for text in &prepared.texts {
            assert!(!text.contains("sk_live_abcdefghijklmnop1234"), "{text}");
            assert!(text.contains(REDACTED_TOKEN), "{text}");
        }
    }

    #[test]
    fn a_url_password_is_redacted_where_it_appears_bare() {
        let code = "await mcp.db({dsn: \"postgresql://admin:Tr0ub4dor&3-horse@db/prod\"});";
        let texts = [
            "rejected for Tr0ub4dor&3-horse",
            "see https://u:s3cr3t-pw@h/x; s3cr3t-pw",
        ];
        let prepared = prepare(&input(code, &texts)).unwrap();
        assert_eq!(
            prepared.texts,
            vec![
                "rejected for [REDACTED]",
                "see https://[REDACTED]@h/x; [REDACTED]"
            ]
        );
        // Too short to redact from free text: left (it would blank ordinary words).
        let short = prepare(&input("", &["https://u:pw@h and pw"])).unwrap();
        assert_eq!(short.texts, vec!["https://[REDACTED]@h and pw"]);
    }

    #[test]
    fn prepare_many_is_prepare_for_each_and_refuses_a_bad_input_alone() {
        let inputs = vec![
            input("await mcp.a({p: \"x.json\"});", &["read x"]),
            CaptureInput {
                code: "x".repeat(crate::normalize::MAX_INPUT_BYTES + 1),
                language: "python".into(),
                texts: vec!["never looked at".into()],
            },
            input("await mcp.b(2);", &["", "b"]),
        ];
        let many = prepare_many(&inputs);
        assert_eq!(many.len(), 3);
        assert_eq!(many[0].as_ref().unwrap(), &prepare(&inputs[0]).unwrap());
        assert!(many[1].is_err());
        assert_eq!(many[2].as_ref().unwrap(), &prepare(&inputs[2]).unwrap());
        assert_eq!(many[2].as_ref().unwrap().texts, vec!["", "b"]);
    }
}
