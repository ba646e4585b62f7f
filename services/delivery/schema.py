"""The delivery schema: what `waybill migrate` upgrades, and what the service checks
at start (it never migrates by itself)."""

from __future__ import annotations

from waybill.common.schema import Schema
from waybill.common.settings import Settings
from waybill.common.sql import service_engine
from waybill.services.delivery.store import MIGRATIONS

SCHEMA = Schema("delivery", MIGRATIONS)


async def upgrade(settings: Settings) -> str:
    """Bring the delivery tables to this build's head; return that revision."""
    return await SCHEMA.upgrade_to_head(
        service_engine(settings, settings.sqlalchemy_url("delivery"))
    )
