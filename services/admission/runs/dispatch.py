"""Hands committed runs to connected runners at once, and carries cancel orders
and lease grants to them.

Each runner holds one `Work` stream. `RunnerPool.wake()` is called when a run is
committed, cancelled or released, or a slot frees up; the dispatch loop then
claims runs for runners with free slots until nothing is left to claim. Between
wake-ups it sleeps until the next lease expires or the next delayed run
(`after_seconds`) becomes due, so a dead runner's run is taken over on time and a
delayed run starts on time. Nothing polls.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from waybill.common import codec
from waybill.common.background import DUE_MARGIN_SECONDS, BackgroundLoop, seconds_until
from waybill.services.admission import metrics
from waybill.services.admission.rows import RunRow
from waybill.services.admission.runs.leases import LeaseStore
from waybill.v1 import admission_pb2

log = logging.getLogger("waybill.admission.dispatch")

Outbox = asyncio.Queue[admission_pb2.WorkAssignment | None]


@dataclass
class RunnerConnection:
    runner_id: str
    slots: int
    outbox: Outbox = field(default_factory=asyncio.Queue)
    active: set[str] = field(default_factory=set)
    # Its event loop is blocked (its lease keeper says so): a run handed to it now
    # would wait unstarted until its lease ran out.
    stalled: bool = False

    @property
    def free_slots(self) -> int:
        return 0 if self.stalled else self.slots - len(self.active)


class RunnerPool:
    def __init__(
        self,
        store: LeaseStore,
        lease_seconds: float,
        max_attempts: int,
        retry_seconds: float = 0.5,
    ) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.runners: dict[str, RunnerConnection] = {}
        self.loop = BackgroundLoop(
            "dispatch", self.dispatch_pass, log=log, retry_seconds=retry_seconds
        )

    def start(self) -> None:
        self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        for runner in self.runners.values():
            runner.outbox.put_nowait(None)

    def wake(self) -> None:
        self.loop.wake()

    def leased_at_admit(self) -> None:
        """A run was claimed as it was admitted. Nothing new is claimable: the loop
        only needs to wake by the lease's expiry. A sleeping loop that would wake
        later gets an alarm for it (no pass now, on the way to the run's first
        token); a loop in a pass may have read the timers before this commit, so
        it is woken to read them again."""
        expiry = asyncio.get_running_loop().time() + self.lease_seconds
        self.loop.wake_by(expiry + DUE_MARGIN_SECONDS)

    # ---- runner connections ----------------------------------------------------

    def connect(self, runner_id: str, slots: int) -> RunnerConnection:
        connection = RunnerConnection(runner_id=runner_id, slots=max(1, slots))
        self.runners[runner_id] = connection
        log.info("runner %s connected with %d slots", runner_id, connection.slots)
        self.wake()
        return connection

    def disconnect(self, connection: RunnerConnection) -> None:
        if self.runners.get(connection.runner_id) is connection:
            del self.runners[connection.runner_id]
        log.info("runner %s disconnected", connection.runner_id)

    def drain(self, connection: RunnerConnection) -> None:
        connection.slots = 0
        log.info("runner %s is draining", connection.runner_id)

    def release(self, runner_id: str, run_id: str) -> None:
        connection = self.runners.get(runner_id)
        if connection is not None:
            connection.active.discard(run_id)
        self.wake()

    def release_ended(self, run_id: str) -> None:
        """A run ended without being executed (cancelled before it started, or out
        of attempts): its runner will not report it, so free its slot here."""
        for connection in self.runners.values():
            connection.active.discard(run_id)
        self.wake()

    def send_cancel(self, run_id: str, action: str) -> bool:
        """Tell the runner executing `run_id` to stop it. False when none here has it."""
        for connection in self.runners.values():
            if run_id in connection.active:
                order = admission_pb2.CancelOrder(run_id=run_id, action=action)
                connection.outbox.put_nowait(admission_pb2.WorkAssignment(cancel=order))
                return True
        return False

    def reserve_slot(self, run_id: str) -> RunnerConnection | None:
        """Hold a free slot for a run about to be admitted (the admit-and-claim
        fast path); None when every runner connected here is full."""
        runner = max(self.runners.values(), key=lambda r: r.free_slots, default=None)
        if runner is None or runner.free_slots <= 0:
            return None
        runner.active.add(run_id)
        return runner

    def assign(self, runner: RunnerConnection, run: RunRow, start_now: bool) -> None:
        """Hand a claimed run to its runner (and its cancel order, if one is stored)."""
        for other in self.runners.values():
            if other is not runner:
                other.active.discard(run.run_id)  # a takeover: it is no longer theirs
        runner.active.add(run.run_id)
        assignment = admission_pb2.WorkAssignment(run=run.to_proto(), start_now=start_now)
        runner.outbox.put_nowait(assignment)
        if run.cancel_action:
            order = admission_pb2.CancelOrder(run_id=run.run_id, action=run.cancel_action)
            runner.outbox.put_nowait(admission_pb2.WorkAssignment(cancel=order))

    async def renew(self, connection: RunnerConnection, leases: list[tuple[str, int]]) -> None:
        """A renewal sent on the work stream: its grant goes back on the stream."""
        grant = await self.grant(connection.runner_id, leases)
        connection.outbox.put_nowait(admission_pb2.WorkAssignment(lease=grant))

    async def grant(
        self, runner_id: str, leases: list[tuple[str, int]], loop_stalled: bool = False
    ) -> admission_pb2.LeaseGrant:
        """Extend the leases `runner_id` still holds (`RenewLeases`, or the stream):
        what it renewed and what it lost. The runner need not be connected to this
        replica: the leases are in SQL."""
        renewed, lost = await self.store.renew_leases(runner_id, leases, self.lease_seconds)
        connection = self.runners.get(runner_id)
        if connection is not None:
            for run_id, _epoch in lost:
                connection.active.discard(run_id)
            self._mark_stalled(connection, loop_stalled)
        metrics.LEASE_RENEWALS.inc(len(renewed))
        metrics.LEASES_LOST.inc(len(lost))
        if lost:
            self.wake()
        return admission_pb2.LeaseGrant(
            renewed=[admission_pb2.RunLease(run_id=r, epoch=e) for r, e in renewed],
            lost=[admission_pb2.RunLease(run_id=r, epoch=e) for r, e in lost],
            lease_seconds=self.lease_seconds,
        )

    def _mark_stalled(self, connection: RunnerConnection, stalled: bool) -> None:
        if stalled == connection.stalled:
            return
        connection.stalled = stalled
        log.warning(
            "runner %s: event loop %s",
            connection.runner_id,
            "stalled: no runs for it meanwhile" if stalled else "turns again",
        )
        if not stalled:
            self.wake()  # the runs that waited for it

    # ---- the dispatch loop -----------------------------------------------------

    async def dispatch_pass(self) -> float | None:
        """Claim runs for free slots until none is left; then the seconds until
        the loop must look again by itself."""
        await self._dispatch_pending()
        return await self.seconds_to_next_timer()

    async def seconds_to_next_timer(self) -> float | None:
        """Seconds until the next lease expiry or delayed start; None: neither waits."""
        due = [codec.aware_utc(moment) for moment in await self.store.next_timers()]
        return seconds_until(min(due, default=None))

    async def _dispatch_pending(self) -> None:
        while True:
            runner = max(self.runners.values(), key=lambda r: r.free_slots, default=None)
            if runner is None or runner.free_slots <= 0:
                return
            claimed = await self.store.claim_next(
                runner.runner_id, self.lease_seconds, self.max_attempts
            )
            if claimed is None:
                return
            run, start_now = claimed
            _count_claim(run, start_now)
            self.assign(runner, run, start_now)


def _count_claim(run: RunRow, start_now: bool) -> None:
    if run.attempt > 1:
        metrics.LEASE_TAKEOVERS.inc()
    else:
        waited = (codec.now_utc() - codec.aware_utc(run.created_at)).total_seconds()
        metrics.QUEUE_WAIT.observe(max(waited, 0.0))
    if start_now:
        metrics.RUNS_STARTED.inc()
