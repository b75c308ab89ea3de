"""Code normalization: normalize+hash throughput against parse-only, and 2-thread scaling.

The corpus is generated here, deterministically: agent-style JS, TS and Python snippets of
200 B to 20 KB (tool calls with object/keyword arguments, loops, conditionals, transforms).
Both figures are ratios measured in the same run:
- normalize+hash MB/s over parse_only MB/s (same tree-sitter parser; target >= 0.5);
- Python threads calling `normalize`: 2 threads over 1 (GIL released; target >= 1.7).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from benches.common import Row, best_of
from pml_server import _core

TOOLS = ["read_file", "write_file", "search", "fetch_url", "gmail:send", "db:query", "parse_csv"]
KEYS = ["path", "query", "limit", "url", "content", "maxResults", "format", "timeout"]


def _value(rnd: random.Random, python: bool) -> str:
    kind = rnd.random()
    if kind < 0.5:
        word = rnd.choice(["data/in.json", "report.csv", "https://api.example.com/v1", "cats"])
        return repr(word) if python else f"'{word}'"
    if kind < 0.8:
        return str(rnd.randint(0, 10_000))
    if kind < 0.9:
        return (
            ("True" if python else "true") if rnd.random() < 0.5 else "None" if python else "null"
        )
    return f"{rnd.random():.3f}"


def _js_block(rnd: random.Random, i: int, typed: bool) -> str:
    tool = rnd.choice(TOOLS)
    call = f"mcp.{tool.replace(':', '.')}" if rnd.random() < 0.8 else f"mcp.call('{tool}', "
    keys = rnd.sample(KEYS, rnd.randint(1, 4))
    args = ", ".join(f"{k}: {_value(rnd, False)}" for k in keys)
    annot = ": Record<string, unknown>" if typed else ""
    # `mcp.call('tool', {...})` already has its parenthesis open.
    opener = f"{call}{{{args}}})" if call.endswith(", ") else f"{call}({{{args}}})"
    shape = rnd.random()
    if shape < 0.4:
        return f"const r{i}{annot} = await {opener};\n"
    if shape < 0.7:
        return (
            f"for (const item of r{max(i - 1, 0)}.items ?? []) {{\n"
            f"  if (item.size > {rnd.randint(1, 999)} && item.name !== 'skip') {{\n"
            f"    // keep the big ones\n    results.push(await {opener});\n  }}\n}}\n"
        )
    return (
        f"const t{i} = (r{max(i - 1, 0)}.rows || []).map((row) => ({{ id: row.id, "
        f"total: row.price * {rnd.randint(2, 9)}, label: `row-${{row.id}}` }}))"
        f".filter(x => x.total >= {rnd.randint(0, 50)});\n"
        f"await {opener};\n"
    )


def _py_block(rnd: random.Random, i: int) -> str:
    tool = rnd.choice(TOOLS)
    keys = rnd.sample(KEYS, rnd.randint(1, 4))
    args = ", ".join(f"{k}={_value(rnd, True)}" for k in keys)
    call = f"await tools.{tool.replace(':', '.')}({args})"
    shape = rnd.random()
    if shape < 0.4:
        return f"r{i} = {call}\n"
    if shape < 0.7:
        return (
            f"for item in r{max(i - 1, 0)}.get('items', []):\n"
            f"    # keep the big ones\n"
            f"    if item['size'] > {rnd.randint(1, 999)} and item['name'] != 'skip':\n"
            f"        results.append({call})\n"
        )
    return (
        f"t{i} = [{{'id': row['id'], 'total': row['price'] * {rnd.randint(2, 9)}}}"
        f" for row in r{max(i - 1, 0)}.rows if row['price'] >= {rnd.randint(0, 50)}]\n"
        f"{call}\n"
    )


def corpus(total_bytes: int, seed: int = 11) -> list[tuple[str, str]]:
    """Snippets whose sizes are log-uniform in [200 B, 20 KB], cycling js / ts / python."""
    rnd = random.Random(seed)
    out: list[tuple[str, str]] = []
    size = 0
    languages = ["js", "ts", "python"]
    while size < total_bytes:
        language = languages[len(out) % 3]
        target = int(200 * 100 ** rnd.random())
        parts = ["results = []\n" if language == "python" else "const results = [];\n"]
        i = 0
        while sum(map(len, parts)) < target:
            if language == "python":
                parts.append(_py_block(rnd, i))
            else:
                parts.append(_js_block(rnd, i, typed=language == "ts"))
            i += 1
        code = "".join(parts)
        out.append((code, language))
        size += len(code.encode())
    return out


def _mb_per_s(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e6


def _run_all(fn: Callable[[str, str], object], items: list[tuple[str, str]]) -> None:
    for code, language in items:
        fn(code, language)


def run(large: bool) -> list[Row]:
    items = corpus(4_000_000 if large else 1_000_000)
    nbytes = sum(len(code.encode()) for code, _ in items)
    assert all(_core.parse_only(code, lang) for code, lang in items), "corpus must parse"
    repeats = 5 if large else 3
    parse_s = best_of(repeats, lambda: _run_all(_core.parse_only, items))
    norm_s = best_of(repeats, lambda: _run_all(_core.normalize, items))
    rows = [
        Row(
            suite="normalize",
            metric="normalize+hash throughput",
            value=_mb_per_s(nbytes, norm_s),
            unit="MB/s",
            baseline=_mb_per_s(nbytes, parse_s),
            baseline_name="parse_only, same parser",
            target=0.5,
            extra={"snippets": len(items), "bytes": nbytes},
        )
    ]
    for language in ("js", "ts", "python"):
        subset = [item for item in items if item[1] == language]
        sub_bytes = sum(len(code.encode()) for code, _ in subset)
        p = best_of(repeats, lambda s=subset: _run_all(_core.parse_only, s))
        n = best_of(repeats, lambda s=subset: _run_all(_core.normalize, s))
        rows.append(
            Row(
                suite="normalize",
                metric=f"normalize+hash throughput ({language})",
                value=_mb_per_s(sub_bytes, n),
                unit="MB/s",
                baseline=_mb_per_s(sub_bytes, p),
                baseline_name="parse_only",
                target=0.5,
            )
        )

    halves = [items[0::2], items[1::2]]
    with ThreadPoolExecutor(max_workers=2) as pool:

        def two_threads() -> None:
            list(pool.map(lambda part: _run_all(_core.normalize, part), halves))

        two_threads()  # warm the pool and each thread's parsers
        t2 = best_of(repeats, two_threads)
    t1 = best_of(repeats, lambda: _run_all(_core.normalize, items))
    rows.append(
        Row(
            suite="normalize",
            metric="2 threads vs 1 (normalize)",
            value=_mb_per_s(nbytes, t2),
            unit="MB/s",
            baseline=_mb_per_s(nbytes, t1),
            baseline_name="1 thread",
            target=1.7,
            extra={"measured_at": time.strftime("%H:%M:%S")},
        )
    )
    return rows
