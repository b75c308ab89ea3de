//! Fuzz-style property tests of the normalizer (proptest): arbitrary text in every language,
//! mutated golden snippets, deep nesting and oversize input. The normalizer must never panic,
//! never fail below the size limit, be deterministic, report spans and JSON that hold together,
//! and give one hash to code that differs only in its literal values.

use pml_core_rs::normalize::{normalize, redact_text, MAX_INPUT_BYTES};
use pml_core_rs::CoreError;
use proptest::prelude::*;
use serde_json::Value;

const VECTORS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/vectors/normalization.json"
));
const LANGUAGES: &[&str] = &["javascript", "typescript", "python", "js", "", "cobol"];

fn golden_snippets() -> Vec<(String, String)> {
    let file: Value = serde_json::from_str(VECTORS).expect("vectors are JSON");
    file["vectors"]
        .as_array()
        .expect("vectors array")
        .iter()
        .map(|v| {
            (
                v["code"].as_str().unwrap().to_owned(),
                v["language"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Everything that must hold for any successful result.
fn assert_well_formed(code: &str, language: &str) {
    let got = normalize(code, language).expect("no error below the size limit");
    let again = normalize(code, language).expect("second run");
    assert_eq!(got, again, "not deterministic for {code:?}");
    assert!(got.code_hash.starts_with("sha256:") && got.code_hash.len() == 7 + 64);
    let chars = code.chars().count();
    let mut previous_end = 0;
    for p in &got.params {
        assert!(
            p.start <= p.end && p.end <= chars,
            "span {}..{} of {chars}",
            p.start,
            p.end
        );
        assert!(
            p.start >= previous_end,
            "overlapping or unsorted spans in {code:?}"
        );
        previous_end = p.end;
        serde_json::from_str::<Value>(&p.value_json)
            .unwrap_or_else(|e| panic!("param value {:?} is not JSON: {e}", p.value_json));
        assert!(p.name.starts_with('$'), "param name {:?}", p.name);
    }
    serde_json::from_str::<Value>(&got.schema_json).expect("schema is JSON");
    assert_eq!(got.parse_ok, got.fallback_reason.is_empty());
}

/// Random edits (insert, delete, replace one char) of a golden snippet.
fn mutated() -> impl Strategy<Value = (String, String)> {
    let snippets = golden_snippets();
    (
        0..snippets.len(),
        prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<char>()), 1..8),
    )
        .prop_map(move |(i, edits)| {
            let (code, language) = snippets[i].clone();
            let mut chars: Vec<char> = code.chars().collect();
            for (at, kind, c) in edits {
                let pos = at.index(chars.len() + 1);
                match kind {
                    0 => chars.insert(pos, c),
                    1 if pos < chars.len() => {
                        chars.remove(pos);
                    }
                    _ if pos < chars.len() => chars[pos] = c,
                    _ => chars.push(c),
                }
            }
            (chars.into_iter().collect(), language)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_in_any_language(code in "\\PC{0,200}", lang in 0..LANGUAGES.len()) {
        assert_well_formed(&code, LANGUAGES[lang]);
    }

    #[test]
    fn code_shaped_noise(code in "[a-z_(){}\\[\\]'\"`$.,;:=+*/\\\\ \n0-9]{0,300}",
                         lang in 0..LANGUAGES.len()) {
        assert_well_formed(&code, LANGUAGES[lang]);
    }

    #[test]
    fn mutated_golden_snippets((code, language) in mutated()) {
        assert_well_formed(&code, &language);
    }

    #[test]
    fn free_text_keeps_no_credential_a_marker_names(
        secret in "[A-Za-z0-9][A-Za-z0-9_.+]{5,23}",
        before in "[a-z ,.:]{0,40}",
        after in "[a-z ,.:]{0,40}",
        shape in 0..12usize,
    ) {
        // the free-text shapes of docs/normalization.md, Secrets, anywhere in prose
        let written = match shape {
            0 => format!("pass={secret}"),
            1 => format!("db_pwd: {secret}"),
            2 => format!("mysql -u bob -p{secret} db"),
            3 => format!("curl -u bob:{secret} https://x"),
            4 => format!("sshpass -p '{secret}' ssh h"),
            5 => format!("deploy --pass {secret}"),
            6 => format!("echo {secret} | docker login -u bob --password-stdin r"),
            7 => format!("Cookie: a=1; sid={secret}; b=2\n"),
            8 => format!("Set-Cookie: sid={secret}; Path=/\n"),
            9 => format!("{{\"name\": \"DB_PASSWORD\", \"value\": \"{secret}\"}}"),
            10 => format!("- name: API_TOKEN\n  value: {secret}\n"),
            _ => format!("{{\"Key\": \"Authorization\", \"Value\": \"{secret}\"}}"),
        };
        let text = format!("{before} {written} {after}");
        let out = redact_text(&text);
        prop_assert!(!out.contains(secret.as_str()), "{text:?} -> {out:?}");
    }

    #[test]
    fn literal_values_do_not_change_the_hash(
        a in "[A-Za-z0-9_./-]{1,30}", b in "[A-Za-z0-9_./-]{1,30}", n in 0u32..100_000, m in 0u32..100_000,
    ) {
        let js = |path: &str, limit: u32| format!(
            "const rows = await mcp.read_file({{path: \"{path}\", limit: {limit}}});\nreturn rows;"
        );
        let py = |path: &str, limit: u32| format!(
            "rows = mcp.read_file(path='{path}', limit={limit})\nprint(rows)"
        );
        for (lang, make) in [("javascript", &js as &dyn Fn(&str, u32) -> String), ("python", &py)] {
            let first = normalize(&make(&a, n), lang).unwrap();
            let second = normalize(&make(&b, m), lang).unwrap();
            prop_assert!(first.parse_ok, "{lang}: {}", first.fallback_reason);
            prop_assert_eq!(&first.code_hash, &second.code_hash);
            prop_assert_eq!(&first.template, &second.template);
            prop_assert_eq!(&first.tool_calls, &vec!["read_file".to_owned()]);
        }
    }
}

#[test]
fn deep_nesting_falls_back_without_overflowing_the_stack() {
    // Test threads have small stacks: a recursive walk would overflow long before 20k levels.
    for open in ["(", "[", "{", "f(", "[{", "a = (", "if (x) {"] {
        for lang in ["javascript", "typescript", "python"] {
            let code = open.repeat(20_000);
            let got = normalize(&code, lang).expect("deep input is not an error");
            assert!(
                !got.parse_ok,
                "{lang} {open:?}: nesting this deep must use the fallback"
            );
        }
    }
}

#[test]
fn oversize_input_is_an_error_not_a_panic() {
    let code = "x".repeat(MAX_INPUT_BYTES + 1);
    match normalize(&code, "javascript") {
        Err(CoreError::TooLarge { .. }) => {}
        other => panic!("expected TooLarge, got {other:?}"),
    }
}
