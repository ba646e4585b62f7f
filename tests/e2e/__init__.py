"""Tests through a running stack: the gateway driven with `langgraph-sdk` and raw
HTTP, real Postgres, Redis and gRPC servers on loopback ports, processes killed."""
