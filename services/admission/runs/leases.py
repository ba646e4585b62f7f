"""A run's lease: the state machine a run moves through between its admission
and its end, and the timers the dispatcher sleeps on.

| step    | who                  | status             | epoch | lease                     |
|---------|----------------------|--------------------|-------|---------------------------|
| claim   | the dispatcher       | pending -> running | + 1   | granted to a runner       |
| takeover| the dispatcher       | running -> running | + 1   | an expired one, re-granted|
| begin   | the runner (barrier) | running -> running | same  | kept                      |
| renew   | the runner           | (unchanged)        | same  | extended                  |
| release | a draining runner    | (unchanged)        | same  | expired now: claimable    |
| finish  | the runner           | running -> ended   | same  | cleared                   |

Every status write is conditional on `RUN_TRANSITIONS` (run_transitions.py: its
WHERE clause lists the statuses the target may be reached from) and on the run's
epoch, so two writers never both win and a runner holding an old epoch (a zombie)
is refused.

Attempts: each claim counts one. A claim past `max_attempts` is leased only for
its runner to end it (`BeginRun` answers "exhausted"; the runner tells the run's
readers why). If even that hand-off fails (the run never reaches a runner: too
large for it, or its runners keep dying on receipt), the next claim ends it
`error` here, with the reason in its record: a run never loops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waybill.common import codec
from waybill.common.statuses import ACTIVE_RUN_STATUSES, CancelAction, RunStatus, ThreadStatus
from waybill.common.usage import TokenCount, summarize
from waybill.services.admission.metrics import RUNS_FINISHED
from waybill.services.admission.rows import THREAD_STATUS_AFTER_RUN, RunEnd, RunRow, run_of
from waybill.services.admission.runs.lease_queries import (
    CLAIM,
    CLAIMABLE,
    CLAIMABLE_LOCKED,
    RUN_END,
    RUN_TO_END,
    THREAD_BUSY,
    TIMERS,
)
from waybill.services.admission.runs.lock_order import lock_thread_of_run, locking_runs_in_order
from waybill.services.admission.runs.log_closes import owe_close
from waybill.services.admission.runs.run_transitions import allowed_sources
from waybill.services.admission.tables import runs
from waybill.services.admission.threads.thread_store import THREAD_STAMP
from waybill.services.admission.usage.usage_ledger import add_usage, record_usage
from waybill.services.admission.wakeups import notify, wake_payload

log = logging.getLogger("waybill.admission.leases")

PENDING, RUNNING = RunStatus.PENDING, RunStatus.RUNNING


async def mark_busy(conn: AsyncConnection, thread_id: str, now: datetime) -> None:
    """The thread of a run that passed its start barrier is busy."""
    busy = {"busy_thread_id": thread_id, "status": ThreadStatus.BUSY, "updated_at": now}
    await conn.execute(THREAD_BUSY, busy)


@dataclass
class Lease:
    """A runner's hold on a run: who, and for how long without renewal."""

    runner_id: str
    seconds: float


def lease_on_admit(run: RunRow, lease: Lease) -> None:
    """Claim a run about to be inserted, whose thread is free: pending -> running,
    epoch 1, so the insert itself stores the claim. (The caller marks the thread
    busy in its own write to the thread.)"""
    if run.status not in allowed_sources(RUNNING) or run.epoch != 0:
        raise ValueError(f"run {run.run_id} cannot be claimed from {run.status}")
    now = codec.now_utc()
    run.status, run.epoch, run.attempt, run.updated_at = RUNNING, 1, 1, now
    run.lease_owner = lease.runner_id
    run.lease_expires_at = now + timedelta(seconds=lease.seconds)


class LeaseStore:
    def __init__(self, engine: AsyncEngine, log_close_grace: float = 10.0) -> None:
        self.engine = engine
        self.log_close_grace = log_close_grace  # see log_closes.py
        self.is_postgres = engine.dialect.name == "postgresql"
        # Told the run's id when a claim ended it (out of attempts): no runner will
        # report it, and its log is owed a close.
        self.on_ended: Callable[[str], None] = lambda _run_id: None

    async def claim_next(
        self, runner_id: str, lease_seconds: float, max_attempts: int
    ) -> tuple[RunRow, bool] | None:
        """Lease the next claimable run to `runner_id` with a new epoch and attempt.

        The start barrier is passed here, in the same conditional write, when the
        run may simply start (status `running` in the record returned). A run
        cancelled before it started, or out of attempts, keeps its status: the
        runner's `BeginRun` ends it without building anything. One whose last
        such hand-off never reached a runner is ended here (see the docstring).
        Returns (the claimed run, whether it starts now).
        """
        while True:
            now = codec.now_utc()
            async with self.engine.begin() as conn:
                candidate = (await conn.execute(CLAIMABLE, {"claim_now": now})).first()
                if candidate is None:
                    return None
                row = await self._lock_claimable(conn, candidate, now)
                if row is None:
                    continue  # claimed or ended by another writer meanwhile: look again
                if row.attempt > max_attempts:  # even its hand-off to be ended failed
                    reason = (
                        f"gave up after {row.attempt} attempts (at most {max_attempts}): "
                        "it could not be handed to a runner"
                    )
                    ended = await self._end(conn, row, RunStatus.ERROR, reason)
                    claimed = None
                else:
                    ended = False
                    claimed = await self._claim(conn, row, runner_id, lease_seconds, max_attempts)
            if ended:
                self.on_ended(str(row.run_id))
            if claimed is not None:
                return claimed

    async def _lock_claimable(
        self, conn: AsyncConnection, candidate: Row[Any], now: datetime
    ) -> Row[Any] | None:
        """The candidate read unlocked, locked thread first and read again (Postgres;
        None: it no longer qualifies). SQLite's writers take turns: it is as read."""
        if not self.is_postgres:
            return candidate
        await lock_thread_of_run(conn, candidate.run_id)
        claimable = {"claim_now": now, "claim_run_id": candidate.run_id}
        return (await conn.execute(CLAIMABLE_LOCKED, claimable)).first()

    async def _claim(
        self,
        conn: AsyncConnection,
        row: Row[Any],
        runner_id: str,
        lease_seconds: float,
        max_attempts: int,
    ) -> tuple[RunRow, bool] | None:
        """One claim's write; None when another writer moved the run first."""
        now = codec.now_utc()
        starts_now = row.attempt + 1 <= max_attempts and (
            row.status == RUNNING or row.cancel_action is None
        )
        status = RUNNING if starts_now else row.status
        claim = {
            "claim_run_id": row.run_id,
            "claim_epoch": row.epoch,
            "claim_sources": list(allowed_sources(status)),
            "status": status,
            "lease_owner": runner_id,
            "lease_expires_at": now + timedelta(seconds=lease_seconds),
            "updated_at": now,
        }
        claimed = (await conn.execute(CLAIM, claim)).first()
        if claimed is None:
            return None
        if starts_now:
            await mark_busy(conn, row.thread_id, now)
        return run_of(claimed), starts_now

    async def begin_run(self, run_id: str, epoch: int, max_attempts: int) -> tuple[bool, str]:
        """The start barrier. (started, reason): reason is "stale", "cancelled" or
        "exhausted" (its leases expired `max_attempts` times: ended `error`)."""
        now = codec.now_utc()
        async with self.engine.begin() as conn:
            await lock_thread_of_run(conn, run_id)
            row = (await conn.execute(select(runs).where(runs.c.run_id == run_id))).first()
            if (
                row is None
                or row.epoch != epoch
                or row.lease_owner is None  # never claimed: epoch 0 is no runner's
                or row.status not in allowed_sources(RUNNING)
            ):
                return False, "stale"
            if row.cancel_action is not None:
                ended = await self._end(
                    conn, row, RunStatus.INTERRUPTED, "cancelled before it started"
                )
                if ended and row.cancel_action == CancelAction.ROLLBACK and row.attempt <= 1:
                    # Never executed, so nothing to roll back: deleted, as LangGraph
                    # Platform deletes it in the cancel. (A later attempt's run has
                    # its earlier attempts' checkpoints, and keeps its record.)
                    await conn.execute(delete(runs).where(runs.c.run_id == run_id))
                return False, "cancelled"
            if row.attempt > max_attempts:
                reason = f"gave up after {max_attempts} attempts: each runner lost its lease"
                await self._end(
                    conn, row, RunStatus.ERROR, reason, thread_status=ThreadStatus.ERROR
                )
                return False, "exhausted"
            await conn.execute(
                update(runs)
                .where(
                    runs.c.run_id == run_id,
                    runs.c.epoch == epoch,
                    runs.c.status.in_(allowed_sources(RUNNING)),
                )
                .values(status=RUNNING, updated_at=now)
            )
            await mark_busy(conn, row.thread_id, now)
        return True, ""

    async def renew_leases(
        self, runner_id: str, leases: list[tuple[str, int]], lease_seconds: float
    ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        """Extend the leases this runner still holds. (renewed, lost)."""
        if not leases:
            return [], []
        expires = codec.now_utc() + timedelta(seconds=lease_seconds)
        renewed: list[tuple[str, int]] = []
        async with self.engine.begin() as conn:
            if self.is_postgres:  # several runs: locked in the one order (lock_order.py)
                held = select(runs.c.run_id).where(runs.c.run_id.in_([r for r, _ in leases]))
                await conn.execute(locking_runs_in_order(held, self.is_postgres))
            for run_id, epoch in leases:
                result = await conn.execute(
                    update(runs)
                    .where(
                        runs.c.run_id == run_id,
                        runs.c.epoch == epoch,
                        runs.c.lease_owner == runner_id,
                        runs.c.status.in_(ACTIVE_RUN_STATUSES),
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
                .where(
                    runs.c.run_id == run_id,
                    runs.c.epoch == epoch,
                    runs.c.status.in_(ACTIVE_RUN_STATUSES),
                )
                .values(lease_expires_at=codec.now_utc() - timedelta(seconds=1))
            )
            await notify(conn, wake_payload())

    async def finish_run(self, report: RunEnd) -> bool:
        """Write a terminal status; refused (False) for a stale epoch or a finished run."""
        async with self.engine.begin() as conn:
            await lock_thread_of_run(conn, report.run_id)
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
                error=report.error,
            )
            if not ended:
                return False
            await record_usage(conn, row, report.token_counts, codec.now_utc())
            if report.rolled_back:
                await conn.execute(delete(runs).where(runs.c.run_id == report.run_id))
        return True

    async def record_after_run_usage(
        self, run_id: str, epoch: int, counts: list[TokenCount]
    ) -> bool:
        """Tokens a runner spent after the run's end (its memory, its thread's title),
        into the ledger; refused (False) unless `epoch` is the one that ended it."""
        async with self.engine.begin() as conn:
            row = (await conn.execute(RUN_TO_END, {"ending_run_id": run_id})).first()
            if row is None or row.epoch != epoch or row.status in ACTIVE_RUN_STATUSES:
                return False
            await add_usage(conn, row, counts, codec.now_utc())
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
        error: dict[str, Any] | None = None,
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
        if row.status == PENDING:
            return True  # it never ran: the thread's state and status are not its to change
        thread_values: dict[str, Any] = {
            "status": thread_status or THREAD_STATUS_AFTER_RUN[RunStatus(status)],
            "updated_at": now,
            "state_updated_at": now,
            "error": error or failure(status, stop_reason),
        }
        if values is not None:
            thread_values["values"] = values
            thread_values["interrupts"] = interrupts or {}
        await conn.execute(THREAD_STAMP, {"stamped_thread_id": row.thread_id, **thread_values})
        return True

    # ---- the dispatcher's timers -------------------------------------------------

    async def next_timers(self) -> list[datetime]:
        """When the dispatcher must look by itself: the next lease expiry and the
        next delayed run (`after_seconds`) becoming due, where there is one. One
        statement: the loop asks after every pass."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(TIMERS, {"timers_now": codec.now_utc()})).one()
        return [moment for moment in row if moment is not None]

    async def wake_replicas(self) -> None:
        """Wake every admission replica's dispatcher: a runner went away, and the
        leases it held (granted by this replica, unknown to the others' timers)
        must be taken over on time by whichever replica still has runners."""
        async with self.engine.begin() as conn:
            await notify(conn, wake_payload())


def failure(status: str, stop_reason: str) -> dict[str, Any] | None:
    """A failed run's error when its runner reported none (admission ended it)."""
    if status in (RunStatus.ERROR, RunStatus.TIMEOUT):
        return {"error": "RunError", "message": stop_reason}
    return None
