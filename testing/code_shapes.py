"""Hostile but valid-sized code for the normalizer (docs/normalization.md, Limits and
robustness): each shape repeated to a given size in each language it applies to, and ordinary
agent code of the same size to compare it with. Used by the cost profile
(`benches/profile/normalize_shapes.py`) and the tests that every shape gives a result
(`tests/capture/test_normalize_properties.py`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# Just under the walk's depth cap (MAX_TREE_DEPTH, 1024 syntax levels in pml_core_rs): the
# deepest chains that are parsed and walked, not sent to the fallback.
CHAIN = 1000


@dataclass(frozen=True)
class Shape:
    name: str
    # one unit of the shape, given its index and whether the language is Python (units are
    # joined by newlines; the fallback, `rust`, is given the Python form)
    unit: Callable[[int, bool], str]


def _ordinary(i: int, python: bool) -> str:
    if python:
        return (
            f'rows = tools.db.query(sql="select * from t where id = {i}", limit=10)\n'
            "for r in rows:\n"
            '    tools.fs.write_file(path=f"/tmp/{r}.json", content=str(r))'
        )
    return (
        f"const rows{i} = await mcp.db.query("
        f'{{sql: "select * from t where id = {i}", limit: 10}});\n'
        f"for (const r of rows{i}) {{ await mcp.fs.write_file({{path: `/tmp/${{r.id}}.json`, "
        "content: JSON.stringify(r)}); }"
    )


ORDINARY = Shape("ordinary", _ordinary)

SHAPES: tuple[Shape, ...] = (
    # a sum CHAIN levels deep, one a line: every literal sits CHAIN levels down one chain
    Shape("deep_sum", lambda i, py: f"x{i} = 1" + " + 1" * CHAIN),
    # a chain of string pieces: each may be a URL's password piece, read with its neighbours
    Shape("string_chain", lambda i, py: f'x{i} = "a"' + ' + "a"' * (CHAIN - 100)),
    Shape("joined_list", lambda i, py: f'x{i} = "".join([' + '"a", ' * 2000 + "])"),
    Shape(
        "templates",
        lambda i, py: f'x{i} = f"a{{b}}c{{d}}e"' if py else f"x{i} = `a${{b}}c${{d}}e`;",
    ),
    # every step reads the two before it
    Shape(
        "step_chain",
        lambda i, py: (
            f"r{i} = mcp.t.g(r{i - 1}, r{i - 2})"
            if py
            else f"const r{i} = await mcp.t.g(r{i - 1}, r{i - 2});"
        ),
    ),
    Shape("calls_in_calls", lambda i, py: "x = " + "f(" * 200 + "1" + ")" * 200),
    # deeper than the caps: the token-level fallback
    Shape("over_bracket_cap", lambda i, py: "x = " + "(" * 300 + "1" + ")" * 300),
    Shape("over_depth_cap", lambda i, py: f"x{i} = 1" + " + 1" * 1100),
    Shape("unterminated_string", lambda i, py: 'x = "' + "a" * 4000),
    Shape("credential_runs", lambda i, py: "x = '" + "password=a&@:=" * 300 + "'"),
)

# Free text of a credential's openings repeated, for the redaction of a record's texts
# (intent, trace, errors, arguments: docs/capture.md, Secrets), and ordinary prose.
TEXT_UNITS = ("?token=", "?next=", "-----BEGIN ", "password=", "x@y:z=w/", "https://u:p@")
PROSE = "Fetched 12 rows from the orders table and wrote them to /tmp/out.json in 0.4 s. "


def text_of(unit: str, size: int) -> str:
    """`unit` repeated to `size` characters."""
    return (unit * (size // len(unit) + 1))[:size]


# The languages a shape is given in (`normalize`'s names); `rust` goes to the fallback.
LANGUAGES = ("python", "javascript", "typescript", "tsx", "rust")


def build(shape: Shape, language: str, size: int) -> str:
    """`shape` repeated, one unit a line, up to at least `size` bytes (whole units)."""
    python = language in ("python", "rust")
    lines: list[str] = []
    total = 0
    i = 0
    while total < size:
        line = shape.unit(i, python)
        lines.append(line)
        total += len(line.encode()) + 1
        i += 1
    return "\n".join(lines) + "\n"
