"""Persistence of threads and runs. Every status change is a conditional write
checked against `RUN_TRANSITIONS`, so two writers can never both win."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import and_, delete, exists, func, insert, select, type_coerce, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from common import codec
from common.errors import busy, conflict, not_found
from common.sql import migrate
from services.admission.records import (
    ACTIVE_STATUSES,
    RUN_TRANSITIONS,
    THREAD_STATUS_AFTER_RUN,
    RunRecord,
    ThreadRecord,
)
from services.admission.tables import runs, threads

MIGRATIONS = Path(__file__).parent / "migrations"


def _thread(row: Row[Any]) -> ThreadRecord:
    return ThreadRecord(
        thread_id=row.thread_id,
        metadata=row.metadata or {},
        status=row.status,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _run(row: Row[Any]) -> RunRecord:
    return RunRecord(
        run_id=row.run_id,
        thread_id=row.thread_id,
        assistant_id=row.assistant_id,
        graph_id=row.graph_id,
        status=row.status,
        multitask_strategy=row.multitask_strategy,
        metadata=row.metadata or {},
        kwargs=row.kwargs or {},
        created_at=row.created_at,
        updated_at=row.updated_at,
        epoch=row.epoch,
        attempt=row.attempt,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        stop_reason=row.stop_reason,
    )


class AdmissionStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        # SQLite has no row locks: serialize admissions per thread in-process.
        self._thread_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def migrate(self) -> None:
        await migrate(self.engine, MIGRATIONS, "admission")

    # ---- threads -------------------------------------------------------------

    async def create_thread(
        self, thread_id: str, metadata: dict[str, Any], if_exists: str
    ) -> ThreadRecord:
        now = codec.now_utc()
        async with self.engine.begin() as conn:
            existing = await self._get_thread(conn, thread_id)
            if existing is not None:
                if if_exists == "do_nothing":
                    return existing
                raise conflict(f"Thread {thread_id} already exists.")
            await conn.execute(
                insert(threads).values(
                    thread_id=thread_id,
                    metadata=metadata,
                    status="idle",
                    created_at=now,
                    updated_at=now,
                )
            )
        return ThreadRecord(thread_id, metadata, "idle", now, now)

    async def _get_thread(
        self, conn: AsyncConnection, thread_id: str, lock: bool = False
    ) -> ThreadRecord | None:
        query = select(threads).where(threads.c.thread_id == thread_id)
        if lock and self.is_postgres:
            query = query.with_for_update()
        row = (await conn.execute(query)).first()
        return _thread(row) if row else None

    async def get_thread(self, thread_id: str) -> ThreadRecord:
        async with self.engine.connect() as conn:
            record = await self._get_thread(conn, thread_id)
        if record is None:
            raise not_found(f"Thread {thread_id} not found.")
        return record

    async def patch_thread(self, thread_id: str, metadata: dict[str, Any]) -> ThreadRecord:
        async with self.engine.begin() as conn:
            record = await self._get_thread(conn, thread_id, lock=True)
            if record is None:
                raise not_found(f"Thread {thread_id} not found.")
            record.metadata = {**record.metadata, **metadata}
            record.updated_at = codec.now_utc()
            await conn.execute(
                update(threads)
                .where(threads.c.thread_id == thread_id)
                .values(metadata=record.metadata, updated_at=record.updated_at)
            )
        return record

    async def delete_thread(self, thread_id: str) -> None:
        async with self.engine.begin() as conn:
            result = await conn.execute(delete(threads).where(threads.c.thread_id == thread_id))
            if result.rowcount == 0:
                raise not_found(f"Thread {thread_id} not found.")
            await conn.execute(delete(runs).where(runs.c.thread_id == thread_id))

    async def search_threads(
        self, metadata: dict[str, Any], status: str, limit: int, offset: int
    ) -> list[ThreadRecord]:
        query = select(threads)
        if status:
            query = query.where(threads.c.status == status)
        if metadata:
            if self.is_postgres:
                query = query.where(type_coerce(threads.c.metadata, JSONB).contains(metadata))
            else:
                for key, value in metadata.items():
                    path = f'$."{key}"'
                    stored = func.json_extract(threads.c.metadata, path)
                    if isinstance(value, dict | list):
                        query = query.where(stored == func.json(codec.dumps(value).decode()))
                    else:
                        query = query.where(stored == value)
        query = query.order_by(threads.c.created_at.desc()).limit(limit).offset(offset)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_thread(row) for row in rows]

    # ---- runs ----------------------------------------------------------------

    async def admit_run(self, run: RunRecord, if_not_exists: str) -> RunRecord:
        """Insert `run` as pending, honouring its thread's multitask strategy."""
        async with self._thread_locks[run.thread_id], self.engine.begin() as conn:
            thread = await self._get_thread(conn, run.thread_id, lock=True)
            if thread is None:
                if if_not_exists != "create":
                    raise not_found(f"Thread {run.thread_id} not found.")
                await conn.execute(
                    insert(threads).values(
                        thread_id=run.thread_id,
                        metadata={"graph_id": run.graph_id, "assistant_id": run.assistant_id},
                        status="idle",
                        created_at=run.created_at,
                        updated_at=run.created_at,
                    )
                )
            else:
                # LangGraph Platform records on the thread which graph it runs.
                await conn.execute(
                    update(threads)
                    .where(threads.c.thread_id == run.thread_id)
                    .values(
                        metadata={
                            **thread.metadata,
                            "graph_id": run.graph_id,
                            "assistant_id": run.assistant_id,
                        },
                        updated_at=run.created_at,
                    )
                )
            if run.multitask_strategy == "reject" and await self._has_active_run(
                conn, run.thread_id
            ):
                raise busy(
                    f"Thread {run.thread_id} already has an active run; "
                    "use multitask_strategy='enqueue' to queue behind it."
                )
            await conn.execute(insert(runs).values(**_run_values(run)))
        return run

    async def _has_active_run(self, conn: AsyncConnection, thread_id: str) -> bool:
        query = select(
            exists().where(runs.c.thread_id == thread_id, runs.c.status.in_(ACTIVE_STATUSES))
        )
        return bool((await conn.execute(query)).scalar())

    async def get_run(self, thread_id: str, run_id: str) -> RunRecord:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(runs).where(runs.c.run_id == run_id, runs.c.thread_id == thread_id)
                )
            ).first()
        if row is None:
            raise not_found(f"Run {run_id} not found on thread {thread_id}.")
        return _run(row)

    async def list_runs(
        self, thread_id: str, status: str | None, limit: int, offset: int
    ) -> list[RunRecord]:
        query = select(runs).where(runs.c.thread_id == thread_id)
        if status:
            query = query.where(runs.c.status == status)
        query = query.order_by(runs.c.created_at.desc()).limit(limit).offset(offset)
        async with self.engine.connect() as conn:
            return [_run(row) for row in (await conn.execute(query)).all()]

    async def delete_run(self, thread_id: str, run_id: str) -> None:
        record = await self.get_run(thread_id, run_id)
        if record.status in ACTIVE_STATUSES:
            raise busy(f"Run {run_id} is {record.status}; cancel it before deleting it.")
        async with self.engine.begin() as conn:
            await conn.execute(delete(runs).where(runs.c.run_id == run_id))

    async def claim_next(self, runner_id: str, lease_seconds: float) -> RunRecord | None:
        """Start the oldest pending run whose thread is free: pending -> running."""
        running = runs.alias("running")
        candidate = (
            select(runs.c.run_id)
            .where(
                runs.c.status == "pending",
                ~exists().where(
                    and_(running.c.thread_id == runs.c.thread_id, running.c.status == "running")
                ),
            )
            .order_by(runs.c.created_at)
            .limit(1)
        )
        if self.is_postgres:
            candidate = candidate.with_for_update(skip_locked=True, of=runs)
        async with self.engine.begin() as conn:
            run_id = (await conn.execute(candidate)).scalar()
            if run_id is None:
                return None
            now = codec.now_utc()
            row = (
                await conn.execute(
                    update(runs)
                    .where(runs.c.run_id == run_id, runs.c.status == "pending")
                    .values(
                        status="running",
                        epoch=runs.c.epoch + 1,
                        attempt=runs.c.attempt + 1,
                        lease_owner=runner_id,
                        lease_expires_at=now + timedelta(seconds=lease_seconds),
                        updated_at=now,
                    )
                    .returning(*runs.c)
                )
            ).first()
            if row is None:
                return None
            await conn.execute(
                update(threads)
                .where(threads.c.thread_id == row.thread_id)
                .values(status="busy", updated_at=now)
            )
        return _run(row)

    async def finish_run(self, run_id: str, epoch: int, status: str, stop_reason: str) -> bool:
        """Write a terminal status; refused (False) for a stale epoch or a finished run."""
        allowed_from = [s for s, targets in RUN_TRANSITIONS.items() if status in targets]
        now = codec.now_utc()
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    update(runs)
                    .where(
                        runs.c.run_id == run_id,
                        runs.c.epoch == epoch,
                        runs.c.status.in_(allowed_from),
                    )
                    .values(
                        status=status,
                        stop_reason=stop_reason,
                        lease_owner=None,
                        lease_expires_at=None,
                        updated_at=now,
                    )
                    .returning(runs.c.thread_id)
                )
            ).first()
            if row is None:
                return False
            await conn.execute(
                update(threads)
                .where(threads.c.thread_id == row.thread_id)
                .values(status=THREAD_STATUS_AFTER_RUN[status], updated_at=now)
            )
        return True


def _run_values(run: RunRecord) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "thread_id": run.thread_id,
        "assistant_id": run.assistant_id,
        "graph_id": run.graph_id,
        "status": run.status,
        "multitask_strategy": run.multitask_strategy,
        "metadata": run.metadata,
        "kwargs": run.kwargs,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "epoch": run.epoch,
        "attempt": run.attempt,
        "lease_owner": run.lease_owner,
        "lease_expires_at": run.lease_expires_at,
        "stop_reason": run.stop_reason,
    }
