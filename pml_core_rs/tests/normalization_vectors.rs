//! Replays every golden vector of tests/vectors/normalization.json (shared with the pytest
//! replay and with clients in other languages) against the Rust normalizer.

use pml_core_rs::normalize::{normalize, NORMALIZER_VERSION};
use serde_json::Value;

const VECTORS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/vectors/normalization.json"
));

#[test]
fn every_vector_replays() {
    let file: Value = serde_json::from_str(VECTORS).expect("vectors are JSON");
    assert_eq!(file["normalizer_version"], u64::from(NORMALIZER_VERSION));
    let vectors = file["vectors"].as_array().expect("vectors array");
    assert!(vectors.len() >= 30, "the contract needs its vectors");
    let mut hashes = std::collections::HashMap::new();
    for vector in vectors {
        let name = vector["name"].as_str().unwrap();
        let code = vector["code"].as_str().unwrap();
        let language = vector["language"].as_str().unwrap();
        let expected = &vector["expected"];
        let got = normalize(code, language).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got.language, expected["language"], "{name}: language");
        assert_eq!(got.template, expected["template"], "{name}: template");
        assert_eq!(got.code_hash, expected["code_hash"], "{name}: code_hash");
        assert_eq!(got.parse_ok, expected["parse_ok"], "{name}: parse_ok");
        assert_eq!(
            got.fallback_reason, expected["fallback_reason"],
            "{name}: reason"
        );
        let tools: Vec<&str> = expected["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(got.tool_calls, tools, "{name}: tool_calls");
        let params = expected["params"].as_array().unwrap();
        assert_eq!(got.params.len(), params.len(), "{name}: param count");
        for (p, e) in got.params.iter().zip(params) {
            assert_eq!(p.name, e["name"], "{name}: param name");
            assert_eq!(p.json_type.as_str(), e["json_type"], "{name}: {}", p.name);
            assert_eq!(p.value_json, e["value_json"], "{name}: {}", p.name);
            assert_eq!(
                p.start as u64,
                e["start"].as_u64().unwrap(),
                "{name}: {}",
                p.name
            );
            assert_eq!(
                p.end as u64,
                e["end"].as_u64().unwrap(),
                "{name}: {}",
                p.name
            );
            assert_eq!(p.secret, e["secret"], "{name}: {} secret", p.name);
        }
        let schema: Value = serde_json::from_str(&got.schema_json).unwrap();
        assert_eq!(schema, expected["schema"], "{name}: schema");
        if let Some(other) = vector.get("same_hash_as").and_then(Value::as_str) {
            assert_eq!(Some(&got.code_hash), hashes.get(other), "{name} vs {other}");
        }
        for other in vector
            .get("differs_from")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let other = other.as_str().unwrap();
            let other_hash = hashes
                .get(other)
                .expect("differs_from names an earlier vector");
            assert_ne!(&got.code_hash, other_hash, "{name} vs {other}");
        }
        hashes.insert(name.to_owned(), got.code_hash);
    }
}
