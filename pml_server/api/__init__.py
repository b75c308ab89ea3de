"""The gRPC layer: thin servicer, proto<->domain conversion, error mapping, server factory."""
