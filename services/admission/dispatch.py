"""Hands committed runs to connected runners at once.

Each runner holds one `Work` stream. `RunnerPool.wake()` is called when a run
is committed or a slot frees up; the dispatch loop then claims pending runs for
runners with free slots until there is nothing left to claim. Nothing polls.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from services.admission.records import RunRecord
from services.admission.store import AdmissionStore

log = logging.getLogger("waybill.admission.dispatch")


@dataclass
class RunnerConnection:
    runner_id: str
    slots: int
    outbox: asyncio.Queue[RunRecord | None] = field(default_factory=asyncio.Queue)
    active: set[str] = field(default_factory=set)

    @property
    def free_slots(self) -> int:
        return self.slots - len(self.active)


class RunnerPool:
    def __init__(self, store: AdmissionStore, lease_seconds: float) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self.runners: dict[str, RunnerConnection] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._dispatch_forever(), name="dispatch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for runner in self.runners.values():
            runner.outbox.put_nowait(None)

    def wake(self) -> None:
        self._wake.set()

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

    def release(self, runner_id: str, run_id: str) -> None:
        connection = self.runners.get(runner_id)
        if connection is not None:
            connection.active.discard(run_id)
        self.wake()

    async def _dispatch_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._dispatch_pending()
            except Exception:
                log.exception("dispatch pass failed; retrying on the next wake-up")
                await asyncio.sleep(0.5)
                self._wake.set()

    async def _dispatch_pending(self) -> None:
        while True:
            runner = max(self.runners.values(), key=lambda r: r.free_slots, default=None)
            if runner is None or runner.free_slots <= 0:
                return
            run = await self.store.claim_next(runner.runner_id, self.lease_seconds)
            if run is None:
                return
            runner.active.add(run.run_id)
            runner.outbox.put_nowait(run)
