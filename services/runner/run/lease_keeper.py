"""The runner's leases, renewed from a thread of its own.

Every run on a runner shares one event loop; a graph may block it (a sync call
inside an async node). Were the leases renewed on that loop, one such graph
would cost every other run its lease: admission takes them over, hands them
back to the same stalled runner, and after `max_attempts` they end `error`.
So the keeper renews on its own thread, through its own (blocking) channel and
`Admission.RenewLeases`, whatever the loop is doing. It also watches the loop:
a stall is counted in the runner's stats and told to admission, which hands the
runner no new run until the loop turns again (the run would wait unstarted,
its lease running out, its attempts spent).

A loop stalled for longer than `WAYBILL_RUNNER_LOOP_WEDGED_SECONDS` is taken
for wedged: the keeper stops renewing, so that the runs are taken over by a
runner that can run them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from waybill.common.grpc_channels import blocking_peer_channel
from waybill.common.settings import Settings
from waybill.services.runner.persistence.fencing import RunFence
from waybill.services.runner.stats import STATS
from waybill.v1 import admission_pb2, admission_pb2_grpc

log = logging.getLogger("waybill.runner.leases")

# A loop that has not turned for this long (beyond its heartbeat) has stalled.
STALL_SECONDS = 0.5
HEARTBEAT_SECONDS = 0.1


@dataclass
class HeldLease:
    run_id: str
    epoch: int
    fence: RunFence


@dataclass
class LoopWatch:
    """When the runner's loop last turned, and what its stalls came to."""

    last_turn: float = 0.0
    stalled: bool = False

    def observe(self, now: float) -> float:
        """The stall so far (0 when the loop turns), counted once per stall."""
        stall = now - self.last_turn - HEARTBEAT_SECONDS
        if stall < STALL_SECONDS:
            self.stalled = False
            return 0.0
        if not self.stalled:
            self.stalled = True
            STATS.loop_stalls += 1
        STATS.loop_stall_longest_ms = max(STATS.loop_stall_longest_ms, int(stall * 1000))
        return stall


class LeaseKeeper:
    """Renews the leases `hold` was told of, every `renew_every` seconds, on its
    own thread. `on_lost(run_id, epoch)` is called on the runner's loop for a
    lease admission refused or whose deadline passed; the fence refuses writes
    from the moment the keeper knows."""

    def __init__(
        self,
        runner_id: str,
        settings: Settings,
        on_lost: Callable[[str, int], None],
    ) -> None:
        self.runner_id = runner_id
        self.settings = settings
        self.renew_every = settings.renew_every
        self.on_lost = on_lost
        self._held: dict[str, HeldLease] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._next_renewal = 0.0
        self._told_stalled = False  # what admission was last told of the loop
        self.watch = LoopWatch()

    # ---- on the runner's loop --------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.watch.last_turn = time.monotonic()
        self._heartbeat = asyncio.create_task(self._beat(), name="loop-heartbeat")
        self._thread = threading.Thread(target=self._keep, name="lease-keeper", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stopping.set()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 5)

    def hold(self, run_id: str, epoch: int, fence: RunFence) -> None:
        with self._lock:
            self._held[run_id] = HeldLease(run_id, epoch, fence)

    def drop(self, run_id: str, epoch: int) -> None:
        with self._lock:
            held = self._held.get(run_id)
            if held is not None and held.epoch == epoch:
                del self._held[run_id]

    async def _beat(self) -> None:
        while True:
            self.watch.last_turn = time.monotonic()
            await asyncio.sleep(HEARTBEAT_SECONDS)

    # ---- on the keeper's thread ------------------------------------------------

    def _keep(self) -> None:
        channel = blocking_peer_channel(self.settings.admission_addr, self.settings)
        admission = admission_pb2_grpc.AdmissionStub(channel)
        try:
            while not self._stopping.wait(self._pause()):
                self._fence_expired()
                stall = self.watch.observe(time.monotonic())
                if stall > self.settings.runner_loop_wedged_seconds:
                    log.error(
                        "the runner's loop has not turned for %.0f s: leases left to expire", stall
                    )
                    continue
                self._renew(admission, stalled=stall > 0)
        finally:
            channel.close()

    def _pause(self) -> float:
        """Renew every `renew_every`, but look at the loop at least every heartbeat."""
        return min(self.renew_every, STALL_SECONDS)

    def _leases(self) -> list[HeldLease]:
        with self._lock:
            return [held for held in self._held.values() if not held.fence.lost]

    def _fence_expired(self) -> None:
        """A lease whose deadline passed unrenewed is lost (admission may have
        given its run to another runner by now)."""
        for held in self._leases():
            if not held.fence.held:
                log.warning("run %s: lease deadline passed; fencing", held.run_id)
                self._lose(held)

    def _renew(self, admission: admission_pb2_grpc.AdmissionStub, stalled: bool) -> None:
        """Renew when due, or at once when the loop's state changed."""
        news = stalled != self._told_stalled
        if time.monotonic() < self._next_renewal and not news:
            return
        self._next_renewal = time.monotonic() + self.renew_every
        leases = self._leases()
        if not leases and not news:
            return
        request = admission_pb2.RenewLeasesRequest(
            runner_id=self.runner_id,
            leases=[admission_pb2.RunLease(run_id=h.run_id, epoch=h.epoch) for h in leases],
            loop_stalled=stalled,
        )
        sent_at = time.monotonic()
        try:
            grant = admission.RenewLeases(request, timeout=max(self.renew_every, 0.5))
        except grpc.RpcError as error:
            STATS.lease_renewals_failed += 1
            log.warning("lease renewal failed: %s", error.code().name)  # type: ignore[attr-defined]
            return
        self._told_stalled = stalled
        self.apply(grant, sent_at, leases)

    def apply(
        self, grant: admission_pb2.LeaseGrant, sent_at: float, leases: list[HeldLease]
    ) -> None:
        by_lease = {(h.run_id, h.epoch): h for h in leases}
        for lease in grant.renewed:
            held = by_lease.get((lease.run_id, lease.epoch))
            if held is not None:
                held.fence.extend(sent_at, grant.lease_seconds)
        for lease in grant.lost:
            held = by_lease.get((lease.run_id, lease.epoch))
            if held is not None:
                log.warning("run %s: admission says the lease is lost", lease.run_id)
                self._lose(held)

    def _lose(self, held: HeldLease) -> None:
        held.fence.lose()  # no write from now on, even before the loop hears of it
        self.drop(held.run_id, held.epoch)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.on_lost, held.run_id, held.epoch)
