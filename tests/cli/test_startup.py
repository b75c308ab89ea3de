"""The client commands start without what only the server needs: `pml import` is timed as a
whole process, and numpy, the ranking modules and importlib.metadata cost it ~0.3 s."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_client_commands_import_no_numpy_ranking_or_metadata() -> None:
    probe = (
        "import sys, pml_server.cli, pml_server.cli._commands; "
        "print(' '.join(m for m in sys.modules if m == 'numpy' or m == 'importlib.metadata' "
        "or m.startswith(('pml_server.ranking.', 'pml_server.retention.policy', "
        "'pml_server.domain.model'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["pml_server.ranking.config"]


def test_every_name_the_lazy_ranking_package_exports_resolves() -> None:
    """`pml_server.ranking` loads its names on first use from a table beside `__all__`: a name
    added to one and not the other would fail only where it is first imported."""
    import types

    import pml_server.ranking as ranking

    for name in ranking.__all__:
        value = getattr(ranking, name)
        assert not isinstance(value, types.ModuleType), name
