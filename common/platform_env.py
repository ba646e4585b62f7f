"""LangGraph Platform's environment names, understood where they mean what ours do.

A project moving from `langgraph up` / LangGraph Platform keeps its environment:
`DATABASE_URI` is `WAYBILL_DATABASE_URL`, and so on (docs/projects.md has the
table). A `WAYBILL_` name, when both are set, wins. A Postgres URL in any of the
usual spellings (`postgres://`, `postgresql://`, `postgresql+psycopg://`) is taken
to the driver the services use (`postgresql_driver_url`).
"""

from __future__ import annotations

import os
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import PydanticBaseSettingsSource

# LangGraph Platform's name -> the Settings field it sets.
PLATFORM_NAMES = {
    "DATABASE_URI": "database_url",
    "REDIS_URI": "redis_url",
    "N_JOBS_PER_WORKER": "runner_slots",
    "BG_JOB_TIMEOUT_SECS": "run_timeout_seconds",
    "LOG_LEVEL": "log_level",
}

# How the services reach Postgres (SQLAlchemy's asyncpg dialect); the checkpointer
# turns it back into the plain URL its own driver reads.
ASYNC_DRIVER = "postgresql+asyncpg://"
POSTGRES_SCHEMES = (
    "postgres://",
    "postgresql://",
    "postgresql+psycopg://",
    "postgresql+psycopg2://",
)


def postgresql_driver_url(url: str | None) -> str | None:
    """`url` with the scheme the services' SQLAlchemy engines need."""
    if url is None:
        return None
    for scheme in POSTGRES_SCHEMES:
        if url.startswith(scheme):
            return ASYNC_DRIVER + url[len(scheme) :]
    return url


class PlatformEnvSource(PydanticBaseSettingsSource):
    """The settings the process environment gives under LangGraph Platform's names;
    consulted after the `WAYBILL_` names, so those win."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # `__call__` answers for every field at once

    def __call__(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for name, field_name in PLATFORM_NAMES.items():
            value = os.environ.get(name)
            if value:
                found[field_name] = value
        return found
