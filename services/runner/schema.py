"""The runner's schema: LangGraph's checkpoint and store tables, then the runner's
own rows beside them (the fence and its trigger guard the checkpoint tables, so
they come after). `waybill migrate` upgrades them; the runner only checks at start."""

from __future__ import annotations

from sqlalchemy import text

from waybill.common.schema import MIGRATE_HINT, Schema, SchemaMismatch
from waybill.common.settings import Settings
from waybill.common.sql import service_engine
from waybill.services.runner.persistence.backends import open_checkpointer, open_store
from waybill.services.runner.persistence.runner_store import MIGRATIONS, RunnerStore

SCHEMA = Schema("runner", MIGRATIONS)


async def upgrade(settings: Settings) -> str:
    """Set up LangGraph's tables, then bring the runner's to this build's head."""
    async with open_checkpointer(settings, setup=True), open_store(settings, setup=True):
        pass
    store = RunnerStore(service_engine(settings, settings.checkpoint_sqlalchemy_url()))
    try:
        await SCHEMA.upgrade(store.engine)
    finally:
        await store.engine.dispose()
    return SCHEMA.head()


def _langgraph_versions() -> dict[str, int]:
    """LangGraph's Postgres tables keep their version in a table each: the newest
    version this build's packages know (SQLite tables are created as they are used)."""
    from langgraph.checkpoint.postgres.base import BasePostgresSaver
    from langgraph.store.postgres.base import BasePostgresStore

    return {
        "checkpoint_migrations": len(BasePostgresSaver.MIGRATIONS) - 1,
        "store_migrations": len(BasePostgresStore.MIGRATIONS) - 1,
    }


async def check(store: RunnerStore) -> None:
    """Raise `SchemaMismatch` unless every table the runner uses is at this build's head."""
    await SCHEMA.check(store.engine)
    if not store.is_postgres:
        return
    async with store.engine.connect() as conn:
        for table, needed in _langgraph_versions().items():
            exists = (await conn.execute(text("SELECT to_regclass(:t)"), {"t": table})).scalar()
            found = None
            if exists is not None:
                found = (await conn.execute(text(f"SELECT max(v) FROM {table}"))).scalar()
            if found is None or found < needed:
                raise SchemaMismatch(
                    f"LangGraph's {table} is at {found}, this build needs {needed}: " + MIGRATE_HINT
                )
            if found > needed:
                raise SchemaMismatch(
                    f"this build does not know LangGraph's {table} version {found} (its newest "
                    f"is {needed}): the database was migrated by a newer release"
                )
