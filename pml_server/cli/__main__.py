"""`python -m pml_server.cli`: the `pml` command."""

from pml_server.cli._main import main

main()
