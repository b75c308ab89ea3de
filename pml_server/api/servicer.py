"""PmlService implementation: translates requests to domain calls, nothing more."""

from __future__ import annotations

import grpc

from pml_server import __version__, _core
from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc
from pml_server.storage import Store


class PmlServicer(pml_pb2_grpc.PmlServiceServicer):
    def __init__(self, store: Store) -> None:
        self._store = store

    def GetServerInfo(
        self, request: pml_pb2.GetServerInfoRequest, context: grpc.ServicerContext
    ) -> pml_pb2.GetServerInfoResponse:
        return pml_pb2.GetServerInfoResponse(
            server_version=__version__,
            core_version=_core.__version__,
            schema_version=self._store.schema_version,
        )
