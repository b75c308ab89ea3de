"""The gRPC layer. At this level the transport: thin servicer, StreamTraces (`stream`), OTLP
ingest, proto<->domain conversion and validation, the one error mapping, the interceptor, logs,
metrics and the server factory. `admission/`: which calls run and what they may answer;
`security/`: keys, tenants, roles and page tokens."""
