"""What admission asks the runners before it admits a run: the context keys a
graph declares, and whether a checkpoint exists on a thread. Any runner can
answer (they share the checkpointer); declared keys are cached per graph."""

from __future__ import annotations

import asyncio

import grpc

from waybill.common import codec
from waybill.common.errors import not_found
from waybill.common.grpc_channels import runner_reads
from waybill.v1 import runner_pb2, runner_pb2_grpc


class RunnerFacts:
    def __init__(self, target: str, timeout: float) -> None:
        self.channel = runner_reads(target)
        self.runner = runner_pb2_grpc.RunnerStub(self.channel)
        self.timeout = timeout
        self._context_keys: dict[str, asyncio.Future[frozenset[str] | None]] = {}

    async def close(self) -> None:
        await self.channel.close()

    async def context_keys(self, graph_id: str) -> frozenset[str] | None:
        """The keys of the graph's context schema; None when it declares none. Asked
        once per graph: the runs admitted meanwhile wait for the same answer."""
        asking = self._context_keys.get(graph_id)
        if asking is None or (asking.done() and (asking.cancelled() or asking.exception())):
            asking = asyncio.ensure_future(self._ask_context_keys(graph_id))
            self._context_keys[graph_id] = asking
        return await asyncio.shield(asking)

    async def _ask_context_keys(self, graph_id: str) -> frozenset[str] | None:
        reply = await self.runner.GetSchemas(
            runner_pb2.GetSchemasRequest(graph_id=graph_id), timeout=self.timeout
        )
        schema = codec.loads(reply.json, {}).get("context_schema")
        properties = (schema or {}).get("properties")
        return frozenset(properties) if isinstance(properties, dict) else None

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
