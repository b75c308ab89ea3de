"""An older build named a placeholder after a credential found in an object key (docs/
normalization.md, Placeholder names): opening the store renames every such pattern's
placeholders once, in its template, parameters, schema and counters, on the embedded RocksDB
store and on the shared PostgreSQL store."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from pml_server import _core
from pml_server.domain.model import SuggestQuery
from pml_server.domain.records import FailureSignature
from pml_server.service import Engine
from pml_server.storage.keys import CF_META, COLUMN_FAMILIES
from pml_server.storage.repo._meta import _PLACEHOLDERS_KEY as PLACEHOLDERS_KEY
from tests.support import files_holding, make_record, open_engine

T = "t"
SECRET = "HUNTER2PW"
CODE = 'const r0 = await mcp.query_db({"https://admin:hunter2pw@db.internal": 1, path: "a.json"});'
INTENT = "count the rows of the orders table in the production database"
NEW = "$HTTPS_REDACTED_DB_INTERNAL"
OLD = "$HTTPS_ADMIN_HUNTER2PW_DB_INTERNAL"  # the name an older build gave it


def _plant_old_names(engine: Engine, pattern_id: str) -> None:
    """Rewrite the stored pattern and counters as the older build wrote them (it wrote no
    marker either)."""
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, pattern_id)
    counters = repo.patterns.counters(T, pattern_id)
    assert pattern is not None
    assert counters is not None
    assert NEW in pattern.template
    assert NEW in counters.recent_values
    old = replace(
        pattern,
        template=pattern.template.replace(NEW, OLD),
        params=tuple(replace(p, name=p.name.replace(NEW, OLD)) for p in pattern.params),
        parameter_schema_json=pattern.parameter_schema_json.replace(NEW, OLD),
    )
    recent = {k.replace(NEW, OLD): v for k, v in counters.recent_values.items()}
    failed = FailureSignature("sig", "query_db", "timeout", 1, 1, {OLD: "1", "$PATH": '"a"'})
    old_counters = replace(counters, recent_values=recent, failure_signatures=[failed])
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, old),
            repo.patterns.put_counters(T, pattern_id, old_counters),
            (CF_META, PLACEHOLDERS_KEY, None),
        ]
    )


def _stored_rows_holding(engine: Engine, secret: str, dsn: str | None) -> list[str]:
    """Where any stored row holds `secret` (any case): every column family of the embedded
    store, or every cell of every table of the shared one."""
    wanted = secret.encode()
    if dsn is None:
        store = engine._state.store
        return [
            cf
            for cf in COLUMN_FAMILIES
            for key, value in store.scan(cf, b"")
            if wanted in key.upper() or wanted in value.upper()
        ]
    found = []
    with psycopg.connect(dsn) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        ).fetchall()
        assert len(tables) > len(COLUMN_FAMILIES) // 2, tables  # the store's tables
        for (table,) in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                cells = [c if isinstance(c, bytes) else str(c).encode() for c in row]
                found += [table for c in cells if wanted in c.upper()]
    return found


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_an_older_builds_secret_placeholder_names_are_renamed_once_at_open(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    dsn = request.getfixturevalue("postgres_dsn") if store == "postgresql" else None
    overrides = {"store": dsn} if dsn else {}
    engine = open_engine(tmp_path / "e", **overrides)
    assert engine.admin.wait_placeholders_renamed(60) == 0  # a new store: nothing to rename
    result = engine.record(T, make_record("r1", INTENT, ["query_db"], code=CODE))
    pattern_id = result.pattern_id
    _plant_old_names(engine, pattern_id)
    assert _stored_rows_holding(engine, SECRET, dsn)  # the older build's store
    engine.close()

    engine = open_engine(tmp_path / "e", **overrides)
    try:
        assert engine.admin.wait_placeholders_renamed(60) == 1
        assert _stored_rows_holding(engine, SECRET, dsn) == []
        view = engine.get_pattern(T, pattern_id)
        assert [p.name for p in view.params] == [NEW, "$PATH"]
        assert NEW in view.template
        assert NEW in view.parameter_schema_json
        assert view.params[0].recent_values_json == ("1",)  # the values followed the rename
        counters = engine._state.repo.patterns.counters(T, pattern_id)
        assert counters is not None
        assert counters.failure_signatures[0].values_json == {NEW: "1", "$PATH": '"a"'}
        found = engine.suggest(T, SuggestQuery(intent=INTENT))
        assert [s.pattern.id for s in found.suggestions] == [pattern_id]
        assert [p.name for p in found.suggestions[0].pattern.params] == [NEW, "$PATH"]
        audit = engine.admin.audit_log(T)
        assert [e["pattern_id"] for e in audit if e["action"] == "placeholders_renamed"] == [
            pattern_id
        ]
    finally:
        engine.close()

    engine = open_engine(tmp_path / "e", **overrides)  # the marker: nothing runs again
    try:
        assert engine.admin.wait_placeholders_renamed(60) == 0
        assert engine._state.repo.meta.placeholders_renamed()
        audit = engine.admin.audit_log(T)
        assert sum(e["action"] == "placeholders_renamed" for e in audit) == 1
    finally:
        engine.close()


def test_an_older_builds_secret_leaves_the_embedded_stores_files(tmp_path: Path) -> None:
    """Rewriting a row leaves its older value in RocksDB's table files until a compaction
    rewrites them: the pass ends by rewriting them, so the older build's secret is gone from
    the disk, not only from what a read returns."""
    engine = open_engine(tmp_path / "e")
    assert engine.admin.wait_placeholders_renamed(60) == 0
    pattern_id = engine.record(T, make_record("r1", INTENT, ["query_db"], code=CODE)).pattern_id
    _plant_old_names(engine, pattern_id)
    engine.close()
    assert files_holding(tmp_path / "e", SECRET)  # the older build's store, on disk

    engine = open_engine(tmp_path / "e")
    try:
        assert engine.admin.wait_placeholders_renamed(60) == 1
        assert _stored_rows_holding(engine, SECRET, None) == []
        assert files_holding(tmp_path / "e", SECRET) == []  # while serving, not only at close
        found = engine.suggest(T, SuggestQuery(intent=INTENT))
        assert [s.pattern.id for s in found.suggestions] == [pattern_id]
    finally:
        engine.close()
    assert files_holding(tmp_path / "e", SECRET) == []


TOKEN = "QTOK7F3A9C2E"
QUERY_CODE = (
    'const r0 = await mcp.fetch_report({url: "https://api.example.com/v1/report?access_token='
    + TOKEN.lower()
    + '&day=1"});'
)


def test_an_older_builds_url_query_token_is_redacted_once_at_open(tmp_path: Path) -> None:
    """An older build kept a credential in a URL query (`?access_token=...`) in the stored
    code and as the URL parameter's recent value; the next open rewrites both."""
    engine = open_engine(tmp_path / "e")
    assert engine.admin.wait_placeholders_renamed(60) == 0
    result = engine.record(T, make_record("r1", INTENT, ["fetch_report"], code=QUERY_CODE))
    pattern_id = result.pattern_id
    assert _stored_rows_holding(engine, TOKEN, None) == []  # today's capture keeps none
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, pattern_id)
    counters = repo.patterns.counters(T, pattern_id)
    assert pattern is not None
    assert counters is not None
    url = pattern.params[0].name
    old = replace(  # as the older build wrote it: the code whole, the URL no secret
        pattern,
        original_code=QUERY_CODE,
        params=tuple(replace(p, secret=False) for p in pattern.params),
    )
    old_counters = replace(counters, recent_values={url: [QUERY_CODE.split('"')[1].join('""')]})
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, old),
            repo.patterns.put_counters(T, pattern_id, old_counters),
            (CF_META, PLACEHOLDERS_KEY, None),
        ]
    )
    assert _stored_rows_holding(engine, TOKEN, None)
    engine.close()

    engine = open_engine(tmp_path / "e")
    try:
        assert engine.admin.wait_placeholders_renamed(60) == 1
        assert _stored_rows_holding(engine, TOKEN, None) == []
        view = engine.get_pattern(T, pattern_id)
        assert view.params[0].secret
        assert view.original_code == pattern.original_code  # as today's capture stores it
    finally:
        engine.close()


SHELL_SECRET = "HUNTER2CORRAL"
SHELL_CODE = f"export API_KEY={SHELL_SECRET.lower()}\ncurl -s https://api.example.com/v1/report"


def test_an_older_builds_shell_credential_is_redacted_once_at_open(tmp_path: Path) -> None:
    """An older build kept a credential written unquoted in shell code (`export API_KEY=...`)
    in the template and the stored code; the next open rewrites the pattern as today's
    capture stores it (docs/storage.md, Migrations)."""
    engine = open_engine(tmp_path / "e")
    assert engine.admin.wait_placeholders_renamed(60) == 0
    record = replace(make_record("r1", INTENT, ["fetch_report"], code=SHELL_CODE), language="bash")
    pattern_id = engine.record(T, record).pattern_id
    assert _stored_rows_holding(engine, SHELL_SECRET, None) == []  # today's capture keeps none
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, pattern_id)
    assert pattern is not None
    assert pattern.template == SHELL_CODE.replace(SHELL_SECRET.lower(), "$API_KEY")
    old = replace(  # as the older build wrote it: the credential was code
        pattern, original_code=SHELL_CODE, template=SHELL_CODE, params=()
    )
    engine._state.store.write(
        [repo.patterns.put_pattern(T, old), (CF_META, PLACEHOLDERS_KEY, None)]
    )
    assert _stored_rows_holding(engine, SHELL_SECRET, None)
    engine.close()

    engine = open_engine(tmp_path / "e")
    try:
        assert engine.admin.wait_placeholders_renamed(60) == 1
        assert _stored_rows_holding(engine, SHELL_SECRET, None) == []
        view = engine.get_pattern(T, pattern_id)
        assert view.template == pattern.template
        assert [(p.name, p.secret) for p in view.params] == [("$API_KEY", True)]
    finally:
        engine.close()


FSTRING_SECRET = "HUNTER2STABLE"
FSTRING_CODE = f'r = await mcp.login(user=name, token=f"{{prefix}}-{FSTRING_SECRET.lower()}")'


def test_an_older_builds_interpolated_credential_is_redacted_once_at_open(tmp_path: Path) -> None:
    """An older build kept the literal text of an f-string given as a credential
    (`token=f"{prefix}..."`) in the template and the stored code, and marked its store
    `placeholders_renamed/4`; the next open rewrites the pattern as today's capture stores it,
    under the same hash (docs/storage.md, Migrations)."""
    engine = open_engine(tmp_path / "e")
    assert engine.admin.wait_placeholders_renamed(60) == 0
    record = replace(make_record("r1", INTENT, ["login"], code=FSTRING_CODE), language="python")
    pattern_id = engine.record(T, record).pattern_id
    assert _stored_rows_holding(engine, FSTRING_SECRET, None) == []  # today's capture keeps none
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, pattern_id)
    assert pattern is not None
    assert 'token=f"{prefix}[REDACTED]"' in pattern.template
    old = replace(pattern, original_code=FSTRING_CODE, template=FSTRING_CODE)
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, old),
            (CF_META, PLACEHOLDERS_KEY, None),
            (CF_META, b"placeholders_renamed/4", b"1"),  # the marker that build wrote
        ]
    )
    assert _stored_rows_holding(engine, FSTRING_SECRET, None)
    engine.close()

    engine = open_engine(tmp_path / "e")
    try:
        assert engine.admin.wait_placeholders_renamed(60) == 1
        assert _stored_rows_holding(engine, FSTRING_SECRET, None) == []
        view = engine.get_pattern(T, pattern_id)
        assert view.template == pattern.template
        assert view.code_hash == pattern.code_hash
    finally:
        engine.close()


# Credentials an older build kept as parameters not flagged secret, each with the marker
# that build wrote and what today's capture stores in its place.
OLDER_SECRETS = [
    pytest.param(  # a literal piece of the value (`password="..." + suffix`)
        "HUNTER2JOINED",
        'r = await mcp.login(user=name, password="hunter2joined" + suffix)',
        5,
        'password="[REDACTED]" + suffix',
        id="joined",
    ),
    pytest.param(  # joined or formatted into the value (`"".join(["...", x])`)
        "HUNTER2FORMATTED",
        'r = await mcp.login(user=name, password="".join(["hunter2formatted", x]))',
        6,
        'password="".join(["[REDACTED]", x])',
        id="formatted",
    ),
    pytest.param(  # a variable a formatting call formats into the value (`fmt.format(x)`)
        "HUNTER2VARIABLE",
        'fmt = "hunter2variable{}"\nr = await mcp.login(user=name, password=fmt.format(x))',
        7,
        'fmt = "[REDACTED]"',
        id="variable",
    ),
    pytest.param(  # a variable sliced or subscripted into the value (`pw[:8]`)
        "HUNTER2SLICED",
        'pw = "hunter2sliced"\nr = await mcp.login(user=name, password=pw[:8].strip())',
        8,
        'pw = "[REDACTED]"',
        id="sliced",
    ),
    pytest.param(  # read from a map written in place, interpolated (`f"{ {...}['k'] }"`)
        "HUNTER2MAPREAD",
        "r = await mcp.login(user=name, password=f\"{ {'k': 'hunter2mapread'}['k'] }\")",
        9,
        "{'k': \"[REDACTED]\"}['k']",
        id="map_read",
    ),
    pytest.param(  # interpolated where a URL's password goes (`f"pg://bob:{pw}@db"`)
        "HUNTER2URLPASS",
        'db_pass = "hunter2urlpass"\nr = await mcp.connect(dsn=f"postgresql://bob:{db_pass}@db/x")',
        9,
        'db_pass = "[REDACTED]"',
        id="url_password",
    ),
    pytest.param(  # named by a short word as its name's last (`db_pass=...`)
        "HUNTER2SHORTNAME",
        'r = await mcp.login(user=name, db_pass="hunter2shortname")',
        11,  # the marker of the build before this rule (docs/storage.md, Migrations)
        'db_pass="[REDACTED]"',
        id="short_name",
    ),
    pytest.param(  # a field named as a credential in a string (a JSON body, a header line)
        "HUNTER2JSONBODY",
        'r = await mcp.post(url=u, data=\'{"user": "bob", "password": "hunter2jsonbody"}\')',
        12,  # the marker of the build before this rule (docs/storage.md, Migrations)
        'data="[REDACTED]"',
        id="field_in_string",
    ),
    pytest.param(  # interpolated where a credential's value goes (`f"password={x}"`)
        "HUNTER2TEMPLATE",
        'x = "hunter2template"\nr = await mcp.query(q=f"host=db password={x}")',
        13,  # the marker of the build before this rule (docs/storage.md, Migrations)
        'x = "[REDACTED]"',
        id="template_value",
    ),
    pytest.param(  # a password in a literal argv list (`["mysql", "-p..."]`)
        "HUNTER2ARGVLIST",
        'r = subprocess.run(["mysql", "-phunter2argvlist", "db"])\n'
        "await mcp.login(user=name, out=r)",
        14,  # the marker of the build before this rule (docs/storage.md, Migrations)
        '["mysql", "[REDACTED]", "db"]',
        id="argv_list",
    ),
    pytest.param(  # a webhook URL, whose path is its credential
        "HUNTER2WEBHOOKXXXXXXXX",
        'r = await mcp.notify(url="https://hooks.slack.com/services/T0000000/B0000000/'
        'hunter2webhookxxxxxxxx")',
        14,
        'url="[REDACTED]"',
        id="webhook",
    ),
    pytest.param(  # a JDBC password in jaydebeapi's `[user, password]` pair
        "HUNTER2JDBCPAIR",
        'c = jaydebeapi.connect("org.h2.Driver", "jdbc:h2:mem:x", ["bob", "hunter2jdbcpair"])\n'
        "await mcp.login(user=name, out=c)",
        15,
        '["bob", "[REDACTED]"]',
        id="jdbc_pair",
    ),
    pytest.param(  # the same pair given to jaydebeapi's `connect` imported alone
        "HUNTER2JDBCFROM",
        "from jaydebeapi import connect\n"
        'c = connect("org.h2.Driver", url, ["bob", "hunter2jdbcfrom"])\n'
        "await mcp.login(user=name, out=c)",
        16,
        '["bob", "[REDACTED]"]',
        id="jdbc_pair_imported",
    ),
    pytest.param(  # the pair assigned to a variable, then given as `driver_args`
        "HUNTER2JDBCVAR",
        'creds = ["bob", "hunter2jdbcvar"]\nc = jaydebeapi.connect(d, url, creds)\n'
        "await mcp.login(user=name, out=c)",
        17,  # the marker of the build before this rule (docs/storage.md, Migrations)
        'creds = ["bob", "[REDACTED]"]',
        id="jdbc_pair_variable",
    ),
    pytest.param(  # set after a string naming a credential (`setattr(o, "password", ...)`)
        "HUNTER2SETATTR",
        'setattr(cfg, "password", "hunter2setattr")\nawait mcp.login(user=name, cfg=cfg)',
        17,
        'setattr(cfg, "password", "[REDACTED]")',
        id="setattr",
    ),
    pytest.param(  # an environment lookup's default given as a credential
        "HUNTER2GETENV",
        'await mcp.login(user=name, api_key=os.getenv("K", "hunter2getenv"))',
        17,
        'os.getenv("K", "[REDACTED]")',
        id="env_default",
    ),
    pytest.param(  # a password in a string of SQL
        "HUNTER2SQLROLE",
        "await mcp.query(user=name, sql=\"ALTER ROLE bob PASSWORD 'hunter2sqlrole'\")",
        17,
        'sql="[REDACTED]"',
        id="sql_password",
    ),
    pytest.param(  # a password a string writes in prose after its name and a link word
        "HUNTER2PROSE9",
        'await mcp.send_email(to="admin", body="my password is Hunter2prose9")',
        18,  # the marker of the build before this rule (docs/storage.md, Migrations)
        'body="[REDACTED]"',
        id="prose_password",
    ),
]


@pytest.mark.parametrize(("secret", "code", "marker", "stored"), OLDER_SECRETS)
def test_an_older_builds_credential_is_redacted_once_at_open(
    tmp_path: Path, secret: str, code: str, marker: int, stored: str
) -> None:
    """An older build kept a literal of a credential's value as a parameter not flagged secret,
    in the stored code and the parameter's recent values, and marked its store
    `placeholders_renamed/<marker>`; the next open rewrites the pattern as today's capture
    stores it, under the same hash (docs/storage.md, Migrations)."""
    engine = open_engine(tmp_path / "e")
    assert engine.admin.wait_placeholders_renamed(60) == 0
    record = replace(make_record("r1", INTENT, ["login"], code=code), language="python")
    pattern_id = engine.record(T, record).pattern_id
    assert _stored_rows_holding(engine, secret, None) == []  # today's capture keeps none
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, pattern_id)
    counters = repo.patterns.counters(T, pattern_id)
    assert pattern is not None
    assert counters is not None
    assert stored in pattern.original_code
    params = [(p.name, p.secret) for p in pattern.params]
    secret_names = [name for name, is_secret in params if is_secret]
    assert len(secret_names) == 1
    # as the older build wrote it: the code as run, the literal no secret, its value kept
    old = replace(
        pattern,
        original_code=code,
        params=tuple(replace(p, secret=False) for p in pattern.params),
        parameter_schema_json=pattern.parameter_schema_json.replace(',"writeOnly":true', ""),
    )
    recent = {secret_names[0]: [f'"{secret.lower()}"']}
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, old),
            repo.patterns.put_counters(T, pattern_id, replace(counters, recent_values=recent)),
            (CF_META, PLACEHOLDERS_KEY, None),
            (CF_META, f"placeholders_renamed/{marker}".encode(), b"1"),  # that build's marker
        ]
    )
    assert _stored_rows_holding(engine, secret, None)
    engine.close()

    engine = open_engine(tmp_path / "e")
    try:
        assert engine.admin.wait_placeholders_renamed(60) == 1
        assert _stored_rows_holding(engine, secret, None) == []
        view = engine.get_pattern(T, pattern_id)
        assert view.template == pattern.template
        assert view.code_hash == pattern.code_hash
        assert [(p.name, p.secret) for p in view.params] == params
    finally:
        engine.close()


# (code, the word an older build read as a credential, the name it gave it, the marker it
# wrote, the parameters once the pass has run)
NO_CREDENTIAL_WORDS = [
    (
        "echo hunter2stdin | docker login -u bob --password-stdin quay.io",
        "quay.io",
        "$PASSWORD_STDIN",
        b"placeholders_renamed/7",
        [("$STR", True), ("$STR_2", False)],
    ),
    (
        "sudo -u postgres psql --password mydb",
        "mydb",
        "$PASSWORD",
        b"placeholders_renamed/9",
        [("$STR", True)],  # the older build's "[REDACTED]" stays, and so does its flag
    ),
]


@pytest.mark.parametrize(("code", "word", "old_name", "marker", "params"), NO_CREDENTIAL_WORDS)
def test_an_older_builds_word_after_a_flag_that_takes_none_is_renamed_once_at_open(
    tmp_path: Path,
    code: str,
    word: str,
    old_name: str,
    marker: bytes,
    params: list[tuple[str, bool]],
) -> None:
    """An older build read the word after a credential's flag that takes no value as a
    credential: the registry after `--password-stdin`, the database after `--password` of
    `psql` run by `sudo`; `"[REDACTED]"` in the stored code, named and flagged so in the
    template, and marked its store. Today the word is kept; it is a parameter as it was, so
    the code hashes as before: the next open names the pattern's placeholder as today's
    capture does, and a run of the code finds the pattern (docs/normalization.md, Secrets;
    docs/storage.md, Migrations)."""
    engine = open_engine(tmp_path / "e")
    assert engine.admin.wait_placeholders_renamed(60) == 0
    record = replace(make_record("r1", INTENT, ["docker"], code=code), language="bash")
    pattern_id = engine.record(T, record).pattern_id
    assert _stored_rows_holding(engine, "HUNTER2STDIN", None) == []
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, pattern_id)
    assert pattern is not None
    assert pattern.original_code == code.replace("hunter2stdin", '"[REDACTED]"')
    assert pattern.template.endswith(" $STR")
    assert (pattern.params[-1].name, pattern.params[-1].secret) == ("$STR", False)
    # as the older build wrote it: the word redacted, named and flagged as a credential
    schema = json.loads(pattern.parameter_schema_json)
    schema["properties"] = {old_name: {**schema["properties"]["$STR"], "writeOnly": True}}
    schema["required"] = [old_name]
    old = replace(
        pattern,
        original_code=pattern.original_code.replace(word, '"[REDACTED]"'),
        template=pattern.template.replace("$STR", old_name),
        params=(replace(pattern.params[0], name=old_name, secret=True),),
        parameter_schema_json=json.dumps(schema, sort_keys=True, separators=(",", ":")),
    )
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, old),
            (CF_META, PLACEHOLDERS_KEY, None),
            (CF_META, marker, b"1"),  # the marker that build wrote
        ]
    )
    engine.close()

    engine = open_engine(tmp_path / "e")
    try:
        assert engine.admin.wait_placeholders_renamed(60) == 1
        view = engine.get_pattern(T, pattern_id)
        # as today's normalizer reads the stored code (an echoed password is a quoted
        # "[REDACTED]" there, a parameter of its own), the word no credential's
        assert view.template == _core.normalize(old.original_code, "bash").template
        assert old_name not in view.template
        assert view.code_hash == pattern.code_hash
        assert [(p.name, p.secret) for p in view.params] == params
        again = replace(make_record("r2", INTENT, ["docker"], code=code), language="bash")
        assert engine.record(T, again).pattern_id == pattern_id
    finally:
        engine.close()


TOOL_SECRET = "HUNTER2TOOLS"
TOOL_CODE = f'await mcp["https://admin:{TOOL_SECRET.lower()}@tools.internal/rows"]({{q: 1}})'


def test_an_older_builds_url_password_in_a_tool_the_code_calls_is_redacted_once_at_open(
    tmp_path: Path,
) -> None:
    """An older build stored the tools the code calls as read (`code_tools`), a URL's password
    with them, though the code and the template had it redacted, and marked its store
    `placeholders_renamed/10`; the next open redacts them as today's capture does
    (docs/normalization.md, Tool calls; docs/storage.md, Migrations)."""
    engine = open_engine(tmp_path / "e")
    assert engine.admin.wait_placeholders_renamed(60) == 0
    tool = f"https://admin:{TOOL_SECRET.lower()}@tools.internal/rows"
    pattern_id = engine.record(T, make_record("r1", INTENT, [tool], code=TOOL_CODE)).pattern_id
    assert _stored_rows_holding(engine, TOOL_SECRET, None) == []  # today's capture keeps none
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, pattern_id)
    assert pattern is not None
    assert pattern.code_tools == ("https://[REDACTED]@tools.internal/rows",)
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, replace(pattern, code_tools=(tool,))),
            (CF_META, PLACEHOLDERS_KEY, None),
            (CF_META, b"placeholders_renamed/10", b"1"),  # the marker that build wrote
        ]
    )
    assert _stored_rows_holding(engine, TOOL_SECRET, None) == ["patterns"]
    engine.close()

    engine = open_engine(tmp_path / "e")
    try:
        assert engine.admin.wait_placeholders_renamed(60) == 1
        assert _stored_rows_holding(engine, TOOL_SECRET, None) == []
        stored = engine._state.repo.patterns.pattern(T, pattern_id)
        assert stored is not None
        assert stored.code_tools == pattern.code_tools
        assert stored.template == pattern.template
    finally:
        engine.close()
