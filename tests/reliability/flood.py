"""A tenant flooding the server, as its own process (so the measuring client does not share a
GIL with it): THREADS threads, each on its own channel, call Suggest and RecordExecution as fast
as they can until their stdin closes (or SECONDS pass), then print one JSON line of
status-code counts.

    python -m tests.reliability.flood TARGET API_KEY THREADS SECONDS
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections import Counter

import grpc

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2


def main() -> None:
    target, key, threads, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    metadata = (("authorization", f"Bearer {key}"),)
    codes: Counter[str] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()

    def hammer(n: int) -> None:
        with grpc.insecure_channel(target) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            i = 0
            while time.monotonic() < deadline and not stop.is_set():
                i += 1
                try:
                    if i % 2:
                        stub.Suggest(
                            pml_pb2.SuggestRequest(intent="flood the server"),
                            metadata=metadata,
                            timeout=10,
                        )
                    else:
                        record = resources_pb2.ExecutionRecord(
                            request_id=uuid.uuid4().hex,
                            intent=f"flood {n}",
                            code="await mcp.flood_tool({n: 1});",
                            language="javascript",
                            tool_calls=[resources_pb2.ToolCall(tool="flood_tool", ok=True)],
                        )
                        stub.RecordExecution(
                            pml_pb2.RecordExecutionRequest(record=record),
                            metadata=metadata,
                            timeout=10,
                        )
                    code = "OK"
                except grpc.RpcError as err:
                    code = err.code().name
                with lock:
                    codes[code] += 1

    workers = [threading.Thread(target=hammer, args=(n,)) for n in range(threads)]
    print("flooding", flush=True)
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(json.dumps(dict(codes)), flush=True)


if __name__ == "__main__":
    main()
