"""The SQL engine every service uses, and its migrations (Alembic, one version
table per service, so that all services can share one Postgres database).

Migrations run through Alembic's own `command.upgrade`: each service's
`migrations/env.py` calls `run_migrations` below, on the connection `migrate`
hands it through the Alembic config."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from alembic import command, context
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from waybill.common import codec, sqlite_driver
from waybill.common.extras import needs_postgres
from waybill.common.settings import Settings
from waybill.common.work_counts import count_postgres


def json_text(value: Any) -> str:
    return codec.dumps(value).decode()


# JSON columns (run kwargs, thread values) with orjson, as on the wire: a thread's
# values after a long answer are tens of kilobytes, written with every run's end.
JSON_CODEC: dict[str, Any] = {"json_serializer": json_text, "json_deserializer": codec.loads}


def database_unreachable(error: BaseException) -> bool:
    """Whether `error` (or what caused it) says the database cannot be reached right
    now: refused or dropped connections, a server starting up or shutting down. Such a
    call is answered UNAVAILABLE (retry), not INTERNAL; the pools reconnect by
    themselves (`pool_pre_ping`, psycopg_pool's check)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _unreachable(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def _unreachable(error: BaseException) -> bool:
    from sqlalchemy import exc

    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, (exc.OperationalError, exc.InterfaceError, ConnectionError)):
        return True
    kind = type(error)
    # asyncpg's and psycopg's own, by module (neither is imported by every service).
    if kind.__module__.startswith("asyncpg") and kind.__name__ in ASYNCPG_UNREACHABLE:
        return True
    return kind.__module__.startswith(("psycopg", "psycopg_pool")) and kind.__name__ in (
        "OperationalError",
        "PoolTimeout",
    )


ASYNCPG_UNREACHABLE = {
    "ConnectionDoesNotExistError",
    "CannotConnectNowError",
    "ConnectionFailureError",
    "AdminShutdownError",
    "CrashShutdownError",
    "InterfaceError",
}


def service_engine(settings: Settings, url: str) -> AsyncEngine:
    """A service's SQL engine for `url`, with this deployment's pool size."""
    return create_engine(
        url, settings.db_pool_size, settings.db_max_overflow, settings.db_ping_idle_seconds
    )


def create_engine(
    url: str, pool_size: int = 5, max_overflow: int = 10, ping_idle_seconds: float = 0.1
) -> AsyncEngine:
    """SQLite for the embedded default, else Postgres with a bounded pool: every
    service's pool counts against the server's `max_connections`."""
    if url.startswith("sqlite"):
        # One trip to aiosqlite's thread per statement (see sqlite_driver.py).
        connect_args = {"timeout": 30, "async_creator_fn": sqlite_driver.connect}
        engine = create_async_engine(url, connect_args=connect_args, **JSON_CODEC)

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):  # type: ignore[no-untyped-def]
            # WAL lets readers proceed while one writer commits.
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return SqliteEngine(engine.sync_engine)
    with needs_postgres():  # SQLAlchemy imports the driver (asyncpg) here
        engine = create_async_engine(
            url, pool_size=pool_size, max_overflow=max_overflow, **JSON_CODEC
        )
    ping_when_idle(engine, ping_idle_seconds)
    count_postgres(engine)
    return engine


def ping_when_idle(engine: AsyncEngine, idle_seconds: float) -> None:
    """Ping a pooled connection before use only when it sat idle `idle_seconds`.

    A ping on every checkout (`pool_pre_ping`) is one more round trip per
    transaction. A connection in steady use needs none: if the server went away
    under it, its statement fails, and SQLAlchemy then recycles every connection
    opened before that failure. One that sat idle through a restart is pinged,
    and a dead one is replaced before anyone uses it."""

    @event.listens_for(engine.sync_engine, "checkin")
    def _checked_in(_dbapi_connection, record):  # type: ignore[no-untyped-def]
        record.info[CHECKED_IN_AT] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _checked_out(dbapi_connection, record, _proxy):  # type: ignore[no-untyped-def]
        checked_in_at = record.info.pop(CHECKED_IN_AT, None)
        if checked_in_at is None or time.monotonic() - checked_in_at < idle_seconds:
            return  # new, or in steady use
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:
            # The pool drops this connection and checks out another.
            raise DisconnectionError(f"an idle connection was gone: {error}") from error


# Where a pooled connection's record keeps when it was last checked in.
CHECKED_IN_AT = "waybill_checked_in_at"


class SqliteEngine(AsyncEngine):
    """An SQLite engine whose write transactions (`begin()`) take turns in this
    process, handed over by the event loop.

    SQLite has one writer per file. Without the turn, a second transaction's
    first write waits in SQLite's busy handler, which sleeps in steps of up to
    100 ms whatever the first one does; and while an event loop is busy a
    transaction of a few statements holds the lock for tens of milliseconds.
    Reads (`connect()`) do not take a turn: WAL lets them run beside the writer."""

    def __init__(self, sync_engine: Any) -> None:
        super().__init__(sync_engine)
        self._turns: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        async with self._turn(), super().begin() as connection:
            yield connection

    def _turn(self) -> asyncio.Lock:
        # One lock per event loop: tests and tools run an engine under several loops.
        loop = asyncio.get_running_loop()
        turn = self._turns.get(loop)
        if turn is None:
            self._turns = {loop: asyncio.Lock()}  # a closed loop's lock is dropped
            turn = self._turns[loop]
        return turn


def version_table(service: str) -> str:
    """Each service's own Alembic version table, so that they can share one database."""
    return f"alembic_version_{service}"


def alembic_config(
    migrations_dir: Path, service: str, connection: Connection | None = None
) -> Config:
    """Alembic's config for a service's migrations; `connection` is the one its
    `env.py` migrates (Alembic never opens one of its own here)."""
    config = Config()
    config.set_main_option("script_location", str(migrations_dir))
    config.attributes.update(service=service, connection=connection)
    return config


def run_migrations(service: str) -> None:
    """What every service's `migrations/env.py` runs: the migrations on the
    connection its caller gave, recorded in the service's own version table."""
    connection: Connection | None = context.config.attributes.get("connection")
    if context.config.attributes.get("service", service) != service:
        raise RuntimeError(f"{context.script.dir} holds the {service} migrations")
    if connection is None:
        raise RuntimeError(
            f"the {service} migrations run on a connection given to them: "
            "`waybill migrate`, not the alembic command line"
        )
    context.configure(
        connection=connection,
        version_table=version_table(service),
        # SQLite alters a table by copying it (Alembic's batch mode).
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _upgrade(connection: Connection, migrations_dir: Path, service: str) -> None:
    command.upgrade(alembic_config(migrations_dir, service, connection), "head")


async def migrate(engine: AsyncEngine, migrations_dir: Path, service: str) -> None:
    """Bring the service's tables to the newest revision."""
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade, migrations_dir, service)
