"""Admission's stores opened directly on a migrated database, for the tests of its
state machine, timers and filters (no services): a SQLite file, or a fresh
Postgres database dropped afterwards."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from tests.support.stacks import fresh_postgres_database
from waybill.common import codec
from waybill.common.settings import Settings
from waybill.common.sql import create_engine
from waybill.common.statuses import DEFAULT_MULTITASK_STRATEGY, RunStatus
from waybill.services.admission.rows import RunRow
from waybill.services.admission.runs.leases import LeaseStore
from waybill.services.admission.runs.run_store import RunStore
from waybill.services.admission.schema import migrate_to_head
from waybill.services.admission.threads.thread_store import ThreadStore

BACKENDS = ["sqlite", "postgres"]


@dataclass
class AdmissionStores:
    threads: ThreadStore
    runs: RunStore  # where runs are admitted
    leases: LeaseStore  # what the dispatcher claims from


@contextlib.asynccontextmanager
async def admission_stores(
    tmp_path: Path, backend: str = "sqlite", log_close_grace: float = 0.0
) -> AsyncIterator[AdmissionStores]:
    with contextlib.ExitStack() as databases:
        database_url = (
            databases.enter_context(fresh_postgres_database()) if backend == "postgres" else None
        )
        settings = Settings(data_dir=tmp_path, database_url=database_url)
        engine = create_engine(settings.sqlalchemy_url("admission"))
        threads = ThreadStore(engine)  # first: it registers SQLite's functions per connection
        await migrate_to_head(engine)
        try:
            yield AdmissionStores(threads, RunStore(threads), LeaseStore(engine, log_close_grace))
        finally:
            await engine.dispose()


def a_pending_run(after_seconds: float = 0.0) -> RunRow:
    """A run as StartRun checks it, on a fresh thread, not stored yet."""
    now = codec.now_utc()
    return RunRow(
        run_id=str(uuid.uuid4()),
        thread_id=str(uuid.uuid4()),
        assistant_id=str(uuid.uuid4()),
        graph_id="lead_agent",
        status=RunStatus.PENDING,
        multitask_strategy=DEFAULT_MULTITASK_STRATEGY,
        metadata={},
        kwargs={},
        created_at=now + timedelta(seconds=after_seconds),  # as admission stores a delay
        updated_at=now,
    )
