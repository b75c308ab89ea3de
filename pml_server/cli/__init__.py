"""The `pml` command: the parser and entry point (`_main`), the client commands (`_commands`),
their terminal rendering (`_render`) and the JSON-lines record reader (`_record_json`)."""

# First of all: a Ctrl-C from here on ends a starting `pml` with exit 130, not a traceback.
import pml_server.cli._interrupt  # noqa: F401  # isort: skip
from pml_server.cli._main import EXIT_CODES, build_parser, client_environment, main

__all__ = ["EXIT_CODES", "build_parser", "client_environment", "main"]
