"""What admission asks the runners before it admits a run: whether its graph can be
built, and whether a checkpoint exists on a thread. Any runner can answer (they share
the project and the checkpointer)."""

from __future__ import annotations

import asyncio

import grpc

from waybill.common.errors import not_found, refused
from waybill.v1 import runner_pb2, runner_pb2_grpc


class RunnerFacts:
    def __init__(self, runners: grpc.aio.Channel, timeout: float) -> None:
        """`runners`: a channel to any runner (`PeerChannels.runner_reads`)."""
        self.runner = runner_pb2_grpc.RunnerStub(runners)
        self.timeout = timeout
        self._buildable: dict[str, asyncio.Future[None]] = {}

    async def ensure_buildable(self, graph_id: str) -> None:
        """FAILED_PRECONDITION (a 400 naming the graph's error) when the graph's factory
        raises. Asked once per graph; runs admitted meanwhile wait for the same answer,
        and a failure is asked again next time (the project may have been fixed)."""
        asking = self._buildable.get(graph_id)
        if asking is None or (asking.done() and (asking.cancelled() or asking.exception())):
            asking = asyncio.ensure_future(self._ask_schemas(graph_id))
            self._buildable[graph_id] = asking
        await asyncio.shield(asking)

    async def _ask_schemas(self, graph_id: str) -> None:
        try:
            await self.runner.GetSchemas(
                runner_pb2.GetSchemasRequest(graph_id=graph_id), timeout=self.timeout
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise refused(error.details() or f"graph {graph_id} could not be built") from error
            raise

    async def require_checkpoint(self, thread_id: str, graph_id: str, checkpoint_id: str) -> None:
        """NOT_FOUND unless `checkpoint_id` is one of the thread's checkpoints."""
        if not graph_id:  # the thread never ran: it has no checkpoints at all
            raise not_found(f"Checkpoint {checkpoint_id} not found on thread {thread_id}.")
        request = runner_pb2.GetThreadStateRequest(
            thread_id=thread_id, graph_id=graph_id, checkpoint_id=checkpoint_id
        )
        try:
            await self.runner.GetThreadState(request, timeout=self.timeout)
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                raise not_found(
                    f"Checkpoint {checkpoint_id} not found on thread {thread_id}."
                ) from error
            raise
