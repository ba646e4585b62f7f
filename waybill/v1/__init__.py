"""Generated gRPC contracts (see protos/)."""
