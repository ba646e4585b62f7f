"""`python -m waybill.common.migrate` (`waybill migrate`): bring every service's schema to
this build's head. It runs once per deploy (the compose `migrate` service, the
Kubernetes Job, or the embedded launcher before it starts anything); services
only check their schema at start.

The services are named by module, as the launcher names them: `common` never
imports a service package at import time.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from sqlalchemy import text

from waybill.common.extras import MISSING_EXTRA_EXIT_CODE, MissingExtra
from waybill.common.project import PROJECT_EXIT_CODE, ProjectError
from waybill.common.schema import Schema, SchemaMismatch
from waybill.common.settings import Settings, get_settings
from waybill.common.sql import service_engine

# service -> its `upgrade(settings) -> revision`, in this order (the runner's fence
# trigger goes on LangGraph's tables, which its own step creates first).
UPGRADES = {
    "journal": "waybill.services.journal.schema:upgrade",
    "delivery": "waybill.services.delivery.schema:upgrade",
    "admission": "waybill.services.admission.schema:upgrade",
    "runner": "waybill.services.runner.schema:upgrade",
}

# Two migration runs at once (two Jobs, a retried one) take turns on Postgres.
ADVISORY_LOCK_KEY = 0x57A7B177


def _upgrade_of(target: str) -> Callable[[Settings], Awaitable[str]]:
    module, _, name = target.partition(":")
    upgrade: Callable[[Settings], Awaitable[str]] = getattr(importlib.import_module(module), name)
    return upgrade


def schema_of(service: str) -> Schema:
    """The service's `SCHEMA`, from the module that holds its upgrade."""
    schema: Schema = importlib.import_module(UPGRADES[service].partition(":")[0]).SCHEMA
    return schema


async def schema_verdict(settings: Settings, service: str) -> str | None:
    """What is wrong with the service's schema for this build (None: at its head).
    Raises what the database raises when it cannot be read."""
    url = (
        settings.checkpoint_sqlalchemy_url()
        if service == "runner"
        else settings.sqlalchemy_url(service)
    )
    engine = service_engine(settings, url)
    try:
        schema = schema_of(service)
        return schema.verdict(await schema.current(engine))
    finally:
        await engine.dispose()


async def wait_for_schemas(settings: Settings, report: Callable[[str], None] = print) -> None:
    """Return once every service's schema is at this build's head: a pod's init
    step, so that services start after the migration Job instead of failing."""
    said = ""
    while True:
        waiting = []
        for service in UPGRADES:
            try:
                verdict = await schema_verdict(settings, service)
            except Exception as error:  # the database is not there yet: keep waiting
                verdict = f"{service}: {type(error).__name__}: {error}"
            if verdict is not None:
                waiting.append(verdict)
        if not waiting:
            return
        if waiting[0] != said:
            said = waiting[0]
            report(f"waiting: {said}")
        await asyncio.sleep(settings.migrate_lock_poll_seconds)


@asynccontextmanager
async def _one_at_a_time(settings: Settings) -> AsyncIterator[None]:
    if not settings.database_url:
        yield  # SQLite: one embedded installation, one launcher
        return
    engine = service_engine(settings, settings.database_url)
    try:
        # Autocommit, and tries instead of a blocking wait: a statement waiting
        # here would be an open transaction, which the other run's CREATE INDEX
        # CONCURRENTLY (in LangGraph's migrations) waits for: a deadlock.
        async with engine.connect() as conn:
            await conn.execution_options(isolation_level="AUTOCOMMIT")
            try_lock = text("SELECT pg_try_advisory_lock(:key)")
            while True:
                if (await conn.execute(try_lock, {"key": ADVISORY_LOCK_KEY})).scalar():
                    break
                await asyncio.sleep(settings.migrate_lock_poll_seconds)
            try:
                yield
            finally:
                await conn.execute(
                    text("SELECT pg_advisory_unlock(:key)"), {"key": ADVISORY_LOCK_KEY}
                )
    finally:
        await engine.dispose()


async def migrate_all(settings: Settings, report: Callable[[str], None] = print) -> None:
    """Upgrade every service's tables; report each one's revision."""
    async with _one_at_a_time(settings):
        for service, target in UPGRADES.items():
            revision = await _upgrade_of(target)(settings)
            report(f"{service}: schema at {revision}")


def main(argv: list[str] | None = None) -> int:
    arguments = argparse.ArgumentParser(prog="waybill migrate", description=__doc__)
    arguments.add_argument(
        "--wait",
        action="store_true",
        help="migrate nothing: wait until another run (the Job) has migrated every schema",
    )
    wait = arguments.parse_args(argv).wait
    settings = get_settings()
    where = "Postgres" if settings.database_url else f"SQLite under {settings.data_dir.resolve()}"
    print(f"waybill migrate: {where}", flush=True)
    if wait:
        asyncio.run(wait_for_schemas(settings, lambda line: print(f"  {line}", flush=True)))
        print("waybill migrate: every schema is at this build's head", flush=True)
        return 0
    try:
        asyncio.run(migrate_all(settings, lambda line: print(f"  {line}", flush=True)))
    except (OSError, SchemaMismatch) as error:
        print(f"waybill migrate: failed: {error}", file=sys.stderr)
        return 1
    except ProjectError as error:  # the store's tables depend on the project's store.index
        print(f"waybill migrate: refusing to migrate: {error}", file=sys.stderr)
        return PROJECT_EXIT_CODE
    except MissingExtra as missing:  # a Postgres URL without the `postgres` extra
        print(f"waybill migrate: refusing to migrate: {missing}", file=sys.stderr)
        return MISSING_EXTRA_EXIT_CODE
    print("waybill migrate: done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
