"""The typed client (pml-client) refuses a bad argument before any call, naming it: a
PmlClientError INVALID_ARGUMENT whose violation is that argument, as the server refuses a bad
field. The client here points at a port nothing listens on, without retries: an argument that
reached the network would answer UNAVAILABLE instead."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from pml_client import PmlClient, PmlClientError, make_record


@pytest.fixture(scope="module")
def nowhere() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"  # closed again: nothing listens there


def _client(target: str, **kwargs: object) -> Callable[[], object]:
    return lambda: PmlClient(target, **kwargs).stats()  # type: ignore[arg-type]


# (argument named, what was said before: the call that shows it)
CONSTRUCTOR = {
    "target": (5, "AttributeError from grpc"),
    "api_key": (5, "AttributeError"),
    "timeout": ("5", "TypeError at the first call"),
    "retries": ("3", "TypeError at the first failure"),
    "tls": ("no", "TLS turned on"),
    "root_certificates": (5, "AttributeError"),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTOR))
def test_a_constructor_argument_of_the_wrong_type_is_refused_naming_it(
    nowhere: str, name: str
) -> None:
    value, _before = CONSTRUCTOR[name]
    kwargs: dict[str, object] = {name: value} if name != "target" else {}
    target = value if name == "target" else nowhere
    with pytest.raises(PmlClientError) as err:
        _client(target, **kwargs)()  # type: ignore[arg-type]
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert [field for field, _ in err.value.violations] == [name]


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"target": ""}, "target"),  # UNKNOWN "the target uri is not valid"
        # each dialled, every call retried as of a server down; 99999 dialled port 34463
        ({"target": "127.0.0.1:99999"}, "target"),
        ({"target": "http://127.0.0.1:50051"}, "target"),
        ({"target": "127.0.0.1 :50051"}, "target"),
        ({"timeout": 0}, "timeout"),  # every call DEADLINE_EXCEEDED
        ({"timeout": -1.0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"timeout": 1e10}, "timeout"),  # every call DEADLINE_EXCEEDED at once
        ({"timeout": float("inf")}, "timeout"),
        ({"retries": -1}, "retries"),  # taken as none
    ],
)
def test_a_constructor_argument_out_of_range_is_refused_naming_it(
    nowhere: str, given: dict[str, object], field: str
) -> None:
    target = given.pop("target", nowhere)
    with pytest.raises(PmlClientError) as err:
        _client(target, **{"retries": 0, **given})()  # type: ignore[arg-type]
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert [f for f, _ in err.value.violations] == [field]


def test_a_tls_file_may_be_given_as_a_str(nowhere: str, tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate")
    with pytest.raises(PmlClientError) as err:
        PmlClient(nowhere, root_certificates=str(tmp_path / "ca.pem"))  # type: ignore[arg-type]
    assert err.value.violations[0][0] == "root_certificates"  # read, and found no PEM in it


CALLS: dict[str, Callable[[PmlClient], object]] = {
    # a lone str was taken as a sequence of one-character tags / tools
    "tags": lambda c: c.suggest("Load JSON", tags="io"),
    "available_tools": lambda c: c.suggest("x", available_tools="read_file"),
    "previous_tools": lambda c: c.suggest("", previous_tools="list_dir"),
    "tags[1]": lambda c: c.suggest("x", tags=["a", 5]),  # type: ignore[list-item]
    # protobuf's TypeError, naming nothing ("bad argument type for built-in operation")
    "intent": lambda c: c.suggest(5),  # type: ignore[arg-type]
    "k": lambda c: c.suggest("x", k="3"),  # type: ignore[arg-type]
    "min_match": lambda c: c.suggest("x", min_match="0.5"),  # type: ignore[arg-type]
    "name": lambda c: c.get_pattern(5),  # type: ignore[arg-type]
    # AttributeError: 'NoneType' object has no attribute 'request_id'
    "record": lambda c: c.record(None),  # type: ignore[arg-type]
    # sent one record per character, after a call to the server
    "records": lambda c: c.upload("abc"),  # type: ignore[arg-type]
    "batch": lambda c: c.upload([], batch="3"),  # type: ignore[arg-type]
    "max_reconnects": lambda c: c.upload([], max_reconnects="3"),  # type: ignore[arg-type]
    # protobuf's TypeError naming nothing ("must be real number, not str", "'str' object
    # cannot be interpreted as an integer", "bad argument type for built-in operation")
    "intent_embedding": lambda c: c.suggest("x", intent_embedding="abc"),  # type: ignore[arg-type]
    "intent_embedding[1]": lambda c: c.suggest("x", intent_embedding=[0.5, "1"]),  # type: ignore[list-item]
    "include_flagged": lambda c: c.suggest("x", include_flagged="no"),  # type: ignore[arg-type]
    "explain": lambda c: c.suggest("x", explain="yes"),  # type: ignore[arg-type]
    "page_size": lambda c: c.list_patterns(page_size="5"),  # type: ignore[arg-type]
    "page_token": lambda c: c.list_capabilities(page_token=5),  # type: ignore[arg-type]
    "capability": lambda c: c.list_patterns(capability=5),  # type: ignore[arg-type]
    "pattern": lambda c: c.list_pattern_intents(5),  # type: ignore[arg-type]
    "apply": lambda c: c.run_retention(apply="yes"),  # type: ignore[arg-type]
    # called on the first acknowledgement, once the records were captured: TypeError then
    "on_ack": lambda c: c.upload([], on_ack=5),  # type: ignore[arg-type]
    "keep_acks": lambda c: c.upload_pairs([], keep_acks="no"),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("field", sorted(CALLS))
def test_a_call_argument_of_the_wrong_type_is_refused_naming_it(nowhere: str, field: str) -> None:
    assert [f for f, _ in _refused(nowhere, CALLS[field])] == [field]


def _refused(nowhere: str, call: Callable[[PmlClient], object]) -> list[tuple[str, str]]:
    """The violations of `call`'s INVALID_ARGUMENT, made before any call reached a server."""
    with PmlClient(nowhere, retries=0) as client, pytest.raises(PmlClientError) as err:
        call(client)
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
    return err.value.violations


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"tools": "read_file"}, "tools"),  # nine tool calls: r, e, a, d, ...
        ({"failed_tools": [("t", 5)]}, "failed_tools[0][1]"),
        ({"failed_tools": "t"}, "failed_tools"),
        # protobuf's TypeError naming nothing, or (code=None) a record with no code
        ({"intent": 5}, "intent"),
        ({"code": None}, "code"),
        ({"language": 5}, "language"),
        ({"request_id": 5}, "request_id"),
        ({"duration_ms": "5"}, "duration_ms"),
        ({"arguments_json": {}}, "arguments_json"),
        ({"session_id": 5}, "session_id"),
    ],
)
def test_make_record_refuses_a_lone_str_for_its_tools(given: dict[str, object], field: str) -> None:
    with pytest.raises(PmlClientError) as err:
        make_record(**{"intent": "Read JSON", "code": "await mcp.read_file({})", **given})  # type: ignore[arg-type]
    assert [f for f, _ in err.value.violations] == [field]


# A str that is not text: a command-line byte that is not UTF-8 (Python reads 0xff as U+DCFF)
# or a lone surrogate (a JSON `\ud800` escape). Before: protobuf's UnicodeEncodeError, a
# traceback naming no argument (`pml suggest $'\xff'`).
NOT_TEXT: dict[str, Callable[[PmlClient], object]] = {
    "intent": lambda c: c.suggest("Load \udcff JSON"),
    "session_id": lambda c: c.suggest("", session_id="s\udcff"),
    "available_tools[1]": lambda c: c.suggest("x", available_tools=["a", "b\ud800"]),
    "tags[0]": lambda c: c.suggest("x", tags=["\udcff"]),
    "previous_tools[0]": lambda c: c.suggest("", previous_tools=["\udcff"]),
    "previous_patterns[0]": lambda c: c.suggest("", previous_patterns=["patterns/\udcff"]),
    "name": lambda c: c.get_pattern("patterns/\udcff"),
    "capability": lambda c: c.list_patterns(capability="capabilities/\udcff"),
    "page_token": lambda c: c.list_failures(page_token="\udcff"),
}


@pytest.mark.parametrize("field", sorted(NOT_TEXT))
def test_a_call_argument_that_is_not_text_is_refused_naming_it(nowhere: str, field: str) -> None:
    [(named, description)] = _refused(nowhere, NOT_TEXT[field])
    assert named == field
    assert "not UTF-8 text" in description


@pytest.mark.parametrize(
    ("given", "field", "said"),
    [
        ({"intent": "Read \udcff"}, "intent", "holds b'\\xff' at position 5"),
        ({"code": "\udc80"}, "code", "holds b'\\x80' at position 0"),
        ({"tools": ["read_file", "x\ud800"]}, "tools[1]", "holds U+D800 at position 1"),
        ({"failed_tools": [("t", "err \udcff")]}, "failed_tools[0][1]", "at position 4"),
        ({"session_id": "\udcff"}, "session_id", "holds b'\\xff' at position 0"),
        ({"request_id": "r\udcff"}, "request_id", "at position 1"),
    ],
)
def test_make_record_refuses_text_that_is_not_utf8_naming_it(
    given: dict[str, object], field: str, said: str
) -> None:
    with pytest.raises(PmlClientError) as err:
        make_record(**{"intent": "Read JSON", "code": "await mcp.read_file({})", **given})  # type: ignore[arg-type]
    assert [f for f, _ in err.value.violations] == [field]
    assert said in err.value.violations[0][1]
