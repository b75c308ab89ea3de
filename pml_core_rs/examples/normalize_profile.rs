//! Where `normalize` spends its time, without Python. Reads a corpus of one JSON
//! `[code, language]` per line and runs MODE (`parse`, `normalize` or `none`) over the snippets
//! of LANG (`js`, `ts`, `python` or `all`) ROUNDS times. Compare modes by CPU time under
//! `perf stat -e task-clock` or profile one with `perf record`.
//! Run: cargo run --release --example normalize_profile -- CORPUS MODE LANG ROUNDS

use std::time::Instant;

use pml_core_rs::normalize::{normalize, parse_only};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, mode, language, rounds] = args.as_slice() else {
        panic!("usage: normalize_profile CORPUS.jsonl MODE LANG ROUNDS");
    };
    let rounds: usize = rounds.parse().expect("ROUNDS is a number");
    let text = std::fs::read_to_string(path).expect("read corpus");
    let items: Vec<(String, String)> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("corpus line"))
        .filter(|(_, l): &(String, String)| language == "all" || l == language)
        .collect();
    let bytes: usize = items.iter().map(|(c, _)| c.len()).sum();
    let start = Instant::now();
    for _ in 0..rounds {
        for (code, lang) in &items {
            match mode.as_str() {
                "parse" => drop(parse_only(code, lang)),
                "normalize" => drop(normalize(code, lang)),
                _ => {}
            }
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "{mode} {language}: {:.2} MB/s wall",
        (bytes * rounds) as f64 / seconds / 1e6
    );
}
