"""An expensive tenant, as its own process (so the measuring client does not share a GIL with
it): THREADS threads, each on its own channel, call Suggest (page_size 100, over the tenant's
giant patterns) and dry-run RunRetention in turn, back to back. A refused call waits the retry
delay the server asked for (RetryInfo), as `PmlClient` does. One command per line on stdin,
one line answered on stdout per command:

    start   start the load (answers `loading` once every thread has had an answer)
    stop    stop; answers one JSON object: status-code counts and calls made per kind
    EOF     exit

    python -m testing.cost_load API_KEY TARGET THREADS
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc

GIANT_QUERY = "load the giant table"
OPTIONS = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]


def retry_delay(err: grpc.RpcError) -> float:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            info = error_details_pb2.RetryInfo()
            detail.Unpack(info)
            return float(info.retry_delay.ToNanoseconds()) / 1e9
    return 0.0


class Load:
    def __init__(self, target: str, key: str, threads: int) -> None:
        self._metadata = (("authorization", f"Bearer {key}"),)
        self._target = target
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.codes: Counter[str] = Counter()
        self._answered = threading.Barrier(threads + 1)
        self._threads = [threading.Thread(target=self._hammer, args=(n,)) for n in range(threads)]
        for thread in self._threads:
            thread.start()
        self._answered.wait(120)

    def _hammer(self, n: int) -> None:
        codes: Counter[str] = Counter()
        with grpc.insecure_channel(self._target, options=OPTIONS) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            i = 0
            while i == 0 or not self._stop.is_set():
                kind = "suggest" if (n + i) % 2 == 0 else "retention"
                i += 1
                try:
                    if kind == "suggest":
                        stub.Suggest(
                            pml_pb2.SuggestRequest(intent=GIANT_QUERY, page_size=100),
                            metadata=self._metadata,
                            timeout=120,
                        )
                    else:
                        stub.RunRetention(
                            pml_pb2.RunRetentionRequest(apply=False),
                            metadata=self._metadata,
                            timeout=120,
                        )
                    codes[f"{kind} OK"] += 1
                except grpc.RpcError as err:
                    codes[f"{kind} {err.code().name}"] += 1  # type: ignore[attr-defined]
                    self._stop.wait(retry_delay(err))
                if i == 1:
                    self._answered.wait(120)
        with self._lock:
            self.codes.update(codes)

    def stop(self) -> dict[str, object]:
        self._stop.set()
        for thread in self._threads:
            thread.join(120)
        return {"codes": dict(self.codes), "calls": sum(self.codes.values())}


def main() -> None:
    key, target, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    load: Load | None = None
    for line in sys.stdin:
        command = line.strip()
        if command == "start" and load is None:
            load = Load(target, key, threads)
            answer = "loading"
        elif command == "stop" and load is not None:
            answer = json.dumps(load.stop())
            load = None
        else:
            answer = f"error: unexpected {command!r}"
        print(answer, flush=True)
    if load is not None:
        load.stop()


if __name__ == "__main__":
    main()
