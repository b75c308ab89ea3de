"""Ctrl-C while `pml` is still starting (docs/cli.md, Exit codes): the console script that
pyproject.toml's `[project.scripts]` makes imports `pml_server.cli` before it calls `main`, and
those imports (the config, the client, gRPC) take about 0.1 s; a SIGINT among them was a
KeyboardInterrupt traceback from whichever module was loading. `pml_server.cli` imports this
module first of all; when the process is the `pml` command (not a program or test importing
the package), the handler set here ends it as SIGINT ends a program, exit 130 and a newline,
until `main` takes over (`hand_over`) and turns a KeyboardInterrupt into the same.

What runs before this module cannot be covered: the interpreter's own start, `site` (the
`.pth` files of the environment, an editable install's import hook) and `pml_server/__init__`
(which loads nothing the interpreter has not loaded already). A SIGINT there ends the
process as Python's default does: killed by the signal before Python set its handler, or a
KeyboardInterrupt traceback from `site`."""

# The C module under `signal`: `signal` itself builds its enums when first imported, a few ms
# a Ctrl-C could land in (and `contextlib` is not imported either, hence the `try`s below).
import _signal  # type: ignore[import-not-found]  # no stub: the functions of `signal`
import os
import sys


def _started_as_pml() -> bool:
    """The `pml` console script (`argv[0]` is its path), or `python -m pml_server.cli` (while
    `-m` imports the package, `argv[0]` is `-m`)."""
    first = sys.argv[0] if sys.argv else ""
    return first == "-m" or os.path.basename(first).removesuffix(".exe") == "pml"


def _interrupted_while_starting(signum: int, frame: object) -> None:
    try:  # noqa: SIM105
        os.write(2, b"\n")  # the shell's prompt starts on a line of its own after `^C`
    except OSError:  # standard error closed (`pml ... 2>&-`)
        pass
    os._exit(128 + signum)


def hand_over() -> None:
    """`main` has started: a SIGINT is a KeyboardInterrupt again, which `main` (or a command's
    own handler) ends as exit 130. Only the handler set here is replaced (a test calling
    `main` in process keeps its own)."""
    if _signal.getsignal(_signal.SIGINT) is _interrupted_while_starting:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)


if _started_as_pml():
    try:  # noqa: SIM105
        _signal.signal(_signal.SIGINT, _interrupted_while_starting)
    except ValueError:  # imported by a thread other than the main one: Python's handler stays
        pass
