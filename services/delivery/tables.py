"""Delivery's tables (the migrations in migrations/versions create them)."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

receipts = Table(
    "receipts",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("epoch", BigInteger, primary_key=True),
    Column("thread_id", String(36), nullable=False),
    Column("assistant_id", String(64), nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("verdict", String(32), nullable=False),
    Column("verdict_reason", Text, nullable=False),
    Column("final_output", LargeBinary, nullable=False),
    Column("error_type", Text, nullable=False),
    Column("error_message", Text, nullable=False),
    Column("presented", Text, nullable=False),  # JSON lists of paths
    Column("produced", Text, nullable=False),
    Column("matched", Text, nullable=False),
    Column("changes", Text, nullable=False),  # JSON list of {path, change, size, sha256}
    Column("usage", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("receipts_by_thread", "thread_id"),
)

# The run's first snapshot (before its agent started); later epochs reuse it.
workspace_snapshots = Table(
    "workspace_snapshots",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("thread_id", String(36), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("files", Text, nullable=False),  # JSON list of {path, size, sha256}
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# The outbox: one row per (run, epoch, target URL).
webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("delivery_id", String(36), primary_key=True),
    Column("run_id", String(36), nullable=False),
    Column("thread_id", String(36), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("url", Text, nullable=False),
    Column("source", String(16), nullable=False),  # run | thread | assistant
    # held | pending | delivered | failed | superseded
    Column("state", String(16), nullable=False),
    Column("payload", LargeBinary, nullable=False),  # the body, fixed when released
    Column("values_json", LargeBinary, nullable=False),  # the thread's values after the run
    # The receipt's summary, kept with the row: the run may be deleted before it is sent.
    Column("receipt_json", LargeBinary, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", DateTime(timezone=True), nullable=True),
    # A sender's claim: another replica leaves the row alone until then.
    Column("claimed_until", DateTime(timezone=True), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("run_id", "epoch", "url", name="one_delivery_per_target"),
    Index("webhook_deliveries_by_run", "run_id"),
    Index("webhook_deliveries_due", "state", "next_attempt_at"),
)

webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    Column("attempt_id", String(36), primary_key=True),
    Column("delivery_id", String(36), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("sent_at", DateTime(timezone=True), nullable=False),
    Column("status_code", Integer, nullable=False),
    Column("error", Text, nullable=False),
    Index("webhook_attempts_by_delivery", "delivery_id"),
)

webhook_subscriptions = Table(
    "webhook_subscriptions",
    metadata,
    Column("subscription_id", String(36), primary_key=True),
    Column("scope", String(16), nullable=False),  # thread | assistant
    Column("scope_id", String(64), nullable=False),
    Column("url", Text, nullable=False),
    Column("owner_id", String(128), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("webhook_subscriptions_by_scope", "scope", "scope_id"),
)
