"""LangGraph's own checkpointer and store packages, on the same database switch
as every other service: SQLite files in the data directory, or Postgres."""

from __future__ import annotations

import contextlib
import sqlite3
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

from waybill.common import sqlite_driver
from waybill.common.extras import needs_postgres
from waybill.common.project import ProjectError
from waybill.common.schema import MIGRATE_HINT, SchemaMismatch
from waybill.common.settings import Settings
from waybill.services.runner.persistence.similarity_store import TABLE, SimilarityStore
from waybill.services.runner.persistence.store_config import StoreConfig, store_config


async def relax_sync(connection: Any) -> None:
    """The durability every other Waybill SQLite file has (common/sql.py): in WAL mode,
    NORMAL survives a crash of the process and skips an fsync per commit, which
    LangGraph's default (FULL) pays on every checkpoint write."""
    await connection.execute("PRAGMA synchronous=NORMAL")


@contextlib.asynccontextmanager
async def open_checkpointer(settings: Settings, setup: bool = True) -> AsyncIterator[Any]:
    """LangGraph's saver for the database, with the whole of LangGraph's interface
    (savers.py: a rollback's `adelete_for_runs`, a copy's `acopy_thread`, `aprune`).
    `setup` creates or upgrades the tables: the migration step's job, not a start's."""
    url = settings.checkpointer_url()
    if settings.database_url:
        with needs_postgres():
            from waybill.services.runner.persistence.postgres_saver import PostgresSaver

        async with postgres_pool(url, settings) as pool:
            saver = PostgresSaver(conn=pool)
            if setup:
                await saver.setup()
            yield saver
    else:
        from waybill.services.runner.persistence.savers import SqliteSaver

        # As `AsyncSqliteSaver.from_conn_string`, on a connection that can `run`.
        async with sqlite_driver.connect_with_run(url) as connection:
            sqlite_saver = SqliteSaver(connection)
            if setup:
                await sqlite_saver.setup()
            await relax_sync(sqlite_saver.conn)
            yield sqlite_saver


@contextlib.asynccontextmanager
async def postgres_pool(url: str, settings: Settings) -> AsyncIterator[Any]:
    """Connections as LangGraph's savers and stores want them, checked when one is
    taken after sitting idle: a connection a Postgres restart dropped is replaced,
    where LangGraph's `from_conn_string` holds one connection for the process's
    life (every run after a restart would fail on it)."""
    with needs_postgres():
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool

    idle = IdleCheck(settings.db_ping_idle_seconds, AsyncConnectionPool.check_connection)
    pool: Any = AsyncConnectionPool(
        url,
        min_size=1,
        max_size=max(1, settings.db_pool_size),
        kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row},
        check=idle.check,
        reset=idle.returned,
        open=False,
    )
    async with pool:
        yield pool


class IdleCheck:
    """psycopg_pool's `check` and `reset`: a connection taken within `idle_seconds`
    of its return is in steady use and goes unchecked (a check is an empty query, a
    round trip per checkpoint write); one idle longer, or new, is checked, as
    common/sql.py's `ping_when_idle` does for SQLAlchemy's pools."""

    def __init__(self, idle_seconds: float, check: Callable[[Any], Awaitable[None]]) -> None:
        self.idle_seconds = idle_seconds
        self._check = check
        self._returned_at: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    async def returned(self, connection: Any) -> None:
        self._returned_at[connection] = time.monotonic()

    async def check(self, connection: Any) -> None:
        returned_at = self._returned_at.pop(connection, None)
        if returned_at is not None and time.monotonic() - returned_at < self.idle_seconds:
            return
        await self._check(connection)


@contextlib.asynccontextmanager
async def open_store(settings: Settings, setup: bool = True) -> AsyncIterator[Any]:
    """LangGraph's store with the project's `store` settings (store_config.py):
    semantic search (`index`) and expiry (`ttl`)."""
    config = store_config(settings)
    if settings.database_url:
        async with _postgres_store(settings, config, setup) as store:
            yield store
    else:
        async with _sqlite_store(settings, config, setup) as store:
            yield store


@contextlib.asynccontextmanager
async def _postgres_store(
    settings: Settings, config: StoreConfig, setup: bool
) -> AsyncIterator[Any]:
    with needs_postgres():
        from langgraph.store.postgres.aio import AsyncPostgresStore

    url = settings.checkpointer_url()
    native = config.index is not None and await _has_pgvector(url)
    async with postgres_pool(url, settings) as pool:
        plain = AsyncPostgresStore(
            conn=pool,
            index=cast(Any, config.index) if native else None,  # PostgresIndexConfig extends it
            ttl=config.ttl,
        )
        store: Any = plain
        if config.index is not None and not native:
            store = SimilarityStore(plain, config.index)  # pgvector absent: rank in Python
        if setup:
            await store.setup()
        elif isinstance(store, SimilarityStore) and not await store.check():
            raise SchemaMismatch(f"store.index: the {TABLE} table is missing: " + MIGRATE_HINT)
        yield store


async def _has_pgvector(url: str) -> bool:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as connection:
        cursor = await connection.execute(
            "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
        )
        return await cursor.fetchone() is not None


@contextlib.asynccontextmanager
async def _sqlite_store(settings: Settings, config: StoreConfig, setup: bool) -> AsyncIterator[Any]:
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    path = str((settings.data_dir / "store.db").resolve())
    async with _sqlite_connection(path, vectors=config.index is not None) as connection:
        store = AsyncSqliteStore(connection, index=_sqlite_index(config), ttl=config.ttl)
        # It handles TTLs, but its class says it does not (BaseStore's False comes first
        # in its MRO), and BaseStore.aput then refuses a put's `ttl`.
        store.supports_ttl = True
        # LangGraph's SQLite store sets itself up on first use anyway (and loads
        # sqlite-vec into the connection then): do it now, so a failure stops start-up.
        if setup or config.index is not None:
            await store.setup()
        await relax_sync(store.conn)
        yield store


def _sqlite_index(config: StoreConfig) -> Any:
    """LangGraph's SQLite store reads the embedded paths from `text_fields`, not
    `fields` as its Postgres store and langgraph.json say."""
    if config.index is None:
        return None
    return {**config.index, "text_fields": config.index.get("fields") or ["$"]}


@contextlib.asynccontextmanager
async def _sqlite_connection(path: str, vectors: bool) -> AsyncIterator[Any]:
    """As `aiosqlite.connect(path, isolation_level=None)`; with `vectors`, on a
    SQLite that can load the sqlite-vec extension."""
    import aiosqlite

    module = _sqlite_with_extensions() if vectors else sqlite3
    connection = aiosqlite.Connection(lambda: module.connect(path, isolation_level=None), 64)
    async with connection:
        yield connection


def _sqlite_with_extensions() -> Any:
    """Python's own sqlite3 where it was built to load extensions; else pysqlite3
    (its wheel bundles a SQLite that can), as many Python builds (pyenv's
    default among them) leave extension loading out."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        from pysqlite3 import dbapi2  # type: ignore[import-not-found]
    except ImportError as error:
        raise ProjectError(
            "store.index on SQLite needs the sqlite-vec extension, and this Python's sqlite3 "
            "cannot load extensions: `pip install pysqlite3-binary`, or use a Python built "
            "with --enable-loadable-sqlite-extensions"
        ) from error
    return dbapi2
