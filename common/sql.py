"""The SQL engine every service uses, and its migrations (Alembic, one version
table per service, so that all services can share one Postgres database)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from waybill.common import codec, sqlite_driver


def json_text(value: Any) -> str:
    return codec.dumps(value).decode()


# JSON columns (run kwargs, thread values) with orjson, as on the wire: a thread's
# values after a long answer are tens of kilobytes, written with every run's end.
JSON_CODEC: dict[str, Any] = {"json_serializer": json_text, "json_deserializer": codec.loads}


def create_engine(url: str, pool_size: int = 5, max_overflow: int = 10) -> AsyncEngine:
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

        return engine
    return create_async_engine(
        url, pool_size=pool_size, max_overflow=max_overflow, pool_pre_ping=True, **JSON_CODEC
    )


def _upgrade(connection: Connection, migrations_dir: Path, service: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir))
    script = ScriptDirectory.from_config(config)

    def upgrade_steps(revision, _context):  # type: ignore[no-untyped-def]
        return script._upgrade_revs("head", revision)

    with EnvironmentContext(config, script, fn=upgrade_steps) as environment:
        environment.configure(
            connection=connection,
            version_table=f"alembic_version_{service}",
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with environment.begin_transaction():
            environment.run_migrations()


async def migrate(engine: AsyncEngine, migrations_dir: Path, service: str) -> None:
    """Bring the service's tables to the newest revision."""
    async with engine.begin() as connection:
        await connection.run_sync(_upgrade, migrations_dir, service)
