"""Every ended run's journal log is closed, so that its readers hear the end.

Who closes a run's log: the runner that wrote the run's terminal status closes it
right after (its streams end at once). But a runner can die between admission
accepting that write and its Close, and then nothing would ever close the log:
its streams and `wait`s would hang on heartbeats. Admission, which commits every
terminal write, owns the guarantee:

| when | who | what |
|---|---|---|
| terminal write | admission | the status, and a `log_closes` row (run, epoch, close_at) |
| right after | the runner | `Journal.Close(run, epoch)` |
| once closed | the runner | says so on its work stream (`log_closed`): the row is deleted |
| close_at passed | admission | `Journal.Close(run, epoch)` again; the row is deleted |

`close_at` is the end plus `WAYBILL_LOG_CLOSE_GRACE_SECONDS`; the row and the
status commit in one transaction (`LeaseStore._end`, leases.py), so no end escapes it.

So a second close is sent only for a run whose runner's word did not come (it
died, or its stream dropped, before it told). The journal's Close is idempotent
and says whether the log was still open: when it was, the runner never closed it, which is counted
(`waybill_log_closes_total{found="open"}`) and logged. The grace lets the runner's
own close (and, for a run out of attempts, the error event it appends first) come
before admission's.

The closer sleeps until the next row is due; a terminal write (here, or on
another replica through the NOTIFY it sends) sets it to wake when the new row
will be due, if it would sleep longer. Replicas claim due rows by moving their
`close_at` on (SKIP LOCKED on Postgres): one replica closes each at a time, and
one whose close failed (the journal unreachable) is tried again
`WAYBILL_LOG_CLOSE_RETRY_SECONDS` later.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

import grpc
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from waybill.common import codec
from waybill.common.background import DUE_MARGIN_SECONDS, BackgroundLoop, seconds_until
from waybill.services.admission import metrics
from waybill.services.admission.tables import log_closes
from waybill.v1 import journal_pb2, journal_pb2_grpc

log = logging.getLogger("waybill.admission.log_closes")

BATCH = 64  # rows claimed (and closed concurrently) per round


LOG_CLOSE_OWED = insert(log_closes)  # built once: it is part of every run's end


async def owe_close(conn: AsyncConnection, run_id: str, epoch: int, grace_seconds: float) -> None:
    """Part of a terminal write's transaction: the run's log must be closed."""
    close_at = codec.now_utc() + timedelta(seconds=grace_seconds)
    await conn.execute(LOG_CLOSE_OWED, {"run_id": run_id, "epoch": epoch, "close_at": close_at})


class LogCloseStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.is_postgres = engine.dialect.name == "postgresql"

    async def claim_due(self, retry_seconds: float, limit: int) -> list[tuple[str, int]]:
        """Up to `limit` due rows as (run_id, epoch), each moved `retry_seconds` on
        so that no other replica claims it meanwhile."""
        now = codec.now_utc()
        due = (
            select(log_closes.c.run_id, log_closes.c.epoch)
            .where(log_closes.c.close_at <= now)
            .order_by(log_closes.c.close_at)
            .limit(limit)
        )
        if self.is_postgres:
            due = due.with_for_update(skip_locked=True)
        async with self.engine.begin() as conn:
            rows = [(str(row.run_id), int(row.epoch)) for row in (await conn.execute(due)).all()]
            if rows:
                await conn.execute(
                    update(log_closes)
                    .where(log_closes.c.run_id.in_([run_id for run_id, _ in rows]))
                    .values(close_at=now + timedelta(seconds=retry_seconds))
                )
        return rows

    async def settle(self, run_ids: list[str]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(delete(log_closes).where(log_closes.c.run_id.in_(run_ids)))

    async def next_due(self) -> datetime | None:
        async with self.engine.connect() as conn:
            found = await conn.execute(select(func.min(log_closes.c.close_at)))
            return found.scalar()


class LogCloser:
    """Closes the journal logs admission owes a close, when they are due."""

    def __init__(
        self,
        store: LogCloseStore,
        journal: grpc.aio.Channel,
        grace_seconds: float,
        retry_seconds: float,
        rpc_timeout: float,
    ) -> None:
        self.store = store
        self.grace_seconds = grace_seconds
        self.retry_seconds = retry_seconds
        self.rpc_timeout = rpc_timeout
        self.journal = journal_pb2_grpc.JournalStub(journal)
        self.loop = BackgroundLoop(
            "log-closer", self.close_pass, log=log, retry_seconds=retry_seconds
        )
        self._closed_by_runners: list[str] = []  # their rows go at the next pass

    def start(self) -> None:
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()

    def owed(self) -> None:
        """A terminal write was committed (here or elsewhere): its row is due after
        the grace. The loop is set to wake by then, unless it would anyway."""
        due = asyncio.get_running_loop().time() + self.grace_seconds
        self.loop.wake_by(due + DUE_MARGIN_SECONDS)

    def closed_by_runner(self, run_id: str) -> None:
        """The run's runner closed its log: no second close is owed. The row goes at
        the pass its close_at brings (no pass of its own: one per row would cost
        more than the close it saves), with every other such row told of meanwhile."""
        self._closed_by_runners.append(run_id)

    async def close_pass(self) -> float | None:
        """Forget the logs runners closed, close every due log; then the seconds
        until the next is due."""
        await self._settle_closed_by_runners()
        await self.close_due()
        return seconds_until(await self.store.next_due())

    async def _settle_closed_by_runners(self) -> None:
        closed, self._closed_by_runners = self._closed_by_runners, []
        if not closed:
            return
        try:
            await self.store.settle(closed)
        except BaseException:
            self._closed_by_runners[:0] = closed  # the next pass tries them again
            raise

    async def close_due(self) -> None:
        while True:
            due = await self.store.claim_due(self.retry_seconds, BATCH)
            if not due:
                return
            results = await asyncio.gather(*(self._close(run, epoch) for run, epoch in due))
            settled = [run for (run, _), done in zip(due, results, strict=True) if done]
            if settled:
                await self.store.settle(settled)
            failed = len(due) - len(settled)
            if failed:
                log.warning(
                    "could not close %d ended runs' logs; trying again in %gs",
                    failed,
                    self.retry_seconds,
                )
            if len(due) < BATCH:
                return

    async def _close(self, run_id: str, epoch: int) -> bool:
        """Close one log; False when it must be tried again."""
        try:
            reply = await self.journal.Close(
                journal_pb2.CloseRequest(run_id=run_id, epoch=epoch), timeout=self.rpc_timeout
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.ABORTED:  # a newer epoch holds it: not ours
                log.warning("run %s: the journal refused its close: %s", run_id, error.details())
                return True
            log.debug("run %s: close failed: %s", run_id, error.details())
            return False
        metrics.LOG_CLOSES.labels("open" if reply.closed else "closed").inc()
        if reply.closed:
            log.warning("run %s: its runner never closed its log; admission closed it", run_id)
        return True
