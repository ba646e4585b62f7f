"""The admission schema: what `waybill migrate` upgrades, and what the service checks
at start (it never migrates by itself)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from waybill.common.schema import Schema
from waybill.common.settings import Settings
from waybill.common.sql import migrate, service_engine

MIGRATIONS = Path(__file__).parent / "migrations"
SCHEMA = Schema("admission", MIGRATIONS)


async def upgrade(settings: Settings) -> str:
    """Bring the admission tables to this build's head; return that revision."""
    return await SCHEMA.upgrade_to_head(
        service_engine(settings, settings.sqlalchemy_url("admission"))
    )


async def migrate_to_head(engine: AsyncEngine) -> None:
    """Create or upgrade the admission tables on `engine` (tests, and embedded use)."""
    await migrate(engine, MIGRATIONS, "admission")
