"""Hand-written stubs for the Rust extension `pml_server._core` (source: pml_core_rs/src/python.rs).

Only plain scalars, strings, bytes and float32 arrays cross this boundary. Every call that does
real work releases the GIL. Every error raised derives from `CoreError`.
"""

__version__: str

class CoreError(Exception):
    """Base of every error raised by pml's Rust core."""

class InvalidArgumentError(CoreError):
    """An argument the core cannot use; the message names it."""

class CorruptDataError(CoreError):
    """Serialized bytes that are truncated, corrupted or of an unknown version."""

class InputTooLargeError(CoreError):
    """An input larger or deeper than the core accepts."""

def sha256_tagged(data: bytes) -> str:
    """Return `"sha256:<64 lowercase hex>"` of `data` (GIL released)."""
