"""pml-client: the typed Python client for pml's gRPC API (clients/python/README.md)."""

from pml_client._proto.pml.v1 import pml_pb2, resources_pb2
from pml_client.client import (
    UPLOAD_BATCH,
    UPLOAD_BATCH_BYTES,
    CaptureResult,
    ExecutionRecord,
    PmlClient,
    UploadReport,
    batched_messages,
    make_record,
)
from pml_client.errors import (
    DEFAULT_RETRIES,
    DEFAULT_RETRY_SECONDS,
    RETRYABLE,
    CertificateError,
    ClientCertificateError,
    PmlClientError,
    TlsMismatchError,
    backoff_seconds,
)

__all__ = [
    "DEFAULT_RETRIES",
    "DEFAULT_RETRY_SECONDS",
    "RETRYABLE",
    "UPLOAD_BATCH",
    "UPLOAD_BATCH_BYTES",
    "CaptureResult",
    "CertificateError",
    "ClientCertificateError",
    "ExecutionRecord",
    "PmlClient",
    "PmlClientError",
    "TlsMismatchError",
    "UploadReport",
    "backoff_seconds",
    "batched_messages",
    "make_record",
    "pml_pb2",
    "resources_pb2",
]
