"""Rewrite `steps.json`: the golden vectors of step and data-flow extraction
(docs/normalization.md, Steps), for clients in other languages. Review the diff by hand.

    .venv/bin/python tests/vectors/regenerate_steps.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pml_server import _core

HERE = Path(__file__).resolve().parent

# (name, language, code)
CASES: list[tuple[str, str, str]] = [
    ("single_parameter", "js", 'const x = await mcp.read_file({path: "a.json"})'),
    (
        "chain_whole_output",
        "js",
        'const r1 = await mcp.search_person({query: "Tom Hanks"});\n'
        "const r2 = await mcp.get_person_movie_credit({person_id: r1});",
    ),
    (
        "field_key_template",
        "js",
        'const r1 = await mcp.rate({from: "USD", to: "EUR"});\n'
        'const r2 = await mcp.convert({rate: r1["Exchange Rate"], id: r1.id, '
        'expr: `5 * ${r1["Exchange Rate"]}`});',
    ),
    (
        "independent_then_join",
        "js",
        'const a = await mcp.weather({city: "Paris"});\n'
        'const b = await mcp.news({topic: "Paris"});\n'
        "await mcp.send({text: `${a.summary} ${b.title}`, urgent: true});",
    ),
    (
        "destructuring_and_alias",
        "js",
        "const {items, next: cursor} = await mcp.list({});\n"
        "const first = items[0];\n"
        "await mcp.get({id: first, page: cursor});",
    ),
    (
        "variable_parameter",
        "js",
        'const path = "a.json";\nawait mcp.read_file({path});',
    ),
    (
        "reassigned",
        "js",
        "let r = await mcp.a({});\nr = await mcp.b({x: r});\nawait mcp.c({y: r});",
    ),
    (
        "nested_call",
        "js",
        "await mcp.outer({v: await mcp.inner({q: 1})});",
    ),
    (
        "dispatch",
        "js",
        'const r = await mcp.call("search", {q: "x"});\n'
        'await tools.call_tool("fetch", {url: r.url});',
    ),
    (
        "loop_and_callback",
        "js",
        "const r = await mcp.list_items({});\n"
        "for (const it of r.items) { await mcp.get_item({id: it.id}); }\n"
        "r.items.map((x) => mcp.put_item({v: x}));",
    ),
    ("free_variable", "js", "await mcp.send({to: recipient, body: `hi`});"),
    ("spread", "js", "const r = await mcp.a({});\nawait mcp.b({...r, k: 2});"),
    (
        "typescript",
        "ts",
        "const r: Result = await mcp.fetch({url: 'u'});\nawait mcp.store({v: (r as Result).body});",
    ),
    (
        "python_keywords",
        "py",
        'r1 = await mcp.search(q="x")\npath = "a.json"\n'
        "r2 = mcp.read_file(path=path, body=f\"hi {r1['x']}\")\nmcp.other(r2.data, 3)\n",
    ),
    (
        "python_tuple_and_loop",
        "py",
        "a, b = mcp.pair()\nfor x in a:\n    mcp.use(v=x, w=b)\n",
    ),
    (
        "parallel_then_each",
        "js",
        'const [w, n] = await Promise.all([mcp.weather({city: "Paris"}), '
        'mcp.news({topic: "Paris"})]);\n'
        "await mcp.send({text: w.summary});\nawait mcp.post({item: n[0]});",
    ),
    (
        "subscript_names",
        "js",
        'const r = await mcp["resolve-library-id"]({libraryName: "react"});\n'
        'await tools.docs["get-library-docs"]({id: r.id});',
    ),
    (
        "python_subscript_names",
        "py",
        'r = await mcp["get-weather"](city="Paris")\nawait mcp["send-mail"](body=r["summary"])\n',
    ),
    (
        "sdk_client_python",
        "py",
        'r = await session.call_tool("get_weather", {"city": "Paris"})\n'
        'await session.call_tool(name="send_mail", arguments={"body": r.content})\n',
    ),
    (
        "sdk_client_js",
        "js",
        'const r = await client.callTool({name: "get-weather", arguments: {city: "Paris"}});\n'
        "await callMCPTool('google_drive__get_document', {id: r.structuredContent.id});",
    ),
    (
        "nested_chain",
        "js",
        "await mcp.a({v: await mcp.b({v: await mcp.c({v: 1})})});",
    ),
    (
        "reassigned_inside_own_call",
        "js",
        "let r = await mcp.a({});\nr = await mcp.b({x: await mcp.c({y: r})});\n"
        "await mcp.d({z: r});",
    ),
    (
        "while_loop_reads_earlier",
        "js",
        "const r = await mcp.list({});\nlet page = r.next;\n"
        "while (page) { const p = await mcp.page({cursor: page, q: r.query}); page = p.next; }",
    ),
    (
        "python_walrus_and_comprehension",
        "py",
        "if (r := mcp.list()):\n    out = [mcp.get(id=i) for i in r.items]\n"
        "    mcp.send(v=out, n=r.total)\n",
    ),
    (
        "rebinding_reads_itself_twice",
        "js",
        "let x = await mcp.b({});\n" + "x = [x.a, x.b];\n" * 7 + "await mcp.c({v: x});",
    ),
    (
        "destructuring_with_defaults",
        "js",
        "const {a = 1, b: {c = 2}, d: [e = 3]} = await mcp.x({});\n"
        "await mcp.y({p: a, q: c, r: e});",
    ),
    (
        "fan_out_over_a_field",
        "js",
        "const r = await mcp.list({});\n"
        "const xs = await Promise.all(r.items.map(i => mcp.get({id: i.id})));\n"
        "r.items.filter(i => i.ok).forEach(({id}) => mcp.tag({id}));\n"
        "await Promise.all(Object.keys(r.byName).map(k => mcp.find({name: k})));",
    ),
    (
        "method_on_a_field_reads_the_field",
        "js",
        "const r = await mcp.list({});\n"
        "await mcp.put({ids: r.items.map(i => i.id), n: r.items.length, "
        "s: r.name.toUpperCase()});",
    ),
    (
        "python_fan_out_over_a_field",
        "py",
        'r = await mcp.list()\nxs = [await mcp.get(id=i["id"]) for i in r["items"]]\n'
        'ys = await asyncio.gather(*[mcp.tag(id=i["id"]) for i in r["items"]])\n'
        'zs = map(lambda i: mcp.find(name=i), r["names"])\n'
        'mcp.put(s=r["title"].upper(), keys=sorted(r["items"], key=lambda i: i["rank"]))\n',
    ),
    (
        "calls_in_a_callback_given_to_a_call",
        "js",
        "const ids = await mcp.list({});\n"
        "await mcp.put({f: await Promise.all(ids.map(async (i) => {\n"
        "  const r = await mcp.get({id: i});\n  return r.body;\n})), "
        "g: xs.map(x => mcp.tag({x}))});",
    ),
    (
        "python_calls_in_a_comprehension_or_lambda_given_to_a_call",
        "py",
        "mcp.put(f=[mcp.get(id=i) for i in xs], g=list(map(lambda x: mcp.tag(x=x), xs)))",
    ),
    (
        "a_helpers_return_and_its_own_names",
        "js",
        "const r = await mcp.a({});\n"
        "async function load(id) { const r = await mcp.b({id}); return r.data; }\n"
        "const d = await load(1);\nawait mcp.c({x: r, y: d});",
    ),
    (
        "assigned_in_a_branch_or_added_to",
        "py",
        "r = mcp.a()\nif r['partial']:\n    r = mcp.b(page=2)\nout = []\n"
        "for i in xs:\n    out.append(mcp.get(id=i))\nfirst, *rest = mcp.c()\n"
        "mcp.put(x=r, y=out, z=rest)",
    ),
    ("unparsed", "js", "const r = await mcp.a({x: 1}; mcp.b(r)"),
    ("unparsed_subscript", "js", 'const r = await mcp["get-weather"]({city: "Paris"}; mcp.b(r)'),
    (
        "promise_then_reads_the_value",
        "js",
        'const n = await mcp.search({q: "x"}).then(({total}) => total);\n'
        "const d = await mcp.get({id: 1}).then(r => r.body);\n"
        "await mcp.report({n, d});",
    ),
    (
        "else_reads_what_the_name_held_before_the_if",
        "python",
        'r = mcp.search(q="x")\nif c:\n    r = mcp.retry(q="y")\nelse:\n    mcp.log(v=r)\n'
        "mcp.send(v=r)",
    ),
    (
        "except_reads_either_value",
        "python",
        'r = mcp.search(q="x")\ntry:\n    r = mcp.retry(q="y")\nexcept E:\n    mcp.log(v=r)',
    ),
    (
        "global_assigned_in_a_function",
        "python",
        'r = None\ndef load():\n    global r\n    r = mcp.search(q="x")\nload()\nmcp.send(v=r)',
    ),
    (
        "import_rebinds_a_name",
        "python",
        'r = mcp.search(q="x")\nfrom json import loads as r\nmcp.send(v=r)',
    ),
    (
        "del_unbinds_a_name",
        "python",
        'r = mcp.search(q="x")\ndel r\nmcp.send(v=r)',
    ),
    (
        "finally_always_assigns",
        "python",
        'r = mcp.search(q="x")\ntry:\n    x = 1\nfinally:\n    r = mcp.retry(q="y")\nmcp.send(v=r)',
    ),
    (
        "else_reads_what_the_body_gave",
        "python",
        'r = mcp.search(q="x")\ntry:\n    r = mcp.retry(q="y")\nexcept E:\n    pass\n'
        "else:\n    mcp.send(v=r)",
    ),
    (
        "try_without_catch_assigns_once_done",
        "js",
        'let r = await mcp.search({q: "x"});\ntry { r = await mcp.retry({q: "y"}); } '
        "finally { done(); }\nawait mcp.send({v: r});",
    ),
]


def steps_of(code: str, language: str) -> list[dict[str, Any]]:
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


def main() -> None:
    vectors = [
        {"name": name, "language": language, "code": code, "steps": steps_of(code, language)}
        for name, language, code in CASES
    ]
    out = {
        "description": "Golden vectors of pml step and data-flow extraction; see "
        "docs/normalization.md, Steps. Step indexes and depends_on count from 0.",
        "vectors": vectors,
    }
    (HERE / "steps.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
