"""Fit the companion's bridge to MiniLM's geometry (docs/ranking.md, Other languages, "The
bridge to MiniLM's geometry") and write `pml_server/embedding/use_to_minilm.npy`.

A ridge regression from USE multilingual's vectors to MiniLM's (the default model, int8 as
served) over the intents of the development data in ../shared/devset: the executions of the
dev set and of its multi-step set (their requests and the multilingual probe are never read).
It prints the file's sha256, which `pml_server/embedding/bridge.py` checks at load.

    python tools/fit_bridge.py [--devset ../shared/devset]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
from pathlib import Path

import numpy as np

from pml_server.embedding.bridge import MAP_PATH, fit
from pml_server.embedding.minilm import MiniLMEmbedder
from pml_server.embedding.use import USEEmbedder

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("executions.jsonl", "multistep/executions.jsonl")


def intents(devset: Path) -> list[str]:
    texts: list[str] = []
    for name in SOURCES:
        with (devset / name).open() as lines:
            texts += [str(json.loads(line)["intent"]) for line in lines if line.strip()]
    return sorted(set(texts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devset", type=Path, default=ROOT.parent / "shared" / "devset")
    args = parser.parse_args()
    texts = intents(args.devset)
    companion = USEEmbedder().embed(texts)
    primary = MiniLMEmbedder().embed(texts)
    mapping = fit(companion, primary).astype(np.float16)
    buffer = io.BytesIO()
    np.save(buffer, mapping, allow_pickle=False)
    MAP_PATH.write_bytes(buffer.getvalue())
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    where = MAP_PATH.relative_to(ROOT)
    print(f"{len(texts)} intents; wrote {where} {mapping.shape}, sha256 {digest}")


if __name__ == "__main__":
    main()
