"""The committed generated code matches what `make proto` produces from proto/."""

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _files(root: Path) -> set[Path]:
    return {
        p.relative_to(root) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }


def test_generated_code_matches_protos(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_proto.py"), "--out", str(out)], check=True
    )
    committed = ROOT / "pml_server" / "_proto"
    assert _files(out) == _files(committed), "generated file set drifted: run `make proto`"
    drifted = [
        str(p) for p in _files(out) if not filecmp.cmp(out / p, committed / p, shallow=False)
    ]
    assert not drifted, f"generated code drifted from proto/: run `make proto` ({drifted})"
