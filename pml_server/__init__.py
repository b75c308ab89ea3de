"""pml: procedural memory for AI agents.

Eager storage, lazy filtering: every successful execution is captured and deduplicated;
the intelligence lives at suggestion time.
"""

from __future__ import annotations

# Nothing here loads a module the interpreter has not loaded by itself: this runs before the
# `pml` command's Ctrl-C handler is set (`pml_server/cli/_interrupt.py`).
import functools

__version__: str  # a declaration only; the value comes from `__getattr__`

__all__ = ["__version__"]


@functools.cache
def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pml-server")
    except PackageNotFoundError:  # running from a source tree without an install
        return "0.0.0+unknown"


def __getattr__(name: str) -> str:
    # `__version__` on first use (PEP 562): importlib.metadata would add ~80 ms to the start of
    # every `pml` command, the client ones included.
    if name == "__version__":
        return _installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
