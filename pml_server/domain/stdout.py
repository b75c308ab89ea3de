"""Stdout whose reader went away (a script that read the port and closed its pipe, `pml list |
head -1`): from then on it writes to /dev/null, so no later print, nor the interpreter's last
flush, meets the broken pipe again. Shared by `pml serve`'s announcements (`api/server.py`) and
the `pml` commands (`cli/`), which do not import each other."""

from __future__ import annotations

import os
import sys


def stdout_to_devnull() -> None:
    """Point the process's stdout (its file descriptor) at /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
