"""The workspace as it was before a run changed it.

Delivery compares the workspace after the run with this before-snapshot. It is
taken once, when a file tool first asks through the run's `SnapshotGate` (from
any thread); a run whose tools never ask changed nothing and takes none.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from waybill.services.runner.agent.workspace import SnapshotGate
from waybill.services.runner.peers import RunnerPeers
from waybill.services.runner.persistence.fencing import FencedCheckpointer, RunFence
from waybill.v1 import common_pb2, delivery_pb2


async def starting_point(
    run: common_pb2.Run, checkpoints: Any, fenced: FencedCheckpointer | None
) -> CheckpointTuple | None:
    """The thread's last checkpoint before this run's own: the state the run
    started from (None: a new thread). Usually the graph's own first read."""
    read = fenced is not None and fenced.found_read
    found = fenced.found if fenced else None
    if read and (found is None or found.metadata.get("run_id") != run.run_id):
        return found
    # A takeover: the graph found this run's own checkpoints; look past them.
    root: RunnableConfig = {"configurable": {"thread_id": run.thread_id, "checkpoint_ns": ""}}
    async for earlier in checkpoints.alist(root):
        if earlier.metadata.get("run_id") != run.run_id:
            return earlier
    return None


class WorkspaceSnapshot:
    def __init__(
        self,
        run: common_pb2.Run,
        peers: RunnerPeers,
        fence: RunFence,
        starting_point: Callable[[], Awaitable[CheckpointTuple | None]],
    ) -> None:
        self.run = run
        self.peers = peers
        self.fence = fence
        self._starting_point = starting_point
        self._task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        return self._task is not None

    async def taken(self) -> None:
        if self._task is not None:
            await self._task

    def gate(self) -> SnapshotGate:
        """A gate whose `start` begins the snapshot once, from any thread."""
        loop = asyncio.get_running_loop()

        def begin() -> None:
            if self._task is None:
                self._task = asyncio.create_task(self._take(gate))

        def start() -> None:
            if threading.get_ident() == loop_thread:
                begin()
            else:
                loop.call_soon_threadsafe(begin)

        loop_thread = threading.get_ident()
        gate = SnapshotGate(start)
        return gate

    async def _take(self, gate: SnapshotGate) -> None:
        """The workspace before the run changes it (a takeover gets the run's first)."""
        try:
            start = await self._starting_point()
            previous = str(start.metadata.get("run_id") or "") if start else ""
            self.fence.check("workspace snapshot")
            await self.peers.delivery.Snapshot(
                delivery_pb2.SnapshotRequest(
                    run_id=self.run.run_id,
                    thread_id=self.run.thread_id,
                    epoch=self.run.epoch,
                    # A resume continues the paused run: its files written before the pause count.
                    continues_run_id=previous,
                ),
                timeout=self.peers.rpc_timeout,
            )
        except BaseException as error:
            gate.open(failure=f"no snapshot of it could be taken ({type(error).__name__})")
            raise
        gate.open()
