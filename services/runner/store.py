"""The runner's own rows, kept beside LangGraph's checkpoints in the same database:
the fence that says which epoch may write a run's checkpoints, the deletion
of one run's checkpoints for a rollback, and a thread's copy and prune."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from waybill.common.sql import migrate

MIGRATIONS = Path(__file__).parent / "migrations"


class RunnerStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"

    async def migrate(self) -> None:
        await migrate(self.engine, MIGRATIONS, "runner")

    async def advance_fence(self, run_id: str, epoch: int) -> None:
        """From now on only `epoch` may write this run's checkpoints."""
        async with self.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO run_fences (run_id, epoch) VALUES (:run_id, :epoch) "
                    "ON CONFLICT (run_id) DO UPDATE SET epoch = excluded.epoch "
                    "WHERE run_fences.epoch < excluded.epoch"
                ),
                {"run_id": run_id, "epoch": epoch},
            )

    async def delete_run_checkpoints(self, thread_id: str, run_id: str) -> int:
        """Remove every checkpoint (and its pending writes) that `run_id` made."""
        if self.is_postgres:
            checkpoints_of_run = (
                "SELECT checkpoint_id FROM checkpoints "
                "WHERE thread_id = :thread_id AND metadata->>'run_id' = :run_id"
            )
            writes_table = "checkpoint_writes"
        else:
            checkpoints_of_run = (
                "SELECT checkpoint_id FROM checkpoints WHERE thread_id = :thread_id "
                "AND json_extract(CAST(metadata AS TEXT), '$.run_id') = :run_id"
            )
            writes_table = "writes"
        params = {"thread_id": thread_id, "run_id": run_id}
        async with self.engine.begin() as conn:
            await conn.execute(
                text(
                    f"DELETE FROM {writes_table} WHERE thread_id = :thread_id "
                    f"AND checkpoint_id IN ({checkpoints_of_run})"
                ),
                params,
            )
            result = await conn.execute(
                text(
                    "DELETE FROM checkpoints WHERE thread_id = :thread_id "
                    f"AND checkpoint_id IN ({checkpoints_of_run})"
                ),
                params,
            )
        return int(result.rowcount or 0)

    async def keep_latest_checkpoints(self, thread_id: str) -> int:
        """Delete all but the newest checkpoint of each namespace of the thread, with
        the pending writes of those deleted (and, on Postgres, the channel values no
        kept checkpoint refers to). Checkpoint ids sort by time, as LangGraph reads them."""
        writes_table = "checkpoint_writes" if self.is_postgres else "writes"
        params = {"thread_id": thread_id}
        async with self.engine.begin() as conn:
            for table in (writes_table, "checkpoints"):
                result = await conn.execute(text(_OLDER_THAN_NEWEST.format(table=table)), params)
            if self.is_postgres:
                await conn.execute(text(_UNREFERENCED_BLOBS), params)
        return int(result.rowcount or 0)

    async def copy_thread_checkpoints(self, source: str, target: str) -> int:
        """Copy a thread's checkpoints (and writes, and blobs) under a new thread id."""
        tables = POSTGRES_CHECKPOINT_TABLES if self.is_postgres else SQLITE_CHECKPOINT_TABLES
        copied = 0
        async with self.engine.begin() as conn:
            for table, columns in tables.items():
                rest = ", ".join(columns)
                result = await conn.execute(
                    text(
                        f"INSERT INTO {table} (thread_id, {rest}) "
                        f"SELECT :target, {rest} FROM {table} WHERE thread_id = :source"
                    ),
                    {"source": source, "target": target},
                )
                if table == "checkpoints":
                    copied = int(result.rowcount or 0)
        return copied


# Rows of `table` older than the newest checkpoint of their thread and namespace.
_OLDER_THAN_NEWEST = (
    "DELETE FROM {table} WHERE thread_id = :thread_id AND checkpoint_id < ("
    "SELECT MAX(newest.checkpoint_id) FROM checkpoints newest "
    "WHERE newest.thread_id = {table}.thread_id "
    "AND newest.checkpoint_ns = {table}.checkpoint_ns)"
)
# Postgres keeps channel values apart, by version: those no checkpoint names any more.
_UNREFERENCED_BLOBS = (
    "DELETE FROM checkpoint_blobs WHERE thread_id = :thread_id AND NOT EXISTS ("
    "SELECT 1 FROM checkpoints kept WHERE kept.thread_id = checkpoint_blobs.thread_id "
    "AND kept.checkpoint_ns = checkpoint_blobs.checkpoint_ns "
    "AND kept.checkpoint -> 'channel_versions' ->> checkpoint_blobs.channel "
    "= checkpoint_blobs.version)"
)

# LangGraph's checkpoint tables, by backend: every column but thread_id.
CHECKPOINT_COLUMNS = (
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "type",
    "checkpoint",
    "metadata",
)
WRITE_COLUMNS = ("checkpoint_ns", "checkpoint_id", "task_id", "task_path", "idx", "channel", "type")
SQLITE_CHECKPOINT_TABLES = {
    "checkpoints": CHECKPOINT_COLUMNS,
    "writes": (*WRITE_COLUMNS, "value"),
}
POSTGRES_CHECKPOINT_TABLES = {
    "checkpoints": CHECKPOINT_COLUMNS,
    "checkpoint_blobs": ("checkpoint_ns", "channel", "version", "type", "blob"),
    "checkpoint_writes": (*WRITE_COLUMNS, "blob"),
}
