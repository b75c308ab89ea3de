"""`make lint` checks the docs' internal links (tools/check_links.py): the repository's pages
have none broken, and a broken file link or anchor is found."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "check_links.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_links", TOOL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_repositorys_pages_have_no_broken_internal_link() -> None:
    done = subprocess.run([sys.executable, str(TOOL)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_broken_links_and_anchors_are_found(tmp_path: Path) -> None:
    tool = _tool()
    tool.ROOT = tmp_path
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Title\n\n## The `x` part, here\n")
    page = tmp_path / "docs" / "a.md"
    page.write_text(
        "[ok](b.md) [ok anchor](b.md#the-x-part-here) [web](https://example.invalid/x)\n"
        "[gone](missing.md) [bad anchor](b.md#nowhere)\n"
        "`[in code](nothing.md)`\n\n```\n[in a block](nothing.md)\n```\n"
    )
    assert tool.broken_links(page) == [
        "docs/a.md: missing.md: no such file",
        "docs/a.md: b.md#nowhere: no such heading",
    ]


def test_anchors_keep_underscores_as_github_does() -> None:
    slug = _tool().slug
    assert slug("Plans (`pml_server/ranking/plans.py`)") == "plans-pml_serverrankingplanspy"
    assert slug("**Bold** words: `a_b`") == "bold-words-a_b"
