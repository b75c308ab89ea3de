"""pml: procedural memory for AI agents.

Eager storage, lazy filtering: every successful execution is captured and deduplicated;
the intelligence lives at suggestion time.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pml-server")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
