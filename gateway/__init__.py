"""The HTTP/SSE edge: LangGraph-Platform-compatible REST over Waybill's gRPC services."""
