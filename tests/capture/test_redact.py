"""Rule 7b's text side: `prepare_captures` (one core call per batch: normalize, then redact
every free text with what the normalizer flagged) and the record it gives back
(`record_texts` / `redacted_record`), against the real extension."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pml_server import _core
from pml_server.capture.normalize import NormalizedCode, normalize, prepare_captures
from pml_server.capture.redact import record_texts, redacted_record
from pml_server.domain.errors import InputTooLargeError
from pml_server.domain.model import ExecutionRecord, ToolCall

SECRET = "sk_live_0123456789abcdefABCDEF"
CODE = f'const key = "{SECRET}";\nawait mcp.pay({{apiKey: key, note: "ok"}});'


def _record(code: str = CODE, secret: str = SECRET) -> ExecutionRecord:
    return ExecutionRecord(
        request_id="r1",
        intent=f"pay the invoice with {secret}",
        code=code,
        language="javascript",
        tool_calls=(
            ToolCall("pay", arguments_json=json.dumps({"apiKey": secret}), error=""),
            ToolCall("pay", arguments_json="{}", ok=False, error=f"401 for {secret}"),
        ),
        trace=f"GET /v1?key={secret}".encode(),
    )


def test_prepare_captures_is_normalize_plus_the_redacted_texts_per_item() -> None:
    ok = ("await mcp.read_file({path: 'a.json'});", "javascript", ["read a.json", ""])
    huge = ("x" * (_core.NORMALIZE_MAX_INPUT_BYTES + 1), "python", ["never read"])
    flagged = (CODE, "javascript", [f"use {SECRET} now", f'{{"k": "{SECRET}"}}'])
    first, refused, third = prepare_captures([ok, huge, flagged])
    assert isinstance(refused, InputTooLargeError)
    assert refused.field == "code"
    assert not isinstance(first, Exception)
    assert not isinstance(third, Exception)
    assert first == (normalize(ok[0], ok[1]), ["read a.json", ""])
    normalized, texts = third
    assert normalized == normalize(CODE, "javascript")
    assert any(p.secret for p in normalized.params)
    assert texts == ["use [REDACTED] now", '{"k": "[REDACTED]"}']


def test_a_flagged_value_shorter_than_the_minimum_stays_in_text() -> None:
    # Flagged by its name (a key), but only 3 characters: blanking "abc" would blank words.
    code = 'const api_key = "abc";\nawait mcp.call({key: api_key});'
    (result,) = prepare_captures([(code, "javascript", ["abc and more"])])
    assert not isinstance(result, Exception)
    normalized, texts = result
    short = [p for p in normalized.params if p.secret]
    assert short
    assert all(len(json.loads(p.value_json)) < _core.MIN_SECRET_CHARS for p in short)
    assert texts == ["abc and more"]


def test_redacted_record_puts_every_redacted_text_back() -> None:
    record = _record()
    (result,) = prepare_captures([(record.code, record.language, record_texts(record))])
    assert not isinstance(result, Exception)
    normalized, texts = result
    stored = redacted_record(record, normalized, texts)
    assert stored.code == normalized.redacted_code
    parts = [stored.code, stored.intent, stored.trace.decode()]
    parts += [t for c in stored.tool_calls for t in (c.error, c.arguments_json)]
    assert all(SECRET not in part for part in parts), parts
    assert stored.intent == "pay the invoice with [REDACTED]"
    assert stored.tool_calls[1].error == "401 for [REDACTED]"
    assert stored.trace == b"GET /v1?key=[REDACTED]"
    assert (stored.request_id, stored.language) == (record.request_id, record.language)


def test_a_record_with_nothing_to_hide_is_returned_as_is() -> None:
    record = _record(code="await mcp.pay({note: 'ok'});", secret="plain")
    # an `apiKey` field's value is a credential's whatever its shape: a note is not
    record = replace(record, tool_calls=(ToolCall("pay", arguments_json='{"note": "plain"}'),))
    (result,) = prepare_captures([(record.code, record.language, record_texts(record))])
    assert not isinstance(result, Exception)
    normalized, texts = result
    assert redacted_record(record, normalized, texts) is record


def _upper_snake_forms(secret: str) -> set[str]:
    """The forms a placeholder name could give `secret`: its UPPER_SNAKE runs."""
    runs = "".join(c if c.isalnum() else " " for c in secret).upper().split()
    return {"_".join(runs), *(r for r in runs if len(r) >= 6)}


def test_a_placeholder_is_never_named_after_a_credential_in_its_key() -> None:
    """A literal's placeholder takes its key's name (`{path: ...}` -> `$PATH`); a key holding
    a credential (a URL with a password, an API key) must not carry it into the template, the
    parameters, the schema or the steps (docs/normalization.md, Placeholder names)."""
    password = "Tr0ub4dor-horse-9f3k2"
    for key in (f"https://admin:{password}@db.example.com", SECRET):
        code = f"const r = await mcp.http_get({{'{key}': 'x', other: 1}}); await mcp.save(r)"
        result = _core.normalize(code, "javascript")
        secret = password if key != SECRET else SECRET
        shown = " ".join(
            [
                result.template,
                result.schema_json,
                result.redacted_code,
                *(p.name for p in result.params),
                *(name for s in result.steps for a in s.arguments for name in a.parameters),
                *(a.name for s in result.steps for a in s.arguments),
            ]
        ).upper()
        for form in _upper_snake_forms(secret):
            assert form not in shown, (form, shown)


def test_a_url_password_quoted_bare_in_a_text_is_redacted_there_too() -> None:
    """The URL is redacted in place; its password, where an error message or the intent quotes
    it alone, is redacted as well (docs/capture.md, Secrets)."""
    password = "Tr0ub4dor-horse"
    code = f'await mcp.query_db({{dsn: "postgresql://admin:{password}@db/prod"}});'
    record = ExecutionRecord(
        request_id="r1",
        intent=f"count rows, the password is {password}",
        code=code,
        language="javascript",
        tool_calls=(
            ToolCall("query_db", arguments_json="{}", ok=False, error=f"rejected for {password}"),
        ),
    )
    (prepared,) = prepare_captures([(record.code, record.language, record_texts(record))])
    assert not isinstance(prepared, Exception)
    normalized, texts = prepared
    redacted = redacted_record(record, normalized, texts)
    assert password not in repr(redacted)
    assert "[REDACTED]" in redacted.intent
    assert redacted.tool_calls[0].error == "rejected for [REDACTED]"


def test_names_lose_a_credential_never_a_random_looking_word() -> None:
    """A tool name or tag is a name, not free text: a URL's password (the core's URL rule:
    user-info to the last `@`), a pair named as a credential and a credential's shape go,
    never a name that merely looks random (docs/capture.md, Secrets)."""
    from pml_server.capture.redact import redacted_name

    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    assert redacted_name("password=hunter2") == "password=[REDACTED]"
    assert redacted_name(token) == "[REDACTED]"
    assert redacted_name(f"gh:{token}") == "gh:[REDACTED]"
    assert redacted_name("auth:login") == "auth:login"

    assert redacted_name("https://admin:p@ss@tools.internal/x") == (
        "https://[REDACTED]@tools.internal/x"
    )
    assert redacted_name("db=pg://admin:Tr0ub&3@db/prod") == "db=pg://[REDACTED]@db/prod"
    for kept in (
        "ssh://git@github.com/a",
        "https://host:8080/x",
        "gmail:get",
        "tool_a8f9e0b1c2d3e4f5a6b7c8d9",
        "commit:a94a8fe5ccb19ba61c4c0873d391e987982fbbd3",
    ):
        assert redacted_name(kept) is kept
    token = "https://h/t?page=2&access_token=abcdef123456"
    assert redacted_name(token) == "https://h/t?page=2&access_token=[REDACTED]"
    # A lone surrogate (no UTF-8) is kept with the name, unless the name has a credential.
    assert redacted_name("tool\ud800") == "tool\ud800"
    assert redacted_name("pg://u:pw@db\ud800").startswith("pg://[REDACTED]@db\ufffd")
    record = ExecutionRecord(
        request_id="r1",
        intent="call it",
        code="await mcp.call({})",
        language="javascript",
        tool_calls=(ToolCall("https://u:pw@h/t", arguments_json="{}"),),
        tags=("pg://u:pw@db", "team"),
    )
    prepared = prepare_captures([(record.code, record.language, record_texts(record))])[0]
    assert not isinstance(prepared, Exception)
    normalized, texts = prepared
    stored = redacted_record(record, normalized, texts)
    assert stored.tool_calls[0].tool == "https://[REDACTED]@h/t"
    assert stored.tags == ("pg://[REDACTED]@db", "team")


PASSWORD = "hunter2-corral"  # no credential shape: only its context can flag it


def _stored_forms(result: _core.Normalized) -> str:
    """Every text of a normalization that a store keeps or an answer shows."""
    return " ".join(
        [
            result.template,
            result.redacted_code,
            result.schema_json,
            *(p.name for p in result.params),
        ]
    )


def test_a_value_named_a_credential_by_a_sibling_is_secret() -> None:
    """A credential's name need not be the literal's own key: an environment variable's
    default, a header set by name, a subscript assignment or a `||` default name it too
    (docs/normalization.md, Secrets). The placeholder keeps its name; the value is flagged,
    so it is neither stored nor shown."""
    cases = [
        ("python", f'import os\npw = os.getenv("DB_PASSWORD", "{PASSWORD}")\nmcp.q(pw=pw)'),
        ("python", f'import os\npw = os.environ.get("DB_PASSWORD", "{PASSWORD}")\nmcp.q(pw=pw)'),
        ("python", f'import os\npw = os.getenv("API_TOKEN", default="{PASSWORD}")\nmcp.q(pw=pw)'),
        ("python", f'pw = os.environ.get("API_TOKEN") or "{PASSWORD}"\nmcp.q(pw=pw)'),
        ("python", f'import os\nos.environ["DB_PASSWORD"] = "{PASSWORD}"\nmcp.q()'),
        ("python", f'h = {{}}\nh["Authorization"] = "Token {PASSWORD}"\nmcp.get(h=h)'),
        ("python", f'mcp.get(headers=[("X-Api-Key", "{PASSWORD}")])'),
        ("javascript", f'const pw = process.env.DB_PASSWORD ?? "{PASSWORD}"; await mcp.q({{pw}})'),
        ("javascript", f'const pw = process.env.API_TOKEN || "{PASSWORD}"; await mcp.q({{pw}})'),
        ("javascript", f'const h = {{}}; h["Authorization"] = "Token {PASSWORD}"; await mcp.g(h)'),
        ("javascript", f'h.set("Authorization", "Token {PASSWORD}"); await mcp.get({{h}})'),
        ("typescript", f'await fetch(u, {{headers: [["Authorization", "Token {PASSWORD}"]]}})'),
    ]
    for language, code in cases:
        result = _core.normalize(code, language)
        assert result.parse_ok, (code, result.fallback_reason)
        (flagged,) = [p for p in result.params if PASSWORD in p.value_json]
        assert flagged.secret, code
        assert not flagged.name.startswith(("$DB_PASSWORD", "$API_TOKEN", "$AUTHORIZATION"))
        assert PASSWORD not in _stored_forms(result), code
        schema = json.loads(result.schema_json)
        assert schema["properties"][flagged.name]["writeOnly"] is True
    # Names that are no credential's, a sentence, and a tool's name leave the value alone.
    for language, code in [
        ("python", 'import os\nlevel = os.getenv("LOG_LEVEL", "info")\nmcp.q(level=level)'),
        ("python", 'log.info("token refreshed for", "alice")'),
        ("python", 'await session.call_tool("get_token", "alice")'),
        ("python", 'mcp.proxy(keep=["Authorization", "Content-Type", "X-Id"])'),
        ("javascript", 'await mcp.proxy({keep: ["Authorization", "Content-Type", "X-Id"]})'),
        ("javascript", 'const n = process.env.PAGE_SIZE || "50"; await mcp.q({n})'),
    ]:
        result = _core.normalize(code, language)
        assert result.parse_ok, (code, result.fallback_reason)
        assert not any(p.secret for p in result.params), code


def test_a_secret_literal_that_stays_code_is_redacted() -> None:
    """A literal the normalizer cannot decode exactly (a byte string, a `\\N{...}` escape, a
    BigInt) stays code, hashed by its text; under a credential's name it is still a secret,
    redacted in the stored code and the template like a secret past the parameter cap."""
    cases = [
        ("python", f'mcp.login(user="a", password=b"{PASSWORD}")'),
        ("python", f'mcp.login(api_key="\\N{{BULLET}}{PASSWORD}")'),
        ("python", f'mcp.login(headers={{"Authorization": b"Token {PASSWORD}"}})'),
        ("python", f'import os\npw = os.environ.get("DB_PASSWORD", b"{PASSWORD}")\nmcp.q(pw=pw)'),
        ("javascript", 'await mcp.login({user: "a", pin: 1, password: 12345678901234567890n})'),
    ]
    for language, code in cases:
        result = _core.normalize(code, language)
        assert result.parse_ok, (code, result.fallback_reason)
        for kept in (PASSWORD, "12345678901234567890"):
            assert kept not in _stored_forms(result), code
        assert '"[REDACTED]"' in result.redacted_code
        assert not any(p.secret for p in result.params), "it stays code, not a parameter"
    # A byte string stays one, so the stored code read again (steps are read from it) names
    # the placeholders the template names.
    result = _core.normalize(f'mcp.login(user="a", password=b"{PASSWORD}")', "python")
    assert result.redacted_code == 'mcp.login(user="a", password=b"[REDACTED]")'
    again = _core.normalize(result.redacted_code, "python")
    assert [p.name for p in again.params] == [p.name for p in result.params] == ["$USER"]
    assert again.template == result.template
    plain = _core.normalize('mcp.read(path=b"a.bin", note="\\N{BULLET}")', "python")
    assert plain.redacted_code == 'mcp.read(path=b"a.bin", note="\\N{BULLET}")'


def test_a_literal_passed_through_a_variable_where_a_credential_goes_is_secret() -> None:
    """`pw = "..."` then `login(password=pw)`: the literal's own context (`pw`) says nothing,
    the place the variable goes does (docs/normalization.md, Secrets)."""
    cases = [
        ("javascript", f'const pw = "{PASSWORD}"; await mcp.login({{user: "a", password: pw}})'),
        ("javascript", f'let p; p = "{PASSWORD}"; await mcp.login({{user: "a", password: p}})'),
        ("typescript", f'const k: string = "{PASSWORD}"; await mcp.q({{auth: k}})'),
        ("python", f'pw = "{PASSWORD}"\nmcp.login(user="a", password=pw)'),
        ("python", f'k = "{PASSWORD}"\nh = {{"Authorization": k}}\nmcp.get(headers=h)'),
        ("python", f'pw = "{PASSWORD}"\nmcp.get(auth=HTTPBasicAuth("a", pw))'),
    ]
    for language, code in cases:
        result = _core.normalize(code, language)
        assert result.parse_ok, (code, result.fallback_reason)
        (flagged,) = [p for p in result.params if PASSWORD in p.value_json]
        assert flagged.secret, code
        assert PASSWORD not in _stored_forms(result), code
    # A variable that goes elsewhere keeps its value.
    for language, code in [
        ("python", "limit = 5\nmcp.q(max_tokens=limit)"),
        ("javascript", 'const u = "alice"; await mcp.login({user: u, password: pw})'),
    ]:
        result = _core.normalize(code, language)
        assert not any(p.secret for p in result.params), code


def test_a_credential_in_a_name_value_pair_is_redacted() -> None:
    """Connection strings, shell variables and flags write a credential as `name=value`
    (`host=db password=...`, `Server=db;Password=...;`, `DB_PASSWORD=... psql`,
    `--api-key=...`): a string holding one is a secret parameter, and free text loses the
    value, keeping the name (docs/capture.md, Secrets). Code keeps `password=pw`: there it is
    a keyword argument, not a credential."""
    values = [
        f"host=db user=admin password={PASSWORD} port=5432",
        f"Server=db;User Id=sa;Password={PASSWORD};",
        f"host=db password='{PASSWORD} x' port=5",
        f"DB_PASSWORD={PASSWORD} psql -h db",
        f"tool --api-key={PASSWORD} run",
    ]
    for value in values:
        code = f"mcp.query(dsn={json.dumps(value)}, limit=5)"
        result = _core.normalize(code, "python")
        assert [(p.name, p.secret) for p in result.params] == [("$DSN", True), ("$LIMIT", False)]
        assert PASSWORD not in _stored_forms(result), value
        assert result.redacted_code == 'mcp.query(dsn="[REDACTED]", limit=5)'
    texts = [f"connection failed: {v}" for v in values]
    (prepared,) = prepare_captures([("x = 1", "python", texts)])
    assert not isinstance(prepared, Exception)
    for text in prepared[1]:
        assert PASSWORD not in text, text
    assert prepared[1][0] == "connection failed: host=db user=admin password=[REDACTED] port=5432"
    kept = ["max_tokens=5 limit=3 author=ann", "password= (empty)", "a=a=a"]
    (plain,) = prepare_captures([("x = 1", "python", kept)])
    assert not isinstance(plain, Exception)
    assert plain[1] == kept
    code = 'mcp.login(password=pw, note="max_tokens=5")'
    assert _core.normalize(code, "python").redacted_code == code


def test_a_credential_written_as_a_shell_writes_it_is_a_secret_parameter() -> None:
    """Code in a language no parser reads (a shell's) writes a credential unquoted: an
    assignment or a flag's `NAME=value`, a flag and its value, `-u user:password` (docs/
    normalization.md, Secrets). Each is a secret parameter named after its name, in no stored
    form, and two runs with other credentials are one pattern; computed values and plain
    words stay code."""
    lines = {
        f"export API_KEY={PASSWORD}\ncurl https://x/api": ("$API_KEY", "export API_KEY=$API_KEY"),
        f"PGPASSWORD={PASSWORD} psql -h db": ("$PGPASSWORD", "PGPASSWORD=$PGPASSWORD psql"),
        f"MYSQL_PWD={PASSWORD}; mysql -u root": ("$MYSQL_PWD", "MYSQL_PWD=$MYSQL_PWD;"),
        f"tool --api-key={PASSWORD}!x run": ("$API_KEY", "tool --api-key=$API_KEY run"),
        f"tool --token {PASSWORD} run": ("$TOKEN", "tool --token $TOKEN run"),
        f"tool --password '{PASSWORD} x' -v": ("$PASSWORD", "tool --password $PASSWORD -v"),
        f"curl -u bob:{PASSWORD} https://x": ("$USER", "curl -u $USER https://x"),
        f"curl --user=bob:{PASSWORD} https://x": ("$USER", "curl --user=$USER https://x"),
        f"mysql -u root -p{PASSWORD} shop": ("$PASSWORD", "mysql -u root -p$PASSWORD shop"),
        f"mariadb-dump -p'{PASSWORD}' shop": ("$PASSWORD", "mariadb-dump -p$PASSWORD shop"),
        f"sshpass -p {PASSWORD} ssh u@h": ("$PASSWORD", "sshpass -p $PASSWORD ssh u@h"),
        f"docker login -u bob -p {PASSWORD} r.io": ("$PASSWORD", "login -u bob -p $PASSWORD r.io"),
        f"mongosh -u bob -p '{PASSWORD}' db": ("$PASSWORD", "mongosh -u bob -p $PASSWORD db"),
        f"redis-cli -h r -a {PASSWORD} ping": ("$PASSWORD", "redis-cli -h r -a $PASSWORD ping"),
    }
    for code, (name, template) in lines.items():
        for language in ("bash", "sh", "powershell"):
            result = _core.normalize(code, language)
            assert [(p.name, p.secret) for p in result.params if p.secret] == [(name, True)]
            assert PASSWORD not in _stored_forms(result), (language, code)
            assert template in result.template, (language, result.template)
            other = _core.normalize(code.replace(PASSWORD, "another-one"), language)
            assert other.code_hash == result.code_hash
    plain = [
        "export TOKEN=$(cat token.txt) && run",
        "TOKEN=$OTHER run",
        "curl -u bob https://x",
        "ls -la && echo done > out.txt",
        "x == password",
        "mkdir -p out && mysql -p shop && ssh -p host",
        "mysql -u root; mkdir -pv out | grep -pq x",
        "docker run -p http -d img && docker ps -a",
        "sshpass -p $PW ssh u@h",
    ]
    for code in plain:
        result = _core.normalize(code, "bash")
        assert not [p for p in result.params if p.secret], code
        assert result.template == code
    # Parsed languages are not read this way: there `password=pw` names a variable.
    assert _core.normalize("login(password=pw)", "python").params == []


def test_an_interpolated_string_given_as_a_credential_keeps_no_literal_text() -> None:
    """An f-string or template string that is a credential's value by its name keeps its
    interpolations, but none of its literal text, in any stored form (docs/normalization.md,
    Secrets), but an auth scheme or one separator; one given to no credential is code as
    written."""
    cases = [
        ("python", f'client.login(token=f"{{prefix}}{PASSWORD}")', 'token=f"{prefix}[REDACTED]"'),
        ("python", f'login(password=f"{{user}}:{PASSWORD}")', 'password=f"{user}[REDACTED]"'),
        ("javascript", f"login({{token: `${{prefix}}{PASSWORD}`}})", "`${prefix}[REDACTED]`"),
        ("typescript", f"const password = `${{user}}:{PASSWORD}`", "`${user}[REDACTED]`"),
    ]
    for language, code, kept in cases:
        result = _core.normalize(code, language)
        assert result.parse_ok, result.fallback_reason
        assert PASSWORD not in _stored_forms(result), (language, code)
        assert kept in result.template, result.template
        assert kept in result.redacted_code, result.redacted_code
    for language, code in [
        ("python", f'mcp.read_file(path=f"{{root}}/{PASSWORD}.json")'),
        ("javascript", f"mcp.read_file({{path: `${{root}}/{PASSWORD}.json`}})"),
        # an auth scheme or one separator holds no secret
        ("python", 'requests.get(u, headers={"Authorization": f"Bearer {token}"})'),
        ("javascript", "fetch(u, {headers: {Authorization: `Basic ${basic}`}})"),
        ("python", 'login(credentials=f"{user}:{pw}")'),
    ]:
        result = _core.normalize(code, language)
        assert (result.template, result.redacted_code) == (code, code)


def test_a_literal_piece_of_a_value_given_as_a_credential_is_secret() -> None:
    """A credential given as a value joined of pieces (`"..." + suffix`, `("..." "...")`, a
    conditional's branch) or through a variable holding an interpolated string (`pw =
    f"{p}..."`) stands in no stored form; the stored code still parses and keeps its names and
    the hash its placeholders (docs/normalization.md, Secrets)."""
    cases = [
        ("python", f'login(password="{PASSWORD}" + suffix)', 'password="[REDACTED]" + suffix'),
        ("python", f'login(password=("{PASSWORD}" "x9"))', '("[REDACTED]" "[REDACTED]")'),
        ("python", f'pw = f"{{p}}{PASSWORD}"\nlogin(password=pw)', 'pw = f"{p}[REDACTED]"'),
        ("python", f'pw = "{PASSWORD}" + s\nlogin(password=pw)', 'pw = "[REDACTED]" + s'),
        ("python", f'login(token=(a if c else "{PASSWORD}"))', '(a if c else "[REDACTED]")'),
        ("typescript", f'await mcp.login({{password: "{PASSWORD}" + s}})', '"[REDACTED]" + s'),
        ("javascript", f"await mcp.login({{password: p + '{PASSWORD}'}})", 'p + "[REDACTED]"'),
        (
            "typescript",
            f"const pw = `${{p}}{PASSWORD}`; await mcp.login({{password: pw}})",
            "`${p}[REDACTED]`",
        ),
    ]
    for language, code, kept in cases:
        result = _core.normalize(code, language)
        assert result.parse_ok, result.fallback_reason
        assert PASSWORD not in _stored_forms(result), (language, code)
        assert kept in result.redacted_code, result.redacted_code
        again = _core.normalize(result.redacted_code, language)
        assert again.parse_ok
        assert again.redacted_code == result.redacted_code
        other = _core.normalize(code.replace(PASSWORD, "another-one"), language)
        if "`" not in code and 'f"' not in code:  # an interpolated string's text is code
            assert other.code_hash == result.code_hash, code
    for language, code in [
        ("python", 'x = "hello" + suffix'),
        ("python", 'requests.get(u, headers={"Authorization": "Bearer " + token})'),
        ("python", 'login(auth=user + ":" + pw)'),
        ("python", 'p = f"{root}/a.json"\nmcp.read_file(path=p)'),
        ("typescript", 'await mcp.read({path: "a/" + name})'),
    ]:
        result = _core.normalize(code, language)
        assert result.redacted_code == code
        assert not [p for p in result.params if p.secret], code


def test_a_literal_piece_of_a_credential_in_code_no_parser_reads_is_secret() -> None:
    """Code with a syntax error goes to the fallback tokenizer, which reads a value given as a
    credential to its end: each literal piece of it is a secret, a call's argument in it and
    the next argument are not (docs/normalization.md, Fallback)."""
    for language, code in [
        ("python", f'login(password=("{PASSWORD}" "x9"), user="bob"\nx = ('),
        ("python", f'login(password=p + "{PASSWORD}", user="bob"\nx = ('),
        ("typescript", f'await mcp.login({{password: "a" + "{PASSWORD}", user: "bob"'),
    ]:
        result = _core.normalize(code, language)
        assert not result.parse_ok
        assert PASSWORD not in _stored_forms(result), code
        assert [p.secret for p in result.params if p.name == "$USER"] == [False]
    code = 'login(password=get("db_name"), n="a" + "b"\nx = ('
    result = _core.normalize(code, "python")
    assert result.redacted_code == code
    assert not [p for p in result.params if p.secret]


def test_a_literal_formatted_or_joined_into_a_credential_is_secret() -> None:
    """A literal formatted or joined into a credential's value (`%`, `.format`, `.join`,
    `.concat`, `String.raw`), in place or through a variable, is a secret; the hash is the one
    another password gives, and a format string or separator holding no secret stays
    (docs/normalization.md, Secrets)."""
    pw = PASSWORD.lower()
    for language, code in [
        ("python", f'login(password="{pw}%s" % x)'),
        ("python", f'login(password="{pw}{{}}".format(x))'),
        ("python", f'login(password="".join(["{pw}", x]))'),
        ("python", f'login(password="-".join(("{pw}", "secret")))'),
        ("python", f'pw = "{pw}%s" % x\nlogin(password=pw)'),
        ("javascript", f'await mcp.login({{password: "{pw}".concat(x)}})'),
        ("javascript", f'await mcp.login({{password: ["{pw}", x].join("")}})'),
        ("typescript", f"await mcp.login({{password: String.raw`{pw}${{x}}`}})"),
        # code the parser rejects: a variable assigned a literal, given as a credential
        ("python", f'pw = "{pw}"\nlogin(password=pw'),
    ]:
        result = _core.normalize(code, language)
        assert pw not in _stored_forms(result).lower(), code
        assert not [p for p in result.params if pw in p.value_json and not p.secret], code
        if "${" not in code:  # an interpolated string's text hashes as code, as an f-string's
            other = _core.normalize(code.replace(pw, "other"), language)
            assert other.code_hash == result.code_hash, code
        again = _core.normalize(result.redacted_code, language)
        assert again.parse_ok == result.parse_ok, code
        assert again.redacted_code == result.redacted_code, code
    for code in (
        'print("%s" % x)',
        'print(", ".join(names))',
        'h = {"Authorization": "Bearer {}".format(tok)}',
    ):
        result = _core.normalize(code, "python")
        assert result.redacted_code == code
        assert not [p for p in result.params if p.secret]


def test_a_prefixed_python_string_in_code_no_parser_reads_is_named_by_its_context() -> None:
    """Python code with a syntax error goes to the fallback tokenizer, which reads a string's
    prefix (`f"..."`, `b"..."`, `rb"..."`) as a word of its own: the string is still named by
    its context, so a credential there is a secret (docs/normalization.md, Secrets)."""
    for prefix in ("f", "b", "r", "rb"):
        code = f'login(user="bob", password={prefix}"{PASSWORD}"\nx = ('
        result = _core.normalize(code, "python")
        assert not result.parse_ok
        assert [(p.name, p.secret) for p in result.params] == [
            ("$USER", False),
            ("$PASSWORD", True),
        ]
        assert PASSWORD not in _stored_forms(result), code


def test_a_uid_and_gid_after_u_is_no_password() -> None:
    """`-u user:password` is a credential only for a command that takes one so (curl, wget):
    `docker run -u 1000:1000` gives a uid and a gid, kept as written (docs/normalization.md,
    Secrets)."""
    for code in ("docker run -u 1000:1000 img", "podman run --user=1000:1000 img ls"):
        result = _core.normalize(code, "bash")
        assert not [p for p in result.params if p.secret], code
        assert result.redacted_code == code
        run = _core.normalize(f"run({json.dumps(code)})", "python")
        assert [p.secret for p in run.params] == [False], code
    for code in (f"curl -u bob:{PASSWORD} https://x", f"sudo wget --user=bob:{PASSWORD} x"):
        result = _core.normalize(code, "bash")
        assert [(p.name, p.secret) for p in result.params if p.secret] == [("$USER", True)]
        assert PASSWORD not in _stored_forms(result), code


def test_a_string_holding_a_field_named_as_a_credential_is_a_secret_parameter() -> None:
    """A JSON body or a header line in a string (`data='{"password": "..."}'`, `curl -H
    "X-Api-Key: ..."`) writes a credential as free text's field rule reads one: the string is a
    secret value, in parsed code and in shell code (docs/normalization.md, Secrets); a prompt,
    a format string and a header naming no credential are not."""
    for code, language in (
        (f'r = requests.post(u, data=\'{{"user": "bob", "password": "{PASSWORD}"}}\')', "python"),
        (f'fetch(u, {{method: "POST", body: \'{{"api_key":"{PASSWORD}"}}\'}})', "javascript"),
        (f'curl -H "X-Api-Key: {PASSWORD}" https://x', "bash"),
        (f"curl -H 'Cookie: session={PASSWORD}' https://x", "bash"),
    ):
        result = _core.normalize(code, language)
        assert [p.secret for p in result.params if PASSWORD in p.value_json] == [True], code
        assert PASSWORD not in _stored_forms(result), code
    for value in ("Password: ", "token: %s", "Authorization: Bearer ", "Content-Type: text/x"):
        result = _core.normalize(f"print({json.dumps(value)})", "python")
        assert [p.secret for p in result.params] == [False], value


def test_a_string_holding_a_shell_credential_is_a_secret_parameter() -> None:
    """A command line in a string (`subprocess.run("...")`) that writes a credential as a shell
    does is a secret value (docs/normalization.md, Secrets); other command lines are not."""
    for value in (
        f"sshpass -p {PASSWORD} ssh h",
        f"PGPASSWORD={PASSWORD} psql",
        f"tool --api-key {PASSWORD}",
        f"mysql -p{PASSWORD} db",
    ):
        result = _core.normalize(f"run({json.dumps(value)})", "python")
        assert [p.secret for p in result.params] == [True], value
        assert PASSWORD not in _stored_forms(result), value
    for value in ("mkdir -p out", "--output=out.txt", "a=b c=d", "curl -u bob https://x", "x-y"):
        result = _core.normalize(f"run({json.dumps(value)})", "python")
        assert [p.secret for p in result.params] == [False], value


def test_a_password_echoed_into_a_command_reading_it_from_its_input_is_secret() -> None:
    """`echo pw | docker login --password-stdin` (and `printf '%s' pw |`, podman, helm, oras,
    `gh auth login --with-token`) writes a password as surely as `-p pw`: in a string code runs
    it makes the string secret, in shell code the password is redacted where it stands
    (docs/normalization.md, Secrets); an echo into another command is kept."""
    for line in (
        f"echo {PASSWORD} | docker login -u bob --password-stdin",
        f"printf '%s' {PASSWORD} | helm registry login r --password-stdin",
        f"echo -n '{PASSWORD}' | podman login -u bob --password-stdin quay.io",
        f"printf {PASSWORD} | oras login -u bob --password-stdin r",
        f"echo {PASSWORD} | gh auth login --with-token",
    ):
        run = _core.normalize(f"subprocess.run({json.dumps(line)}, shell=True)", "python")
        assert [p.secret for p in run.params] == [True], line
        assert PASSWORD not in _stored_forms(run), line
        shell = _core.normalize(line, "bash")
        assert PASSWORD not in _stored_forms(shell), line
        assert '"[REDACTED]" |' in shell.redacted_code, shell.redacted_code
    for line in ("echo hello | grep h", 'echo "$PW" | docker login --password-stdin'):
        run = _core.normalize(f"subprocess.run({json.dumps(line)}, shell=True)", "python")
        assert [p.secret for p in run.params] == [False], line
        assert _core.normalize(line, "bash").redacted_code == line


def test_a_credential_written_as_a_field_is_redacted_from_free_text() -> None:
    """A credential a tool's arguments, an error or a trace write as a field, as JSON, YAML, a
    Python dict or an HTTP header writes it (`"password": "..."`, `client_secret: ...`,
    `Authorization: Basic ...`), loses its value, whatever its shape; the name stays, and a
    field no credential's name names stays whole (docs/capture.md, Secrets)."""
    code = "r = await mcp.login(user=name, password=pw)"  # the value never appears in the code
    args = json.dumps({"user": "bob", "password": PASSWORD, "headers": {"X-Api-Key": PASSWORD}})
    record = ExecutionRecord(
        request_id="r1",
        intent=f"log in, password: {PASSWORD}",
        code=code,
        language="python",
        tool_calls=(
            ToolCall("login", arguments_json=args, ok=False, error=f"{{'api_key': '{PASSWORD}'}}"),
        ),
        trace=f"Authorization: Basic {PASSWORD}\nclient_secret: {PASSWORD}".encode(),
    )
    (prepared,) = prepare_captures([(record.code, record.language, record_texts(record))])
    assert not isinstance(prepared, Exception)
    stored = redacted_record(record, prepared[0], prepared[1])
    call = stored.tool_calls[0]
    assert PASSWORD not in stored.intent + call.arguments_json + call.error
    assert PASSWORD.encode() not in stored.trace
    assert json.loads(call.arguments_json) == {
        "user": "bob",
        "password": "[REDACTED]",
        "headers": {"X-Api-Key": "[REDACTED]"},
    }
    assert stored.trace == b"Authorization: [REDACTED]\nclient_secret: [REDACTED]"
    kept = ['{"max_tokens": 5, "author": "ann"}', "Password::new()", 'note: "password reset"']
    (plain,) = prepare_captures([("x = 1", "python", kept)])
    assert not isinstance(plain, Exception)
    assert plain[1] == kept


def test_a_hex_digest_in_free_text_is_kept_unless_a_credentials_word_names_it() -> None:
    """A commit or a checksum in an intent or a tool's output is no secret: kept; the same hex
    after `token`, `secret` or `api key` is a credential: redacted (docs/capture.md, Secrets)."""
    commit = "3f2a9c8e1b7d4f6a0c5e2b9d8a7f6e5d4c3b2a19"
    sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    kept = [
        f"deploy commit {commit} to prod",
        f"sha256 of the file is {sha256}",
        f"sha256:{sha256}",
    ]
    named = [f"token {commit}", f"the api key is {commit}", f"secret: {sha256}"]
    prepared = prepare_captures([("x = 1", "python", kept + named)])[0]
    assert not isinstance(prepared, Exception)
    texts = prepared[1]
    assert texts[: len(kept)] == kept
    assert all("[REDACTED]" in t and commit not in t and sha256 not in t for t in texts[3:])


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("javascript", "const q = sql`SELECT ${a} FROM u WHERE password={}`;"),
        ("typescript", 'const q = gql`{ login(user: ${u}, token: "{}") }`;'),
        ("javascript", "const q = html`<b>${name}</b> password={}`;"),
        ("javascript", 'const t = "{}";\nconst q = sql`WHERE password=${t}`;'),
        ("javascript", 'const t = "{}";\nconst q = gql`{ login(token: "${t}") }`;'),
        ("python", 'q = f"{h} host=db password={}"'),
        ("python", 'x = "{}"\nq = f"host=db password={x}"'),
    ],
)
def test_a_tagged_or_interpolated_template_keeps_no_credential(language: str, code: str) -> None:
    """A template string (tagged or not) or an f-string: a piece of its text holding a
    credential, or a variable interpolated where a credential's value goes, leaves the stored
    code, the template and every parameter (docs/normalization.md, Secrets)."""
    secret = "hunter2corral"
    result = normalize(code.replace("{}", secret, 1), language)
    assert result.parse_ok
    assert secret not in _stored_forms_of(result)
    assert "[REDACTED]" in result.redacted_code


def _assert_kept_whole(code: str, language: str) -> None:
    """`code` parses, and no parameter of it is a secret: nothing redacted."""
    result = _core.normalize(code, language)
    assert result.parse_ok, (code, result.fallback_reason)
    assert not any(p.secret for p in result.params), code
    assert "[REDACTED]" not in result.redacted_code, code


def _captured(
    code: str, language: str, secret: str = "hunter2corral", braces: bool = False
) -> tuple[NormalizedCode, str]:
    """`code` with `secret` written for `{}` (with `braces`, `{{` and `}}` for braces too),
    prepared for capture with a text quoting it: the normalized code and that text as stored."""
    written = code.replace("{}", secret)
    if braces:
        written = written.replace("{{", "{").replace("}}", "}")
    prepared = prepare_captures([(written, language, [f"ran: {written}"])])[0]
    assert not isinstance(prepared, Exception)
    result, texts = prepared
    return result, texts[0]


def _stored_forms_of(result: NormalizedCode) -> str:
    return " ".join(
        [
            result.template,
            result.redacted_code,
            result.schema_json,
            *(p.value_json for p in result.params if not p.secret),
        ]
    )


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", 'open(n, "w").write("machine h login bob password {}")'),
        ("python", 'open(p, "w").write("db.internal:5432:app:bob:{}")'),
        ("python", 'import smtplib\ns = smtplib.SMTP(h)\ns.login("bob@x.com", "{}")'),
        ("python", 'import ftplib\nftplib.FTP(h).login(user, "{}")'),
        ("python", 'import imaplib\nm = imaplib.IMAP4_SSL(h)\nm.login("bob", "{}")'),
        ("python", 'import psycopg\npsycopg.connect(host=h, password="{}")'),
        ("bash", "aws configure set aws_secret_access_key {}"),
        ("bash", "gh auth login --with-token <<< {}"),
        ("bash", "htpasswd -b /etc/htpasswd bob {}"),
        ("bash", "openssl enc -aes-256-cbc -k {} -in a -out b"),
        ("bash", "openssl enc -aes-256-cbc -pass pass:{} -in a"),
        ("bash", "openssl genrsa -aes256 -passout pass:{} 2048"),
        ("bash", "sshpass -p {} ssh h"),
        ("bash", "mysql -u root -p{} db"),
        ("bash", "PGPASSWORD={} psql -h db"),
    ],
)
def test_a_password_a_command_or_a_credentials_file_takes_is_redacted(
    language: str, code: str
) -> None:
    """A `.netrc` or `.pgpass` entry in a string, a login call's positional password, and the
    passwords shell commands take by flag, position or here-string: in no stored form of the
    code, nor in a text quoting the code (docs/normalization.md, Secrets)."""
    secret = "hunter2corral"
    result, text = _captured(code, language, secret)
    assert secret not in _stored_forms_of(result)
    if language == "bash" or "machine" in code or "5432" in code:
        assert secret not in text


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", 'import subprocess\nsubprocess.run(["mysql", "-u", "root", "-p{}", "db"])'),
        ("python", 'subprocess.check_call(("curl", "-sS", "-u", "bob:{}", url))'),
        ("python", 'subprocess.run(["sshpass", "-p", "{}", "ssh", host])'),
        ("python", 'subprocess.run(["deploy", "--api-key", "{}", "-h", "db"])'),
        ("javascript", 'execFile("psql", ["--password={}", "-h", "db"])'),
        ("javascript", 'spawn("sshpass", ["-p", "{}", "ssh", "deploy@h"])'),
        ("javascript", 'spawn("curl", ["-u", "bob:{}", "https://x"])'),
        ("typescript", 'execFileSync("mysql", [`-p{}`, "db"])'),
    ],
)
def test_a_password_in_a_literal_argv_list_is_redacted(language: str, code: str) -> None:
    """A literal list used as an argv is read by the rules of a shell's command line, each
    item one word: the item holding a password is a secret parameter, in no stored form of the
    code nor in a text quoting it (docs/normalization.md, Secrets)."""
    secret = "hunter2corral"
    result, text = _captured(code, language, secret)
    assert result.parse_ok, result.fallback_reason
    assert secret not in _stored_forms_of(result)
    assert secret not in text


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", 'c = jaydebeapi.connect("org.h2.Driver", "jdbc:h2:tcp://h/~/t", ["bob", "{}"])'),
        ("python", 'c = jaydebeapi.connect(driver, url, ("bob", "{}"), "/opt/h2.jar")'),
        ("python", 'c = jaydebeapi.connect(driver, url, [user, "{}"])'),
        ("python", 'c = connect("org.h2.Driver", "jdbc:h2:mem:x", ["bob", "{}"])'),
        ("python", 'c = jaydebeapi.connect(jclassname=d, url=u, driver_args=["bob", "{}"])'),
        ("python", 'c = jaydebeapi.connect(d, url, {{"user": "bob", "password": "{}"}})'),
        ("python", 'import jaydebeapi as jdb\nc = jdb.connect(d, url, ["bob", "{}"])'),
        ("python", 'from jaydebeapi import connect\nc = connect(d, url, ["bob", "{}"])'),
        ("javascript", 'const c = DriverManager.getConnection("jdbc:h2:mem:x", "bob", "{}");'),
        ("javascript", 'dm.getConnection(url, "bob", "{}", (err, c) => use(c));'),
    ],
)
def test_a_jdbc_password_given_by_position_or_in_a_credentials_pair_is_redacted(
    language: str, code: str
) -> None:
    """jaydebeapi's `driver_args` (a `[user, password]` list, or a dict naming them) and
    JDBC's `getConnection(url, user, password)`: the password is a secret parameter, in no
    stored form of the code nor in a text quoting it; the user stays (docs/normalization.md,
    Secrets)."""
    secret = "hunter2corral"
    result, text = _captured(code, language, secret, braces=True)
    assert result.parse_ok, result.fallback_reason
    assert secret not in _stored_forms_of(result)
    assert secret not in text
    assert "bob" in result.redacted_code or "user" in result.redacted_code


def test_a_pair_of_strings_given_to_another_call_keeps_its_values() -> None:
    """Only jaydebeapi's `connect` (or one given a `jdbc:` URL) reads its third argument as
    credentials, and only a pair; `getConnection`'s password is its third argument."""
    for code in [
        'x = mcp.f("a", "b", ["a", "b"])',
        'db = sqlite3.connect("a.db", 5, ["a", "b"])',
        'sock.connect(("example.com", 80))',
        'c = jaydebeapi.connect(d, url, ["bob", "pw", "x"])',
        'pool.getConnection("a", "b")',
    ]:
        _assert_kept_whole(code, "python")


def test_an_argv_list_without_a_credential_keeps_its_values() -> None:
    """Ordinary argv lists and lists of words keep every item a plain parameter."""
    for language, code in [
        ("python", 'subprocess.run(["git", "log", "-p", "--author", "bob", "HEAD~3"])'),
        ("python", 'subprocess.run(["pytest", "-x", "-q", "tests/test_login.py"])'),
        ("python", 'subprocess.run(["curl", "-u", "bob", "https://example.com"])'),
        ("javascript", 'spawn("ls", ["-la", "/tmp/passwords"])'),
        ("javascript", 'await mcp.q({cols: ["user", "password_hash", "token_count"]})'),
    ]:
        _assert_kept_whole(code, language)


@pytest.mark.parametrize(
    "text",
    [
        'then call login("bob", "{}") to get in',
        "failed: conn.login('bob@x.com', '{}') raised SMTPAuthenticationError",
        '# ftp = ftplib.FTP("h", "bob", "{}")',
        'ldap: c.simple_bind_s("cn=admin,dc=x", "{}")',
    ],
)
def test_a_positional_password_of_a_login_call_quoted_in_free_text_is_redacted(
    text: str,
) -> None:
    """A login call quoted in prose (an intent, a tool's error, a comment) loses the string
    at the position its function takes a password; the user stays (docs/capture.md,
    Secrets)."""
    secret = "hunter2corral"
    prepared = prepare_captures([("mcp.x()", "python", [text.replace("{}", secret)])])[0]
    assert not isinstance(prepared, Exception)
    (redacted,) = prepared[1]
    assert secret not in redacted
    assert "[REDACTED]" in redacted
    assert "bob" in redacted or "admin" in redacted


def test_a_login_call_in_free_text_without_a_literal_password_is_kept() -> None:
    """A name, a call or a keyword argument at the password's position is no password."""
    for text in [
        'smtp.login("bob", password)',
        "m.login(user, get_password())",
        'ftplib.FTP("h", "bob")',
        'the login("bob") helper',
    ]:
        prepared = prepare_captures([("mcp.x()", "python", [text])])[0]
        assert not isinstance(prepared, Exception)
        assert prepared[1] == [text], text


def test_a_netrc_entry_is_read_in_its_grammar_and_prose_about_machines_is_kept() -> None:
    """A `.netrc` password is the word after `password` in an entry written in `.netrc`'s
    grammar (`machine NAME` or `default`, then `login`/`account`/`port` pairs); prose holding
    the words `machine` and `password` within 256 bytes is no entry (docs/capture.md,
    Secrets)."""
    secret = "hunter2corral"
    entries = [
        f"machine h login bob password {secret}",
        f"machine api.github.com\n  login bob\n  account ops\n  password {secret}\n",
        json.dumps({"content": f"machine h\nlogin bob\npassword {secret}\n"}),
        f"default login bob password {secret}",
    ]
    prose = [
        "the machine learning model asked for a password reset link",
        "Train the machine learning model, then send the password reset email",
        "machine h is down; by default the password policy applies",
    ]
    prepared = prepare_captures([("mcp.x()", "python", entries + prose)])[0]
    assert not isinstance(prepared, Exception)
    texts = prepared[1]
    for entry, text in zip(entries, texts, strict=False):
        assert secret not in text, entry
        assert "[REDACTED]" in text, entry
    assert texts[len(entries) :] == prose
    for text in prose:
        code = f"await mcp.notify({{note: {json.dumps(text)}}})"
        result = _core.normalize(code, "javascript")
        assert not any(p.secret for p in result.params), text


@pytest.mark.parametrize(
    ("code", "secret"),
    [
        # a webhook URL's path is its credential
        (
            'requests.post("https://hooks.slack.com/services/T0A1B2C3D/B0A1B2C3D/{}", json=m)',
            "hunter2corral0a1b2c3d",
        ),
        ('requests.post("https://discord.com/api/webhooks/1234567/{}", json=m)', "hunter2corral-x"),
        # an Azure storage connection string's account key
        (
            'BlobServiceClient.from_connection_string("DefaultEndpointsProtocol=https;'
            'AccountName=acct;AccountKey={};EndpointSuffix=core.windows.net")',
            "hunter2corral",
        ),
        # a signed URL's signature (Azure SAS, S3, GCS)
        (
            'requests.get("https://acct.blob.core.windows.net/c/b?sv=2020-08-04&sig={}")',
            "hunter2corral",
        ),
        (
            'requests.get("https://b.s3.amazonaws.com/k?X-Amz-Signature={}&X-Amz-Date=1")',
            "hunter2corral",
        ),
    ],
)
def test_a_webhook_an_account_key_and_a_signed_urls_signature_are_redacted(
    code: str, secret: str
) -> None:
    """Credential shapes a real agent writes that no name-before-value rule caught: the
    path of a Slack or Discord webhook URL, `AccountKey=` of an Azure connection string and
    the signature of a signed URL are in no stored form of the code nor in a text quoting it
    (docs/capture.md, Secrets)."""
    result, text = _captured(code, "python", secret)
    assert secret not in _stored_forms_of(result)
    assert secret not in text


def test_a_name_describing_a_credential_keeps_its_value() -> None:
    """A name whose last word describes a credential rather than holding it (`token_count`,
    `token_type`, `password_length`, `auth_method`, `auth_url`, `secret_name`) and an ARN
    naming a secret are ordinary values; a credential-shaped value under such a name is still
    one (docs/normalization.md, Secrets)."""
    code = (
        'mcp.llm(prompt="hi", max_tokens=256, token_count=12, token_type="bpe",'
        ' password_length=16, password_policy="strong", auth_method="oauth",'
        ' auth_url="https://login.example.com/oauth2/authorize", secret_name="prod/db",'
        ' secret_arn="arn:aws:secretsmanager:us-east-1:123:secret:prod")'
    )
    result = _core.normalize(code, "python")
    assert result.parse_ok
    assert [p.name for p in result.params if p.secret] == []
    assert "[REDACTED]" not in result.redacted_code
    token = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    result = _core.normalize(f'mcp.q(token_type="{token}")', "python")
    assert [p.secret for p in result.params] == [True]


@pytest.mark.parametrize(
    "text",
    [
        'requests.get(u, auth=("bob", "{}")) raised ConnectionError',
        'HTTPBasicAuth("bob", "{}") was refused',
        "[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\naws_secret_access_key = {}\n",
        '{"content": "[prod]\\n  db_password = {}\\n"}',
    ],
)
def test_a_tuple_auth_and_an_ini_line_in_free_text_lose_their_password(text: str) -> None:
    """`auth=("bob", "...")` loses the password (it mangled the `(` and kept it), a basic
    auth object's second argument too, and an INI or credentials file's `name = value` line
    named as a credential its value (docs/capture.md, Secrets)."""
    secret = "hunter2corral"
    prepared = prepare_captures([("mcp.x()", "python", [text.replace("{}", secret)])])[0]
    assert not isinstance(prepared, Exception)
    (redacted,) = prepared[1]
    assert secret not in redacted
    assert "bob" in redacted or "_key" in redacted or "db_password" in redacted


def test_code_quoted_in_free_text_keeps_its_computed_credentials() -> None:
    for text in [
        "token = None",
        "    password = get_password()",
        "auth=(user, pw) failed",
        "x == token = y",
    ]:
        prepared = prepare_captures([("mcp.x()", "python", [text])])[0]
        assert not isinstance(prepared, Exception)
        assert prepared[1] == [text], text


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", 'creds = ["bob", "{}"]\nconn = jaydebeapi.connect(d, url, creds)'),
        ("python", 'creds = ("bob", "{}")\nconn = jaydebeapi.connect(d, url, driver_args=creds)'),
        ("python", 'import jaydebeapi as jdb\ncreds = ["bob", "{}"]\nc = jdb.connect(d, u, creds)'),
        ("python", 'creds = [user, "{}"]\nc = connect("org.h2.Driver", "jdbc:h2:mem:x", creds)'),
        ("python", 'setattr(cfg, "password", "{}")'),
        ("python", 'config.set("db", "password", "{}")'),
        ("javascript", '_.set(cfg, "auth.token", "{}");'),
        ("python", 'c = Client(api_key=os.getenv("K", "{}"))'),
        ("python", 'c = Client(api_key=os.environ.get("K", "{}"))'),
        ("python", 'mcp.call(bearer="{}", passcode="{}")'),
        ("python", 'mcp.sign(hmac_key="{}", encryption_key="{}", master_key="{}")'),
    ],
)
def test_a_credential_given_through_a_variable_a_setter_or_an_env_default_is_redacted(
    language: str, code: str
) -> None:
    """A JDBC `[user, password]` list assigned to a variable then given as jaydebeapi's
    `driver_args`, a value set after a string naming a credential (`setattr(o, "password",
    ...)`), an environment lookup's default given where a credential goes, and credentials
    named `bearer`, `passcode`, `hmac_key`...: each was stored as written (in the code, the
    template, a parameter's value and a text quoting the code). Now a secret parameter, in no
    stored form (docs/normalization.md, Secrets)."""
    secret = "hunter2corral"
    result, text = _captured(code, language, secret)
    assert result.parse_ok, result.fallback_reason
    assert secret not in _stored_forms_of(result)
    assert secret not in text


@pytest.mark.parametrize(
    "text",
    [
        # a JSON body inside a JSON string: a tool's arguments, an error quoting a request
        '{"body": "{\\"password\\": \\"{}\\", \\"user\\": \\"bob\\"}"}',
        'POST /login failed: {\\"api_key\\":\\"{}\\"}',
        # a template literal's value
        "await mcp.call({password: `${a}{}`})",
        # a JDBC pair quoted in an intent or an error
        'jaydebeapi.connect(d, url, ["bob", "{}"]) raised DatabaseError',
        'connect("org.h2.Driver", "jdbc:h2:mem:x", ("bob", "{}"))',
        'connect(d, url, driver_args=["bob", "{}"])',
        # SQL quoted in an error
        "ERROR at CREATE ROLE bob WITH LOGIN PASSWORD '{}'",
        "ALTER USER bob IDENTIFIED BY '{}' failed",
    ],
)
def test_free_text_loses_escaped_json_fields_template_values_and_jdbc_pairs(text: str) -> None:
    """Free text (an intent, an error, arguments) with no code flagging the value: the
    core's text rules alone redact it (docs/capture.md, Secrets)."""
    secret = "hunter2corral"
    prepared = prepare_captures([("x = 1", "python", [text.replace("{}", secret)])])[0]
    assert not isinstance(prepared, Exception)
    (redacted,) = prepared[1]
    assert secret not in redacted
    assert "[REDACTED]" in redacted


def test_ordinary_code_and_text_near_the_new_rules_keep_their_values() -> None:
    """No false positive: ordinary names, a default that is no credential's, a list given to
    another call, and JSON inside a string without a credential's name."""
    for language, code in [
        ("python", "tokens = tokenize(text)\npassword_length = 12"),
        ("python", 'keyboard.press("Enter")'),
        ("python", 'setattr(cfg, "name", "alice")'),
        ("python", 'home = os.getenv("HOME", "/root")'),
        ("python", 'c = Client(path=os.getenv("P", "/tmp/x"))'),
        ("python", 'pair = ["a", "b"]\ndb = sqlite3.connect("a.db", 5, pair)'),
        ("python", 'creds = ["bob", "pw", "x"]\nc = jaydebeapi.connect(d, url, creds)'),
        ("javascript", 'const spec = {bearerFormat: "JWT", scheme: "bearer"};'),
    ]:
        _assert_kept_whole(code, language)
    texts = [
        '{"body": "{\\"user\\": \\"bob\\", \\"max_tokens\\": 5}"}',
        'sqlite3.connect("a.db", 5, ["a", "b"])',
        "keyboard.press(`Enter`)",
    ]
    prepared = prepare_captures([("x = 1", "python", texts)])[0]
    assert not isinstance(prepared, Exception)
    assert prepared[1] == texts


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("go", 'os.Setenv("API_KEY", "{}")'),
        ("go", 'req.Header.Set("X-Api-Key", "{}")'),
        ("java", 'props.setProperty("password", "{}");'),
        ("java", 'Connection c = DriverManager.getConnection(url, "bob", "{}");'),
        ("php", '$pdo = new PDO($dsn, "bob", "{}");'),
        ("sql", "CREATE USER bob WITH PASSWORD '{}';"),
        ("sql", "ALTER USER bob IDENTIFIED BY '{}';"),
        ("python", "cur.execute(\"CREATE USER 'bob'@'%' IDENTIFIED BY '{}'\")"),
        ("javascript", "await db.query(\"ALTER ROLE bob WITH LOGIN PASSWORD '{}'\");"),
        ("yaml", "environment:\n  - POSTGRES_PASSWORD: {}\n  - POSTGRES_USER: bob"),
        ("bash", "kubectl create secret generic s --from-literal=password={}"),
        ("python", 'requests.get(url, headers={{"Ocp-Apim-Subscription-Key": "{}"}})'),
    ],
)
def test_a_credential_named_by_its_sibling_or_written_in_sql_is_redacted(
    language: str, code: str
) -> None:
    """Code the fallback tokenizer reads (Go, Java, PHP, SQL, YAML, shell): a value after a
    string naming a credential, at a login call's password position, after SQL's `PASSWORD`
    or `IDENTIFIED BY`, a YAML mapping's value, a flag's `NAME=value`: each was stored as
    written. Now a secret parameter (docs/normalization.md, Secrets)."""
    secret = "hunter2corral"
    result, _ = _captured(code, language, secret, braces=True)
    assert secret not in _stored_forms_of(result)
    assert any(p.secret for p in result.params)
