"""Property tests of the normalization contract (docs/normalization.md).

Programs are generated as a structure (tools, keys, operators, control flow) plus a surface
(literal values, quotes, whitespace, comments, local names, key order). Two surfaces of one
structure must hash alike; changing one structural element must change the hash.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server import _core
from testing import code_shapes

IDENT = st.sampled_from(["path", "limit", "query", "mode", "maxResults", "content", "url"])
TOOLS = st.sampled_from(["read_file", "write_file", "search", "fetch", "send_email"])
OPS = st.sampled_from([">", "<", "==", "!="])
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=30)
LITERAL = st.one_of(TEXT, st.integers(min_value=0, max_value=10**12))


@dataclass(frozen=True)
class Structure:
    """What the hash must see."""

    tools: tuple[str, ...]
    keys: tuple[tuple[str, ...], ...]  # object keys per call
    op: str
    flag: bool


@st.composite
def structures(draw: st.DrawFn) -> Structure:
    n = draw(st.integers(min_value=1, max_value=4))
    tools = tuple(draw(TOOLS) for _ in range(n))
    keys = tuple(tuple(draw(st.lists(IDENT, min_size=1, max_size=3, unique=True))) for _ in tools)
    return Structure(tools, keys, draw(OPS), draw(st.booleans()))


def js_literal(value: str | int, rnd: random.Random) -> str:
    if isinstance(value, int):
        return str(value)
    if rnd.random() < 0.5:
        return json.dumps(value)
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def py_literal(value: str | int, rnd: random.Random) -> str:
    if isinstance(value, int):
        return str(value)
    quote = rnd.choice(["'", '"'])
    escaped = value.replace("\\", "\\\\").replace(quote, "\\" + quote)
    return f"{quote}{escaped}{quote}"


def render_js(s: Structure, values: list[str | int], seed: int) -> str:
    rnd = random.Random(seed)
    sp = lambda: rnd.choice(["", " ", "  ", "\n", "\t", " /* c */ "])  # noqa: E731
    var = [f"{rnd.choice(['v', 'data', 'res', 'x'])}{i}_{seed % 97}" for i in range(len(s.tools))]
    lines, k = [], 0
    for i, tool in enumerate(s.tools):
        pairs = []
        for key in s.keys[i]:  # values follow the structure's key order, then keys shuffle
            pairs.append(f"{key}:{sp()}{js_literal(values[k % len(values)], rnd)}")
            k += 1
        rnd.shuffle(pairs)
        semi = rnd.choice([";", ""])
        args = ("," + sp()).join(pairs)
        lines.append(f"const {var[i]}{sp()}={sp()}await mcp.{tool}({{{sp()}{args}}}){semi}")
    flag = "true" if s.flag else "false"
    lines.append(
        f"if ({var[0]}.size {s.op} {js_literal(values[0], rnd)}) {{ log({var[-1]}, {flag}) }}"
    )
    if rnd.random() < 0.5:
        lines.insert(0, "// generated")
    return rnd.choice(["\n", "\n\n"]).join(lines)


def render_py(s: Structure, values: list[str | int], seed: int) -> str:
    rnd = random.Random(seed)
    sp = lambda: rnd.choice(["", " ", "  "])  # noqa: E731
    var = [f"{rnd.choice(['v', 'data', 'res', 'x'])}{i}_{seed % 97}" for i in range(len(s.tools))]
    lines, k = [], 0
    for i, tool in enumerate(s.tools):
        kwargs = []
        for key in s.keys[i]:
            kwargs.append(f"{key}{sp()}={sp()}{py_literal(values[k % len(values)], rnd)}")
            k += 1
        rnd.shuffle(kwargs)
        comment = rnd.choice(["", "  # note"])
        lines.append(f"{var[i]} ={sp()}await tools.{tool}({(',' + sp()).join(kwargs)}){comment}")
        if rnd.random() < 0.3:
            lines.append("")
    flag = "True" if s.flag else "False"
    lines.append(f"if {var[0]}.size {s.op} {py_literal(values[0], rnd)}:")
    indent = rnd.choice(["  ", "    ", "\t"])
    lines.append(f"{indent}print({var[-1]}, {flag})")
    return "\n".join(lines) + "\n"


RENDERERS = {"js": render_js, "python": render_py}


@settings(max_examples=60, deadline=None)
@given(
    structures(),
    st.sampled_from(sorted(RENDERERS)),
    st.lists(LITERAL, min_size=1, max_size=5),
    st.lists(LITERAL, min_size=1, max_size=5),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
)
def test_same_structure_same_hash(
    s: Structure,
    language: str,
    values_a: list[str | int],
    values_b: list[str | int],
    seed_a: int,
    seed_b: int,
) -> None:
    render = RENDERERS[language]
    # Keep each literal's type per position: a string replaced by a number is a change of
    # code (the placeholder's type), not of value.
    # Same length, so literal k lands in the same position in both renderings.
    values_b = [
        vb if isinstance(vb, type(va)) else va
        for va, vb in zip(values_a, itertools.cycle(values_b), strict=False)
    ]
    a, b = render(s, values_a, seed_a), render(s, values_b, seed_b)
    na, nb = _core.normalize(a, language), _core.normalize(b, language)
    assert na.parse_ok, (a, na.fallback_reason)
    assert nb.parse_ok, (b, nb.fallback_reason)
    assert na.code_hash == nb.code_hash, (a, b)
    assert na.tool_calls == list(s.tools)


@settings(max_examples=60, deadline=None)
@given(
    structures(),
    st.sampled_from(sorted(RENDERERS)),
    st.lists(LITERAL, min_size=1, max_size=5),
    st.integers(0, 10**6),
    st.data(),
)
def test_structural_change_changes_hash(
    s: Structure, language: str, values: list[str | int], seed: int, data: st.DataObject
) -> None:
    change = data.draw(st.sampled_from(["tool", "key", "op", "flag", "extra_call"]))
    if change == "tool":
        i = data.draw(st.integers(0, len(s.tools) - 1))
        new_tool = data.draw(TOOLS.filter(lambda t: t != s.tools[i]))
        changed = replace(s, tools=(*s.tools[:i], new_tool, *s.tools[i + 1 :]))
    elif change == "key":
        i = data.draw(st.integers(0, len(s.keys) - 1))
        new_key = data.draw(IDENT.filter(lambda k: k not in s.keys[i]))
        changed = replace(s, keys=(*s.keys[:i], (new_key, *s.keys[i][1:]), *s.keys[i + 1 :]))
    elif change == "op":
        changed = replace(s, op=data.draw(OPS.filter(lambda o: o != s.op)))
    elif change == "flag":
        changed = replace(s, flag=not s.flag)
    else:
        changed = replace(s, tools=(*s.tools, s.tools[0]), keys=(*s.keys, s.keys[0]))
    render = RENDERERS[language]
    a, b = render(s, values, seed), render(changed, values, seed)
    assert _core.normalize(a, language).code_hash != _core.normalize(b, language).code_hash


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400), st.sampled_from(["js", "ts", "tsx", "py", "rust", "", "SQL"]))
def test_never_raises_and_template_round_trips(code: str, language: str) -> None:
    n = _core.normalize(code, language)
    assert n.code_hash.startswith("sha256:")
    assert len(n.code_hash) == 71
    assert n.parse_ok == (n.fallback_reason == "")
    assert "internal error" not in n.fallback_reason  # a caught panic in the tree path
    # Putting each literal back in place of its placeholder gives the input again.
    rebuilt, cursor, pos = [], 0, 0
    for p in n.params:
        at = n.template.index(p.name, pos)
        rebuilt.append(n.template[pos:at])
        rebuilt.append(code[p.start : p.end])
        assert code[cursor : p.start] == n.template[pos:at]
        cursor, pos = p.end, at + len(p.name)
        json.loads(p.value_json)
        assert p.json_type in ("string", "integer", "number")
    rebuilt.append(n.template[pos:])
    assert "".join(rebuilt) == code
    schema = json.loads(n.schema_json)
    assert list(schema["properties"]) == sorted(p.name for p in n.params) or set(
        schema["properties"]
    ) == {p.name for p in n.params}
    assert _core.normalize(code, language) == n  # deterministic


def _corpus() -> list[tuple[str, str]]:
    rnd = random.Random(7)
    out = []
    for i in range(40):
        s = Structure(
            ("read_file", "search")[: 1 + i % 2], (("path",), ("query", "limit")), ">", True
        )
        out.append((render_js(s, [f"f{i}.json", i], i), "js"))
        out.append((render_py(s, [f"q{i}", i], i), "python"))
        out.append(("".join(rnd.choice("{}()[]'\"ab=:1 \n") for _ in range(200)), "js"))
    return out


def test_deterministic_across_threads() -> None:
    corpus = _corpus()
    expected = [_core.normalize(code, lang) for code, lang in corpus]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(3):
            got = list(pool.map(lambda c: _core.normalize(*c), corpus))
            assert got == expected


def test_several_megabytes_and_the_size_limit() -> None:
    snippet = "const r{i} = await mcp.read_file({{path: 'dir/file{i}.json', limit: {i}}});\n"
    big = "".join(snippet.format(i=i) for i in range(50_000))
    assert 3_000_000 < len(big) < _core.NORMALIZE_MAX_INPUT_BYTES
    n = _core.normalize(big, "js")
    assert n.parse_ok
    # 100,000 literals: the first NORMALIZE_MAX_PARAMS are parameters, the rest stay code
    assert len(n.params) == _core.NORMALIZE_MAX_PARAMS
    assert len(n.template) < len(big) + 16 * 1024
    assert len(n.tool_calls) == 50_000
    too_big = "x" * (_core.NORMALIZE_MAX_INPUT_BYTES + 1)
    with pytest.raises(_core.InputTooLargeError, match="code"):
        _core.normalize(too_big, "js")
    with pytest.raises(_core.InputTooLargeError):
        _core.parse_only(too_big, "py")


@pytest.mark.parametrize(
    ("code", "language"),
    [
        ("(" * 200_000, "js"),
        ("[" * 200_000, "py"),
        ("x = " + "-" * 100_000 + "1\n", "py"),
        ("a" + ".b" * 200_000, "ts"),
        ("x = " + "1 + " * 200_000 + "1\n", "python"),
        (
            "if a:\n" + "".join(" " * i + "if a:\n" for i in range(1, 400)) + " " * 400 + "pass\n",
            "py",
        ),
    ],
    ids=["parens", "brackets", "unary", "members", "binary-chain", "indentation"],
)
def test_deep_nesting_falls_back_or_parses(code: str, language: str) -> None:
    n = _core.normalize(code, language)
    assert n.code_hash.startswith("sha256:")
    if not n.parse_ok:
        assert n.fallback_reason


@pytest.mark.parametrize("language", code_shapes.LANGUAGES)
@pytest.mark.parametrize("shape", code_shapes.SHAPES, ids=lambda shape: shape.name)
def test_hostile_shapes_give_a_result(shape: code_shapes.Shape, language: str) -> None:
    # docs/normalization.md, Limits and robustness: chains just under the depth cap, long
    # joined values, nesting over the caps, unterminated strings; read in a thread of 1 MiB
    # of stack (the walks are iterative, or recurse at most 64 levels: no input's depth
    # reaches the thread's stack)
    code = code_shapes.build(shape, language, 32 * 1024)
    results: list[_core.Normalized] = []
    threading.stack_size(1024 * 1024)
    try:
        reader = threading.Thread(target=lambda: results.append(_core.normalize(code, language)))
        reader.start()
        reader.join()
    finally:
        threading.stack_size(0)
    (n,) = results
    assert n.code_hash.startswith("sha256:")
    assert n.parse_ok or n.fallback_reason
    assert _core.normalize(code, language).code_hash == n.code_hash


def test_lone_surrogate_is_a_named_error() -> None:
    with pytest.raises(_core.CoreArgumentError, match="`code`"):
        _core.normalize("x = '\ud800'", "py")


def test_language_aliases() -> None:
    code = "const a = f('x')"
    for alias in ("js", "JavaScript", "mjs", "cjs", "jsx"):
        assert _core.normalize(code, alias).language == "javascript"
    for alias in ("ts", "typescript", "mts", "tsx"):
        assert _core.normalize(code, alias).language == "typescript"
    assert _core.normalize("a = f('x')", "py").language == "python"
    other = _core.normalize(code, "  Kotlin ")
    assert other.language == "kotlin"
    assert not other.parse_ok
    assert _core.parse_only(code, "js")
    assert not _core.parse_only(code, "kotlin")
    assert not _core.parse_only("const = (", "js")
