"""The runner's side of the `Work` stream: say hello, receive runs, execute them.

The stream is reconnected with a short, configurable backoff when admission
goes away; runs already executing carry on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator

import grpc

from services.runner.execution import Peers, RunExecution
from services.runner.graphs import GraphRegistry
from waybill.v1 import admission_pb2, common_pb2

log = logging.getLogger("waybill.runner.worker")


def new_runner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    def __init__(
        self, graphs: GraphRegistry, peers: Peers, slots: int, reconnect_seconds: float = 0.5
    ) -> None:
        self.graphs = graphs
        self.peers = peers
        self.slots = slots
        self.reconnect_seconds = reconnect_seconds
        self.runner_id = new_runner_id()
        self.executions: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()

    async def run_forever(self) -> None:
        while not self._stopping.is_set():
            try:
                await self._hold_work_stream()
            except grpc.aio.AioRpcError as error:
                if self._stopping.is_set():
                    return
                log.warning("work stream lost (%s); reconnecting", error.code().name)
            await asyncio.sleep(self.reconnect_seconds)

    async def stop(self, grace_seconds: float) -> None:
        """Stop taking runs, then give running ones `grace_seconds` to finish."""
        self._stopping.set()
        if self.executions:
            await asyncio.wait(set(self.executions), timeout=grace_seconds)

    async def _requests(self) -> AsyncIterator[admission_pb2.WorkRequest]:
        yield admission_pb2.WorkRequest(
            hello=admission_pb2.RunnerHello(runner_id=self.runner_id, slots=self.slots)
        )
        await self._stopping.wait()

    async def _hold_work_stream(self) -> None:
        call = self.peers.admission.Work(self._requests())
        async for assignment in call:
            task = asyncio.create_task(self._execute(assignment.run), name=assignment.run.run_id)
            self.executions.add(task)
            task.add_done_callback(self.executions.discard)

    async def _execute(self, run: common_pb2.Run) -> None:
        execution = RunExecution(run, self.runner_id, self.graphs, self.peers)
        try:
            await execution.execute()
        except Exception as error:
            log.exception("run %s: infrastructure failure", run.run_id)
            await self._report_failure(run, error)

    async def _report_failure(self, run: common_pb2.Run, error: Exception) -> None:
        try:
            await self.peers.admission.FinishRun(
                admission_pb2.RunFinished(
                    run_id=run.run_id,
                    runner_id=self.runner_id,
                    epoch=run.epoch,
                    status=common_pb2.RUN_STATUS_ERROR,
                    stop_reason=f"runner failure: {type(error).__name__}: {error}",
                )
            )
            await RunExecution(run, self.runner_id, self.graphs, self.peers).sink.close()
        except Exception:
            log.exception("run %s: could not report the failure", run.run_id)
