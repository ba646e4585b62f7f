"""The runner process: the work loop plus the graph-side read service."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc

from common import codec
from common.errors import not_found
from common.grpc_server import configure_logging, serve, translate_errors
from common.settings import Settings, get_settings
from common.sql import create_engine
from services.runner.execution import Peers, RunLimits
from services.runner.graphs import GraphNotFoundError, GraphRegistry
from services.runner.state import EMPTY_STATE, snapshot_to_dict
from services.runner.stats import STATS
from services.runner.store import RunnerStore
from services.runner.worker import Worker
from waybill.v1 import (
    admission_pb2_grpc,
    delivery_pb2_grpc,
    journal_pb2_grpc,
    runner_pb2,
    runner_pb2_grpc,
)

log = logging.getLogger("waybill.runner")


def _schema_or_none(make_schema: Callable[[], Any]) -> Any:
    """A schema pydantic cannot express is reported as null, as LangGraph Platform does."""
    try:
        return make_schema()
    except Exception:
        log.warning("cannot build a JSON schema", exc_info=True)
        return None


class RunnerServicer(runner_pb2_grpc.RunnerServicer):
    def __init__(self, graphs: GraphRegistry) -> None:
        self.graphs = graphs

    def _graph(self, graph_id: str) -> Any:
        try:
            return self.graphs.build(graph_id)
        except GraphNotFoundError as error:
            raise not_found(str(error)) from error

    @translate_errors
    async def GetThreadState(self, request, context):  # type: ignore[no-untyped-def]
        if not request.graph_id:
            return runner_pb2.JsonReply(json=codec.dumps(EMPTY_STATE))
        graph = self._graph(request.graph_id)
        snapshot = await graph.aget_state(
            {"configurable": {"thread_id": request.thread_id}}, subgraphs=request.subgraphs
        )
        return runner_pb2.JsonReply(json=codec.dumps(snapshot_to_dict(snapshot)))

    @translate_errors
    async def GetThreadHistory(self, request, context):  # type: ignore[no-untyped-def]
        if not request.graph_id:
            return runner_pb2.JsonReply(json=b"[]")
        graph = self._graph(request.graph_id)
        before = request.before
        states = [
            snapshot_to_dict(snapshot)
            async for snapshot in graph.aget_state_history(
                {"configurable": {"thread_id": request.thread_id}},
                filter=codec.loads(request.filter_json, None),
                before={"configurable": {"checkpoint_id": before}} if before else None,
                limit=request.limit or 10,
            )
        ]
        return runner_pb2.JsonReply(json=codec.dumps(states))

    @translate_errors
    async def GetStats(self, request, context):  # type: ignore[no-untyped-def]
        return runner_pb2.JsonReply(json=codec.dumps(STATS.as_dict()))

    @translate_errors
    async def GetGraph(self, request, context):  # type: ignore[no-untyped-def]
        drawable = (await self._graph(request.graph_id).aget_graph(xray=request.xray)).to_json()
        return runner_pb2.JsonReply(json=codec.dumps(drawable))

    @translate_errors
    async def GetSchemas(self, request, context):  # type: ignore[no-untyped-def]
        graph = self._graph(request.graph_id)
        schemas = {
            "graph_id": request.graph_id,
            "input_schema": _schema_or_none(graph.get_input_jsonschema),
            "output_schema": _schema_or_none(graph.get_output_jsonschema),
            "state_schema": _schema_or_none(graph.get_output_jsonschema),
            "config_schema": _schema_or_none(graph.get_config_jsonschema),
            "context_schema": _schema_or_none(graph.get_context_jsonschema),
        }
        return runner_pb2.JsonReply(json=codec.dumps(schemas))


@contextlib.asynccontextmanager
async def open_checkpointer(settings: Settings) -> AsyncIterator[Any]:
    """LangGraph's own checkpointer packages, on the same database switch."""
    url = settings.checkpointer_url()
    if settings.database_url:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(url) as saver:
            await saver.setup()
            yield saver
    else:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(url) as saver:
            await saver.setup()
            yield saver


def connect_peers(settings: Settings) -> Peers:
    return Peers(
        admission=admission_pb2_grpc.AdmissionStub(
            grpc.aio.insecure_channel(settings.admission_addr)
        ),
        journal=journal_pb2_grpc.JournalStub(grpc.aio.insecure_channel(settings.journal_addr)),
        delivery=delivery_pb2_grpc.DeliveryStub(grpc.aio.insecure_channel(settings.delivery_addr)),
    )


async def main() -> None:
    settings = get_settings()
    configure_logging("runner")
    store = RunnerStore(create_engine(settings.checkpoint_sqlalchemy_url()))
    await store.migrate()
    async with open_checkpointer(settings) as checkpointer:
        graphs = GraphRegistry(settings.graph_specs(), checkpointer)
        graphs.load_all()
        worker = Worker(
            graphs,
            connect_peers(settings),
            store,
            slots=settings.runner_slots,
            limits=RunLimits(settings.lease_seconds, settings.run_timeout_seconds),
            renew_every=settings.renew_every,
            reconnect_seconds=settings.reconnect_seconds,
        )
        work = asyncio.create_task(worker.run_forever(), name="work-stream")
        servicer = RunnerServicer(graphs)

        async def stop() -> None:
            await worker.stop(settings.shutdown_grace_seconds)
            work.cancel()

        await serve(
            "Runner",
            settings.runner_addr,
            lambda server: runner_pb2_grpc.add_RunnerServicer_to_server(servicer, server),
            on_stop=stop,
            grace_seconds=settings.shutdown_grace_seconds,
        )


if __name__ == "__main__":
    asyncio.run(main())
