"""Every RPC of PmlService against a real server on a loopback port."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pml_server import cli
from pml_server._proto.pml.v1 import resources_pb2 as r
from pml_server.api.admission import budget
from pml_server.api.server import RunningServer
from pml_server.client import PmlClient, PmlClientError, make_record
from pml_server.domain.errors import InvalidArgumentError
from pml_server.domain.model import SuggestContext
from pml_server.retention import RetentionConfig
from pml_server.service._sessions import check_context
from pml_server.storage.keys import COLUMN_FAMILIES
from testing.store_reads import intents_read
from tests.conftest import StartServer
from tests.support import files_holding

READ_JSON = "const d = await mcp.read_file({path: 'a.json'}); return mcp.parse_json(d)"
WRITE_JSON = "await mcp.write_file({path: 'o.json', data: JSON.stringify(x)})"


class _Listing(Protocol):
    @property
    def next_page_token(self) -> str: ...


_Page = TypeVar("_Page", bound=_Listing)


def _seed(client: PmlClient) -> tuple[r.CaptureResult, r.CaptureResult]:
    read = client.record(
        make_record(
            "Read JSON file", READ_JSON, tools=["read_file", "parse_json"], request_id="seed-1"
        )
    )
    write = client.record(
        make_record("Write JSON file", WRITE_JSON, tools=["write_file"], request_id="seed-2")
    )
    return read, write


def test_record_saves_then_counts(client: PmlClient) -> None:
    first, _ = _seed(client)
    assert first.outcome == r.CAPTURE_OUTCOME_SAVED
    assert first.new_pattern
    assert first.pattern.startswith("patterns/")
    assert first.capability.startswith("capabilities/")
    again = client.record(
        make_record("Read JSON file", READ_JSON, tools=["read_file", "parse_json"])
    )
    assert again.outcome == r.CAPTURE_OUTCOME_COUNTED
    assert not again.new_pattern
    assert again.pattern == first.pattern
    assert client.get_pattern(first.pattern).usage_count == 2


def test_python_fstrings_without_a_field_are_values_like_any_string(client: PmlClient) -> None:
    """`f"a.json"` is the string `a.json` (docs/normalization.md, Parameters): two runs with
    other values are one pattern with a parameter, as with `"a.json"`; an f-string with a
    replacement field is code, so other expressions in it are other patterns."""

    def run(code: str) -> r.CaptureResult:
        return client.record(make_record("Read the file", code, language="python"))

    first = run("data = await mcp.read_file(path=f'a.json')")
    again = run('data = await mcp.read_file(path=F"b.json")')
    plain = run("data = await mcp.read_file(path='c.json')")
    assert (first.outcome, again.outcome, plain.outcome) == (
        r.CAPTURE_OUTCOME_SAVED,
        r.CAPTURE_OUTCOME_COUNTED,
        r.CAPTURE_OUTCOME_COUNTED,
    )
    assert first.pattern == again.pattern == plain.pattern
    stored = client.get_pattern(first.pattern)
    assert stored.template == "data = await mcp.read_file(path=$PATH)"
    assert [p.name for p in stored.parameters] == ["$PATH"]
    field = run("data = await mcp.read_file(path=f'{name}.json')")
    other = run("data = await mcp.read_file(path=f'{other}.json')")
    assert field.pattern != other.pattern != first.pattern != field.pattern
    assert (
        client.get_pattern(field.pattern).template
        == "data = await mcp.read_file(path=f'{name}.json')"
    )


@pytest.mark.parametrize(
    "command",
    [
        "mysql -h db -u root -p{}",
        "/usr/bin/mariadb -p'{}'",
        "sudo mysqldump --opt -p{}",
        "sshpass -p {} ssh deploy@h",
        "docker login -u bob -p {} registry.io",
        "redis-cli -a {}",
    ],
)
def test_a_password_given_to_a_commands_short_flag_is_never_stored(
    client: PmlClient, command: str
) -> None:
    """mysql and its tools take the password attached to `-p` (`-pSECRET`), sshpass and
    `docker login` after `-p`, redis-cli after `-a`: like `--password SECRET`, it is a secret
    parameter (docs/normalization.md, Secrets), in neither the stored template nor the
    original code, and two runs with other passwords are one pattern. The flag of other
    commands (`mkdir -p`, `ssh -p 22`) is no password."""
    passwords = ["Tr0ub4dor-horse-42x", "an0ther!secret-9"]
    results = []
    for password in passwords:
        code = f"{command.format(password)} shop < dump.sql && mkdir -p out"
        results.append(client.record(make_record("Load the dump", code, language="bash")))
    outcomes = [(x.outcome, x.pattern) for x in results]
    assert outcomes == [
        (r.CAPTURE_OUTCOME_SAVED, results[0].pattern),
        (r.CAPTURE_OUTCOME_COUNTED, results[0].pattern),
    ]
    stored = client.get_pattern(results[0].pattern)
    for password in passwords:
        assert password not in stored.template + stored.original_code
        assert password not in str(stored)
    assert command.split("{}")[0].rstrip("'") in stored.original_code
    assert "$PASSWORD" in stored.template
    plain = "mkdir -p out && ssh -p 2222 host && mysql -p shop && grep -pqx f && docker run -p w i"
    kept = client.get_pattern(client.record(make_record("Other", plain, language="bash")).pattern)
    assert kept.original_code == plain
    assert [p.secret for p in kept.parameters] == [False] * len(kept.parameters)


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", 'subprocess.run("sshpass -p {} ssh deploy@h uptime", shell=True)'),
        ("python", 'os.system("mysql -u root -p{} shop < dump.sql")'),
        ("javascript", 'execSync("curl -u bob:{} https://api.internal/v1")'),
        ("python", 'subprocess.run(["bash", "-c", "tool --token {} run"])'),
    ],
)
def test_a_shell_command_in_a_string_keeps_its_password_out_of_the_store(
    client: PmlClient, language: str, code: str
) -> None:
    """Agent code runs shell commands from a string (`subprocess.run("...")`): a credential the
    command line writes as a shell does (docs/normalization.md, Secrets) makes the string a
    secret parameter, so the password is in no stored form, recent values included."""
    passwords = ["Tr0ub4dor-horse-42x", "an0ther-secret-9"]
    results = [
        client.record(make_record("Run the command", code.format(p), language=language))
        for p in passwords
    ]
    assert results[1].pattern == results[0].pattern
    stored = client.get_pattern(results[0].pattern)
    for password in passwords:
        assert password not in str(stored)
    assert [p.secret for p in stored.parameters][-1]


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", 'r = mcp.login(token=f"{prefix}{}")'),
        ("python", 'r = mcp.login(password=f"{user}:{}")'),
        ("javascript", "const r = await mcp.login({token: `${prefix}{}`})"),
        ("typescript", "const password = `${user}:{}`; await mcp.login({password})"),
    ],
)
def test_an_interpolated_credential_keeps_its_literal_text_out_of_the_store(
    client: PmlClient, language: str, code: str
) -> None:
    """An f-string or template string given as a credential keeps its interpolations and none
    of its literal text in the stored template, code or parameters (docs/normalization.md,
    Secrets)."""
    secret = "s3cr3tvalue99-horse"
    result = client.record(
        make_record("Log in", code.replace("{}", secret), tools=["login"], language=language)
    )
    stored = client.get_pattern(result.pattern)
    assert secret not in str(stored)
    assert "[REDACTED]" in stored.template
    assert "[REDACTED]" in stored.original_code
    assert "{user}" in stored.original_code or "{prefix}" in stored.original_code


def _families_holding(server: RunningServer, secret: str) -> list[str]:
    """The server's store families with a row (key or value) holding `secret`."""
    store = server.engine._state.store  # type: ignore[attr-defined]
    return [
        cf
        for cf in COLUMN_FAMILIES
        for key, value in store.scan(cf, b"")
        if secret.encode() in key or secret.encode() in value
    ]


def test_a_credential_written_as_a_field_in_free_text_reaches_no_stored_row(
    client: PmlClient, server: RunningServer
) -> None:
    """A credential the code never holds (`password=pw`) but the intent, a tool's arguments or
    its error write as a field (`password: ...`, `{"password": "..."}`, `{'api_key': '...'}`,
    `Authorization: Basic ...`) is in no stored row of the server's store
    (docs/capture.md, Secrets)."""
    secret = "Tr0ub4dor-field-42x"
    record = make_record(
        f"log in to the portal, password: {secret}",
        "r = await mcp.login(user=name, password=pw)",
        language="python",
        tools=["login"],
        failed_tools=[
            ("login", f"rejected {{'api_key': '{secret}'}}, Authorization: Basic {secret}")
        ],
        arguments_json=f'{{"user": "bob", "password": "{secret}"}}',
    )
    client.record(record)
    assert _families_holding(server, secret) == []


@pytest.mark.parametrize(
    "prose",
    [
        "my password is {}",
        "reset the password to {} please",
        "mein Passwort ist {}",
        "我的密码是{}，谢谢",
    ],
)
def test_a_password_written_in_prose_reaches_no_stored_row(
    client: PmlClient, server: RunningServer, prose: str
) -> None:
    """A password an intent, a tool's arguments or error, or a string of the code writes in
    prose after its name and a link word is in no stored row (docs/normalization.md,
    Secrets)."""
    secret = "Winter2024x"
    said = prose.format(secret)
    record = make_record(
        f"email the admin: {said}",
        f"await mcp.send_email({{to: 'admin', body: {json.dumps(said)}}})",
        tools=["send_email"],
        failed_tools=[("send_email", f"rejected: {said}")],
        arguments_json=json.dumps({"to": "admin", "body": said}),
    )
    client.record(record)
    assert _families_holding(server, secret) == []


@pytest.mark.parametrize(
    ("intent", "error"),
    [
        ("connect, pwd: {}", ""),
        ("connect", 'rejected {{"args": "db_pass={} host=db"}}'),
        ("connect", "mysql -u bob -p{} db: access denied"),
        ("connect", "`curl -u bob:{} https://x` exited 22"),
        ("connect", "sshpass -p '{}' ssh h: exit 5"),
        ("connect", "deploy --pass {}: unknown host"),
        ("connect", "401 for Cookie: a=1; session={}"),
        ("connect", 'bad env [{{"name": "DB_PASSWORD", "value": "{}"}}]'),
        ("connect", "bad env:\n- name: API_TOKEN\n  value: {}\n"),
        ("connect", 'bad env [{{"value": "{}", "name": "DB_PASSWORD"}}]'),
        ("connect", "bad env:\n- value: {}\n  name: API_TOKEN\n"),
    ],
)
def test_a_credential_a_command_line_or_a_sibling_names_in_free_text_reaches_no_stored_row(
    client: PmlClient, server: RunningServer, intent: str, error: str
) -> None:
    """A credential the intent or a tool's error writes after a short name (`pwd:`,
    `db_pass=`), in a command line (`mysql -pSECRET`, `curl -u bob:SECRET`, `sshpass -p`,
    `--pass`), in a `Cookie:` header after the first cookie, or as the `value` of an entry
    whose `name` is a credential's, before or after it, is in no stored row
    (docs/normalization.md, Secrets)."""
    secret = "hunter2hunter"  # short, low entropy: no token rule flags it alone
    record = make_record(
        intent.format(secret),
        "r = await mcp.login(user=name)",
        language="python",
        failed_tools=[("login", error.format(secret) or "refused")],
    )
    client.record(record)
    assert _families_holding(server, secret) == []


def test_a_curl_users_password_leaves_the_failure_log_but_the_user_stays(
    client: PmlClient, server: RunningServer
) -> None:
    """`curl -u bob:SECRET` in a tool's error loses the password, not the user; `curl -u bob`
    (curl asks for the password) keeps the user (docs/normalization.md, Secrets)."""
    secret = "hunter2hunter2"
    client.record(
        make_record(
            "connect",
            "r = await mcp.login(user=name)",
            language="python",
            failed_tools=[("login", f"`curl -u bob:{secret} https://x` then `curl -u ann h`")],
            request_id="curl-1",
        )
    )
    assert [f.error for f in client.list_failures().failures] == [
        "`curl -u bob:[REDACTED] https://x` then `curl -u ann h`"
    ]
    assert _families_holding(server, secret) == []


def test_a_uid_and_gid_given_to_docker_run_is_no_secret(client: PmlClient) -> None:
    """`docker run -u 1000:1000` gives a uid and a gid, not a user and a password: kept as
    written; `curl -u bob:pw` stays a secret (docs/normalization.md, Secrets)."""
    code = "docker run -u 1000:1000 -v /data:/data img && curl -u bob:Tr0ub4dor-42x https://x"
    stored = client.get_pattern(client.record(make_record("Run", code, language="bash")).pattern)
    assert "docker run -u 1000:1000" in stored.original_code
    assert "Tr0ub4dor-42x" not in str(stored)
    assert [p.name for p in stored.parameters if p.secret] == ["$USER"]


def test_repeated_request_id_counts_once(client: PmlClient) -> None:
    first, _ = _seed(client)
    replay = client.record(
        make_record(
            "Read JSON file", READ_JSON, tools=["read_file", "parse_json"], request_id="seed-1"
        )
    )
    assert replay.replayed
    assert replay.pattern == first.pattern
    assert client.get_pattern(first.pattern).usage_count == 1


def test_new_pattern_with_failed_tool_is_rejected_and_logged(client: PmlClient) -> None:
    result = client.record(
        make_record(
            "Mail the boss",
            "await mcp.gmail_get({})",
            tools=["memory_search"],
            failed_tools=[("gmail:get", "not connected")],
            request_id="fail-1",
        )
    )
    assert result.outcome == r.CAPTURE_OUTCOME_REJECTED
    assert not result.pattern
    assert [(f.tool, f.error) for f in result.tool_failures] == [("gmail:get", "not connected")]
    failures = client.list_failures().failures
    assert [(f.tool, f.request_id) for f in failures] == [("gmail:get", "fail-1")]
    assert client.stats().rejected == 1


def test_suggest_returns_score_parts(client: PmlClient) -> None:
    read, _ = _seed(client)
    reply = client.suggest("Read JSON file", k=3)
    assert reply.suggestions, "a stored intent must be suggested for the same words"
    best = reply.suggestions[0]
    assert best.capability == read.capability
    assert best.pattern.name == read.pattern
    assert list(best.pattern.tools_used) == ["read_file", "parse_json"]
    assert best.score.total > 0
    assert 0 < best.score.match <= 1


def test_get_list_delete_pattern(client: PmlClient) -> None:
    read, write = _seed(client)
    pattern = client.get_pattern(read.pattern)
    assert pattern.original_code == READ_JSON
    assert pattern.language == "typescript"
    names = {p.name for p in client.iter_patterns(page_size=1)}
    assert names == {read.pattern, write.pattern}
    client.delete_pattern(read.pattern)
    with pytest.raises(PmlClientError) as err:
        client.get_pattern(read.pattern)
    assert err.value.code is grpc.StatusCode.NOT_FOUND
    assert {p.name for p in client.iter_patterns()} == {write.pattern}
    assert all(s.pattern.name != read.pattern for s in client.suggest("Read JSON file").suggestions)


def test_get_list_delete_capability(client: PmlClient) -> None:
    read, write = _seed(client)
    capability = client.get_capability(read.capability)
    assert list(capability.tools) == ["read_file", "parse_json"]
    assert read.pattern in capability.patterns
    assert {c.name for c in client.iter_capabilities(page_size=1)} == {
        read.capability,
        write.capability,
    }
    client.delete_capability(read.capability)
    with pytest.raises(PmlClientError) as err:
        client.get_capability(read.capability)
    assert err.value.code is grpc.StatusCode.NOT_FOUND
    with pytest.raises(PmlClientError):
        client.get_pattern(read.pattern)


@pytest.mark.parametrize("what", ["pattern", "capability"])
def test_a_deleted_pattern_leaves_the_stores_files_before_the_answer(
    what: str, client: PmlClient, data_dir: Path
) -> None:
    """A user's DeletePattern or DeleteCapability answers once the pattern's code, intents and
    recent values are in no file of the data directory (the write-ahead log and RocksDB's
    table files held them: docs/storage.md, Data left on disk); what was not deleted stays."""
    gone, kept = "zqxjkvb-framboise-ledger", "wvtplmq-myrtille-ledger"
    deleted = client.record(
        make_record(
            f"open the {gone} of Mme Dupont",
            f"await mcp.read_ledger({{owner: 'Mme Dupont', path: '{gone}.json'}})",
            tools=["read_ledger"],
        )
    )
    other = client.record(
        make_record(
            f"open the {kept}",
            f"await mcp.read_ledger({{path: '{kept}.json', year: 2024}})",
            tools=["read_ledger"],
        )
    )
    assert other.pattern != deleted.pattern
    assert files_holding(data_dir, gone)  # in the write-ahead log, at least
    if what == "pattern":
        client.delete_pattern(deleted.pattern)
    else:
        client.delete_capability(deleted.capability)
    assert files_holding(data_dir, gone) == []
    if what == "pattern" or other.capability != deleted.capability:
        assert files_holding(data_dir, kept)
        assert client.get_pattern(other.pattern).usage_count == 1
    else:
        assert files_holding(data_dir, kept) == []


def _failures_by_page(client: PmlClient, page_size: int) -> list[tuple[str, str]]:
    listed, token = [], ""
    while True:
        page = client.list_failures(page_size=page_size, page_token=token)
        listed += [(f.request_id, f.error) for f in page.failures]
        token = page.next_page_token
        if not token:
            return listed


def test_a_users_deletion_erases_the_failure_log_entries_of_its_runs(
    client: PmlClient, data_dir: Path
) -> None:
    """The failure log kept a deleted pattern's failed runs (their intent and tool error) in
    its listing and in the store's files. A user's deletion erases them, and its code's
    rejected first tries; the other entries stay, in order, on every page size; the count of
    failures logged does not change (docs/storage.md, Data left on disk). The tool errors stay
    in the requests' idempotency answers until they expire (the same doc)."""
    gone, kept = "qzvnx-groseille", "kwpmr-airelle"
    code = "await mcp.post_invoice({id: 7})"

    def run(request_id: str, marker: str, code: str, error: str = "") -> r.CaptureResult:
        tool = code.split("(")[0].removeprefix("await mcp.")
        failed = [(tool, error)] if error else []
        return client.record(
            make_record(
                f"post the {marker} invoice",
                code,
                tools=[] if error else [tool],
                failed_tools=failed,
                request_id=request_id,
            )
        )

    run("k1", kept, "await mcp.void_invoice({id: 8})", error="502 from billing")
    run("g1", gone, code, error="502 from billing")  # a rejected first try of the code
    deleted = run("g2", gone, code)
    run("k2", kept, "await mcp.void_invoice({id: 8})", error="502 from billing")
    run("g3", gone, code, error="502 from billing")  # a failed try of the pattern
    run("k3", kept, "await mcp.mail_invoice({id: 9})", error="502 from billing")
    assert [i for i, _ in _failures_by_page(client, 10)] == ["k3", "g3", "k2", "g1", "k1"]
    logged = client.stats().failures_logged
    client.delete_pattern(deleted.pattern)
    for size in (1, 2, 10):
        assert [i for i, _ in _failures_by_page(client, size)] == ["k3", "k2", "k1"]
    assert client.stats().failures_logged == logged
    assert files_holding(data_dir, gone) == []
    assert files_holding(data_dir, kept)


def test_pages_cover_everything_once(client: PmlClient) -> None:
    made = {
        client.record(make_record(f"task {i}", f"await mcp.t{i}({{}})", tools=[f"t{i}"])).pattern
        for i in range(7)
    }
    first = client.list_patterns(page_size=3)
    assert len(first.patterns) == 3
    assert first.next_page_token
    assert {p.name for p in client.iter_patterns(page_size=3)} == made


def test_retention_dry_run_and_apply(client: PmlClient) -> None:
    _seed(client)
    dry = client.run_retention()
    assert dry.dry_run
    assert dry.run_time.seconds > 0
    applied = client.run_retention(apply=True)
    assert not applied.dry_run


def test_a_retention_answer_lists_what_fits_and_applies_every_action(
    start: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RunRetention answered one entry per action, with no bound: a store with a million
    patterns due for removal answered past the gRPC message limit (and the client's). Now the
    answer lists what fits its byte budget and at most `LIMITS.retention_entries`, says how
    many actions there were and that the list is cut; every action is still applied."""
    retention = RetentionConfig(min_tries=2, min_success_rate=0.9, auto_remove=True)
    server = start(retention=retention)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        for i in range(12):  # 12 patterns of 1 success in 2 tries: each removed
            code = f"await mcp.tool_{i}({{}})"
            client.record(make_record(f"task {i}", code, tools=[f"tool_{i}"]))
            failed = [(f"tool_{i}", "timeout")]
            client.record(make_record(f"task {i}", code, failed_tools=failed))
        whole = client.run_retention()
        assert len(whole.entries) == 12
        assert (whole.total_actions, whole.truncated) == (12, False)
        sizes = [e.ByteSize() for e in whole.entries]
        # Room for the first three entries only (as a listing page's byte budget).
        monkeypatch.setattr(budget, "RESPONSE_BYTES", sum(sizes[:3]) + sizes[3] - 1)
        cut = client.run_retention()
        assert list(cut.entries) == list(whole.entries[:3])
        assert (cut.total_actions, cut.truncated) == (12, True)
        monkeypatch.undo()
        monkeypatch.setattr(budget, "RETENTION_ENTRIES", 5)
        applied = client.run_retention(apply=True)
        assert not applied.dry_run
        assert list(applied.entries) == list(whole.entries[:5])
        assert all(e.action == r.RETENTION_ACTION_REMOVED for e in applied.entries)
        assert (applied.total_actions, applied.truncated) == (12, True)
        assert client.stats().patterns == 0  # all 12 applied, 5 listed
        after = client.run_retention()
        assert (len(after.entries), after.total_actions, after.truncated) == (0, 0, False)


def test_stats_count_the_tenant(client: PmlClient) -> None:
    _seed(client)
    stats = client.stats()
    assert (stats.patterns, stats.capabilities) == (2, 2)
    assert stats.executions == 2
    assert stats.intents >= 2


def test_health_serves_after_ready_and_reports_not_serving_on_stop(
    server: RunningServer,
) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        for _ in range(100):
            reply = stub.Check(health_pb2.HealthCheckRequest(service="pml.v1.PmlService"))
            if reply.status == health_pb2.HealthCheckResponse.SERVING:
                break
            server._stopped.wait(0.05)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def _every_page(ask: Callable[[str], _Page]) -> list[_Page]:
    """Every page of a listing, `ask(token)` giving the page after `token` ("" first)."""
    pages = [ask("")]
    while pages[-1].next_page_token:
        pages.append(ask(pages[-1].next_page_token))
    return pages


def test_a_failure_log_of_long_errors_pages_within_a_default_clients_limit(
    client: PmlClient, channel: grpc.Channel
) -> None:
    """300 rejected records with 16 KB errors: ListFailures(page_size=1000) answered one 5 MB
    message, and a client with gRPC's default 4 MiB receive limit (grpcurl, Go, Node, a plain
    stub) got RESOURCE_EXHAUSTED for the whole listing. Now a page ends early with a token,
    and the pages hold every failure once."""
    from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc

    for i in range(300):
        record = make_record(
            f"fail loudly {i}", f"await mcp.loud{i}()", failed_tools=[(f"loud{i}", "E" * 16_000)]
        )
        client.record(record)
    stub = pml_pb2_grpc.PmlServiceStub(channel)  # gRPC's default limits
    pages = _every_page(
        lambda token: stub.ListFailures(
            pml_pb2.ListFailuresRequest(page_size=1000, page_token=token), timeout=30
        )
    )
    seen = [f.request_id for page in pages for f in page.failures]
    assert len(pages) >= 2
    assert len(seen) == len(set(seen)) == 300


def test_an_explained_suggest_is_read_within_a_default_clients_limit(start: StartServer) -> None:
    """With `explain`, a candidate the `available_tools` filter removed comes with every tool
    it needs that the caller cannot reach, and a pattern may call 1024 distinct tools of 256
    characters: a quarter MB of detail each. The filtered candidates were outside the answer's
    byte budget: 20 such patterns made a 5 MB answer even for 5 suggestions, and a client with
    gRPC's default 4 MiB receive limit got RESOURCE_EXHAUSTED. Now each detail is cut and the
    filtered candidates count in the budget (docs/api.md, Suggest)."""
    from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc

    server = start(max_tool_calls=1024, max_code_bytes=512 * 1024)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        for n in range(20):
            tools = [f"sync{n}_{i}_".ljust(256, "x") for i in range(1024)]
            code = "\n".join(f"await mcp.{t}({{}});" for t in tools)
            intent = f"synchronize the warehouse inventory ledger {n}"
            assert client.record(make_record(intent, code, "javascript", tools=tools)).pattern
    request = pml_pb2.SuggestRequest(
        intent="synchronize the warehouse inventory ledger", page_size=5, explain=True
    )
    request.available_tools.tools.append("read_file")
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pml_pb2_grpc.PmlServiceStub(channel)  # gRPC's default limits
        reply = stub.Suggest(request, timeout=60)
    assert not reply.suggestions
    assert len(reply.filtered) == 20
    for filtered in reply.filtered:
        assert filtered.rule == "available_tools"
        assert filtered.detail.startswith("needs tools the caller cannot reach: sync")
        assert len(filtered.detail) <= budget.TRIMMED_DETAIL_CHARS + 64
        assert filtered.detail.endswith("more characters)")


def test_a_pattern_of_many_long_intents_is_read_within_a_default_clients_limit(
    client: PmlClient,
    channel: grpc.Channel,
    server: RunningServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1100 distinct intents of 4,000 characters on one pattern (storage keeps every one):
    GetPattern answered them all, 4.5 MB, and a client with gRPC's default 4 MiB receive limit
    got RESOURCE_EXHAUSTED, never the pattern. Now it answers those of most hits that fit, with
    `intent_count` and `truncated`, and ListPatternIntents pages through each intent once."""
    import random

    from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc

    rng = random.Random(7)
    texts = set()
    for _ in range(1100):
        intent = " ".join(f"w{rng.randrange(10**9)}" for _ in range(400))[:4000]
        texts.add(intent)
        saved = client.record(make_record(intent, READ_JSON, tools=["read_file", "parse_json"]))
    name = saved.pattern
    stub = pml_pb2_grpc.PmlServiceStub(channel)  # gRPC's default limits
    got = stub.GetPattern(pml_pb2.GetPatternRequest(name=name), timeout=30).pattern
    assert got.intent_count == 1100
    assert 0 < len(got.intents) < 1100
    assert got.truncated
    assert got.usage_count == 1100  # the rest of the pattern is whole
    assert got.original_code == READ_JSON
    pages = _every_page(
        lambda token: stub.ListPatternIntents(
            pml_pb2.ListPatternIntentsRequest(parent=name, page_size=1000, page_token=token),
            timeout=30,
        )
    )
    assert len(pages) >= 2
    listed = [i for page in pages for i in page.intents]
    assert len({i.id for i in listed}) == len(listed) == 1100
    assert {i.text for i in listed} == texts
    assert {i.id for i in got.intents} <= {i.id for i in listed}
    assert [i.text for i in client.iter_pattern_intents(name)] == [i.text for i in listed]
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as shown:
        cli.main(["show", name, "--server", f"127.0.0.1:{server.port}"])
    assert shown.value.code == 0
    assert f"{len(got.intents)} of 1100 shown" in capsys.readouterr().out


def test_a_list_pattern_intents_page_reads_only_its_rows(
    client: PmlClient, server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pattern of 80 intents: a page of 10 read all 80 stored intents (the whole pattern was
    read, then cut); now one range scan of 11 rows (the page and whether more follow), and the
    pages still list each intent once, oldest first."""
    for n in range(80):
        saved = client.record(make_record(f"load w{n}x{n * 7}q now w{n}z", READ_JSON))
    store = server.engine._state.store  # type: ignore[attr-defined]
    read = intents_read(store, monkeypatch)
    page = client.list_pattern_intents(saved.pattern, page_size=10)
    assert len(page.intents) == 10
    assert sum(read) <= 11
    listed = [i.id for i in client.iter_pattern_intents(saved.pattern)]
    assert listed == sorted(set(listed))
    assert len(listed) == 80


def test_list_pattern_intents_refuses_what_it_cannot_list(client: PmlClient) -> None:
    first, write = _seed(client)
    page = client.list_pattern_intents(first.pattern)
    assert [i.text for i in page.intents] == ["Read JSON file"]
    assert page.next_page_token == ""
    whole = client.get_pattern(first.pattern)
    assert (whole.intent_count, whole.truncated) == (1, False)
    for parent, field in (("capabilities/x", "parent"), ("", "parent")):
        with pytest.raises(PmlClientError) as refused:
            client.list_pattern_intents(parent)
        assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert field in dict(refused.value.violations)
    with pytest.raises(PmlClientError) as missing:
        client.list_pattern_intents("patterns/nope")
    assert missing.value.code is grpc.StatusCode.NOT_FOUND
    for i in range(3):
        client.record(make_record(f"Load the JSON data {i} q{i * 7919}", READ_JSON))
    token = client.list_pattern_intents(first.pattern, page_size=1).next_page_token
    assert token
    # A token of one pattern's intents is no token for another's listing.
    with pytest.raises(PmlClientError) as foreign:
        client.list_pattern_intents(write.pattern, page_token=token)
    assert foreign.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert "page_token" in dict(foreign.value.violations)


def test_list_patterns_of_a_capability(client: PmlClient) -> None:
    """ListPatterns with `capability` pages through that capability's patterns only, by id
    (docs/api.md, Capabilities); GetCapability counts them all in `pattern_count`."""
    read, write = _seed(client)
    for i in range(2):
        code = READ_JSON + f"; d.f{i}"
        tools = ["read_file", "parse_json"]
        client.record(make_record("Read JSON file", code, tools=tools, request_id=f"v{i}"))
    capability = client.get_capability(read.capability)
    assert capability.pattern_count == 3
    members = [p.name for p in client.iter_patterns(page_size=1, capability=read.capability)]
    assert members == sorted(capability.patterns)
    assert write.pattern not in members
    assert [p.name for p in client.iter_patterns(capability=write.capability)] == [write.pattern]
    for bad in ("patterns/x", "capabilities/"):
        with pytest.raises(PmlClientError) as refused:
            client.list_patterns(capability=bad)
        assert refused.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert "capability" in dict(refused.value.violations)
    with pytest.raises(PmlClientError) as missing:
        client.list_patterns(capability="capabilities/nope")
    assert missing.value.code is grpc.StatusCode.NOT_FOUND
    # A token of one capability's listing is no token for another listing.
    token = client.list_patterns(page_size=1, capability=read.capability).next_page_token
    assert token
    for other in (write.capability, ""):
        with pytest.raises(PmlClientError) as foreign:
            client.list_patterns(page_token=token, capability=other)
        assert foreign.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert "page_token" in dict(foreign.value.violations)


def test_capabilities_of_long_intents_page_within_a_default_clients_limit(
    client: PmlClient, channel: grpc.Channel
) -> None:
    """A capability answers up to 50 intents of 4 KiB: 24 such took ListCapabilities past 4 MiB
    in one page (6.3 MB for 81 measured against a grpcurl client: RESOURCE_EXHAUSTED for the
    whole listing). Now a page ends early with a token, and the pages hold each once."""
    from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc

    for c in range(24):
        intent = (f"topic{c} " + "summarize the quarterly report for the board " * 100)[:4000]
        for i in range(50):
            code = f"await mcp.ct{c}({{k{i}: 'x'}})"
            client.record(make_record(f"{intent} {i}", code, tools=[f"ct{c}"]))
    stub = pml_pb2_grpc.PmlServiceStub(channel)  # gRPC's default limits
    pages = _every_page(
        lambda token: stub.ListCapabilities(
            pml_pb2.ListCapabilitiesRequest(page_size=1000, page_token=token), timeout=30
        )
    )
    seen = [c.name for page in pages for c in page.capabilities]
    assert len(pages) >= 2
    assert len(seen) == len(set(seen)) == client.stats().capabilities


GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("request_id", GITHUB_TOKEN, "credential"),
        ("request_id", "password=hunter2", "credential"),
        ("request_id", "run\n1", "printable ASCII"),
        ("request_id", "run\x001", "printable ASCII"),
        ("request_id", "run 1", "printable ASCII"),
        ("language", "AKIAIOSFODNN7EXAMPLE", "credential"),
        ("language", "python\n", "language's name"),
        ("language", "type script", "language's name"),
    ],
)
def test_a_request_id_or_language_holding_a_credential_or_a_control_character_is_refused(
    client: PmlClient, server: RunningServer, field: str, value: str, problem: str
) -> None:
    """A request id cannot be redacted without breaking idempotency, and a language is a short
    name: a credential-shaped one, control characters or spaces are refused naming the field
    (docs/api.md, Requests), and nothing of the value is stored."""
    record = make_record("Read JSON file", READ_JSON, tools=["read_file", "parse_json"])
    setattr(record, field, value)
    with pytest.raises(PmlClientError) as refused:
        client.record(record)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, d in refused.value.violations if problem in d] == [f"record.{field}"]
    assert client.stats().executions == 0


@pytest.mark.parametrize(
    ("tool", "shown"),
    [
        ("read\u202efile", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("read_file\u200b", "U+200B ZERO WIDTH SPACE"),
        ("read\x07file", "U+0007"),
        ("read\u2028file", "U+2028 LINE SEPARATOR"),
    ],
)
def test_a_tool_name_with_an_invisible_character_is_refused(
    client: PmlClient, tool: str, shown: str
) -> None:
    """A tool name holding a control or invisible character (a right-to-left override, a
    zero-width space) would show as another name: refused naming the field and the character,
    in a record and in a Suggest's tools (docs/api.md, Requests); nothing is stored."""
    record = make_record("Read JSON file", READ_JSON, tools=["parse_json", tool])
    with pytest.raises(PmlClientError) as refused:
        client.record(record)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, d in refused.value.violations if shown in d] == ["record.tool_calls[1].tool"]
    assert client.stats().executions == 0
    for asked, field in (
        ({"available_tools": ["parse_json", tool]}, "available_tools.tools[1]"),
        ({"previous_tools": [tool]}, "context.previous_tools[0]"),
    ):
        with pytest.raises(PmlClientError) as refused:
            client.suggest("Read JSON file", **asked)  # type: ignore[arg-type]
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert [f for f, d in refused.value.violations if shown in d] == [field]


def test_tool_names_in_any_script_are_taken(client: PmlClient) -> None:
    """Only control and invisible characters are refused: names in other scripts, accents and
    namespaces stay valid."""
    for n, tool in enumerate(["lire_fichier_é", "読み込み", "fs:read_file", "mcp__fs__read-file"]):
        client.record(make_record(f"Read JSON file {n}", READ_JSON, tools=[tool]))
    assert client.stats().executions == 4


def test_a_request_id_a_language_and_a_tag_of_ordinary_shapes_are_taken(
    client: PmlClient,
) -> None:
    """What callers send today stays valid: a UUID, an `otel:` id, a ULID, `c++`, `c#`."""
    for request_id, language in [
        ("3f1c2a9e-8d7b-4c6a-9e5f-1a2b3c4d5e6f", "typescript"),
        ("otel:0af7651916cd43dd8448eb211c80319c:b7ad6b7169203331", "python"),
        ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "c++"),
        ("job-42/step.3", "c#"),
    ]:
        record = make_record("Read JSON file", READ_JSON, tools=["read_file", "parse_json"])
        record.request_id, record.language = request_id, language
        record.tags.append("commit:a94a8fe5ccb19ba61c4c0873d391e987982fbbd3")
        client.record(record)
    assert client.stats().executions == 4


def test_a_credential_in_a_tag_or_a_tool_name_reaches_no_stored_row(
    client: PmlClient, server: RunningServer
) -> None:
    """Tags and tool names are redacted by the rules for names (a credential's shape, a pair
    named as one, a URL's password): `password=hunter2` and a GitHub token as a tag or a tool
    are stored redacted (docs/capture.md, Secrets)."""
    secret = "hunter2corral"
    record = make_record(
        "Read JSON file", "await mcp.read_file({path: 'a.json'})", tools=[GITHUB_TOKEN]
    )
    record.tags.extend([f"password={secret}", GITHUB_TOKEN])
    client.record(record)
    assert _families_holding(server, "password=[REDACTED]") != []
    assert _families_holding(server, secret) == []
    assert _families_holding(server, GITHUB_TOKEN) == []


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("javascript", "const q = sql`SELECT ${a} FROM u WHERE password={}`; await mcp.q({q})"),
        ("typescript", 'const q = gql`{ login(user: ${u}, token: "{}") }`; await mcp.q({q})'),
        ("javascript", 'const t = "{}";\nconst q = sql`WHERE password=${t}`; await mcp.q({q})'),
        ("python", 'q = f"{h} host=db password={}"\nawait mcp.q(q=q)'),
    ],
)
def test_a_credential_in_a_tagged_or_interpolated_template_reaches_no_stored_row(
    client: PmlClient, server: RunningServer, language: str, code: str
) -> None:
    """A template string's literal text holding a credential, or a variable interpolated where
    a credential's value goes, is stored redacted (docs/normalization.md, Secrets)."""
    secret = "hunter2corral"
    record = make_record("Query the users", code.replace("{}", secret, 1), language=language)
    result = client.record(record)
    assert "[REDACTED]" in client.get_pattern(result.pattern).original_code
    assert _families_holding(server, secret) == []


@pytest.mark.parametrize(
    "arguments",
    [
        {"command": "sshpass -p {} ssh deploy@h"},
        {"cmd": "mysql -u root -p{} db", "n": 1},
        {"content": "machine h\nlogin bob\npassword {}\n"},
        {"command": "aws configure set aws_secret_access_key {}"},
    ],
)
def test_a_credential_in_a_command_or_a_netrc_in_a_tools_arguments_reaches_no_stored_row(
    client: PmlClient, server: RunningServer, arguments: dict[str, object]
) -> None:
    """A tool's arguments are JSON, and its error often quotes them: a command line in a
    string value (a shell tool's `command`) and a `.netrc` written with escaped line breaks
    keep their passwords out of every stored row, the failure log's included
    (docs/normalization.md, Secrets)."""
    secret = "hunter2corral"
    written = json.dumps(arguments).replace("{}", secret)
    record = make_record(
        "Run the deploy",
        "await mcp.bash({command: cmd})",
        failed_tools=[("bash", f"exit 1 for {written}")],
        arguments_json=written,
    )
    client.record(record)
    assert _families_holding(server, secret) == []


@pytest.mark.parametrize(
    ("language", "code", "intent"),
    [
        ("python", 'subprocess.run(["mysql", "-u", "root", "-p{}", "db"])', "Dump the db"),
        ("python", 'subprocess.run(["curl", "-u", "bob:{}", "https://x"])', "Fetch x"),
        ("javascript", 'execFile("psql", ["--password={}", "-h", "db"])', "Query"),
        ("javascript", 'spawn("sshpass", ["-p", "{}", "ssh", "deploy@h"])', "Deploy"),
        ("python", "r = await mcp.login(user=name)", 'Log in with smtp.login("bob", "{}")'),
    ],
)
def test_a_password_in_an_argv_list_or_a_quoted_login_call_reaches_no_stored_row(
    client: PmlClient, server: RunningServer, language: str, code: str, intent: str
) -> None:
    """A literal list run as an argv is read as a command line, each item one word, and a
    login call quoted in the intent keeps its positional password out: neither the pattern
    nor the intent holds it (docs/normalization.md, Secrets)."""
    secret = "hunter2corral"
    record = make_record(
        intent.replace("{}", secret), code.replace("{}", secret), language=language
    )
    client.record(record)
    assert _families_holding(server, secret) == []


@pytest.mark.parametrize("pattern_id", [" ", "\t", "a/b", "pat_\x07", "x" * 257])
def test_a_pattern_id_is_read_by_one_rule_as_a_name_and_in_a_context(
    client: PmlClient, pattern_id: str
) -> None:
    """The {id} of `patterns/{id}` is refused by one rule wherever it is given: a blank id was
    NOT_FOUND as a name (GetPattern) and INVALID_ARGUMENT in a Suggest's `previous_patterns`;
    the engine's own check (in process) took an id holding `/`."""
    with pytest.raises(PmlClientError) as named:
        client.get_pattern(f"patterns/{pattern_id}")
    assert named.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, _ in named.value.violations] == ["name"]
    with pytest.raises(PmlClientError) as asked:
        client.suggest("Read JSON file", previous_patterns=[f"patterns/{pattern_id}"])
    assert asked.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, _ in asked.value.violations] == ["context.previous_patterns[0]"]
    context = SuggestContext(previous_patterns=(f"patterns/{pattern_id}",))
    with pytest.raises(InvalidArgumentError) as engine:
        check_context(context)
    assert [v.field for v in engine.value.violations] == ["context.previous_patterns"]


@pytest.mark.parametrize(
    ("tag", "shown"),
    [("team\u200b", "U+200B ZERO WIDTH SPACE"), ("a\x1bb", "U+001B"), ("x\u202ey", "U+202E")],
)
def test_a_tag_with_an_invisible_character_is_refused(
    client: PmlClient, tag: str, shown: str
) -> None:
    """A tag holding a control or invisible character would show as another tag (and filter
    as none): refused naming it, in a record and in a Suggest, as a tool name is; nothing is
    stored."""
    record = make_record("Read JSON file", READ_JSON, tools=["read_file"])
    record.tags.extend(["io", tag])
    with pytest.raises(PmlClientError) as refused:
        client.record(record)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, d in refused.value.violations if shown in d] == ["record.tags[1]"]
    assert client.stats().executions == 0
    with pytest.raises(PmlClientError) as asked:
        client.suggest("Read JSON file", tags=[tag])
    assert asked.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, d in asked.value.violations if shown in d] == ["tags[0]"]
