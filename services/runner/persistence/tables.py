"""The runner's own tables, beside LangGraph's checkpoint and store tables (which
LangGraph's savers create and own). Its stores write them in plain SQL; these
declarations are what the migrations must produce (tests/e2e/test_schema_drift.py)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Float, Integer, LargeBinary, MetaData, String, Table

metadata = MetaData()

# Which epoch may write a run's checkpoints (a takeover moves it on; store.py).
run_fences = Table(
    "run_fences",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("epoch", BigInteger, nullable=False),
)

# A run's tool and model calls, started and finished (tool_call_store.py).
tool_calls = Table(
    "tool_calls",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("call_id", String(255), primary_key=True),  # the call's id, or model:<digest>:<n>
    Column("thread_id", String(36), nullable=False, index=True),
    Column("kind", String(8), nullable=False),  # tool | model
    Column("name", String(255), nullable=False),
    Column("status", String(16), nullable=False),  # started | finished
    Column("epoch", BigInteger, nullable=False),  # the epoch that last wrote it
    Column("attempts", Integer, nullable=False, server_default="1"),
    Column("result_type", String(32)),
    Column("result", LargeBinary),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float),
)
