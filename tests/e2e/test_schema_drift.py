"""The migrations and the table declarations describe the same schema.

Every service declares its tables (`tables.py`, and the journal's and channels'
stores) and creates them with Alembic migrations. Nothing else ties the two
together: a migration that adds an index the declaration lacks, or a column
declared but never migrated, goes unnoticed until a query meets it. Here the
migrations run on an empty database, SQLite and Postgres, and Alembic's
`compare_metadata` must find nothing between them and the declarations.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import MetaData
from sqlalchemy.engine import Connection

from tests.support.stacks import fresh_postgres_database
from waybill.common.migrate import migrate_all
from waybill.common.settings import Settings
from waybill.common.sql import service_engine
from waybill.services.admission import tables as admission_tables
from waybill.services.delivery import tables as delivery_tables
from waybill.services.delivery.channels import store as channel_store
from waybill.services.journal import tables as journal_tables
from waybill.services.runner.persistence import tables as runner_tables

# Each service's declared tables.
DECLARED: dict[str, tuple[MetaData, ...]] = {
    "admission": (admission_tables.metadata,),
    "journal": (journal_tables.metadata,),
    "delivery": (delivery_tables.metadata, channel_store.metadata),
    "runner": (runner_tables.metadata,),
}

# LangGraph's savers create and migrate these themselves, beside the runner's rows.
LANGGRAPH_TABLES = {
    "checkpoints",
    "checkpoint_blobs",
    "checkpoint_writes",
    "checkpoint_migrations",
    "writes",
    "store",
    "store_vectors",
    "store_migrations",
    "vector_migrations",
}


def merged(*parts: MetaData) -> MetaData:
    whole = MetaData()
    for part in parts:
        for table in part.tables.values():
            table.to_metadata(whole)
    return whole


def drift(connection: Connection, declared: MetaData) -> list[Any]:
    """What Alembic would have to change to make the database match `declared`:
    columns and their types, nullability, indexes, unique constraints, tables."""

    def ours(name: str | None, kind: str, _parent: dict[str, Any]) -> bool:
        if kind != "table" or name is None:
            return True
        return name not in LANGGRAPH_TABLES and not name.startswith("alembic_version_")

    context = MigrationContext.configure(
        connection, opts={"compare_type": True, "include_name": ours}
    )
    found: list[Any] = compare_metadata(context, declared)
    return found


async def drift_of(settings: Settings, url: str, declared: MetaData) -> list[Any]:
    engine = service_engine(settings, url)
    try:
        async with engine.connect() as connection:
            return await connection.run_sync(drift, declared)
    finally:
        await engine.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def migrated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    if request.param == "sqlite":
        yield Settings(data_dir=tmp_path)
        return
    with fresh_postgres_database() as url:
        yield Settings(data_dir=tmp_path, database_url=url)


def places(settings: Settings) -> dict[str, MetaData]:
    """Each database the services use, and the tables declared in it."""
    if settings.database_url:  # Postgres: one database holds every service's tables
        return {settings.database_url: merged(*(m for ms in DECLARED.values() for m in ms))}
    # SQLite: a file per service; the runner's rows are in the checkpoints file.
    return {
        (
            settings.checkpoint_sqlalchemy_url()
            if service == "runner"
            else settings.sqlalchemy_url(service)
        ): merged(*parts)
        for service, parts in DECLARED.items()
    }


async def test_every_service_s_migrations_build_the_tables_it_declares(
    migrated: Settings,
) -> None:
    await migrate_all(migrated, report=lambda _line: None)
    for url, declared in places(migrated).items():
        assert await drift_of(migrated, url, declared) == [], url


async def test_the_check_sees_an_index_only_a_migration_has(migrated: Settings) -> None:
    """The comparison is not blind: a declaration without one of its migrated
    indexes is drift."""
    await migrate_all(migrated, report=lambda _line: None)
    url, declared = next((u, d) for u, d in places(migrated).items() if "runs" in d.tables)
    runs = declared.tables["runs"]
    runs.indexes.discard(next(i for i in runs.indexes if i.name == "ix_runs_status_lease"))
    found = await drift_of(migrated, url, declared)
    assert [(change[0], change[1].name) for change in found] == [
        ("remove_index", "ix_runs_status_lease")
    ]
