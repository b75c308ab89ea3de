"""Rewrite `normalization.json` from the cases below and the current normalizer.

Run after a deliberate rule change (with NORMALIZER_VERSION bumped), then review the diff by
hand: every expected template, name and flag in the file is part of the contract. The
`same_hash_as` / `differs_from` relations are checked here and again by both replays, so a
regeneration cannot silently turn a "same" pair into a "different" one.

    .venv/bin/python tests/vectors/regenerate.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pml_server import _core

HERE = Path(__file__).resolve().parent

# (name, language, code, same_hash_as, differs_from)
Case = tuple[str, str, str, str | None, list[str]]

SEED = 'const x = await mcp.read_file({path: "a.json"})'

CASES: list[Case] = [
    ("seed_a", "js", SEED, None, []),
    ("seed_b", "js", 'const x = await mcp.read_file({path: "b.json"})', "seed_a", []),
    ("seed_quotes", "js", "const x = await mcp.read_file({path: 'c.json'})", "seed_a", []),
    (
        "seed_formatting",
        "javascript",
        "// read it\nconst x =\n  await mcp.read_file( { path: 'd.json', } ) /* done */\n",
        "seed_a",
        [],
    ),
    ("seed_renamed", "js", "const data = await mcp.read_file({path: 'a.json'})", "seed_a", []),
    ("seed_as_python_language", "py", SEED, None, ["seed_a"]),
    ("seed_as_typescript", "ts", SEED, None, ["seed_a"]),
    ("other_tool", "js", "const x = await mcp.write_file({path: 'a.json'})", None, ["seed_a"]),
    ("other_key", "js", "const x = await mcp.read_file({file: 'a.json'})", None, ["seed_a"]),
    ("variable_not_literal", "js", "const x = await mcp.read_file({path: p})", None, ["seed_a"]),
    ("number_not_string", "js", "const x = await mcp.read_file({path: 1})", None, ["seed_a"]),
    (
        "key_order_a",
        "js",
        "await mcp.write_file({path: 'out.csv', content: text, overwrite: true})",
        None,
        [],
    ),
    (
        "key_order_b",
        "js",
        "await mcp.write_file({overwrite: true, content: text, path: 'other.csv'})",
        "key_order_a",
        [],
    ),
    (
        "boolean_differs",
        "js",
        "await mcp.write_file({path: 'out.csv', content: text, overwrite: false})",
        None,
        ["key_order_a"],
    ),
    (
        "null_differs",
        "js",
        "await mcp.write_file({path: 'out.csv', content: text, overwrite: null})",
        None,
        ["key_order_a", "boolean_differs"],
    ),
    (
        "two_calls",
        "js",
        "const raw = await mcp.read_file({path: 'in.json'});\n"
        "const rows = JSON.parse(raw).items.filter(r => r.size > 100);\n"
        "await mcp.write_file({path: 'out.json', content: JSON.stringify(rows)});\n",
        None,
        [],
    ),
    (
        "two_calls_renamed",
        "js",
        "const text = await mcp.read_file({path: 'a.json'})\n"
        "const kept = JSON.parse(text).items.filter(item => item.size > 5)\n"
        "await mcp.write_file({content: JSON.stringify(kept), path: 'b.json'})\n",
        "two_calls",
        [],
    ),
    (
        "two_calls_swapped_operator",
        "js",
        "const raw = await mcp.read_file({path: 'in.json'});\n"
        "const rows = JSON.parse(raw).items.filter(r => r.size < 100);\n"
        "await mcp.write_file({path: 'out.json', content: JSON.stringify(rows)});\n",
        None,
        ["two_calls"],
    ),
    (
        "control_flow",
        "js",
        "for (const f of files) { await mcp.read_file({path: f}) }",
        None,
        [],
    ),
    (
        "control_flow_other",
        "js",
        "if (files.length) { await mcp.read_file({path: files[0]}) }",
        None,
        ["control_flow"],
    ),
    ("order_ab", "js", "await mcp.a(); await mcp.b();", None, []),
    ("order_ba", "js", "await mcp.b(); await mcp.a();", None, ["order_ab"]),
    ("count_aab", "js", "await mcp.a(); await mcp.a(); await mcp.b();", None, ["order_ab"]),
    (
        "dispatch_call",
        "js",
        'const r = await mcp.call("read_file", {path: "a.json"});',
        None,
        ["seed_a"],
    ),
    (
        "dispatch_other_tool",
        "js",
        'const r = await mcp.call("write_file", {path: "a.json"});',
        None,
        ["dispatch_call"],
    ),
    (
        "subscript_tool",
        "js",
        'const r = await mcp["get-weather"]({city: "Paris"});',
        None,
        [],
    ),
    (
        "subscript_other_tool",
        "js",
        'const r = await mcp["get-news"]({city: "Paris"});',
        None,
        ["subscript_tool"],
    ),
    (
        "sdk_client_tool",
        "py",
        'r = await session.call_tool("get_weather", {"city": "Paris"})',
        None,
        [],
    ),
    (
        "sdk_client_other_tool",
        "py",
        'r = await session.call_tool("get_news", {"city": "Paris"})',
        None,
        ["sdk_client_tool"],
    ),
    (
        "sdk_client_tool_js",
        "js",
        'const r = await client.callTool({name: "get-weather", arguments: {city: "Paris"}});',
        None,
        [],
    ),
    (
        "sdk_client_other_tool_js",
        "js",
        'const r = await client.callTool({name: "get-news", arguments: {city: "Paris"}});',
        None,
        ["sdk_client_tool_js"],
    ),
    (
        "subscript_tool_python",
        "py",
        'r = await tools.weather["get-forecast"](city="Paris", days=3)',
        None,
        [],
    ),
    (
        "server_namespaced",
        "ts",
        "const msgs: Message[] = await mcp.gmail.search({query: 'from:boss', maxResults: 10});\n"
        "await mcp.notion.create_page("
        "{title: `Digest`, body: msgs.map(m => m.subject).join('\\n')});",
        None,
        [],
    ),
    (
        "names_from_context",
        "js",
        "const limit = 5;\nlet ratio = 0.75;\nconst offset = -1;\n"
        "await mcp.search('cats', limit, {sortBy: 'date', tags: ['a', 'b']});\n"
        "opts.retryCount = 3;\nfunction page(size = 20) { return size }\nlog('done', 'x');\n",
        None,
        [],
    ),
    (
        "strings_kept_as_code",
        "js",
        "import fs from 'node:fs';\nconst m = require('path');\n"
        "const v = obj['field'];\n'use strict';\nswitch (k) { case 'a': f(k) }",
        None,
        [],
    ),
    (
        "escapes_decoded",
        "js",
        "f('tab\\there', \"\\u00e9t\\u00e9\", `multi\nline`, 0x1F, 1_000, 2.5e3)",
        None,
        [],
    ),
    (
        "unicode_offsets",
        "js",
        "const café = 'crème brûlée 🍮'; mcp.note({text: café, tag: 'ünï'})",
        None,
        [],
    ),
    (
        "secrets",
        "js",
        "await mcp.http.get({url: 'https://api.example.com/v1/items?limit=10', "
        "headers: {Authorization: 'Bearer abcdef123456', 'X-Api-Key': 'k1'}, "
        "password: 'hunter2', note: 'ghp_0123456789abcdefghijklmnopqrstuvwxyz', "
        "jwt: 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dGhpc2lzYXNpZ25hdHVyZQ', "
        "blob: 'q8Zr3VxT0pLk2WmN7sYb4HdJ9fGc', id: '550e8400-e29b-41d4-a716-446655440000', "
        "maxTokens: 100})",
        None,
        [],
    ),
    (
        "url_passwords",
        "js",
        "// primary postgresql://admin:Tr0ub4dor&3-horse@db.internal:5432/prod\n"
        "await mcp.query({dsn: 'postgresql://admin:Tr0ub4dor&3-horse@db.internal:5432/prod', "
        "mirror: 'redis://:p@ss@cache:6379/0', repo: 'ssh://git@github.com/a/b', "
        "site: 'https://example.com/a:b@c'})",
        None,
        [],
    ),
    (
        "schema_formats",
        "js",
        "mcp.send({to: 'ann@example.org', at: '2024-05-01T10:00:00Z', day: '2024-05-01', "
        "link: 'https://example.org/a', file: '../data/report.csv', count: 3, ratio: 0.5, "
        "label: 'plain'})",
        None,
        [],
    ),
    (
        "py_seed",
        "python",
        'x = await tools.read_file(path="a.json")\n',
        None,
        ["seed_a"],
    ),
    (
        "py_seed_variant",
        "py",
        "# read the file\ndata = await tools.read_file(path='zz.json')  # inline\n",
        "py_seed",
        [],
    ),
    (
        "py_fstring_without_field",
        "py",
        "x = await tools.read_file(path=f'b.json')\n",
        "py_seed",
        [],
    ),
    (
        "py_fstring_with_field",
        "py",
        "x = await tools.read_file(path=f'{d}.json')\n",
        None,
        ["py_seed"],
    ),
    (
        "shell_mysql_password",
        "bash",
        "mysql -h db -u root -p'S3cret-1' shop < dump.sql && mkdir -p out\n",
        None,
        [],
    ),
    (
        "shell_mysql_other_password",
        "bash",
        'mysql -h db -u root -p"An0ther 2" shop < dump.sql && mkdir -p out\n',
        "shell_mysql_password",
        [],
    ),
    (
        "py_kwarg_order_a",
        "py",
        "await tools.write_file(path='o.txt', content=body, mode='w')\n",
        None,
        [],
    ),
    (
        "py_kwarg_order_b",
        "py",
        "await tools.write_file(mode='a', path='p.txt', content=body)\n",
        "py_kwarg_order_a",
        [],
    ),
    (
        "py_block",
        "py",
        "for f in files:\n    if f.endswith('.csv'):\n        rows = await tools.read_csv(path=f)\n"
        "    print(f)\n",
        None,
        [],
    ),
    (
        "py_block_indent_differs",
        "py",
        "for f in files:\n    if f.endswith('.csv'):\n        rows = await tools.read_csv(path=f)\n"
        "        print(f)\n",
        None,
        ["py_block"],
    ),
    (
        "py_names",
        "py",
        'def fetch(url, retries=3, *, timeout=2.5):\n    """Docstrings are not parameters."""\n'
        '    return tools.call("http:get", url=url, headers={"api_key": "abc", "accept": "json"})\n'
        "limit = 10\nconfig.batch_size = 64\nitems = [1, 2]\nprint('hi', -4, None, True)\n"
        "name = f'{limit} items'\nraw = rb'\\x00'\nkey = d['key']\n",
        None,
        [],
    ),
    (
        "fallback_syntax_error",
        "js",
        "const x = await mcp.read_file({path: 'a.json'}",
        None,
        ["seed_a"],
    ),
    (
        "fallback_unknown_language",
        "Rust",
        'fn main() {\n    let path = "a.json"; // comment\n    read(path, 42);\n}\n',
        None,
        [],
    ),
    (
        "fallback_unknown_language_variant",
        "rust",
        "fn main() { let path = 'b.txt'; read(path, 7); }",
        "fallback_unknown_language",
        [],
    ),
    ("fallback_too_deep", "js", "f(" + "[" * 300 + "1" + "]" * 300 + ")", None, []),
]


def _expected(n: Any) -> dict[str, Any]:
    return {
        "language": n.language,
        "template": n.template,
        "code_hash": n.code_hash,
        "params": [
            {
                "name": p.name,
                "json_type": p.json_type,
                "value_json": p.value_json,
                "start": p.start,
                "end": p.end,
                "secret": p.secret,
            }
            for p in n.params
        ],
        "tool_calls": list(n.tool_calls),
        "parse_ok": n.parse_ok,
        "fallback_reason": n.fallback_reason,
        "schema": json.loads(n.schema_json),
    }


def build() -> dict[str, Any]:
    vectors = []
    hashes: dict[str, str] = {}
    for name, language, code, same_as, differs in CASES:
        n = _core.normalize(code, language)
        hashes[name] = n.code_hash
        if same_as is not None and hashes[same_as] != n.code_hash:
            raise SystemExit(f"{name}: expected the hash of {same_as}")
        for other in differs:
            if hashes[other] == n.code_hash:
                raise SystemExit(f"{name}: expected a hash different from {other}")
        vector: dict[str, Any] = {"name": name, "language": language, "code": code}
        if same_as is not None:
            vector["same_hash_as"] = same_as
        if differs:
            vector["differs_from"] = differs
        vector["expected"] = _expected(n)
        vectors.append(vector)
    return {
        "description": "Golden vectors of pml code normalization; see docs/normalization.md.",
        "normalizer_version": _core.NORMALIZER_VERSION,
        "vectors": vectors,
    }


if __name__ == "__main__":
    out = HERE / "normalization.json"
    out.write_text(json.dumps(build(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {out}")
