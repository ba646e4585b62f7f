"""The runner process: the work loop plus the graph-side read service."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc
from langgraph.errors import InvalidUpdateError
from langgraph.store.base import NOT_PROVIDED, BaseStore

from waybill.common import codec
from waybill.common.errors import ServiceError, invalid, not_found, refused
from waybill.common.grpc_channels import PeerChannels
from waybill.common.grpc_server import configure_logging, run_service, serve
from waybill.common.identity import LOCAL_USER, acting_user, caller_of
from waybill.common.metrics import StatsCollector, register
from waybill.common.project_app import runner_lifespan
from waybill.common.readiness import WorkHealth
from waybill.common.secret_scan import refuse_stored_secrets
from waybill.common.settings import Settings, get_settings
from waybill.common.sql import service_engine
from waybill.services.runner.agent import memory
from waybill.services.runner.agent.mcp_tools import close_mcp_toolbox, open_mcp_toolbox
from waybill.services.runner.agent.workspace import remove_workspace_off_loop
from waybill.services.runner.graphs.context import AuthUser, principal_user, with_caller
from waybill.services.runner.graphs.registry import (
    AccessContext,
    GraphNotFoundError,
    GraphRegistry,
    prepare_project,
)
from waybill.services.runner.peers import RunnerPeers, connect_peers
from waybill.services.runner.persistence.backends import open_checkpointer, open_store
from waybill.services.runner.persistence.owned_store import StoreAccess, store_of
from waybill.services.runner.persistence.runner_store import RunnerStore
from waybill.services.runner.reads.introspection import (
    drawing_of,
    schemas_of,
    subgraph_schemas,
    xray_of,
)
from waybill.services.runner.reads.store_api import item_to_dict, put_index, store_key
from waybill.services.runner.reads.thread_state import (
    EMPTY_STATE,
    checkpoint_config,
    snapshot_to_dict,
    state_config,
    superstep_updates,
    thread_record,
    update_reply,
)
from waybill.services.runner.run.node_threads import install as install_node_threads
from waybill.services.runner.run.worker import Worker
from waybill.services.runner.schema import check as check_schema
from waybill.services.runner.stats import STATS
from waybill.v1 import (
    journal_pb2,
    runner_pb2,
    runner_pb2_grpc,
)

log = logging.getLogger("waybill.runner")


class RunnerServicer(runner_pb2_grpc.RunnerServicer):
    def __init__(
        self, graphs: GraphRegistry, store: RunnerStore, peers: RunnerPeers, settings: Settings
    ) -> None:
        self.graphs = graphs
        self.store = store
        self.peers = peers  # admission and the journal hear of state written outside runs
        self.workspaces = settings.workspaces_path()
        self.workspace_io_seconds = settings.workspace_io_seconds
        self.store_access = StoreAccess.from_settings(settings)
        # LangGraph's stores (and SimilarityStore) keep `index_config` when store.index is set.
        self.semantic = getattr(graphs.store, "index_config", None) is not None

    @asynccontextmanager
    async def _graph(
        self,
        graph_id: str,
        access_context: AccessContext,
        context: Any,
        config_json: bytes = b"",
    ) -> AsyncIterator[Any]:
        """The graph for one read; a factory gets a read-only runtime with the caller,
        and the assistant's config (`config_json`) with the caller stamped in it."""
        caller = caller_of(context) or LOCAL_USER
        # The project's user when its auth made the caller, as a run's factory sees it.
        user = (
            AuthUser(caller.user)
            if caller.user is not None
            else principal_user(caller.user_id, sorted(caller.scopes))
        )
        built = False
        try:
            config = with_caller(codec.loads(config_json, None), user) if config_json else None
            opened = self.graphs.open(graph_id, access_context, config, user=user)
            async with opened as graph:
                built = True
                yield graph
        except GraphNotFoundError as error:
            raise not_found(str(error)) from error
        except ServiceError:
            raise
        except Exception as error:
            if built:
                raise
            # The project's factory raised: its error, named, is the caller's answer.
            raise refused(
                f"graph {graph_id} could not be built: {type(error).__name__}: {error}"
            ) from error

    async def GetThreadState(
        self, request: runner_pb2.GetThreadStateRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        if not request.graph_id:
            return runner_pb2.JsonReply(json=codec.dumps(EMPTY_STATE))
        config = checkpoint_config(request)
        if request.checkpoint_id and await self.graphs.checkpointer.aget_tuple(config) is None:
            raise not_found(f"Checkpoint {request.checkpoint_id} not found on this thread.")
        async with self._graph(request.graph_id, "threads.read", context) as graph:
            try:
                snapshot = await graph.aget_state(config, subgraphs=request.subgraphs)
            except ValueError as error:
                # A stored input the graph refused (a message of an unknown role): the
                # state cannot be built. LangGraph Platform answers 400 with the reason.
                raise refused(str(error)) from error
        return runner_pb2.JsonReply(json=codec.dumps(snapshot_to_dict(snapshot)))

    async def UpdateThreadState(
        self, request: runner_pb2.UpdateThreadStateRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        config = checkpoint_config(request)
        try:
            async with self._graph(request.graph_id, "threads.update", context) as graph:
                written = await graph.aupdate_state(
                    config, codec.loads(request.values_json, None), as_node=request.as_node or None
                )
                state = snapshot_to_dict(await graph.aget_state(written))
        except (InvalidUpdateError, ValueError) as error:
            raise refused(str(error)) from error  # 400 "Node x does not exist", as the platform
        except TypeError as error:
            raise refused(values_refused(error)) from error
        await self._after_write(request.thread_id, state)
        return runner_pb2.JsonReply(json=codec.dumps(update_reply(written)))

    async def BulkUpdateThreadState(
        self, request: runner_pb2.BulkUpdateThreadStateRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        config = state_config(request.thread_id)
        config["configurable"]["checkpoint_ns"] = ""
        updates = superstep_updates(codec.loads(request.supersteps_json, []))
        try:
            async with self._graph(request.graph_id, "threads.update", context) as graph:
                written = await graph.abulk_update_state(config, updates)
                state = snapshot_to_dict(await graph.aget_state(written))
        except (InvalidUpdateError, ValueError) as error:
            raise refused(str(error)) from error
        except TypeError as error:
            raise refused(values_refused(error)) from error
        await self._after_write(request.thread_id, state)
        return runner_pb2.JsonReply(json=codec.dumps(update_reply(written)))

    async def _after_write(self, thread_id: str, state: dict[str, Any]) -> None:
        """As LangGraph Platform does after update_state: the thread's record takes the
        new state (values, interrupts, status), and its streams hear of it
        (`state_update`). The state is written already: a peer away costs only these."""
        try:
            await self.peers.admission.RecordThreadState(
                thread_record(thread_id, state), timeout=self.peers.rpc_timeout
            )
        except grpc.aio.AioRpcError as error:
            log.warning("thread %s: new state not recorded on the thread: %s", thread_id, error)
        event = journal_pb2.RunEvent(
            event="state_update", data=codec.dumps({"state": state, "thread_id": thread_id})
        )
        try:
            await self.peers.journal.Append(
                journal_pb2.AppendRequest(run_id=codec.thread_log_id(thread_id), events=[event]),
                timeout=self.peers.rpc_timeout,
            )
        except grpc.aio.AioRpcError as error:
            log.warning("thread %s: state update not told to its streams: %s", thread_id, error)

    async def DeleteThreadState(
        self, request: runner_pb2.DeleteThreadStateRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        # The id names a directory below: only a UUID may (no `..`, no `/`).
        if not codec.is_uuid(request.thread_id):
            raise invalid(f"thread_id '{request.thread_id}' is not a UUID.")
        # The workspace first: when its files cannot go, nothing else of the thread does.
        await remove_workspace_off_loop(
            self.workspaces, self.workspace_io_seconds, request.thread_id
        )
        await self.graphs.checkpointer.adelete_thread(request.thread_id)
        await self.store.tool_calls.forget_thread(request.thread_id)
        # The thread's own log (its state updates) goes with its state.
        thread_log = codec.thread_log_id(request.thread_id)
        await self.peers.journal.Forget(journal_pb2.ForgetRequest(run_ids=[thread_log]))
        return runner_pb2.JsonReply(json=b"{}")

    async def PruneThreadState(
        self, request: runner_pb2.PruneThreadStateRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        await self.graphs.checkpointer.aprune([request.thread_id], strategy="keep_latest")
        return runner_pb2.JsonReply(json=b"{}")

    async def CopyThreadState(
        self, request: runner_pb2.CopyThreadStateRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        await self.graphs.checkpointer.acopy_thread(
            request.source_thread_id, request.target_thread_id
        )
        return runner_pb2.JsonReply(json=b"{}")

    # ---- the long-term store -------------------------------------------------------

    def _store(self, context: Any) -> BaseStore:
        """The caller's own namespaces of the store (see owned_store.py)."""
        caller = caller_of(context)
        admin = caller is not None and caller.is_admin and not caller.by_project_auth
        return store_of(self.graphs.store, acting_user(context), self.store_access, admin=admin)

    async def StorePut(
        self, request: runner_pb2.StorePutRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        value = codec.loads(request.value_json, None)
        if not isinstance(value, dict):
            raise invalid("value must be a JSON object.")
        refuse_stored_secrets(value)  # here, where the store is: no request path skips it
        key = store_key(request.item)
        store = self._store(context)
        index = put_index(request.index_json)
        if index is not None and index is not False and not self.semantic:
            raise invalid("index: semantic search is not configured (store.index).")
        ttl = request.ttl_minutes if request.HasField("ttl_minutes") else NOT_PROVIDED
        if ttl is not NOT_PROVIDED and store.ttl_config is None:
            raise invalid("ttl: item expiry is not configured (store.ttl).")
        await store.aput(tuple(request.item.namespace), key, value, index=index, ttl=ttl)
        return runner_pb2.JsonReply(json=b"{}")

    async def StoreGet(
        self, request: runner_pb2.StoreKey, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        item = await self._store(context).aget(
            tuple(request.namespace),
            store_key(request),
            refresh_ttl=request.refresh_ttl if request.HasField("refresh_ttl") else None,
        )
        # A missing item is an answer, not an error: LangGraph Platform returns `null`.
        found = None if item is None else item_to_dict(item)
        return runner_pb2.JsonReply(json=codec.dumps(found))

    async def StoreDelete(
        self, request: runner_pb2.StoreKey, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        await self._store(context).adelete(tuple(request.namespace), store_key(request))
        return runner_pb2.JsonReply(json=b"{}")

    async def StoreSearch(
        self, request: runner_pb2.StoreSearchRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        if request.query and not self.semantic:
            raise invalid("query: semantic search is not configured (store.index).")
        items = await self._store(context).asearch(
            tuple(request.namespace_prefix),
            query=request.query or None,
            filter=codec.loads(request.filter_json, None),
            limit=request.limit or 10,
            offset=request.offset,
            refresh_ttl=request.refresh_ttl if request.HasField("refresh_ttl") else None,
        )
        return runner_pb2.JsonReply(json=codec.dumps({"items": [item_to_dict(i) for i in items]}))

    async def StoreListNamespaces(
        self, request: runner_pb2.StoreListNamespacesRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        namespaces = await self._store(context).alist_namespaces(
            prefix=tuple(request.prefix) or None,
            suffix=tuple(request.suffix) or None,
            max_depth=request.max_depth or None,
            limit=request.limit or 100,
            offset=request.offset,
        )
        return runner_pb2.JsonReply(json=codec.dumps({"namespaces": [list(n) for n in namespaces]}))

    # ---- the caller's memory (agent/memory.py) ------------------------------------------

    async def ListMemory(
        self, request: runner_pb2.ListMemoryRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.MemoryFacts:
        facts = await memory.recall(self.graphs.store, acting_user(context), memory.LIST_MAX)
        return runner_pb2.MemoryFacts(facts=[memory_fact_proto(f) for f in facts])

    async def PutMemory(
        self, request: runner_pb2.PutMemoryRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.MemoryFact:
        try:
            fact = await memory.put_fact(
                self.graphs.store, acting_user(context), request.fact, request.fact_id
            )
        except KeyError as error:
            raise not_found(f"Fact {request.fact_id} not found.") from error
        return memory_fact_proto(fact)

    async def DeleteMemory(
        self, request: runner_pb2.DeleteMemoryRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.DeleteMemoryResponse:
        try:
            await memory.delete_fact(self.graphs.store, acting_user(context), request.fact_id)
        except KeyError as error:
            raise not_found(f"Fact {request.fact_id} not found.") from error
        return runner_pb2.DeleteMemoryResponse()

    async def GetThreadHistory(
        self, request: runner_pb2.GetThreadHistoryRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        if not request.graph_id:
            return runner_pb2.JsonReply(json=b"[]")
        before = request.before
        async with self._graph(request.graph_id, "threads.read", context) as graph:
            states = [
                snapshot_to_dict(snapshot)
                async for snapshot in graph.aget_state_history(
                    checkpoint_config(request),
                    filter=codec.loads(request.filter_json, None),
                    before={"configurable": {"checkpoint_id": before}} if before else None,
                    limit=request.limit or 10,
                )
            ]
        return runner_pb2.JsonReply(json=codec.dumps(states))

    async def GetStats(
        self, request: runner_pb2.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        return runner_pb2.JsonReply(json=codec.dumps(STATS.as_dict()))

    async def GetGraph(
        self, request: runner_pb2.GetGraphRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        async with self._graph(
            request.graph_id, "assistants.read", context, request.config_json
        ) as graph:
            drawable = await drawing_of(graph, xray_of(request.xray, request.xray_depth))
        return runner_pb2.JsonReply(json=codec.dumps(drawable))

    async def GetSchemas(
        self, request: runner_pb2.GetSchemasRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        async with self._graph(
            request.graph_id, "assistants.read", context, request.config_json
        ) as graph:
            schemas = {"graph_id": request.graph_id, **schemas_of(graph)}
        return runner_pb2.JsonReply(json=codec.dumps(schemas))

    async def GetSubgraphs(
        self, request: runner_pb2.GetSubgraphsRequest, context: grpc.aio.ServicerContext
    ) -> runner_pb2.JsonReply:
        async with self._graph(
            request.graph_id, "assistants.read", context, request.config_json
        ) as graph:
            found = await subgraph_schemas(graph, request.namespace or None, request.recurse)
        return runner_pb2.JsonReply(json=codec.dumps(found))


def memory_fact_proto(fact: memory.Fact) -> runner_pb2.MemoryFact:
    return runner_pb2.MemoryFact(
        fact_id=fact.fact_id,
        fact=fact.fact,
        thread_id=fact.thread_id,
        run_id=fact.run_id,
        created_at=fact.created_at,
        updated_at=fact.updated_at,
    )


async def main() -> None:
    settings = get_settings()
    configure_logging("runner")
    os.nice(settings.runner_nice)  # see the setting; 0 changes nothing
    prepare_project(settings.project())
    register(StatsCollector("waybill_runner", STATS, {}))
    install_node_threads(settings.runner_node_threads)
    settings.prices()  # a bad price table stops the runner here, not at each run's end
    store = RunnerStore(service_engine(settings, settings.checkpoint_sqlalchemy_url()))
    await check_schema(store)  # `waybill migrate` upgrades it, once per deploy
    async with (
        open_checkpointer(settings, setup=False) as checkpointer,
        open_store(settings, setup=False) as long_term,
    ):
        # Expired items are deleted every store.ttl.sweep_interval_minutes (none without ttl).
        await long_term.start_ttl_sweeper()
        graphs = GraphRegistry(settings.graph_specs(), checkpointer, long_term)
        graphs.load_all()
        open_mcp_toolbox(settings)
        # The project's `http.app` lifespan, as on LangGraph Platform's workers: what it
        # opens (a client, a pool) is there for the graphs, until the runs stopped.
        async with runner_lifespan(settings.project()):
            work_health = WorkHealth()
            channels = PeerChannels(settings)
            worker = Worker(
                graphs,
                connect_peers(channels),
                store,
                slots=settings.runner_slots,
                settings=settings,
                work_health=work_health,
            )
            work = asyncio.create_task(worker.run_forever(), name="work-stream")
            servicer = RunnerServicer(graphs, store, worker.peers, settings)

            async def stop() -> None:
                await worker.stop(settings.shutdown_grace_seconds)
                work.cancel()
                await close_mcp_toolbox()  # the MCP servers' connections (stdio: their processes)
                await long_term.stop_ttl_sweeper(settings.shutdown_grace_seconds)

            await serve(
                "Runner",
                settings.runner_addr,
                lambda server: runner_pb2_grpc.add_RunnerServicer_to_server(servicer, server),
                on_stop=stop,
                grace_seconds=settings.shutdown_grace_seconds,
                on_serving=work_health.attach,
            )
            # After the server stopped: calls served in the grace may still use them.
            await channels.close()


def values_refused(error: TypeError) -> str:
    """A channel's reducer refused the update's values (a number added to a list): the
    client's input, so a 400 (the platform answers 500); nothing is written."""
    return f"values: the graph's channels refused them: {error}"


if __name__ == "__main__":
    run_service(main)
