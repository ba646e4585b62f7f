"""The journal's tables (the migrations in migrations/versions create them;
tests/e2e/test_schema_drift.py holds the two together)."""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, Index, LargeBinary, MetaData, String, Table

metadata = MetaData()
run_event_batches = Table(
    "run_event_batches",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("first_seq", BigInteger, primary_key=True),
    # In the key too: a copy of events at other boundaries than a stored row is kept.
    Column("last_seq", BigInteger, primary_key=True),
    Column("frames", LargeBinary, nullable=False),  # zlib(StoredBatch)
    Column("created_at", DateTime(timezone=True), nullable=False),
)
run_logs = Table(
    "run_logs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("epoch", BigInteger, nullable=False),
    Column("closed_at", DateTime(timezone=True)),
    Index("run_logs_closed_at", "closed_at"),
)
# Runs deleted with their thread: their log must not come back (a late Close or
# Append), and a subscriber must hear NOT_FOUND rather than wait forever.
forgotten_runs = Table(
    "forgotten_runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("forgotten_at", DateTime(timezone=True), nullable=False),
)
# Runs whose events the retention sweep deleted: their stream answers that the
# events expired, rather than waiting for events that will never come.
expired_runs = Table(
    "expired_runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("ended_at", DateTime(timezone=True), nullable=False),
    Column("expired_at", DateTime(timezone=True), nullable=False),
)

# The live journal replicas on Redis (see replicas.py): the Redis incarnation each
# has stored everything from before, and a heartbeat count that changes while it lives.
journal_replicas = Table(
    "journal_replicas",
    metadata,
    Column("replica_id", String(36), primary_key=True),
    Column("incarnation", String(64)),
    Column("beats", BigInteger, nullable=False),
    Column("joined_at", DateTime(timezone=True), nullable=False),
)

# A run's typed records (records.py), numbered per run in their own sequence.
run_records = Table(
    "run_records",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("seq", BigInteger, primary_key=True),
    Column("type", String(64), nullable=False),
    Column("epoch", BigInteger, nullable=False),  # the appender's: a staler one is refused
    Column("data", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
