"""What hostile code costs the normalizer per byte against ordinary agent code of the same size
and language (docs/normalization.md, Limits and robustness): every shape of
`testing/code_shapes.py` in every language, read as a view reads it (`with_steps=True`), best
of 3 each in CPU time of the calling thread (the call runs there; wall time on a shared machine
follows its load), the shape and the ordinary code timed alternately. A ratio near 1 is
ordinary cost; a shape whose ratio grows with SIZE is superlinear. Then the redaction of a
record's texts (`prepare_captures`) on each of `TEXT_UNITS` repeated to SIZE against prose of
the same size.

    python -m benches.profile.normalize_shapes [SIZE_KIB ...]   # default 64
"""

from __future__ import annotations

import sys
import time

from pml_server import _core
from testing.code_shapes import LANGUAGES, ORDINARY, PROSE, SHAPES, TEXT_UNITS, build, text_of


def _best(code: str, language: str, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.thread_time()
        _core.normalize(code, language)
        best = min(best, time.thread_time() - start)
    return best


def rows(size: int) -> list[tuple[str, str, int, float, float, str]]:
    """(language, shape, bytes, shape ns/B, ordinary ns/B, how it was read) at `size` bytes."""
    out = []
    for language in LANGUAGES:
        ordinary = build(ORDINARY, language, size)
        for shape in SHAPES:
            code = build(shape, language, size)
            shape_s = _best(code, language)
            ordinary_s = _best(ordinary, language)
            read = "tree" if _core.normalize(code, language).parse_ok else "fallback"
            out.append(
                (
                    language,
                    shape.name,
                    len(code),
                    shape_s * 1e9 / len(code),
                    ordinary_s * 1e9 / len(ordinary),
                    read,
                )
            )
    return out


def _redaction(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        _core.prepare_captures([("x = 1", "python", [text])])
        best = min(best, time.thread_time() - start)
    return best


def text_rows(size: int) -> list[tuple[str, float, float]]:
    """(unit, its ns/B, prose ns/B) of redacting a text of `size` characters."""
    prose = _redaction(text_of(PROSE, size)) * 1e9 / size
    return [(unit, _redaction(text_of(unit, size)) * 1e9 / size, prose) for unit in TEXT_UNITS]


def main(sizes: list[int]) -> None:
    print("| KiB | language | shape | read as | ns/B | ordinary ns/B | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for size in sizes:
        for language, name, _, per_byte, ordinary, read in rows(size):
            print(
                f"| {size // 1024} | {language} | {name} | {read} | {per_byte:.0f} "
                f"| {ordinary:.0f} | {per_byte / ordinary:.2f} |",
                flush=True,
            )
    print()
    print("| KiB | text of | ns/B | prose ns/B | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for size in sizes:
        for unit, per_byte, prose in text_rows(size):
            print(
                f"| {size // 1024} | `{unit}` | {per_byte:.0f} | {prose:.0f} "
                f"| {per_byte / prose:.2f} |"
            )


if __name__ == "__main__":
    main([int(a) * 1024 for a in sys.argv[1:]] or [64 * 1024])
