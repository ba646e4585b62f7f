"""LangGraph's own checkpointer and store packages, on the same database switch
as every other service: SQLite files in the data directory, or Postgres."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from waybill.common import sqlite_driver
from waybill.common.settings import Settings


async def relax_sync(connection: Any) -> None:
    """The durability every other Waybill SQLite file has (common/sql.py): in WAL mode,
    NORMAL survives a crash of the process and skips an fsync per commit, which
    LangGraph's default (FULL) pays on every checkpoint write."""
    await connection.execute("PRAGMA synchronous=NORMAL")


@contextlib.asynccontextmanager
async def open_checkpointer(settings: Settings, setup: bool = True) -> AsyncIterator[Any]:
    """`setup` creates or upgrades the tables: the migration step's job, not a start's."""
    url = settings.checkpointer_url()
    if settings.database_url:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(url) as saver:
            if setup:
                await saver.setup()
            yield saver
    else:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        # As `AsyncSqliteSaver.from_conn_string`, on a connection that can `run`.
        async with sqlite_driver.connect_with_run(url) as connection:
            sqlite_saver = AsyncSqliteSaver(connection)
            if setup:
                await sqlite_saver.setup()
            await relax_sync(sqlite_saver.conn)
            yield sqlite_saver


@contextlib.asynccontextmanager
async def open_store(settings: Settings, setup: bool = True) -> AsyncIterator[Any]:
    if settings.database_url:
        from langgraph.store.postgres.aio import AsyncPostgresStore

        async with AsyncPostgresStore.from_conn_string(settings.checkpointer_url()) as store:
            if setup:
                await store.setup()
            yield store
    else:
        from langgraph.store.sqlite.aio import AsyncSqliteStore

        settings.data_dir.mkdir(parents=True, exist_ok=True)
        path = str((settings.data_dir / "store.db").resolve())
        async with AsyncSqliteStore.from_conn_string(path) as store:
            if setup:
                await store.setup()
            await relax_sync(store.conn)
            yield store
