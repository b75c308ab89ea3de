"""Check the internal links of the project's Markdown: every relative link `[text](path)` or
`[text](path#anchor)` in README.md, docs/, benches/ and clients/ must name a file or folder that
exists, and an anchor must name a heading of that page (GitHub's slugs). External links
(http, https, mailto) are not fetched.

    python tools/check_links.py      # `make lint` runs it; exit 1 listing every broken link"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ["README.md", "docs", "benches", "clients", "CONTRIBUTING.md"]
LINK_RE = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE_RE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE_RE = re.compile(r"`[^`\n]*`")
SKIP_DIRS = {"node_modules", ".cache", "__pycache__"}


def markdown_files(root: Path = ROOT) -> list[Path]:
    found: list[Path] = []
    for name in PAGES:
        path = root / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found += [p for p in sorted(path.rglob("*.md")) if not SKIP_DIRS & set(p.parts)]
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE_RE.sub("", page.read_text())
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        base = slug(heading)
        count = seen.get(base, 0)
        out.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return out


def broken_links(page: Path) -> list[str]:
    text = INLINE_CODE_RE.sub("", FENCE_RE.sub("", page.read_text()))
    problems = []
    for target in LINK_RE.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # http:, https:, mailto:
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            problems.append(f"{page.relative_to(ROOT)}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{page.relative_to(ROOT)}: {target}: no such heading")
    return problems


def main() -> None:
    problems = [p for page in markdown_files() for p in broken_links(page)]
    for problem in problems:
        print(problem)
    if problems:
        sys.exit(f"{len(problems)} broken link(s)")
    print(f"links: {len(markdown_files())} pages checked")


if __name__ == "__main__":
    main()
