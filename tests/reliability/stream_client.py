"""A StreamTraces client as its own process, for the tests that SIGKILL a client mid-stream
(`test_clients_giving_up.py`): it sends every execution of `records(prefix, pattern, n)` (whole
records or live events), keeps its request stream open, and prints `ack ID` for each
acknowledged execution until it is killed.

    python -m tests.reliability.stream_client TARGET PREFIX PATTERN N records|live
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator

from pml_server._proto.pml.v1 import pml_pb2, resources_pb2
from tests.reliability import workload
from tests.reliability.test_concurrency import _stream_requests


def records(prefix: str, pattern: int, n: int) -> list[resources_pb2.ExecutionRecord]:
    """The same executions in the test process and in this one (a fixed seed per prefix)."""
    rng = random.Random(prefix)
    return [
        workload.record(pattern, f"give up {prefix} p{pattern}", f"{prefix}-{i}", False, rng)
        for i in range(n)
    ]


def main() -> None:
    target, prefix, pattern, n, kind = sys.argv[1:6]
    requests = _stream_requests(records(prefix, int(pattern), int(n)), kind == "live")
    never = threading.Event()

    def send() -> Iterator[pml_pb2.StreamTracesRequest]:
        yield from requests
        never.wait()  # the request side stays open: the process is killed, never half-closes

    _, stub = workload.stub_for(target)
    for ack in stub.StreamTraces(send(), timeout=600):
        print("ack", ack.execution_id, ack.WhichOneof("outcome"), flush=True)


if __name__ == "__main__":
    main()
