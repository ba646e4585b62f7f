"""Persistence of threads: create, read, patch, record a state, delete, search.

A thread's status as read is its live one (see thread_queries.py). Admissions
and deletions of one thread are serialized: by the thread row's lock on
Postgres, and by an in-process lock per thread on SQLite, which has no row locks.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, delete, exists, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waybill.common import codec
from waybill.common.errors import busy, conflict, not_found
from waybill.common.statuses import ACTIVE_RUN_STATUSES, ThreadStatus
from waybill.services.admission.auth_filters import visible_threads
from waybill.services.admission.records import ThreadRecord, thread_of
from waybill.services.admission.tables import runs, threads
from waybill.services.admission.thread_queries import (
    ThreadQuery,
    filters,
    has_active_run,
    install_sqlite_json_contains,
    ordering,
    thread_columns,
)

# The project's auth filter for threads (and runs through them); None: no filter.
Filter = dict[str, Any] | None


def _thread_and_activity(lock: bool) -> Select[Any]:
    columns = [*thread_columns(), has_active_run().label("has_active_run")]
    query = select(*columns).where(threads.c.thread_id == bindparam("thread_id"))
    return query.with_for_update(of=threads) if lock else query


# A thread with its live status and whether it has an active run, by `thread_id`
# (locked: True). Built once: building it cost more than running it (it is read
# twice on the way to a run's first token).
THREAD_AND_ACTIVITY = {lock: _thread_and_activity(lock) for lock in (False, True)}
# A write to a thread's row, its values given at execution (built once, as above).
THREAD_STAMP = update(threads).where(threads.c.thread_id == bindparam("stamped_thread_id"))


def owned_by(owner: str | None) -> list[Any]:
    """The WHERE clause confining a query to `owner`'s threads (none for admins)."""
    return [] if owner is None else [threads.c.owner_id == owner]


async def has_active_run_on(conn: AsyncConnection, thread_id: str) -> bool:
    query = select(
        exists().where(runs.c.thread_id == thread_id, runs.c.status.in_(ACTIVE_RUN_STATUSES))
    )
    return bool((await conn.execute(query)).scalar())


class ThreadStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"
        if not self.is_postgres:
            install_sqlite_json_contains(engine)
        # SQLite has no row locks: admissions and deletions of a thread are
        # serialized per thread in-process (run_store.py takes the same locks).
        self.locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def create_thread(
        self, thread_id: str, metadata: dict[str, Any], if_exists: str, owner_id: str
    ) -> ThreadRecord:
        now = codec.now_utc()
        async with self.engine.begin() as conn:
            existing = await self.read(conn, thread_id)
            if existing is not None:
                # Someone else's thread is never handed out, even with do_nothing.
                if if_exists == "do_nothing" and existing.owner_id == owner_id:
                    return existing
                raise conflict(f"Thread {thread_id} already exists.")
            await conn.execute(
                insert(threads).values(
                    thread_id=thread_id,
                    metadata=metadata,
                    status=ThreadStatus.IDLE,
                    created_at=now,
                    updated_at=now,
                    owner_id=owner_id,
                )
            )
        return ThreadRecord(thread_id, metadata, ThreadStatus.IDLE, now, now, owner_id=owner_id)

    async def read(
        self, conn: AsyncConnection, thread_id: str, lock: bool = False, auth: Filter = None
    ) -> ThreadRecord | None:
        """The thread if it passes the project's auth filter (locked: on Postgres)."""
        query = select(*thread_columns()).where(
            threads.c.thread_id == thread_id, visible_threads(auth, self.is_postgres)
        )
        if lock and self.is_postgres:
            query = query.with_for_update(of=threads)
        row = (await conn.execute(query)).first()
        return thread_of(row) if row else None

    async def read_to_admit_on(
        self, conn: AsyncConnection, thread_id: str, lock: bool = True
    ) -> tuple[ThreadRecord | None, bool]:
        """The thread, locked, and whether it has an active run: one statement."""
        query = THREAD_AND_ACTIVITY[lock and self.is_postgres]
        row = (await conn.execute(query, {"thread_id": thread_id})).first()
        return (thread_of(row), bool(row.has_active_run)) if row else (None, False)

    async def read_owned(
        self,
        conn: AsyncConnection,
        thread_id: str,
        owner: str | None,
        lock: bool = False,
        auth: Filter = None,
    ) -> ThreadRecord:
        """The thread, if `owner` may see it and it passes the project's auth filter;
        another user's thread is simply not found."""
        record = await self.read(conn, thread_id, lock, auth)
        if record is None or not record.visible_to(owner):
            raise not_found(f"Thread {thread_id} not found.")
        return record

    async def thread_for_run(
        self, thread_id: str, owner: str | None, if_not_exists: str, auth: Filter = None
    ) -> ThreadRecord | None:
        """The run's thread if `owner` may use it; None when it will be created."""
        async with self.engine.connect() as conn:
            record, _ = await self.read_to_admit_on(conn, thread_id, lock=False)
            if record is None and if_not_exists == "create":
                return None
            if record is None or not record.visible_to(owner):
                raise not_found(f"Thread {thread_id} not found.")
            if auth and await self.read(conn, thread_id, auth=auth) is None:
                raise not_found(f"Thread {thread_id} not found.")  # the auth filter excludes it
        return record

    async def get_thread(
        self, thread_id: str, owner: str | None = None, auth: Filter = None
    ) -> ThreadRecord:
        async with self.engine.connect() as conn:
            return await self.read_owned(conn, thread_id, owner, auth=auth)

    async def patch_thread(
        self,
        thread_id: str,
        metadata: dict[str, Any],
        owner: str | None = None,
        auth: Filter = None,
        if_absent: dict[str, Any] | None = None,
    ) -> ThreadRecord:
        """Merge `metadata` in; `if_absent`'s keys only where the thread has none yet."""
        async with self.engine.begin() as conn:
            record = await self.read_owned(conn, thread_id, owner, lock=True, auth=auth)
            record.metadata = {**(if_absent or {}), **record.metadata, **metadata}
            record.updated_at = codec.now_utc()
            await conn.execute(
                update(threads)
                .where(threads.c.thread_id == thread_id)
                .values(metadata=record.metadata, updated_at=record.updated_at)
            )
        return record

    async def record_thread_state(
        self,
        thread_id: str,
        values: dict[str, Any],
        interrupts: dict[str, Any],
        status: str,
        owner: str | None = None,
    ) -> ThreadRecord:
        """A state written outside a run, on the thread's row as a run's end writes it.
        Refused while a run is active: that run records the thread when it ends."""
        async with self.locks[thread_id], self.engine.begin() as conn:
            record = await self.read_owned(conn, thread_id, owner, lock=True)
            if await has_active_run_on(conn, thread_id):
                raise busy(f"Thread {thread_id} has an active run; it records the state.")
            record.values, record.interrupts, record.status = values, interrupts, status
            record.updated_at = codec.now_utc()
            await conn.execute(
                THREAD_STAMP,
                {
                    "stamped_thread_id": thread_id,
                    "values": values,
                    "interrupts": interrupts,
                    "status": status,
                    "updated_at": record.updated_at,
                },
            )
        return record

    async def delete_thread(
        self, thread_id: str, owner: str | None = None, auth: Filter = None
    ) -> list[str]:
        """Delete the thread and its runs; returns the deleted runs' ids."""
        async with self.locks[thread_id], self.engine.begin() as conn:
            await self.read_owned(conn, thread_id, owner, lock=True, auth=auth)
            if await has_active_run_on(conn, thread_id):
                raise busy(f"Thread {thread_id} has an active run; cancel it before deleting.")
            deleted = await conn.execute(
                delete(runs).where(runs.c.thread_id == thread_id).returning(runs.c.run_id)
            )
            run_ids = [str(run_id) for run_id in deleted.scalars()]
            await conn.execute(delete(threads).where(threads.c.thread_id == thread_id))
        return run_ids

    async def threads_idle_since(self, cutoff: datetime, limit: int) -> list[str]:
        """Threads not updated since `cutoff` and not busy, oldest first (checkpointer.ttl)."""
        statement = (
            select(threads.c.thread_id)
            .where(threads.c.updated_at < cutoff, threads.c.status != ThreadStatus.BUSY)
            .order_by(threads.c.updated_at)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            return [str(thread_id) for thread_id in (await conn.execute(statement)).scalars()]

    async def search_threads(
        self,
        query: ThreadQuery,
        limit: int,
        offset: int,
        owner: str | None = None,
        auth: Filter = None,
    ) -> list[ThreadRecord]:
        statement = (
            select(*thread_columns())
            .where(
                *filters(query, self.is_postgres),
                *owned_by(owner),
                visible_threads(auth, self.is_postgres),
            )
            .order_by(*ordering(query))
            .limit(limit)
            .offset(offset)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [thread_of(row) for row in rows]

    async def count_threads(
        self, query: ThreadQuery, owner: str | None = None, auth: Filter = None
    ) -> int:
        statement = (
            select(func.count())
            .select_from(threads)
            .where(
                *filters(query, self.is_postgres),
                *owned_by(owner),
                visible_threads(auth, self.is_postgres),
            )
        )
        async with self.engine.connect() as conn:
            return int((await conn.execute(statement)).scalar_one())
