"""Persistence of threads and runs. Every status change is a conditional write
checked against `RUN_TRANSITIONS`, so two writers can never both win."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Select,
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waybill.common import codec
from waybill.common.errors import busy, conflict, not_found
from waybill.common.sql import migrate
from waybill.common.usage import TokenCount, summarize
from waybill.services.admission.auth_filters import visible_runs, visible_threads
from waybill.services.admission.idempotency import IdempotencyKey, KeyedRun
from waybill.services.admission.log_closes import owe_close
from waybill.services.admission.metrics import RUNS_FINISHED
from waybill.services.admission.records import (
    ACTIVE_STATUSES,
    CANCEL_ACTIONS,
    THREAD_STATUS_AFTER_RUN,
    RunRecord,
    ThreadRecord,
    allowed_sources,
)
from waybill.services.admission.tables import idempotency_keys, runs, threads
from waybill.services.admission.thread_queries import (
    ThreadQuery,
    filters,
    has_active_run,
    install_sqlite_json_contains,
    ordering,
    thread_columns,
)
from waybill.services.admission.usage_ledger import record_usage
from waybill.services.admission.wakeups import cancel_payload, notify, wake_payload

log = logging.getLogger("waybill.admission.store")

MIGRATIONS = Path(__file__).parent / "migrations"


def _thread(row: Row[Any]) -> ThreadRecord:
    return ThreadRecord(
        thread_id=row.thread_id,
        metadata=row.metadata or {},
        status=row.status,
        created_at=row.created_at,
        updated_at=row.updated_at,
        values=row.values,
        interrupts=row.interrupts,
        owner_id=row.owner_id,
    )


def _thread_and_activity(lock: bool) -> Select[Any]:
    columns = [*thread_columns(), has_active_run().label("has_active_run")]
    query = select(*columns).where(threads.c.thread_id == bindparam("thread_id"))
    return query.with_for_update(of=threads) if lock else query


# A thread with its live status and whether it has an active run, by `thread_id`
# (locked: True). Built once: building it cost more than running it (it is read
# twice on the way to a run's first token).
THREAD_AND_ACTIVITY = {lock: _thread_and_activity(lock) for lock in (False, True)}
# The admit's writes, their values given at execution (the columns are the keys):
# a statement built with its values costs more to build and key than to run.
RUN_INSERT = insert(runs)
THREAD_INSERT = insert(threads)
THREAD_STAMP = update(threads).where(threads.c.thread_id == bindparam("stamped_thread_id"))
# A run's end, built once for the same reason (it is on the way to its stream's end):
# what the end reads of the run, and its conditional terminal write.
RUN_TO_END: Select[Any] = select(
    runs.c.run_id, runs.c.thread_id, runs.c.owner_id, runs.c.epoch, runs.c.status
).where(runs.c.run_id == bindparam("ending_run_id"))
RUN_END = update(runs).where(
    runs.c.run_id == bindparam("ending_run_id"),
    runs.c.epoch == bindparam("ending_epoch"),
    runs.c.status.in_(bindparam("ending_sources", expanding=True)),
)


# The project's auth filter for threads (and runs through them); None: no filter.
Filter = dict[str, Any] | None


def _owned_by(owner: str | None) -> list[Any]:
    """The WHERE clause confining a query to `owner`'s threads (none for admins)."""
    return [] if owner is None else [threads.c.owner_id == owner]


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
        cancel_action=row.cancel_action,
        owner_id=row.owner_id,
        usage=row.usage,
    )


class AdmissionStore:
    def __init__(self, engine: AsyncEngine, log_close_grace: float = 10.0) -> None:
        self.engine = engine
        self.log_close_grace = log_close_grace  # see log_closes.py
        self.is_postgres = engine.dialect.name == "postgresql"
        if not self.is_postgres:
            install_sqlite_json_contains(engine)
        # SQLite has no row locks: serialize admissions per thread in-process.
        self._thread_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def migrate(self) -> None:
        await migrate(self.engine, MIGRATIONS, "admission")

    # ---- threads -------------------------------------------------------------

    async def create_thread(
        self, thread_id: str, metadata: dict[str, Any], if_exists: str, owner_id: str
    ) -> ThreadRecord:
        now = codec.now_utc()
        async with self.engine.begin() as conn:
            existing = await self._get_thread(conn, thread_id)
            if existing is not None:
                # Someone else's thread is never handed out, even with do_nothing.
                if if_exists == "do_nothing" and existing.owner_id == owner_id:
                    return existing
                raise conflict(f"Thread {thread_id} already exists.")
            await conn.execute(
                insert(threads).values(
                    thread_id=thread_id,
                    metadata=metadata,
                    status="idle",
                    created_at=now,
                    updated_at=now,
                    owner_id=owner_id,
                )
            )
        return ThreadRecord(thread_id, metadata, "idle", now, now, owner_id=owner_id)

    async def _get_thread(
        self, conn: AsyncConnection, thread_id: str, lock: bool = False, auth: Filter = None
    ) -> ThreadRecord | None:
        query = select(*thread_columns()).where(
            threads.c.thread_id == thread_id, visible_threads(auth, self.is_postgres)
        )
        if lock and self.is_postgres:
            query = query.with_for_update(of=threads)
        row = (await conn.execute(query)).first()
        return _thread(row) if row else None

    async def _thread_to_admit_on(
        self, conn: AsyncConnection, thread_id: str, lock: bool = True
    ) -> tuple[ThreadRecord | None, bool]:
        """The thread, locked, and whether it has an active run: one statement."""
        query = THREAD_AND_ACTIVITY[lock and self.is_postgres]
        row = (await conn.execute(query, {"thread_id": thread_id})).first()
        return (_thread(row), bool(row.has_active_run)) if row else (None, False)

    async def _owned_thread(
        self,
        conn: AsyncConnection,
        thread_id: str,
        owner: str | None,
        lock: bool = False,
        auth: Filter = None,
    ) -> ThreadRecord:
        """The thread, if `owner` may see it and it passes the project's auth filter;
        another user's thread is simply not found."""
        record = await self._get_thread(conn, thread_id, lock, auth)
        if record is None or not record.visible_to(owner):
            raise not_found(f"Thread {thread_id} not found.")
        return record

    async def thread_for_run(
        self, thread_id: str, owner: str | None, if_not_exists: str, auth: Filter = None
    ) -> ThreadRecord | None:
        """The run's thread if `owner` may use it; None when it will be created."""
        async with self.engine.connect() as conn:
            record, _ = await self._thread_to_admit_on(conn, thread_id, lock=False)
            if record is None and if_not_exists == "create":
                return None
            if record is None or not record.visible_to(owner):
                raise not_found(f"Thread {thread_id} not found.")
            if auth and await self._get_thread(conn, thread_id, auth=auth) is None:
                raise not_found(f"Thread {thread_id} not found.")  # the auth filter excludes it
        return record

    async def get_thread(
        self, thread_id: str, owner: str | None = None, auth: Filter = None
    ) -> ThreadRecord:
        async with self.engine.connect() as conn:
            return await self._owned_thread(conn, thread_id, owner, auth=auth)

    async def patch_thread(
        self,
        thread_id: str,
        metadata: dict[str, Any],
        owner: str | None = None,
        auth: Filter = None,
    ) -> ThreadRecord:
        async with self.engine.begin() as conn:
            record = await self._owned_thread(conn, thread_id, owner, lock=True, auth=auth)
            record.metadata = {**record.metadata, **metadata}
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
        async with self._thread_locks[thread_id], self.engine.begin() as conn:
            record = await self._owned_thread(conn, thread_id, owner, lock=True)
            if await self._has_active_run(conn, thread_id):
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
        async with self._thread_locks[thread_id], self.engine.begin() as conn:
            await self._owned_thread(conn, thread_id, owner, lock=True, auth=auth)
            if await self._has_active_run(conn, thread_id):
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
            .where(threads.c.updated_at < cutoff, threads.c.status != "busy")
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
                *_owned_by(owner),
                visible_threads(auth, self.is_postgres),
            )
            .order_by(*ordering(query))
            .limit(limit)
            .offset(offset)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [_thread(row) for row in rows]

    async def count_threads(
        self, query: ThreadQuery, owner: str | None = None, auth: Filter = None
    ) -> int:
        statement = (
            select(func.count())
            .select_from(threads)
            .where(
                *filters(query, self.is_postgres),
                *_owned_by(owner),
                visible_threads(auth, self.is_postgres),
            )
        )
        async with self.engine.connect() as conn:
            return int((await conn.execute(statement)).scalar_one())

    # ---- runs ----------------------------------------------------------------

    async def keyed_run(self, key: IdempotencyKey) -> KeyedRun | None:
        """The run a live idempotency key points at; an expired key is forgotten."""
        where = and_(idempotency_keys.c.owner_id == key.owner_id, idempotency_keys.c.key == key.key)
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(idempotency_keys).where(
                    where, idempotency_keys.c.expires_at < codec.now_utc()
                )
            )
            row = (await conn.execute(select(idempotency_keys).where(where))).first()
        return KeyedRun(row.request_digest, row.thread_id, row.run_id) if row else None

    async def admit_run(
        self,
        run: RunRecord,
        if_not_exists: str,
        lease: Lease | None = None,
        owner: str | None = None,
        key: IdempotencyKey | None = None,
        auth: Filter = None,
    ) -> RunRecord:
        """Insert `run` as pending, honouring its thread's multitask strategy.

        With a `lease` (a runner with a free slot is connected here) a run that
        may start at once is claimed for that runner in the same transaction:
        one commit instead of two on the way to the first token.
        """
        async with self._thread_locks[run.thread_id], self.engine.begin() as conn:
            thread, thread_busy = await self._thread_to_admit_on(conn, run.thread_id)
            if thread is not None and not thread.visible_to(owner):
                raise not_found(f"Thread {run.thread_id} not found.")
            if (
                thread is not None
                and auth
                and not await self._get_thread(conn, run.thread_id, auth=auth)
            ):
                raise not_found(f"Thread {run.thread_id} not found.")  # the auth filter excludes it
            if thread is None and if_not_exists != "create":
                raise not_found(f"Thread {run.thread_id} not found.")
            if thread is not None:
                run.owner_id = thread.owner_id  # a run belongs to its thread's owner
            if run.multitask_strategy == "reject" and thread_busy:
                raise busy(
                    f"Thread {run.thread_id} already has an active run; "
                    "use multitask_strategy='enqueue' to queue behind it."
                )
            displaced: list[tuple[str, str]] = []
            if run.multitask_strategy in CANCEL_ACTIONS:
                displaced = await self._cancel_active_runs(
                    conn, run.thread_id, run.multitask_strategy
                )
            leased = False
            if lease is not None and not thread_busy and _is_due(run):
                _lease_on_admit(run, lease)
                leased = True
            await conn.execute(RUN_INSERT, _run_values(run))
            if key is not None:  # a concurrent twin with the same key fails here
                await conn.execute(
                    insert(idempotency_keys).values(
                        owner_id=key.owner_id,
                        key=key.key,
                        request_digest=key.request_digest,
                        run_id=run.run_id,
                        thread_id=run.thread_id,
                        expires_at=key.expires_at,
                    )
                )
            if not leased:
                await notify(conn, wake_payload())
            await self._stamp_thread(conn, thread, run, busy=leased)
        run.displaced = displaced
        return run

    async def _stamp_thread(
        self, conn: AsyncConnection, thread: ThreadRecord | None, run: RunRecord, busy: bool
    ) -> None:
        """As LangGraph Platform does: the thread records which graph it runs, and
        the run's metadata is merged into the thread's. One write, creating the
        thread if needed, and marking it busy when the run was claimed at once."""
        stamp = {**run.metadata, "graph_id": run.graph_id, "assistant_id": run.assistant_id}
        now = run.updated_at
        if thread is None:
            new_thread = {
                "thread_id": run.thread_id,
                "metadata": stamp,
                "status": "busy" if busy else "idle",
                "created_at": run.created_at,
                "updated_at": now,
                "owner_id": run.owner_id,
            }
            await conn.execute(THREAD_INSERT, new_thread)
            return
        values: dict[str, Any] = {"metadata": {**thread.metadata, **stamp}, "updated_at": now}
        if busy:
            values["status"] = "busy"
        await conn.execute(THREAD_STAMP, {**values, "stamped_thread_id": run.thread_id})

    async def _cancel_active_runs(
        self, conn: AsyncConnection, thread_id: str, action: str
    ) -> list[tuple[str, str]]:
        """`interrupt`/`rollback` strategies: cancel the thread's active runs (the first
        action wins, as with a direct cancel). Returns (run_id, action) to deliver."""
        active = (
            await conn.execute(
                select(runs).where(
                    runs.c.thread_id == thread_id, runs.c.status.in_(ACTIVE_STATUSES)
                )
            )
        ).all()
        return [(row.run_id, await self._mark_cancelled(conn, row, action)) for row in active]

    async def _mark_cancelled(self, conn: AsyncConnection, row: Row[Any], action: str) -> str:
        """Store a cancel request (the first action wins) and announce it to every
        admission replica. Returns the action that stands."""
        values: dict[str, Any] = {"cancel_action": func.coalesce(runs.c.cancel_action, action)}
        if row.lease_owner is None:
            values["lease_expires_at"] = None  # nobody holds it: claimable now, to finalize
        stored = (
            await conn.execute(
                update(runs)
                .where(runs.c.run_id == row.run_id)
                .values(**values)
                .returning(runs.c.cancel_action)
            )
        ).scalar_one()
        await notify(conn, cancel_payload(row.run_id, stored))
        return str(stored)

    async def _has_active_run(self, conn: AsyncConnection, thread_id: str) -> bool:
        query = select(
            exists().where(runs.c.thread_id == thread_id, runs.c.status.in_(ACTIVE_STATUSES))
        )
        return bool((await conn.execute(query)).scalar())

    async def request_cancel_many(
        self,
        thread_id: str,
        run_ids: list[str],
        status: str,
        action: str,
        owner: str | None = None,
        auth: Filter = None,
    ) -> list[RunRecord]:
        """Record a cancel for several runs: the listed runs of one thread, or every
        run with `status` (pending, running or all). Finished runs among the listed
        ones are left alone. Returns the runs cancelled, each with its standing action."""
        query = select(runs)
        if status:
            wanted = ACTIVE_STATUSES if status == "all" else (status,)
            query = query.where(runs.c.status.in_(wanted))
        else:
            query = query.where(runs.c.thread_id == thread_id, runs.c.run_id.in_(run_ids))
        if owner is not None:  # someone else's runs are never found, let alone cancelled
            query = query.where(runs.c.owner_id == owner)
        query = query.where(visible_runs(auth, self.is_postgres))
        async with self.engine.begin() as conn:
            rows = (await conn.execute(query.order_by(runs.c.created_at))).all()
            if not rows:
                raise not_found("No runs found to cancel.")
            cancelled: list[RunRecord] = []
            for row in rows:
                if row.status not in ACTIVE_STATUSES:
                    continue
                record = _run(row)
                record.cancel_action = await self._mark_cancelled(conn, row, action)
                cancelled.append(record)
        return cancelled

    async def get_run(
        self, thread_id: str, run_id: str, owner: str | None = None, auth: Filter = None
    ) -> RunRecord:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(runs).where(
                        runs.c.run_id == run_id,
                        runs.c.thread_id == thread_id,
                        visible_runs(auth, self.is_postgres),
                    )
                )
            ).first()
        if row is None or (owner is not None and row.owner_id != owner):
            raise not_found(f"Run {run_id} not found on thread {thread_id}.")
        return _run(row)

    async def list_runs(
        self,
        thread_id: str,
        status: str | None,
        limit: int,
        offset: int,
        owner: str | None = None,
        auth: Filter = None,
    ) -> list[RunRecord]:
        async with self.engine.connect() as conn:
            await self._owned_thread(conn, thread_id, owner, auth=auth)  # 404 for someone else's
        query = select(runs).where(runs.c.thread_id == thread_id)
        if status:
            query = query.where(runs.c.status == status)
        query = query.order_by(runs.c.created_at.desc()).limit(limit).offset(offset)
        async with self.engine.connect() as conn:
            return [_run(row) for row in (await conn.execute(query)).all()]

    async def delete_run(
        self, thread_id: str, run_id: str, owner: str | None = None, auth: Filter = None
    ) -> None:
        record = await self.get_run(thread_id, run_id, owner, auth)
        if record.status in ACTIVE_STATUSES:
            raise busy(f"Run {run_id} is {record.status}; cancel it before deleting it.")
        async with self.engine.begin() as conn:
            await conn.execute(delete(runs).where(runs.c.run_id == run_id))

    # ---- the run lifecycle: claim -> begin -> renew ... -> finish ------------------

    def _claimable(self, now: datetime) -> Select[Any]:
        """Pending runs that are due and whose thread is free (or that are cancelled:
        they only need finalizing), and running runs whose lease expired (takeover),
        oldest first. A delayed run (`after_seconds`) is due at its created_at."""
        other = runs.alias("other")
        # Busy: another active run of the thread is held by a runner (claimed,
        # running, or waiting for takeover).
        thread_busy = exists().where(
            and_(
                other.c.thread_id == runs.c.thread_id,
                other.c.run_id != runs.c.run_id,
                other.c.status.in_(ACTIVE_STATUSES),
                other.c.lease_owner.is_not(None),
            )
        )
        query = (
            select(runs.c.run_id)
            .where(
                or_(
                    and_(
                        runs.c.status == "pending",
                        or_(
                            runs.c.cancel_action.is_not(None),
                            and_(~thread_busy, runs.c.created_at <= now),
                        ),
                        or_(runs.c.lease_expires_at.is_(None), runs.c.lease_expires_at < now),
                    ),
                    and_(runs.c.status == "running", runs.c.lease_expires_at < now),
                )
            )
            .order_by(runs.c.created_at)
            .limit(1)
        )
        if self.is_postgres:
            query = query.with_for_update(skip_locked=True, of=runs)
        return query

    async def claim_next(
        self, runner_id: str, lease_seconds: float, max_attempts: int
    ) -> tuple[RunRecord, bool] | None:
        """Lease the next claimable run to `runner_id` with a new epoch and attempt.

        The start barrier is passed here, in the same conditional write, when the
        run may simply start (status `running` in the record returned). A run
        cancelled before it started, or out of attempts, stays as it was: the
        runner's `BeginRun` finalizes it without building anything.
        Returns (the claimed run, whether it starts now).
        """
        while True:
            now = codec.now_utc()
            async with self.engine.begin() as conn:
                run_id = (await conn.execute(self._claimable(now))).scalar()
                if run_id is None:
                    return None
                row = (await conn.execute(select(runs).where(runs.c.run_id == run_id))).one()
                starts_now = row.attempt + 1 <= max_attempts and (
                    row.status == "running" or row.cancel_action is None
                )
                claimed = (
                    await conn.execute(
                        update(runs)
                        .where(runs.c.run_id == run_id, runs.c.epoch == row.epoch)
                        .values(
                            status="running" if starts_now else row.status,
                            epoch=runs.c.epoch + 1,
                            attempt=runs.c.attempt + 1,
                            lease_owner=runner_id,
                            lease_expires_at=now + timedelta(seconds=lease_seconds),
                            updated_at=now,
                        )
                        .returning(*runs.c)
                    )
                ).first()
                if claimed is not None and starts_now:
                    await conn.execute(
                        update(threads)
                        .where(threads.c.thread_id == row.thread_id)
                        .values(status="busy", updated_at=now)
                    )
            if claimed is not None:
                return _run(claimed), starts_now

    async def begin_run(self, run_id: str, epoch: int, max_attempts: int) -> tuple[bool, str]:
        """The start barrier. (started, reason): reason is "stale", "cancelled" or
        "exhausted" (its leases expired `max_attempts` times: ended `error`)."""
        now = codec.now_utc()
        async with self.engine.begin() as conn:
            row = (await conn.execute(select(runs).where(runs.c.run_id == run_id))).first()
            if row is None or row.epoch != epoch or row.status not in allowed_sources("running"):
                return False, "stale"
            if row.cancel_action is not None:
                await self._end(conn, row, "interrupted", "cancelled before it started")
                return False, "cancelled"
            if row.attempt > max_attempts:
                reason = f"gave up after {max_attempts} attempts: each runner lost its lease"
                await self._end(conn, row, "error", reason, thread_status="error")
                return False, "exhausted"
            await conn.execute(
                update(runs)
                .where(runs.c.run_id == run_id, runs.c.epoch == epoch)
                .values(status="running", updated_at=now)
            )
            await conn.execute(
                update(threads)
                .where(threads.c.thread_id == row.thread_id)
                .values(status="busy", updated_at=now)
            )
        return True, ""

    async def request_cancel(
        self,
        thread_id: str,
        run_id: str,
        action: str,
        owner: str | None = None,
        auth: Filter = None,
    ) -> RunRecord:
        """Record a cancel request; the first action wins. Only active runs qualify."""
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    select(runs).where(
                        runs.c.run_id == run_id,
                        runs.c.thread_id == thread_id,
                        visible_runs(auth, self.is_postgres),
                    )
                )
            ).first()
            if row is None or (owner is not None and row.owner_id != owner):
                raise not_found(f"Run {run_id} not found on thread {thread_id}.")
            if row.status not in ACTIVE_STATUSES:
                raise not_found(f"Run {run_id} not found or not active on thread {thread_id}.")
            record = _run(row)
            record.cancel_action = await self._mark_cancelled(conn, row, action)
        return record

    async def renew_leases(
        self, runner_id: str, leases: list[tuple[str, int]], lease_seconds: float
    ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        """Extend the leases this runner still holds. (renewed, lost)."""
        if not leases:
            return [], []
        expires = codec.now_utc() + timedelta(seconds=lease_seconds)
        renewed: list[tuple[str, int]] = []
        async with self.engine.begin() as conn:
            for run_id, epoch in leases:
                result = await conn.execute(
                    update(runs)
                    .where(
                        runs.c.run_id == run_id,
                        runs.c.epoch == epoch,
                        runs.c.lease_owner == runner_id,
                        runs.c.status.in_(ACTIVE_STATUSES),
                    )
                    .values(lease_expires_at=expires)
                )
                if result.rowcount:
                    renewed.append((run_id, epoch))
        lost = [lease for lease in leases if lease not in renewed]
        return renewed, lost

    async def release_run(self, run_id: str, epoch: int) -> None:
        """A draining runner hands a run back: its lease ends now."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(runs)
                .where(runs.c.run_id == run_id, runs.c.epoch == epoch)
                .values(lease_expires_at=codec.now_utc() - timedelta(seconds=1))
            )
            await notify(conn, wake_payload())

    async def wake_replicas(self) -> None:
        """Wake every admission replica's dispatcher: a runner went away, and the
        leases it held (granted by this replica, unknown to the others' timers)
        must be taken over on time by whichever replica still has runners."""
        async with self.engine.begin() as conn:
            await notify(conn, wake_payload())

    async def queue_depth(self) -> dict[str, float]:
        """Runs waiting for a runner (pending and due) and running, for /metrics."""
        now = codec.now_utc()
        async with self.engine.connect() as conn:
            query = select(runs.c.status, func.count()).where(
                runs.c.status.in_(ACTIVE_STATUSES),
                or_(runs.c.status == "running", runs.c.created_at <= now),
            )
            found = (await conn.execute(query.group_by(runs.c.status))).tuples().all()
        counts: dict[str, int] = dict(found)
        return {
            "waybill_runs_queued": float(counts.get("pending", 0)),
            "waybill_runs_running": float(counts.get("running", 0)),
        }

    async def next_lease_expiry(self) -> datetime | None:
        async with self.engine.connect() as conn:
            query = select(func.min(runs.c.lease_expires_at)).where(
                runs.c.status.in_(ACTIVE_STATUSES), runs.c.lease_owner.is_not(None)
            )
            return (await conn.execute(query)).scalar()  # type: ignore[no-any-return]

    async def next_delayed_start(self) -> datetime | None:
        """When the next delayed run (`after_seconds`) becomes due, if one waits."""
        async with self.engine.connect() as conn:
            query = select(func.min(runs.c.created_at)).where(
                runs.c.status == "pending",
                runs.c.cancel_action.is_(None),
                runs.c.created_at > codec.now_utc(),
            )
            return (await conn.execute(query)).scalar()  # type: ignore[no-any-return]

    async def finish_run(self, report: RunEnd) -> bool:
        """Write a terminal status; refused (False) for a stale epoch or a finished run."""
        async with self.engine.begin() as conn:
            row = (await conn.execute(RUN_TO_END, {"ending_run_id": report.run_id})).first()
            if (
                row is None
                or row.epoch != report.epoch
                or row.status not in allowed_sources(report.status)
            ):
                return False
            ended = await self._end(
                conn,
                row,
                report.status,
                report.stop_reason,
                thread_status=report.thread_status,
                values=report.values,
                interrupts=report.interrupts,
                usage=summarize(report.token_counts),
            )
            if not ended:
                return False
            await record_usage(conn, row, report.token_counts, codec.now_utc())
            if report.rolled_back:
                await conn.execute(delete(runs).where(runs.c.run_id == report.run_id))
        return True

    async def _end(
        self,
        conn: AsyncConnection,
        row: Row[Any],
        status: str,
        stop_reason: str,
        *,
        thread_status: str | None = None,
        values: dict[str, Any] | None = None,
        interrupts: dict[str, Any] | None = None,
        usage: dict[str, Any] | None = None,
    ) -> bool:
        """Terminal write for a run (conditional on its epoch and, as every status
        write, on the transition table), with its token usage when its runner
        reported one, and its thread's status. False: a concurrent transaction ended
        the run first (its row was read before that commit), and nothing is
        written: a run gets exactly one terminal write."""
        now = codec.now_utc()
        ending: dict[str, Any] = {} if usage is None else {"usage": usage}
        written = await conn.execute(
            RUN_END,
            {
                "ending_run_id": row.run_id,
                "ending_epoch": row.epoch,
                "ending_sources": list(allowed_sources(status)),
                "status": status,
                "stop_reason": stop_reason,
                "lease_owner": None,
                "lease_expires_at": None,
                "updated_at": now,
                **ending,
            },
        )
        if not written.rowcount:
            log.warning("run %s: ended concurrently; %s not written", row.run_id, status)
            return False
        RUNS_FINISHED.labels(status).inc()
        # Its log must be closed even if its runner dies before closing it (log_closes.py).
        await owe_close(conn, row.run_id, row.epoch, self.log_close_grace)
        # Every replica: the thread's next run may start, and the closer has a row.
        await notify(conn, wake_payload())
        if row.status == "pending":
            return True  # it never ran: the thread's state and status are not its to change
        thread_values: dict[str, Any] = {
            "status": thread_status or THREAD_STATUS_AFTER_RUN[status],
            "updated_at": now,
        }
        if values is not None:
            thread_values["values"] = values
            thread_values["interrupts"] = interrupts or {}
        await conn.execute(THREAD_STAMP, {"stamped_thread_id": row.thread_id, **thread_values})
        return True


@dataclass
class Lease:
    """A runner's hold on a run: who, and for how long without renewal."""

    runner_id: str
    seconds: float


@dataclass
class RunEnd:
    """A runner's report of how a run ended."""

    run_id: str
    epoch: int
    status: str
    stop_reason: str = ""
    thread_status: str | None = None
    values: dict[str, Any] | None = None
    interrupts: dict[str, Any] | None = None
    rolled_back: bool = False
    token_counts: list[TokenCount] = field(default_factory=list)


def _is_due(run: RunRecord) -> bool:
    """False for a run created with `after_seconds` whose delay has not passed."""
    return run.created_at <= codec.now_utc()


def _lease_on_admit(run: RunRecord, lease: Lease) -> None:
    """Claim a run about to be inserted, whose thread is free: pending -> running,
    epoch 1, so the insert itself stores the claim. (The caller marks the thread
    busy in its own write to the thread.)"""
    if run.status not in allowed_sources("running") or run.epoch != 0:
        raise ValueError(f"run {run.run_id} cannot be claimed from {run.status}")
    now = codec.now_utc()
    run.status, run.epoch, run.attempt, run.updated_at = "running", 1, 1, now
    run.lease_owner = lease.runner_id
    run.lease_expires_at = now + timedelta(seconds=lease.seconds)


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
        "cancel_action": run.cancel_action,
        "owner_id": run.owner_id,
    }
