"""The admission service's tables. Migrations in `migrations/` create them."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

JsonDocument = JSON().with_variant(JSONB(), "postgresql")

metadata = MetaData()

threads = Table(
    "threads",
    metadata,
    Column("thread_id", String(36), primary_key=True),
    Column("metadata", JsonDocument, nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, index=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("values", JsonDocument),
    Column("interrupts", JsonDocument),
    Column("owner_id", String(255), nullable=False),
    Column("config", JsonDocument),
    Column("error", JsonDocument),
    Column("state_updated_at", DateTime(timezone=True)),
    # Its time-to-live (thread_ttl.py): "delete" or "keep_latest", its minutes, and
    # when it expires (NULL: never, or not again until an update or a run).
    Column("ttl_strategy", String(16)),
    Column("ttl_minutes", Float),
    Column("ttl_expires_at", DateTime(timezone=True), index=True),
    Index("ix_threads_owner", "owner_id", "created_at"),
)

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("thread_id", String(36), nullable=False, index=True),
    Column("assistant_id", String(36), nullable=False),
    Column("graph_id", String(255), nullable=False),
    Column("status", String(16), nullable=False),
    Column("multitask_strategy", String(16), nullable=False),
    Column("metadata", JsonDocument, nullable=False),
    Column("kwargs", JsonDocument, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("lease_owner", String(255)),
    Column("lease_expires_at", DateTime(timezone=True)),
    Column("stop_reason", Text, nullable=False),
    Column("cancel_action", String(16)),
    Column("owner_id", String(255), nullable=False),
    Column("usage", JsonDocument),  # common/usage.py's summary, once the run ended
    Index("ix_runs_status_created_at", "status", "created_at"),
    Index("ix_runs_status_lease", "status", "lease_expires_at"),
    Index("ix_runs_owner", "owner_id", "created_at"),
    # At most one running run per thread, however claims race.
    Index(
        "ux_runs_one_running_per_thread",
        "thread_id",
        unique=True,
        postgresql_where=text("status = 'running'"),
        sqlite_where=text("status = 'running'"),
    ),
    # The claim's scan: active runs in arrival order.
    Index(
        "ix_runs_active_by_arrival",
        "created_at",
        postgresql_where=text("status IN ('pending', 'running')"),
        sqlite_where=text("status IN ('pending', 'running')"),
    ),
)

# Tokens each run spent, per (model, source): summed by thread and by owner. A
# ledger: it keeps the rows of deleted and rolled-back runs (tokens spent stay spent).
token_usage = Table(
    "token_usage",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("model", String(255), primary_key=True),
    Column("source", String(32), primary_key=True),
    Column("thread_id", String(36), nullable=False),
    Column("owner_id", String(255), nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("total_tokens", BigInteger, nullable=False),
    Column("cache_read_tokens", BigInteger, nullable=False),
    Column("llm_calls", BigInteger, nullable=False),
    Column("cost", Float),  # by the price table when the run ended; NULL: not priced
    Column("recorded_at", DateTime(timezone=True), nullable=False),
    Index("ix_token_usage_thread", "thread_id", "recorded_at"),
    Index("ix_token_usage_owner", "owner_id", "recorded_at"),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("owner_id", String(255), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("request_digest", String(64), nullable=False),
    Column("run_id", String(36), nullable=False),
    Column("thread_id", String(36), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Index("ix_idempotency_keys_expires", "expires_at"),
)

# An assistant points at one of its versions; each version is a full copy.
assistants = Table(
    "assistants",
    metadata,
    Column("assistant_id", String(36), primary_key=True),
    Column("graph_id", String(255), nullable=False, index=True),
    Column("name", Text, nullable=False),
    Column("description", Text),
    Column("config", JsonDocument, nullable=False),
    Column("context", JsonDocument, nullable=False),
    Column("metadata", JsonDocument, nullable=False),
    Column("version", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, index=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("owner_id", String(255), nullable=False),  # who made it; system: "local"
    Index("ix_assistants_owner", "owner_id", "created_at"),
)

assistant_versions = Table(
    "assistant_versions",
    metadata,
    Column(
        "assistant_id",
        String(36),
        ForeignKey("assistants.assistant_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("version", Integer, primary_key=True),
    Column("graph_id", String(255), nullable=False),
    Column("name", Text, nullable=False),
    Column("description", Text),
    Column("config", JsonDocument, nullable=False),
    Column("context", JsonDocument, nullable=False),
    Column("metadata", JsonDocument, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# A schedule and the run each firing starts on behalf of its owner. The
# scheduler claims a due firing by moving `next_run_at` on with a conditional
# update: of any number of admission replicas, exactly one wins each due time.
crons = Table(
    "crons",
    metadata,
    Column("cron_id", String(36), primary_key=True),
    Column("assistant_id", String(36), nullable=False),
    Column("thread_id", String(36), index=True),  # NULL: a fresh thread per firing
    Column("owner_id", String(255), nullable=False, index=True),
    Column("owner_role", String(64), nullable=False),
    Column("owner_scopes", Text, nullable=False),  # comma-separated, as at creation
    # A project-auth creator (0012): its user as `@auth.authenticate` returned it, and
    # the `@auth.on` filters of the cron's run, {resource: filter}; NULL otherwise.
    Column("owner_user", JsonDocument),
    Column("auth_filters", JsonDocument),
    Column("schedule", String(255), nullable=False),
    Column("timezone", String(64), nullable=False),  # "" means UTC
    Column("end_time", DateTime(timezone=True)),
    Column("enabled", Boolean, nullable=False),
    Column("on_run_completed", String(8)),
    Column("kwargs", JsonDocument, nullable=False),
    Column("metadata", JsonDocument, nullable=False),
    Column("multitask_strategy", String(16), nullable=False),
    Column("next_run_at", DateTime(timezone=True), index=True),  # NULL: will not fire again
    Column("last_run_id", String(36)),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# One row per firing a replica claimed: when it was due, the run it started (or
# why none started), so that "exactly once per due time" can be checked.
cron_firings = Table(
    "cron_firings",
    metadata,
    Column("cron_id", String(36), primary_key=True),
    Column("due_at", DateTime(timezone=True), primary_key=True),
    Column("fired_at", DateTime(timezone=True), nullable=False),
    Column("outcome", String(16), nullable=False),  # claimed | started | skipped | refused | error
    Column("run_id", String(36)),
    Column("thread_id", String(36)),
    Column("detail", Text, nullable=False),
    # on_run_completed=delete: "pending" until the ended run's thread is deleted, then "done".
    Column("thread_cleanup", String(8)),
)

# Journal logs admission still owes a close: one row per terminal write, in the
# same transaction. The runner that ended the run normally closes the log at once;
# admission closes it anyway once `close_at` has passed (log_closes.py), and the
# row goes. `close_at` moves on while the journal cannot be reached.
log_closes = Table(
    "log_closes",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("epoch", BigInteger, nullable=False),
    Column("close_at", DateTime(timezone=True), nullable=False, index=True),
)

# One row per principal a quota applies to (services/admission/runs/quotas.py). Every
# admit of the principal's runs locks it first, so that two admission replicas
# count and reserve the principal's runs one after the other; it also keeps the
# `runs_per_minute` GCRA's theoretical arrival time (seconds since the epoch).
quota_principals = Table(
    "quota_principals",
    metadata,
    Column("principal_id", String(255), primary_key=True),
    Column("rate_arrival", Float, nullable=False),
)
