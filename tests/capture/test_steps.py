"""Steps and data flow (docs/normalization.md, Steps): the golden vectors replayed, and property
tests over generated programs whose data flow is known by construction."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server import _core
from pml_server.capture.steps import STEPS_RULES, pattern_steps, step_views, stored_steps

VECTORS_PATH = Path(__file__).resolve().parents[1] / "vectors" / "steps.json"
VECTORS: list[dict[str, Any]] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))["vectors"]


def _steps(code: str, language: str) -> list[dict[str, Any]]:
    return [
        {
            "tool": s.tool,
            "arguments": [
                {
                    "name": a.name,
                    "kind": a.kind,
                    "parameters": list(a.parameters),
                    "sources": [{"step": step, "path": path} for step, path in a.sources],
                }
                for a in s.arguments
            ],
            "depends_on": list(s.depends_on),
            "flow_known": s.flow_known,
        }
        for s in _core.normalize(code, language).steps
    ]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_vector(vector: dict[str, Any]) -> None:
    assert _steps(vector["code"], vector["language"]) == vector["steps"]


# ---- generated programs ------------------------------------------------------------------------

KEYS = st.sampled_from(["path", "id", "query", "limit", "text", "city"])
FIELDS = st.sampled_from(["id", "name", "data", "Exchange Rate", "items"])
# tool names as MCP servers spell them: identifiers, and names that are none
TOOLS = ["tool_0", "tool_1", "readFile", "get-weather", "resolve-library-id", "files.read"]
# (code, language, edges, argument kinds per step, tools in call order)
Program = tuple[str, str, set[tuple[int, int]], list[list[str]], list[str]]


@st.composite
def programs(draw: st.DrawFn) -> Program:
    """A program of n calls, each argument a literal or a reference to an earlier result in
    one of the written forms (through a function returning it, or with the name bound again
    in a function before); returns (code, language, edges, kinds per step, tools)."""
    python = draw(st.booleans())
    n = draw(st.integers(min_value=1, max_value=7))
    edges: set[tuple[int, int]] = set()
    kinds: list[list[str]] = []
    tools: list[str] = []
    lines = []
    for i in range(n):
        args = []
        step_kinds = []
        keys = draw(st.lists(KEYS, min_size=0, max_size=3, unique=True))
        for key in keys:
            if i > 0 and draw(st.booleans()):
                src = draw(st.integers(min_value=0, max_value=i - 1))
                field = draw(FIELDS)
                form = draw(
                    st.sampled_from(
                        ["whole", "dot", "key", "template", "alias", "returned", "shadowed"]
                    )
                )
                if form == "dot" and " " in field:
                    form = "key"
                value = {
                    "whole": f"r{src}",
                    "dot": f"r{src}.{field}",
                    "key": f'r{src}["{field}"]',
                    "template": f'f"x {{r{src}}} y"' if python else f"`x ${{r{src}}} y`",
                    "alias": f"a{i}_{key}",
                    # what a function returns; the name bound again inside a function only
                    "returned": f"(lambda: r{src})()" if python else f"(() => r{src})()",
                    "shadowed": f"r{src}",
                }[form]
                if form == "shadowed":
                    lines.append(
                        f"def h{i}_{key}(r{src}):\n    r{src} = 1"
                        if python
                        else f"function h{i}_{key}(r{src}) {{ const r{src} = 1; }}"
                    )
                if form == "alias":
                    lines.append(
                        f"a{i}_{key} = r{src}" if python else f"const a{i}_{key} = r{src};"
                    )
                edges.add((src, i))
                step_kinds.append("reference")
            elif draw(st.booleans()):
                value = json.dumps(draw(st.text(alphabet="abcxyz ./", max_size=8)))
                step_kinds.append("parameter")
            else:
                value = ("True" if python else "true") if draw(st.booleans()) else "None"
                if not python:
                    value = "null" if value == "None" else value
                step_kinds.append("literal")
            args.append((key, value))
        # a tool whose name is no identifier is called by subscript (`mcp["get-x"](...)`),
        # and an identifier may be too; or through an MCP SDK client, which names it in an
        # argument (`session.call_tool("x", {...})`, `client.callTool({name: "x", ...})`)
        tool = draw(st.sampled_from(TOOLS))
        callee = (
            f'mcp["{tool}"]' if not tool.isidentifier() or draw(st.booleans()) else f"mcp.{tool}"
        )
        sdk = draw(st.booleans())
        if python and sdk:
            entries = ", ".join(f'"{k}": {v}' for k, v in args)
            lines.append(f'r{i} = await session.call_tool("{tool}", {{{entries}}})')
        elif python:
            call = f"{callee}({', '.join(f'{k}={v}' for k, v in args)})"
            lines.append(f"r{i} = {call}")
        elif sdk:
            entries = ", ".join(f"{k}: {v}" for k, v in args)
            call = f'await client.callTool({{name: "{tool}", arguments: {{{entries}}}}})'
            lines.append(f"const r{i} = {call};")
        else:
            call = f"await {callee}({{{', '.join(f'{k}: {v}' for k, v in args)}}})"
            lines.append(f"const r{i} = {call};")
        kinds.append(step_kinds)
        tools.append(tool)
    return "\n".join(lines), "python" if python else "js", edges, kinds, tools


@settings(max_examples=200, deadline=None)
@given(programs())
def test_every_reference_is_an_edge_and_no_other(program: Program) -> None:
    code, language, edges, kinds, tools = program
    normalized = _core.normalize(code, language)
    steps = normalized.steps
    assert normalized.tool_calls == [s.tool for s in steps] == tools, code
    got = {(d, i) for i, s in enumerate(steps) for d in s.depends_on}
    assert got == edges, code
    assert [[a.kind for a in s.arguments] for s in steps] == kinds, code
    # A DAG in call order: every edge points back.
    assert all(d < i for d, i in got)
    assert all(s.flow_known for s in steps)


@settings(max_examples=100, deadline=None)
@given(programs(), st.sampled_from(["loop", "callback"]))
def test_unreadable_flow_degrades_to_steps_in_call_order(program: Program, wrap: str) -> None:
    code, language, _, _, tools = program
    if language == "python":
        body = "\n".join("    " + line for line in code.splitlines())
        wrapped = f"for item in items:\n{body}\n"
    elif wrap == "loop":
        wrapped = f"for (const item of items) {{\n{code}\n}}"
    else:
        wrapped = f"items.forEach(async (item) => {{\n{code}\n}});"
    plain = _core.normalize(code, language)
    inside = _core.normalize(wrapped, language)
    assert [s.tool for s in inside.steps] == inside.tool_calls == plain.tool_calls == tools
    assert not any(s.flow_known for s in inside.steps)


@pytest.mark.parametrize(
    ("language", "code"),
    [
        (
            "js",
            "const [a, b] = await Promise.all([mcp.weather({city: c}), mcp.news({topic: t})]);\n"
            "await mcp.send({x: a.summary});\nawait mcp.post({y: b});",
        ),
        (
            "js",
            "const res = await Promise.all([mcp.weather({city: c}), mcp.news({topic: t})]);\n"
            "await mcp.send({x: res[0].summary});\nawait mcp.post({y: res[1]});",
        ),
        (
            "ts",
            "const [a, b] = [await mcp.weather({city: c}), await mcp.news({topic: t})];\n"
            "await mcp.send({x: a.summary});\nawait mcp.post({y: b});",
        ),
        (
            "python",
            "a, b = mcp.weather(city=c), mcp.news(topic=t)\nmcp.send(x=a.summary)\nmcp.post(y=b)",
        ),
        (
            "python",
            "a, b = await asyncio.gather(mcp.weather(city=c), mcp.news(topic=t), "
            "return_exceptions=True)\nawait mcp.send(x=a.summary)\nawait mcp.post(y=b)",
        ),
        (
            "python",
            "res = [mcp.weather(city=c), mcp.news(topic=t)]\n"
            "mcp.send(x=res[0].summary)\nmcp.post(y=res[1])",
        ),
    ],
)
def test_each_element_of_parallel_calls_reads_its_own_step(language: str, code: str) -> None:
    """Calls written side by side and taken apart (`Promise.all`, `asyncio.gather`, a tuple or
    a list): each name or constant index reads its own call's output, so `send` depends on
    `weather` alone and `post` on `news` alone (docs/normalization.md, Steps)."""
    steps = _steps(code, language)
    assert [s["tool"] for s in steps] == ["weather", "news", "send", "post"]
    assert [s["depends_on"] for s in steps] == [[], [], [0], [1]], code
    assert steps[2]["arguments"][0]["sources"] == [{"step": 0, "path": ".summary"}]
    assert steps[3]["arguments"][0]["sources"] == [{"step": 1, "path": ""}]
    # The sequence as a whole still reads both; a spread hides positions, so it stays whole.
    whole = _steps("rs = await Promise.all([mcp.a(), mcp.b()]); await mcp.c({rs})", "js")
    assert whole[2]["depends_on"] == [0, 1]
    spread = _steps("[a, b] = await Promise.all([...xs, mcp.a()]); await mcp.c({a})", "js")
    assert spread[1]["depends_on"] == [0]


def test_an_awaited_typescript_call_with_type_arguments_is_a_step() -> None:
    """tree-sitter-typescript reads `await mcp.search<Row[]>(...)` as a call of
    `await mcp.search`; the call is the tool's all the same, so it is listed and is a step
    (docs/normalization.md, Tool calls)."""
    code = (
        'const rows = await mcp.search<Row[]>({q: "a"});\n'
        "await mcp.get<Item>({id: rows[0].id});\nawait mcp.log({n: rows.length});"
    )
    for language in ("ts", "tsx"):
        result = _core.normalize(code, language)
        assert result.parse_ok, result.fallback_reason
        assert result.tool_calls == ["search", "get", "log"]
        steps = _steps(code, language)
        assert [s["depends_on"] for s in steps] == [[], [0], [0]]
        assert steps[1]["arguments"][0]["sources"] == [{"step": 0, "path": "[0].id"}]


@pytest.mark.parametrize(
    ("language", "line"),
    [
        ("js", "x = [x.a, x.b];"),
        ("js", "x = `${x.a}${x.b}`;"),
        ("python", "x = x.a + x.b"),
    ],
)
def test_a_name_read_twice_in_its_own_rebinding_lists_a_bounded_set_of_sources(
    language: str, line: str
) -> None:
    """`x = [x.a, x.b]` written n times makes `x` read 2^n paths of step 0: listed in full, 24
    such lines (400 bytes of code) took 10 GB and minutes to read on every Suggest returning the
    pattern. An argument's sources are bounded (docs/normalization.md, Steps): at most 64
    paths, each at most 256 bytes, and past them one source per further step, so every edge
    is still read."""
    lines = "\n".join([line] * 16)
    first = "x = mcp.b()" if language == "python" else "let x = await mcp.b({});"
    last = "mcp.c(v=x, w=y)" if language == "python" else "await mcp.c({v: x, w: y});"
    second = "y = mcp.d()" if language == "python" else "const y = await mcp.d({});"
    steps = _steps("\n".join([first, second, lines, last]), language)
    assert [s["tool"] for s in steps] == ["b", "d", "c"]
    assert steps[2]["depends_on"] == [0, 1]
    v, w = steps[2]["arguments"]
    assert v["kind"] == "reference"
    assert 1 <= len(v["sources"]) <= 64
    assert {s["step"] for s in v["sources"]} == {0}
    assert all(len(s["path"]) <= 256 for s in v["sources"])
    assert w["sources"] == [{"step": 1, "path": ""}]


def test_a_path_built_up_over_many_bindings_is_cut_at_a_bounded_length() -> None:
    """`x = x.abc...` over thousands of lines gave a path of megabytes per binding (4 GB to
    read 2 MB of code); a source's path now stops before the segment that would take it past
    256 bytes: what it names is still where the value is read from."""
    code = (
        "let x = await mcp.b({});\n"
        + "x = x.abcdefgh.ijklmnop;\n" * 200
        + 'await mcp.c({v: x, w: x["k"]});'
    )
    steps = _steps(code, "js")
    v, w = steps[1]["arguments"]
    for argument in (v, w):
        [source] = argument["sources"]
        assert source["step"] == 0
        assert 0 < len(source["path"]) <= 256
        assert source["path"].startswith(".abcdefgh.ijklmnop.abcdefgh")


def test_names_bound_past_the_snippets_budget_of_sources_read_as_unknown() -> None:
    """Each binding of a name read by many paths held its own copy of them all: 1 MB of
    `x = [x.a, x.b, x.c, x.d]` held 4 GB. The sources a snippet's names read and bind are
    bounded in all (65,536, docs/normalization.md, Steps); past it a name reads as unknown,
    what code whose flow cannot be read gives."""
    code = (
        "let x = await mcp.b({});\n"
        + "x = [x.a, x.b];\n" * 6
        + "".join(f"const y{i} = [x, x];\n" for i in range(1000))
        + "await mcp.c({v: await mcp.d({}), w: y999});"
    )
    steps = _steps(code, "js")
    assert [s["tool"] for s in steps] == ["b", "c", "d"]
    v, w = steps[1]["arguments"]
    assert w["kind"] == "unknown"
    assert w["sources"] == []
    # A call's output read where it is made is no name: still read.
    assert v["sources"] == [{"step": 2, "path": ""}]
    assert steps[1]["depends_on"] == [2]


@pytest.mark.parametrize(
    ("pattern", "path"),
    [
        ("{x = 5}", ".x"),
        ("{y: x = 5}", ".y"),
        ("[x = 5]", "[0]"),
        ("{data: {x = 5}}", ".data.x"),
    ],
)
def test_a_destructured_name_with_a_default_still_reads_its_step(pattern: str, path: str) -> None:
    """`const {x = 5} = r` binds `x` to `r.x` (or 5 when it is undefined): before, a default
    made the name unknown and the edge from `r`'s step was lost (docs/normalization.md,
    Steps)."""
    code = f"const r = await mcp.a({{}});\nconst {pattern} = r;\nawait mcp.b({{v: x}});"
    steps = _steps(code, "js")
    assert steps[1]["depends_on"] == [0]
    assert steps[1]["arguments"][0]["sources"] == [{"step": 0, "path": path}]


FAN_OUT = [
    ("js", "const xs = await Promise.all(r.items.map(i => mcp.get({id: i.id})));", ".items[*].id"),
    ("js", "for (const i of r.items) { await mcp.get({id: i.id}); }", ".items[*].id"),
    ("js", "r.items.forEach(i => mcp.get({id: i.id}));", ".items[*].id"),
    ("js", "r.items.forEach(function (i) { mcp.get({id: i.id}); });", ".items[*].id"),
    ("js", "r.items.map(({id}) => mcp.get({id}));", ".items[*].id"),
    ("js", "r.items.filter(i => i.ok).map(i => mcp.get({id: i.id}));", ".items[*].id"),
    ("js", "await Promise.all(Object.keys(r.x).map(k => mcp.get({id: k})));", ".x[*]"),
    ("js", "for (const k in r.x) { await mcp.get({id: k}); }", ".x"),
    ("ts", "r.items.map((i: Item) => mcp.get({id: i.id}));", ".items[*].id"),
    ("python", 'xs = [await mcp.get(id=i["id"]) for i in r["items"]]', '["items"][*]["id"]'),
    ("python", 'for i in r["items"]:\n    mcp.get(id=i["id"])', '["items"][*]["id"]'),
    ("python", 'xs = map(lambda i: mcp.get(id=i["id"]), r["items"])', '["items"][*]["id"]'),
    (
        "python",
        'xs = await asyncio.gather(*[mcp.get(id=i["id"]) for i in r["items"]])',
        '["items"][*]["id"]',
    ),
    ("python", 'xs = sorted(r["items"], key=lambda i: mcp.get(id=i))', '["items"][*]'),
]


@pytest.mark.parametrize(("language", "line", "path"), FAN_OUT)
def test_a_call_per_element_of_a_steps_output_depends_on_that_step(
    language: str, line: str, path: str
) -> None:
    """A call made for each element of step 0's output (a loop, a comprehension, a callback
    given to `map`/`forEach`/`filter`, Python's `map` and `sorted(key=...)`) reads that output:
    the edge from step 0 is there, its path names the data (`.items[*].id`), and the step may
    run several times (docs/normalization.md, Steps). Before, the element was an unknown loop
    variable and the step read as independent of the call it iterates over."""
    first = "r = await mcp.list()" if language == "python" else "const r = await mcp.list({});"
    steps = _steps(f"{first}\n{line}", language)
    assert [s["tool"] for s in steps] == ["list", "get"]
    assert steps[1]["depends_on"] == [0]
    assert steps[1]["arguments"][0]["sources"] == [{"step": 0, "path": path}]
    assert not steps[1]["flow_known"]


@pytest.mark.parametrize(
    ("language", "value", "paths"),
    [
        ("js", "r.items.map(i => i.id)", [".items", ".items[*].id"]),
        ("js", "r.name.toUpperCase()", [".name"]),
        ("js", "r.items.filter(i => i.ok).map(i => i.id)", [".items", ".items[*].id"]),
        ("js", "r.items?.map(i => i.id)", [".items", ".items[*].id"]),
        ("js", "r.items.length", [".items.length"]),
        ("python", 'r["name"].upper()', ['["name"]']),
        ("python", "r.items()", [""]),
        ("python", 'sorted(r["items"], key=lambda i: i["rank"])', ['["items"]']),
    ],
)
def test_a_methods_name_is_never_a_path(language: str, value: str, paths: list[str]) -> None:
    """A value computed by a method called on a step's output reads what the method is called
    on: `r.items.map(f)` read `.items.map`, `r.name.toUpperCase()` `.name.toUpperCase`, paths
    naming no data; and what a function given to it returns (`.items[*].id`), unless the method
    only tests or orders (`filter`, `key=`) (docs/normalization.md, Steps)."""
    code = (
        f"r = await mcp.list()\nmcp.put(v={value})"
        if language == "python"
        else f"const r = await mcp.list({{}});\nawait mcp.put({{v: {value}}});"
    )
    steps = _steps(code, language)
    assert steps[1]["depends_on"] == [0]
    assert steps[1]["arguments"][0]["sources"] == [{"step": 0, "path": p} for p in paths]
    assert steps[1]["flow_known"]


def test_nested_fan_outs_over_a_long_snippet_read_a_bounded_set_of_sources() -> None:
    """Loops and callbacks nested over one output, 2,000 of them in a snippet: each step lists
    its one edge with a bounded path, and only the first 256 calls are steps."""
    body = "".join(
        f"for (const a{n} of r.items) {{\n"
        f"  a{n}.subs.map(b => mcp.get({{id: b.id, p: a{n}.id}}));\n}}\n"
        for n in range(2000)
    )
    steps = _steps("const r = await mcp.list({});\n" + body, "js")
    assert len(steps) == 256
    for step in steps[1:]:
        assert step["depends_on"] == [0]
        assert [s["sources"] for s in step["arguments"]] == [
            [{"step": 0, "path": ".items[*].subs[*].id"}],
            [{"step": 0, "path": ".items[*].id"}],
        ]


@pytest.mark.parametrize(
    ("language", "code"),
    [
        (
            "js",
            "const rs = await Promise.all([mcp.a({}), mcp.b({})]);\n"
            "for (const r of rs) { await mcp.c({v: r.id}); }",
        ),
        ("python", "rs = await asyncio.gather(mcp.a(), mcp.b())\nfor r in rs:\n    mcp.c(v=r.id)"),
        (
            "js",
            "const rs = [await mcp.a({}), await mcp.b({})];\nrs.forEach(r => mcp.c({v: r.id}));",
        ),
    ],
)
def test_a_loop_over_calls_written_side_by_side_takes_each_call_whole(
    language: str, code: str
) -> None:
    """Iterating a sequence written element by element gives each element's own output, not a
    part of it: `r.id` reads `.id` of step 0 and of step 1 (docs/normalization.md, Steps)."""
    steps = _steps(code, language)
    assert steps[2]["depends_on"] == [0, 1]
    assert steps[2]["arguments"][0]["sources"] == [
        {"step": 0, "path": ".id"},
        {"step": 1, "path": ".id"},
    ]


PROMISES_BRANCHES_GLOBALS = [
    # a promise is no list: `then`'s function takes the value itself (`[*].x` or the whole
    # output before)
    ("javascript", "const n = await mcp.a({q: 'x'}).then(r => r.x);\nawait mcp.b({v: n});", ".x"),
    ("javascript", "const n = await mcp.a({q: 'x'}).then(({x}) => x);\nawait mcp.b({v: n});", ".x"),
    (
        "javascript",
        "const p = mcp.a({q: 'x'});\nconst n = await p.then(r => r.x);\nawait mcp.b({v: n});",
        ".x",
    ),
    # `else` runs instead of the `if` that assigned: what the name held before (step 1 before)
    ("python", "r = mcp.a(q='x')\nif c:\n    r = mcp.z(q='y')\nelse:\n    mcp.b(v=r)", ""),
    # a `global` assigned in a function is the module's name (no edge before)
    ("python", "r = None\ndef f():\n    global r\n    r = mcp.a(q='x')\nf()\nmcp.b(v=r)", ""),
]


@pytest.mark.parametrize(("language", "code", "path"), PROMISES_BRANCHES_GLOBALS)
def test_a_promise_a_later_clause_and_a_global_read_the_value_they_hold(
    language: str, code: str, path: str
) -> None:
    steps = _core.normalize(code, language).steps
    assert steps[0].tool == "a"
    read = steps[-1]
    assert read.tool == "b"
    assert list(read.depends_on) == [0]
    assert [list(a.sources) for a in read.arguments] == [[(0, path)]]


# ---- stored steps ------------------------------------------------------------------------------

# The digest of tests/vectors/steps.json under each `STEPS_RULES`: the vectors change when the
# core reads steps differently, and steps stored under the former rules must then be read
# again from their code (raise `STEPS_RULES`, then record the new digest here).
VECTORS_UNDER_RULES = {
    1: "bbae2d46ed151a9f6d87fa4300881dc766a3e0031df89acceaba0490e83ee09e",
    2: "a8bbfefc0f9d163396b8ba97005fc2048ae218277d3b11749c0f4e19b565f8f6",
    3: "8cd7981702e7dbc2cfe5650047e22d3a661b6463fdae4042602c858eb94e96ab",
}


def test_the_steps_rules_change_with_the_golden_vectors() -> None:
    digest = hashlib.sha256(VECTORS_PATH.read_bytes()).hexdigest()
    assert VECTORS_UNDER_RULES.get(STEPS_RULES) == digest, (
        "tests/vectors/steps.json changed: raise capture/steps.py STEPS_RULES and record "
        f"{digest} under it here"
    )


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_stored_steps_read_back_as_the_code_gives_them(vector: dict[str, Any]) -> None:
    """A new pattern stores its steps; read back (with no code to read them from: the stored
    ones are what is shown), they are those its code gives."""
    code, language = vector["code"], vector["language"]
    stored = stored_steps(code, language)
    read = pattern_steps(f"stored-{vector['name']}", "h", "", language, stored)
    assert read == step_views(_core.normalize(code, language).steps)


def test_steps_stored_under_other_rules_are_read_again_from_the_code() -> None:
    code = "const a = await mcp.read_file({path: 'a.json'});\nawait mcp.parse_json({text: a});"
    rules, steps = json.loads(stored_steps("await mcp.send_mail({to: 'x'});", "javascript"))
    older = json.dumps([rules - 1, steps])
    read = pattern_steps("rules-older", "h", code, "javascript", older)
    assert [s.tool for s in read] == ["read_file", "parse_json"]
    assert read[1].depends_on == (0,)


def test_a_name_rebound_by_with_as_reads_no_step() -> None:
    """`with open(p) as r:` rebinds `r`: it no longer reads step a (a wrong edge before)."""
    code = "r = mcp.a()\nwith open(p) as r:\n    pass\nmcp.b(v=r)"
    steps = _core.normalize(code, "python").steps
    assert list(steps[1].depends_on) == []
    assert steps[1].arguments[0].kind == "unknown"


@pytest.mark.parametrize(
    "rebinding",
    [
        "import r",
        "import r.sub",
        "import json as r",
        "from m import r",
        "from m import x as r, y",
        "from . import r",
        "del r",
        "del q, r",
    ],
)
def test_a_name_rebound_by_import_or_unbound_by_del_reads_no_step(rebinding: str) -> None:
    """`import`, `from ... import` and `del` rebind `r`: a later use no longer reads step a
    (a false edge before; docs/normalization.md, Steps)."""
    code = f"r = mcp.a()\nq = 1\n{rebinding}\nmcp.b(v=r)"
    steps = _core.normalize(code, "python").steps
    assert [s.tool for s in steps] == ["a", "b"]
    assert list(steps[1].depends_on) == []
    # importing another name, or deleting one, leaves `r` as it was
    other = rebinding.replace(" r", " other").replace("r.sub", "other.sub")
    steps = _core.normalize(f"r = mcp.a()\nq = 1\n{other}\nmcp.b(v=r)", "python").steps
    assert list(steps[1].depends_on) == [0]


TRY_CLAUSES = [
    # `finally` always runs: what it assigns is what the name holds after the statement
    ("python", "r = mcp.a()\ntry:\n    x = 1\nfinally:\n    r = mcp.c()\nmcp.b(v=r)", [1]),
    (
        "python",
        "r = mcp.a()\ntry:\n    x = 1\nexcept E:\n    pass\nfinally:\n    r = 2\nmcp.b(v=r)",
        [],
    ),
    # no handler: the code after runs only when the body completed
    ("python", "r = mcp.a()\ntry:\n    r = mcp.c()\nfinally:\n    x = 1\nmcp.b(v=r)", [1]),
    ("javascript", "let r = mcp.a();\ntry { r = mcp.c(); } finally { f(); }\nmcp.b({v: r});", [1]),
    ("javascript", "let r = mcp.a();\ntry { f(); } finally { r = mcp.c(); }\nmcp.b({v: r});", [1]),
    # a handler may end an exception in the body: either value
    ("python", "r = mcp.a()\ntry:\n    r = mcp.c()\nexcept E:\n    pass\nmcp.b(v=r)", [0, 1]),
    ("javascript", "let r = mcp.a();\ntry { r = mcp.c(); } catch (e) {}\nmcp.b({v: r});", [0, 1]),
    # inside a branch of the `finally`, the assignment may not run
    (
        "python",
        "r = mcp.a()\ntry:\n    x = 1\nfinally:\n    if k:\n        r = mcp.c()\nmcp.b(v=r)",
        [0, 1],
    ),
    # `else` runs only once the body completed: what the body assigned alone
    (
        "python",
        "r = mcp.a()\ntry:\n    r = mcp.c()\nexcept E:\n    pass\nelse:\n    mcp.b(v=r)",
        [1],
    ),
    # ... but a `finally` after it, or a handler, may follow a raise in the body: either value
    (
        "python",
        "r = mcp.a()\ntry:\n    r = mcp.c()\nexcept E:\n    pass\nelse:\n    x = 1\n"
        "finally:\n    mcp.b(v=r)",
        [0, 1],
    ),
    (
        "python",
        "r = mcp.a()\ntry:\n    if k:\n        r = mcp.c()\nexcept E:\n    pass\nelse:\n"
        "    mcp.b(v=r)",
        [0, 1],
    ),
    # the `finally` itself may run after the body raised: it reads either value
    ("python", "r = mcp.a()\ntry:\n    r = mcp.c()\nfinally:\n    mcp.b(v=r)", [0, 1]),
]


@pytest.mark.parametrize(("language", "code", "depends_on"), TRY_CLAUSES)
def test_a_try_statement_joins_only_what_may_not_have_run(
    language: str, code: str, depends_on: list[int]
) -> None:
    """Past a `try`, a name holds what an assignment gave alone when it ran whenever the code
    after does (in `finally`, or in a body no handler follows), and in its `else` what the
    body gave alone; else with what it held before (docs/normalization.md, Steps)."""
    steps = _core.normalize(code, language).steps
    assert [s.tool for s in steps][-1] == "b"
    assert list(steps[-1].depends_on) == depends_on
