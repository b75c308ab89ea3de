"""pml's domain: the types, errors and engine interface shared by capture, ranking, retention
and the API layer. Nothing here imports grpc or generated protobuf code."""
