"""Pending writes, stored only if the run's fence still names this epoch, checked
in the same transaction as the insert.

A checkpoint row carries its epoch in its metadata, so a database trigger can
refuse a stale one (migration 0002). A pending write's row carries nothing of
the kind, so the check happens here instead: the fence row is read (shared-
locked on Postgres, under SQLite's write lock) and the writes inserted in one
transaction, so a takeover cannot slip in between. This uses the connection
and SQL of LangGraph's own savers, the one place that depends on their insides.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from waybill.common.sqlite_driver import SqliteConnection

if TYPE_CHECKING:  # the `postgres` extra: imported below only for a saver not SQLite's
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

FENCE_QUERY = "SELECT epoch FROM run_fences WHERE run_id = {}"


async def put_writes_fenced(
    saver: Any,
    run_id: str,
    epoch: int,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str = "",
) -> int | None:
    """Store the writes unless a newer epoch holds the run; returns that epoch if so."""
    if isinstance(saver, AsyncSqliteSaver):
        return await _on_sqlite(saver, run_id, epoch, config, writes, task_id, task_path)
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    if isinstance(saver, AsyncPostgresSaver):
        return await _on_postgres(saver, run_id, epoch, config, writes, task_id, task_path)
    raise TypeError(f"no fenced pending writes for {type(saver).__name__}")


def _newer(current: Any, epoch: int) -> int | None:
    """The fence's epoch when it is not ours (a takeover moved it); None otherwise."""
    return int(current) if current is not None and int(current) != epoch else None


def _upsert(writes: Sequence[tuple[str, Any]]) -> bool:
    """Special channels (errors, interrupts...) replace; ordinary writes never do."""
    return all(channel in WRITES_IDX_MAP for channel, _ in writes)


async def _on_postgres(
    saver: AsyncPostgresSaver,
    run_id: str,
    epoch: int,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> int | None:
    configurable = config["configurable"]
    params = await asyncio.to_thread(
        saver._dump_writes,
        configurable["thread_id"],
        configurable["checkpoint_ns"],
        configurable["checkpoint_id"],
        task_id,
        task_path,
        writes,
    )
    query = (
        saver.UPSERT_CHECKPOINT_WRITES_SQL
        if _upsert(writes)
        else saver.INSERT_CHECKPOINT_WRITES_SQL
    )
    async with saver._cursor() as cur, cur.connection.transaction():
        # FOR SHARE: a takeover's fence update waits until these writes commit.
        await cur.execute(FENCE_QUERY.format("%s") + " FOR SHARE", (run_id,))
        row = await cur.fetchone()
        newer = _newer(None if row is None else row["epoch"], epoch)
        if newer is not None:
            return newer
        await cur.executemany(query, params)
    return None


async def _on_sqlite(
    saver: AsyncSqliteSaver,
    run_id: str,
    epoch: int,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> int | None:
    configurable = config["configurable"]
    verb = "INSERT OR REPLACE" if _upsert(writes) else "INSERT OR IGNORE"
    query = (
        f"{verb} INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, "
        "idx, channel, type, value) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )
    rows = [
        (
            str(configurable["thread_id"]),
            str(configurable["checkpoint_ns"]),
            str(configurable["checkpoint_id"]),
            task_id,
            task_path,
            WRITES_IDX_MAP.get(channel, idx),
            channel,
            *saver.serde.dumps_typed(value),
        )
        for idx, (channel, value) in enumerate(writes)
    ]
    await saver.setup()

    def transaction(connection: sqlite3.Connection) -> int | None:
        """On the connection's thread: the fence check and the writes in one trip."""
        if connection.in_transaction:  # left open by an insert the fence trigger aborted
            connection.rollback()
        # IMMEDIATE takes the write lock first: no other process can move the
        # fence between the read and the insert.
        connection.execute("BEGIN IMMEDIATE")
        try:
            row = connection.execute(FENCE_QUERY.format("?"), (run_id,)).fetchone()
            newer = _newer(None if row is None else row[0], epoch)
            if newer is None:
                connection.executemany(query, rows)
        except BaseException:
            connection.rollback()
            raise
        connection.commit()
        return newer

    connection = cast(SqliteConnection, saver.conn)  # see persistence.open_checkpointer
    async with saver.lock:
        newer: int | None = await connection.run(transaction, connection.sqlite_connection)
    return newer
