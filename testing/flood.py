"""A tenant flooding a server, as its own process (so the measuring client does not share a GIL
with it), driven by one command per line on stdin and answering one line on stdout per command:

    flood TARGET   THREADS threads, each on its own channel, call Suggest and RecordExecution as
                   fast as they can (answers `flooding` once every thread has had an answer)
    count          answers the number of calls answered so far in this flood
    stop           stop flooding; answers one JSON object: status-code counts, calls made,
                   and how many RESOURCE_EXHAUSTED answers carried google.rpc.RetryInfo and the
                   grpc-retry-pushback-ms trailer (the first refusal of each thread is checked)
    hold TARGET N  open N StreamTraces calls that send nothing and stay open: they occupy N of
                   the tenant's call slots, so a flood is then refused on every call
    release        close the held streams
    EOF            exit (a flood also stops by itself after SECONDS)

    python -m testing.flood API_KEY THREADS SECONDS
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2

PUSHBACK_TRAILER = "grpc-retry-pushback-ms"


def has_retry_advice(err: grpc.RpcError) -> tuple[bool, bool]:
    """(RetryInfo with a positive retry_delay in the status details, pushback trailer)."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    retry_info = False
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            retry_info = info.retry_delay.ToNanoseconds() > 0
    trailers = dict(err.trailing_metadata() or ())  # type: ignore[attr-defined]
    return retry_info, PUSHBACK_TRAILER in trailers


class Flood:
    def __init__(self, target: str, key: str, threads: int, seconds: float) -> None:
        self._metadata = (("authorization", f"Bearer {key}"),)
        self._target = target
        self._stop = threading.Event()
        self._deadline = time.monotonic() + seconds
        self._lock = threading.Lock()
        self.codes: Counter[str] = Counter()
        self.advice: Counter[str] = Counter()
        self.answered = [0] * threads  # per thread (no lock needed), for `count`
        self._answered = threading.Barrier(threads + 1)
        self._threads = [threading.Thread(target=self._hammer, args=(n,)) for n in range(threads)]
        for thread in self._threads:
            thread.start()
        self._answered.wait(30)  # every thread has had one answer: the flood is on

    def _call(self, stub: pml_pb2_grpc.PmlServiceStub, n: int, i: int) -> None:
        if i % 2:
            stub.Suggest(
                pml_pb2.SuggestRequest(intent="flood the server"),
                metadata=self._metadata,
                timeout=10,
            )
            return
        record = resources_pb2.ExecutionRecord(
            request_id=uuid.uuid4().hex,
            intent=f"flood {n}",
            code="await mcp.flood_tool({n: 1});",
            language="javascript",
            tool_calls=[resources_pb2.ToolCall(tool="flood_tool", ok=True)],
        )
        stub.RecordExecution(
            pml_pb2.RecordExecutionRequest(record=record), metadata=self._metadata, timeout=10
        )

    def _hammer(self, n: int) -> None:
        codes: Counter[str] = Counter()
        advice: Counter[str] = Counter()
        with grpc.insecure_channel(self._target) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            i = 0
            while i == 0 or (time.monotonic() < self._deadline and not self._stop.is_set()):
                i += 1
                try:
                    self._call(stub, n, i)
                    codes["OK"] += 1
                except grpc.RpcError as err:
                    code = err.code().name  # type: ignore[attr-defined]
                    codes[code] += 1
                    if code == "RESOURCE_EXHAUSTED" and not advice["checked"]:
                        retry_info, pushback = has_retry_advice(err)
                        advice.update(checked=1, retry_info=retry_info, pushback=pushback)
                self.answered[n] += 1
                if i == 1:
                    self._answered.wait(30)
        with self._lock:
            self.codes.update(codes)
            self.advice.update(advice)

    def stop(self) -> dict[str, object]:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        return {
            "codes": dict(self.codes),
            "calls": sum(self.codes.values()),
            "refusals_checked": self.advice["checked"],
            "with_retry_info": self.advice["retry_info"],
            "with_pushback": self.advice["pushback"],
        }


class HeldStreams:
    """N open StreamTraces calls that send nothing: each holds one of the tenant's slots."""

    def __init__(self, target: str, key: str, count: int) -> None:
        self._channel = grpc.insecure_channel(target)
        self._release = threading.Event()
        stub = pml_pb2_grpc.PmlServiceStub(self._channel)
        metadata = (("authorization", f"Bearer {key}"),)
        self._calls = [stub.StreamTraces(self._idle(), metadata=metadata) for _ in range(count)]

    def _idle(self) -> Iterator[pml_pb2.StreamTracesRequest]:
        self._release.wait(120)
        return
        yield  # a generator that sends nothing

    def close(self) -> None:
        self._release.set()
        for call in self._calls:
            call.cancel()
        self._channel.close()


def main() -> None:
    key, threads, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    flood: Flood | None = None
    held: HeldStreams | None = None
    for line in sys.stdin:
        command, *args = line.split()
        if command == "flood" and flood is None:
            flood = Flood(args[0], key, threads, seconds)
            answer = "flooding"
        elif command == "count" and flood is not None:
            answer = str(sum(flood.answered))
        elif command == "stop" and flood is not None:
            answer = json.dumps(flood.stop())
            flood = None
        elif command == "hold" and held is None:
            held = HeldStreams(args[0], key, int(args[1]))
            answer = "held"
        elif command == "release" and held is not None:
            held.close()
            held = None
            answer = "released"
        else:
            answer = f"error: unexpected {line.strip()!r}"
        print(answer, flush=True)
    if flood is not None:
        flood.stop()
    if held is not None:
        held.close()


if __name__ == "__main__":
    main()
