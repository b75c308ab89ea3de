"""Print the cosine similarities the capture thresholds were calibrated on.

    python -m benches.calibrate.thresholds [minilm|hashing ...]

Pairs are grouped by what the thresholds must decide: near-identical wording (one intent
mapping), paraphrases with the same tools (one capability), and unrelated or other-verb intents.
"""

from __future__ import annotations

import sys

from pml_server.capture.dedup import DEFAULT_THRESHOLDS
from pml_server.embedding import make_embedder

PAIRS: dict[str, list[tuple[str, str]]] = {
    "near-identical": [
        ("Read JSON file", "Read JSON file."),
        ("Read JSON file", "read json file"),
        ("Process CSV file", "Process a CSV file"),
        ("List my open pull requests", "List my open pull requests please"),
    ],
    "paraphrase": [
        ("Read JSON file", "Parse JSON from disk"),
        ("Read JSON file", "Load JSON data"),
        ("Parse JSON from disk", "Load JSON data"),
        ("Rename vacation photos", "Rename holiday pictures"),
        ("Fetch a web page", "Download the HTML of a URL"),
        ("Query the users table", "Run SQL on the users table"),
    ],
    "other verb / unrelated": [
        ("Read JSON file", "Write JSON file"),
        ("Send an email to my boss", "Read an email from my boss"),
        ("Read JSON file", "Send an email to my boss"),
        ("Process CSV file", "Summarize sales spreadsheet"),
        ("Rename vacation photos", "Delete old git branches"),
    ],
}


def main(names: list[str]) -> None:
    for name in names or ["minilm", "hashing"]:
        embedder = make_embedder(name)
        thresholds = DEFAULT_THRESHOLDS[embedder.family]
        print(f"{embedder.model_id}: {thresholds}")
        for group, pairs in PAIRS.items():
            print(f"  {group}")
            for a, b in pairs:
                vectors = embedder.embed([a, b])
                print(f"    {float(vectors[0] @ vectors[1]):6.3f}  {a!r} / {b!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
