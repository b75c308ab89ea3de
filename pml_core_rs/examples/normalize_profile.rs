//! Where `normalize` spends its time, without Python. Reads a corpus of one JSON
//! `[code, language]` per line and runs MODE (`parse`, `normalize` or `none`) over the snippets
//! of LANG (`js`, `ts`, `python` or `all`) ROUNDS times, split over THREADS threads (default 1,
//! parts balanced by bytes). Compare modes by CPU time under `perf stat -e task-clock`, by
//! instruction counts under `valgrind --tool=cachegrind`, or profile one with `perf record`.
//! Run: cargo run --release --example normalize_profile -- CORPUS MODE LANG ROUNDS [THREADS]
//! The bench corpus as CORPUS: `.venv/bin/python -c 'import json; from benches.bench_normalize
//! import corpus; [print(json.dumps(item)) for item in corpus(1_000_000)]' > corpus.jsonl`

use std::time::Instant;

use pml_core_rs::normalize::{normalize, parse_only};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (path, mode, language, rounds, threads) = match args.as_slice() {
        [p, m, l, r] => (p, m, l, r, "1"),
        [p, m, l, r, t] => (p, m, l, r, t.as_str()),
        _ => panic!("usage: normalize_profile CORPUS.jsonl MODE LANG ROUNDS [THREADS]"),
    };
    let rounds: usize = rounds.parse().expect("ROUNDS is a number");
    let threads: usize = threads.parse().expect("THREADS is a number");
    let text = std::fs::read_to_string(path).expect("read corpus");
    let items: Vec<(String, String)> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("corpus line"))
        .filter(|(_, l): &(String, String)| language == "all" || l == language)
        .collect();
    let bytes: usize = items.iter().map(|(c, _)| c.len()).sum();
    // Largest first onto the lightest part, so no thread is left with more bytes than needed.
    let mut order: Vec<&(String, String)> = items.iter().collect();
    order.sort_by_key(|(code, _)| std::cmp::Reverse(code.len()));
    let mut parts: Vec<(usize, Vec<&(String, String)>)> = vec![(0, Vec::new()); threads.max(1)];
    for item in order {
        let lightest = parts
            .iter_mut()
            .min_by_key(|(size, _)| *size)
            .expect("a part");
        lightest.0 += item.0.len();
        lightest.1.push(item);
    }
    let run = |part: &[&(String, String)]| {
        for _ in 0..rounds {
            for (code, lang) in part {
                match mode.as_str() {
                    "parse" => drop(parse_only(code, lang)),
                    "normalize" => drop(normalize(code, lang)),
                    _ => {}
                }
            }
        }
    };
    let start = Instant::now();
    std::thread::scope(|scope| {
        for (_, part) in &parts {
            scope.spawn(|| run(part));
        }
    });
    let seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "{mode} {language} x{threads}: {:.2} MB/s wall",
        (bytes * rounds) as f64 / seconds / 1e6
    );
}
