"""Persistence of runs: the admission's atomic insert, cancel requests, reads.

The admit is one transaction under the thread's lock: the thread's access, its
multitask strategy against its active runs, the run's insert (claimed for a
runner at once when it may start), its idempotency key, and the thread's stamp.
A run's status moves after that only through leases.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from waybill.common import codec
from waybill.common.config_file import QuotaLimits
from waybill.common.errors import busy, not_found
from waybill.common.statuses import ACTIVE_RUN_STATUSES, MultitaskStrategy, RunStatus, ThreadStatus
from waybill.services.admission.auth_filters import visible_runs
from waybill.services.admission.rows import CANCEL_ACTIONS, RunRow, ThreadRow, run_of
from waybill.services.admission.runs.idempotency import IdempotencyKey, KeyedRun
from waybill.services.admission.runs.leases import Lease, lease_on_admit
from waybill.services.admission.runs.lock_order import locking_runs_in_order
from waybill.services.admission.runs.quotas import QuotaGate
from waybill.services.admission.tables import idempotency_keys, runs
from waybill.services.admission.threads.thread_store import (
    THREAD_INSERT,
    THREAD_STAMP,
    Filter,
    ThreadStore,
    refreshed_ttl,
    ttl_columns,
)
from waybill.services.admission.wakeups import cancel_payload, notify, wake_payload

# The admit's writes, their values given at execution (the columns are the keys):
# a statement built with its values costs more to build and key than to run.
RUN_INSERT = insert(runs)
# A run by id on its thread (a project's auth filter is added where there is one).
RUN_ON_THREAD = select(runs).where(
    runs.c.run_id == bindparam("wanted_run_id"), runs.c.thread_id == bindparam("on_thread_id")
)
ROLLBACK_POLL_SECONDS = 0.02  # how often a rollback's cancel looks for its run's end


@dataclass(frozen=True)
class Admit:
    """A checked run to store: how a missing thread is met (`if_not_exists`), the
    owner its caller is confined to, and the project's thread filter."""

    run: RunRow
    if_not_exists: str
    owner: str | None = None
    auth: Filter = None
    quota: QuotaLimits | None = None  # its owner's limits; None: none to check


class RunStore:
    def __init__(self, threads: ThreadStore, quotas: QuotaGate | None = None) -> None:
        self.threads = threads  # a run is read and admitted through its thread
        self.engine = threads.engine
        self.is_postgres = threads.is_postgres
        self.quotas = quotas  # None: no quota is checked (tests of the store alone)

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
        run: RunRow,
        if_not_exists: str,
        lease: Lease | None = None,
        owner: str | None = None,
        key: IdempotencyKey | None = None,
        auth: Filter = None,
        quota: QuotaLimits | None = None,
    ) -> RunRow:
        """Insert `run` as pending, honouring its thread's multitask strategy.

        With a `lease` (a runner with a free slot is connected here) a run that
        may start at once is claimed for that runner in the same transaction:
        one commit instead of two on the way to the first token.
        """
        admit = Admit(run, if_not_exists, owner, auth, quota)
        async with self.threads.locks[run.thread_id], self.engine.begin() as conn:
            await self._take_quota_turns(conn, [admit])
            await self._admit_on(conn, admit, lease, key)
            if run.lease_owner is None:
                await notify(conn, wake_payload())
        return run

    async def admit_runs(self, admits: Sequence[Admit]) -> None:
        """A batch, all or none: every run in one transaction, none claimed at once
        (the claim loop takes them, woken once). Threads are locked in their ids'
        order, so two batches sharing threads never wait on each other in a circle."""
        in_lock_order = sorted(admits, key=lambda admit: admit.run.thread_id)
        async with AsyncExitStack() as held:
            for thread_id in sorted({admit.run.thread_id for admit in admits}):
                await held.enter_async_context(self.threads.locks[thread_id])
            async with self.engine.begin() as conn:
                await self._take_quota_turns(conn, admits)
                for admit in in_lock_order:
                    await self._admit_on(conn, admit, None, None)
                await notify(conn, wake_payload())

    async def _take_quota_turns(self, conn: AsyncConnection, admits: Sequence[Admit]) -> None:
        """The transaction's first writes: the turn of each owner with limits
        (quotas.py), so that the counts read after it are exact across replicas."""
        owners = [admit.run.owner_id for admit in admits if admit.quota is not None]
        if owners and self.quotas is not None:
            await self.quotas.take_turn(conn, owners)

    async def _admit_on(
        self, conn: AsyncConnection, admit: Admit, lease: Lease | None, key: IdempotencyKey | None
    ) -> None:
        """One run's admit inside the caller's transaction (its thread's lock held)."""
        run, owner, auth = admit.run, admit.owner, admit.auth
        thread, thread_busy = await self.threads.read_to_admit_on(conn, run.thread_id)
        if thread is not None and not thread.visible_to(owner):
            raise not_found(f"Thread {run.thread_id} not found.")
        if thread is not None and auth and not await self._passes(conn, run.thread_id, auth):
            raise not_found(f"Thread {run.thread_id} not found.")  # the auth filter excludes it
        if thread is None and admit.if_not_exists != "create":
            raise not_found(f"Thread {run.thread_id} not found.")
        if thread is not None:
            run.owner_id = thread.owner_id  # a run belongs to its thread's owner
        if run.multitask_strategy == MultitaskStrategy.REJECT and thread_busy:
            raise busy(
                f"Thread {run.thread_id} already has an active run; "
                "use multitask_strategy='enqueue' to queue behind it."
            )
        displaced: list[tuple[str, str]] = []
        if run.multitask_strategy in CANCEL_ACTIONS:
            displaced = await self._cancel_active_runs(conn, run.thread_id, run.multitask_strategy)
        leased = False
        if lease is not None and not thread_busy and _is_due(run):
            lease_on_admit(run, lease)
            leased = True
        if admit.quota is not None and self.quotas is not None:
            await self.quotas.reserve(conn, run.owner_id, admit.quota, starts_now=leased)
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
        await self._stamp_thread(conn, thread, run, busy=leased)
        run.displaced = displaced

    async def _passes(self, conn: AsyncConnection, thread_id: str, auth: Filter) -> bool:
        return await self.threads.read(conn, thread_id, auth=auth) is not None

    async def _stamp_thread(
        self, conn: AsyncConnection, thread: ThreadRow | None, run: RunRow, busy: bool
    ) -> None:
        """As LangGraph Platform does: the thread records which graph it runs; a
        thread the run creates also takes the metadata the run was sent (an
        existing thread's stays its own). One write, creating the thread if
        needed, and marking it busy when the run was claimed at once. The run
        refreshes the thread's TTL (a thread without one takes the project's
        default, as a thread the run creates does: thread_ttl.py)."""
        stamp = {"graph_id": run.graph_id, "assistant_id": run.assistant_id}
        now = run.updated_at
        policy = self.threads.ttl_policy
        if thread is None:
            sent = run.metadata if run.sent_metadata is None else run.sent_metadata
            new_thread = {
                "thread_id": run.thread_id,
                "metadata": {**sent, **stamp},
                "status": ThreadStatus.BUSY if busy else ThreadStatus.IDLE,
                "created_at": run.created_at,
                "updated_at": now,
                "owner_id": run.owner_id,
                "config": run.thread_config,
                "state_updated_at": run.created_at,
                **ttl_columns(policy.default, now),
            }
            await conn.execute(THREAD_INSERT, new_thread)
            return
        values: dict[str, Any] = {
            "metadata": {**thread.metadata, **stamp},
            "config": run.thread_config,
            "updated_at": now,
            **ttl_columns(refreshed_ttl(thread, policy), now),
        }
        if busy:
            values["status"] = ThreadStatus.BUSY
        await conn.execute(THREAD_STAMP, {**values, "stamped_thread_id": run.thread_id})

    # ---- cancel requests (the runner, or the next claim, acts on them) ----------

    async def _cancel_active_runs(
        self, conn: AsyncConnection, thread_id: str, action: str
    ) -> list[tuple[str, str]]:
        """`interrupt`/`rollback` strategies: cancel the thread's active runs (the first
        action wins, as with a direct cancel). Returns (run_id, action) to deliver."""
        active_runs = select(runs).where(
            runs.c.thread_id == thread_id, runs.c.status.in_(ACTIVE_RUN_STATUSES)
        )
        active = (await conn.execute(locking_runs_in_order(active_runs, self.is_postgres))).all()
        return [(row.run_id, await _mark_cancelled(conn, row, action)) for row in active]

    async def request_cancel(
        self,
        thread_id: str,
        run_id: str,
        action: str,
        owner: str | None = None,
        auth: Filter = None,
    ) -> RunRow:
        """Record a cancel request; the first action wins. Only active runs qualify."""
        async with self.engine.begin() as conn:
            row = await self._visible_run(conn, thread_id, run_id, owner, auth)
            if row.status not in ACTIVE_RUN_STATUSES:
                raise not_found(f"Run {run_id} not found or not active on thread {thread_id}.")
            record = run_of(row)
            record.cancel_action = await _mark_cancelled(conn, row, action)
        return record

    async def request_cancel_many(
        self,
        thread_id: str,
        run_ids: list[str],
        status: str,
        action: str,
        owner: str | None = None,
        auth: Filter = None,
    ) -> list[RunRow]:
        """Record a cancel for several runs: the listed runs of one thread, or every
        run with `status` (pending, running or all). Finished runs among the listed
        ones are left alone. Returns the runs cancelled, each with its standing action."""
        query = select(runs)
        if status:
            wanted = ACTIVE_RUN_STATUSES if status == "all" else (RunStatus(status),)
            query = query.where(runs.c.status.in_(wanted))
        else:
            query = query.where(runs.c.thread_id == thread_id, runs.c.run_id.in_(run_ids))
        if owner is not None:  # someone else's runs are never found, let alone cancelled
            query = query.where(runs.c.owner_id == owner)
        query = query.where(visible_runs(auth, self.is_postgres))
        async with self.engine.begin() as conn:
            rows = (await conn.execute(locking_runs_in_order(query, self.is_postgres))).all()
            if not rows:
                raise not_found("No runs found to cancel.")
            cancelled: list[RunRow] = []
            for row in rows:
                if row.status not in ACTIVE_RUN_STATUSES:
                    continue
                record = run_of(row)
                record.cancel_action = await _mark_cancelled(conn, row, action)
                cancelled.append(record)
        return cancelled

    async def until_ended(self, run_ids: list[str], within: float) -> None:
        """Wait, for at most `within` seconds, until these runs (cancelled with a
        rollback) have ended. A runner deletes a running run's checkpoints before it
        reports the run rolled back, and that report deletes the run: once this
        returns, a read that no longer finds the run finds its thread's state
        without it, as on LangGraph Platform, which deletes both in the cancel's own
        request. Past `within` (no runner to act on it) reads hide the run all the
        same (common/codec.py, `rolling_back`)."""
        ends_at = asyncio.get_running_loop().time() + within
        query = select(func.count()).where(
            runs.c.run_id.in_(run_ids), runs.c.status.in_(ACTIVE_RUN_STATUSES)
        )
        while True:
            async with self.engine.connect() as conn:
                if not await conn.scalar(query):
                    return
            if asyncio.get_running_loop().time() >= ends_at:
                return
            await asyncio.sleep(ROLLBACK_POLL_SECONDS)

    # ---- reads and deletes -------------------------------------------------------

    async def get_run(
        self, thread_id: str, run_id: str, owner: str | None = None, auth: Filter = None
    ) -> RunRow:
        async with self.engine.connect() as conn:
            return run_of(await self._visible_run(conn, thread_id, run_id, owner, auth))

    async def _visible_run(
        self, conn: AsyncConnection, thread_id: str, run_id: str, owner: str | None, auth: Filter
    ) -> Row[Any]:
        """The run's row if the caller may see it; else 404 (not someone else's 403)."""
        query = RUN_ON_THREAD
        if auth:
            query = query.where(visible_runs(auth, self.is_postgres))
        on_thread = {"wanted_run_id": run_id, "on_thread_id": thread_id}
        row = (await conn.execute(query, on_thread)).first()
        if row is None or (owner is not None and row.owner_id != owner):
            raise not_found(f"Run {run_id} not found on thread {thread_id}.")
        return row

    async def list_runs(
        self,
        thread_id: str,
        status: str | None,
        limit: int,
        offset: int,
        owner: str | None = None,
        auth: Filter = None,
    ) -> list[RunRow]:
        async with self.engine.connect() as conn:  # 404 for someone else's thread
            await self.threads.read_owned(conn, thread_id, owner, auth=auth)
        query = select(runs).where(runs.c.thread_id == thread_id)
        if status:
            query = query.where(runs.c.status == status)
        query = query.order_by(runs.c.created_at.desc()).limit(limit).offset(offset)
        async with self.engine.connect() as conn:
            return [run_of(row) for row in (await conn.execute(query)).all()]

    async def delete_run(
        self, thread_id: str, run_id: str, owner: str | None = None, auth: Filter = None
    ) -> None:
        record = await self.get_run(thread_id, run_id, owner, auth)
        if record.status in ACTIVE_RUN_STATUSES:
            raise busy(f"Run {run_id} is {record.status}; cancel it before deleting it.")
        async with self.engine.begin() as conn:
            await conn.execute(delete(runs).where(runs.c.run_id == run_id))

    async def queue_depth(self) -> dict[str, float]:
        """Runs waiting for a runner (pending and due) and running, for /metrics."""
        now = codec.now_utc()
        async with self.engine.connect() as conn:
            query = select(runs.c.status, func.count()).where(
                runs.c.status.in_(ACTIVE_RUN_STATUSES),
                or_(runs.c.status == RunStatus.RUNNING, runs.c.created_at <= now),
            )
            found = (await conn.execute(query.group_by(runs.c.status))).tuples().all()
        counts: dict[str, int] = dict(found)
        return {
            "waybill_runs_queued": float(counts.get(RunStatus.PENDING, 0)),
            "waybill_runs_running": float(counts.get(RunStatus.RUNNING, 0)),
        }


async def _mark_cancelled(conn: AsyncConnection, row: Row[Any], action: str) -> str:
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


def _is_due(run: RunRow) -> bool:
    """False for a run created with `after_seconds` whose delay has not passed."""
    return run.created_at <= codec.now_utc()


def _run_values(run: RunRow) -> dict[str, Any]:
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
