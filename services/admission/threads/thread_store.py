"""Persistence of threads: create, read, patch, record a state, delete, search.

A thread's status as read is its live one (see thread_queries.py). Admissions
and deletions of one thread are serialized: by the thread row's lock on
Postgres, and by an in-process lock per thread on SQLite, which has no row locks.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, delete, exists, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waybill.common import codec
from waybill.common.errors import busy, conflict, not_found
from waybill.common.statuses import ACTIVE_RUN_STATUSES, ThreadStatus
from waybill.services.admission.auth_filters import visible_threads
from waybill.services.admission.rows import ThreadRow, thread_of
from waybill.services.admission.tables import runs, threads
from waybill.services.admission.threads.thread_queries import (
    ThreadQuery,
    filters,
    has_active_run,
    install_sqlite_json_contains,
    ordering,
    thread_columns,
)
from waybill.services.admission.threads.thread_ttl import ThreadTTL, TTLPolicy

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
# A thread by `thread_id` (narrowed by an auth filter or locked where asked).
THREAD_BY_ID = select(*thread_columns()).where(threads.c.thread_id == bindparam("thread_id"))
# A write to a thread's row, its values given at execution (built once, as above).
THREAD_STAMP = update(threads).where(threads.c.thread_id == bindparam("stamped_thread_id"))
# A new thread's row, its values given at execution.
THREAD_INSERT = insert(threads)


def owned_by(owner: str | None) -> list[Any]:
    """The WHERE clause confining a query to `owner`'s threads (none for admins)."""
    return [] if owner is None else [threads.c.owner_id == owner]


async def has_active_run_on(conn: AsyncConnection, thread_id: str) -> bool:
    query = select(
        exists().where(runs.c.thread_id == thread_id, runs.c.status.in_(ACTIVE_RUN_STATUSES))
    )
    return bool((await conn.execute(query)).scalar())


def ttl_columns(ttl: ThreadTTL | None, now: datetime) -> dict[str, Any]:
    """A thread row's TTL columns for `ttl` set (or refreshed) at `now`."""
    if ttl is None:
        return {"ttl_strategy": None, "ttl_minutes": None, "ttl_expires_at": None}
    return {
        "ttl_strategy": ttl.strategy,
        "ttl_minutes": ttl.minutes,
        "ttl_expires_at": ttl.expires(now),
    }


def refreshed_ttl(record: ThreadRow, policy: TTLPolicy) -> ThreadTTL | None:
    """The TTL an update or a run leaves on a thread: its own, else the project's."""
    if record.ttl_strategy is not None and record.ttl_minutes is not None:
        return ThreadTTL(record.ttl_strategy, record.ttl_minutes)
    return policy.default


def still_expired(record: ThreadRow, now: datetime) -> bool:
    """Whether the thread's TTL is armed and expired by `now` (not refreshed since)."""
    expires = record.ttl_expires_at
    return expires is not None and codec.aware_utc(expires) <= now


class ThreadStore:
    def __init__(self, engine: AsyncEngine, ttl_policy: TTLPolicy | None = None) -> None:
        self.engine = engine
        # The project's checkpointer.ttl: a default TTL for new and running threads.
        self.ttl_policy = ttl_policy or TTLPolicy()
        self.is_postgres = engine.dialect.name == "postgresql"
        if not self.is_postgres:
            install_sqlite_json_contains(engine)
        # SQLite has no row locks: admissions and deletions of a thread are
        # serialized per thread in-process (run_store.py takes the same locks).
        self.locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def create_thread(
        self,
        thread_id: str,
        metadata: dict[str, Any],
        if_exists: str,
        owner_id: str,
        ttl: ThreadTTL | None = None,
    ) -> ThreadRow:
        """A new thread; `ttl` is its time-to-live (the caller resolved the default)."""
        now = codec.now_utc()
        expiry = ttl_columns(ttl, now)
        async with self.engine.begin() as conn:
            existing = await self.read(conn, thread_id)
            if existing is not None:
                # Someone else's thread is never handed out, even with do_nothing.
                if if_exists == "do_nothing" and existing.owner_id == owner_id:
                    return existing
                raise conflict(f"Thread {thread_id} already exists.")
            row = {
                "thread_id": thread_id,
                "metadata": metadata,
                "status": ThreadStatus.IDLE,
                "created_at": now,
                "updated_at": now,
                "owner_id": owner_id,
                "config": {},
                "state_updated_at": now,
                **expiry,
            }
            await conn.execute(THREAD_INSERT, row)
        return ThreadRow(
            thread_id,
            metadata,
            ThreadStatus.IDLE,
            now,
            now,
            owner_id=owner_id,
            state_updated_at=now,
            **expiry,
        )

    async def read(
        self, conn: AsyncConnection, thread_id: str, lock: bool = False, auth: Filter = None
    ) -> ThreadRow | None:
        """The thread if it passes the project's auth filter (locked: on Postgres)."""
        query = THREAD_BY_ID
        if auth:
            query = query.where(visible_threads(auth, self.is_postgres))
        if lock and self.is_postgres:
            query = query.with_for_update(of=threads)
        row = (await conn.execute(query, {"thread_id": thread_id})).first()
        return thread_of(row) if row else None

    async def read_to_admit_on(
        self, conn: AsyncConnection, thread_id: str, lock: bool = True
    ) -> tuple[ThreadRow | None, bool]:
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
    ) -> ThreadRow:
        """The thread, if `owner` may see it and it passes the project's auth filter;
        another user's thread is simply not found."""
        record = await self.read(conn, thread_id, lock, auth)
        if record is None or not record.visible_to(owner):
            raise not_found(f"Thread {thread_id} not found.")
        return record

    async def thread_for_run(
        self, thread_id: str, owner: str | None, if_not_exists: str, auth: Filter = None
    ) -> ThreadRow | None:
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
    ) -> ThreadRow:
        async with self.engine.connect() as conn:
            return await self.read_owned(conn, thread_id, owner, auth=auth)

    async def patch_thread(
        self,
        thread_id: str,
        metadata: dict[str, Any],
        owner: str | None = None,
        auth: Filter = None,
        if_absent: dict[str, Any] | None = None,
        ttl: ThreadTTL | None = None,
    ) -> ThreadRow:
        """Merge `metadata` in; `if_absent`'s keys only where the thread has none yet.
        `ttl` replaces the thread's time-to-live; without it, the thread's own is
        refreshed from now (as LangGraph Platform refreshes it on an update)."""
        async with self.engine.begin() as conn:
            record = await self.read_owned(conn, thread_id, owner, lock=True, auth=auth)
            record.metadata = {**(if_absent or {}), **record.metadata, **metadata}
            record.updated_at = codec.now_utc()
            kept = ttl or refreshed_ttl(record, TTLPolicy())  # an update gives no default
            expiry = ttl_columns(kept, record.updated_at)
            for name, value in expiry.items():
                setattr(record, name, value)
            await conn.execute(
                update(threads)
                .where(threads.c.thread_id == thread_id)
                .values(metadata=record.metadata, updated_at=record.updated_at, **expiry)
            )
        return record

    async def record_thread_state(
        self,
        thread_id: str,
        values: dict[str, Any],
        interrupts: dict[str, Any],
        status: str,
        owner: str | None = None,
    ) -> ThreadRow:
        """A state written outside a run, on the thread's row as a run's end writes it.
        Refused while a run is active: that run records the thread when it ends."""
        async with self.locks[thread_id], self.engine.begin() as conn:
            record = await self.read_owned(conn, thread_id, owner, lock=True)
            if await has_active_run_on(conn, thread_id):
                raise busy(f"Thread {thread_id} has an active run; it records the state.")
            record.values, record.interrupts, record.status = values, interrupts, status
            record.updated_at = record.state_updated_at = codec.now_utc()
            record.error = None  # as the platform's update_state: the state is the client's now
            await conn.execute(
                THREAD_STAMP,
                {
                    "stamped_thread_id": thread_id,
                    "values": values,
                    "interrupts": interrupts,
                    "status": status,
                    "updated_at": record.updated_at,
                    "state_updated_at": record.updated_at,
                    "error": None,
                },
            )
        return record

    async def delete_thread(
        self,
        thread_id: str,
        owner: str | None = None,
        auth: Filter = None,
        before_delete: Callable[[], Awaitable[None]] | None = None,
        expired_by: datetime | None = None,
    ) -> list[str]:
        """Delete the thread and its runs; returns the deleted runs' ids.
        `before_delete` runs once the thread may go, with the thread locked: if
        it raises, the thread and its runs stay (e.g. its files could not go).
        `expired_by`: only if its TTL expired by then (the TTL sweep's delete)."""
        async with self.locks[thread_id], self.engine.begin() as conn:
            record = await self.read_owned(conn, thread_id, owner, lock=True, auth=auth)
            if expired_by is not None and not still_expired(record, expired_by):
                raise conflict(f"Thread {thread_id} was refreshed; it has not expired.")
            if await has_active_run_on(conn, thread_id):
                raise busy(f"Thread {thread_id} has an active run; cancel it before deleting.")
            if before_delete is not None:
                await before_delete()
            deleted = await conn.execute(
                delete(runs).where(runs.c.thread_id == thread_id).returning(runs.c.run_id)
            )
            run_ids = [str(run_id) for run_id in deleted.scalars()]
            await conn.execute(delete(threads).where(threads.c.thread_id == thread_id))
        return run_ids

    async def expired_threads(self, now: datetime, limit: int) -> list[tuple[str, str]]:
        """(thread_id, strategy) of the threads whose TTL expired by `now` and that
        have no active run, the longest expired first (thread_ttl.py's sweep)."""
        statement = (
            select(threads.c.thread_id, threads.c.ttl_strategy)
            .where(threads.c.ttl_expires_at <= now, ~has_active_run())
            .order_by(threads.c.ttl_expires_at)
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [(str(row.thread_id), str(row.ttl_strategy)) for row in rows]

    async def keep_latest_expired(
        self, thread_id: str, now: datetime, prune: Callable[[], Awaitable[None]]
    ) -> bool:
        """The keep_latest strategy of an expired thread: `prune` (the runner's prune
        of its checkpoints) with the thread locked and no run active, so none is
        admitted meanwhile; then its TTL is disarmed until its next update or run.
        False if it is gone or was refreshed meanwhile."""
        async with self.locks[thread_id], self.engine.begin() as conn:
            record = await self.read(conn, thread_id, lock=True)
            if record is None or not still_expired(record, now):
                return False
            if await has_active_run_on(conn, thread_id):
                raise busy(f"Thread {thread_id} has an active run; it is pruned later.")
            await prune()
            await conn.execute(
                update(threads).where(threads.c.thread_id == thread_id).values(ttl_expires_at=None)
            )
        return True

    async def search_threads(
        self,
        query: ThreadQuery,
        limit: int,
        offset: int,
        owner: str | None = None,
        auth: Filter = None,
    ) -> list[ThreadRow]:
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
