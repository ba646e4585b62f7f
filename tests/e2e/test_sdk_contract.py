"""The langgraph-sdk contract: every public method of the pinned Python client,
called against a real Waybill stack, answers in the shape `langgraph_sdk.schema`
declares (as LangGraph Platform answers).

`CONTRACT` below is the documentation of what Waybill supports: one entry per SDK
method, the call it makes and the shape its answer must have. The list of methods
comes from the SDK itself, so a method added by an SDK upgrade fails the test until
it has an entry. The sync client has the same methods, so covering the async one
covers both.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from langgraph_sdk import get_client, get_sync_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.schema import (
    Assistant,
    AssistantVersion,
    Cron,
    GraphSchema,
    ListNamespaceResponse,
    Run,
    RunMetadataPayload,
    SearchItemsResponse,
    StreamPart,
    Thread,
    ThreadState,
)

from tests.support.helpers import slow
from tests.support.sdk_answers import (
    MODE_DATA,
    Answers,
    GetItemAnswers,
    GetStateAnswers,
    PlatformCron,
    PlatformRun,
    PruneAnswer,
    Streams,
    SubgraphSchema,
    ThreadStreamStarted,
    UpdateStateAnswers,
    run_stream,
)
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack

YEARLY = "0 9 1 1 *"  # far from the test's time: no cron fires during it
NOTE = {"owner": "contract", "text": "remember me"}  # the `memory` graph's input
STORE_NAMESPACE = ["contract", "notes"]


@dataclass
class World:
    """What the calls share, made once for the module: one thread with a finished
    run, one assistant, one cron, one store item, all tagged with `mark`."""

    client: LangGraphClient
    mark: dict[str, str]
    assistant_id: str
    thread_id: str
    run_id: str
    cron_id: str
    nested_assistant_id: str  # the system assistant of `nested`, a graph with a subgraph


# ---- small helpers the calls use -------------------------------------------------------


async def new_thread(w: World) -> str:
    return (await w.client.threads.create(metadata=w.mark))["thread_id"]


async def thread_with_a_run(w: World) -> tuple[str, str]:
    """A fresh thread, and a run of `memory` on it that has finished."""
    thread_id = await new_thread(w)
    run = await w.client.runs.create(thread_id, "memory", input=NOTE)
    await w.client.runs.join(thread_id, run["run_id"])
    return thread_id, run["run_id"]


async def long_run(w: World) -> tuple[str, str]:
    """A run that is still going when the next call comes: its tool waits 30 s (a
    cancel cuts it after the stack's short grace). Streaming 20,000 tokens, as it
    did, takes under 0.4 s: a loaded machine's cancel came after its end (404)."""
    thread_id = await new_thread(w)
    run = await w.client.runs.create(thread_id, "lead_agent", input=slow(30))
    return thread_id, run["run_id"]


async def collected(parts: AsyncIterator[StreamPart]) -> list[StreamPart]:
    return [part async for part in parts]


# ---- assistants ------------------------------------------------------------------------


async def create_assistant(w: World) -> Assistant:
    return await w.client.assistants.create(
        "memory", config={"configurable": {"tone": "dry"}}, metadata=w.mark, name="contract"
    )


async def delete_assistant(w: World) -> None:
    await w.client.assistants.delete((await create_assistant(w))["assistant_id"])


# ---- threads ---------------------------------------------------------------------------


async def delete_thread(w: World) -> None:
    await w.client.threads.delete(await new_thread(w))


async def prune_threads(w: World) -> dict[str, Any]:
    return await w.client.threads.prune([await new_thread(w)])


async def get_states(w: World) -> GetStateAnswers:
    threads = w.client.threads
    latest = await threads.get_state(w.thread_id)
    checkpoint_id = latest["checkpoint"]["checkpoint_id"]
    assert checkpoint_id is not None
    return {
        "latest": latest,
        "by_id": await threads.get_state(w.thread_id, checkpoint_id=checkpoint_id),
        "by_checkpoint": await threads.get_state(w.thread_id, checkpoint=latest["checkpoint"]),
    }


async def update_states(w: World) -> UpdateStateAnswers:
    thread_id, _ = await thread_with_a_run(w)
    threads = w.client.threads
    latest = await threads.update_state(thread_id, {"text": "edited"})
    on_checkpoint = await threads.update_state(
        thread_id, {"text": "edited again"}, checkpoint=latest["checkpoint"]
    )
    return {"latest": latest, "on_checkpoint": on_checkpoint}


async def join_thread_stream(w: World) -> list[StreamPart]:
    """Follow a thread's stream until a run on it sends its values: runs start on the
    thread one after another until the stream (connected at some point) sees one."""
    thread_id = await new_thread(w)

    async def until_values() -> list[StreamPart]:
        parts = []
        async for part in await w.client.threads.join_stream(thread_id):
            parts.append(part)
            if part.event == "values":
                return parts
        return parts

    follower = asyncio.create_task(until_values())
    for _ in range(20):
        if follower.done():
            break
        await w.client.runs.wait(thread_id, "memory", input=NOTE)
    return await asyncio.wait_for(follower, timeout=10)


async def thread_stream_session(w: World) -> ThreadStreamStarted:
    async with w.client.threads.stream(await new_thread(w), assistant_id="memory") as session:
        started = await session.run.start(input=NOTE)
        output = await session.output.with_timeout(30)
    return {"started": started, "output": output}


# ---- runs ------------------------------------------------------------------------------


async def create_run(w: World) -> Run:
    run = await w.client.runs.create(w.thread_id, "memory", input=NOTE)
    await w.client.runs.join(w.thread_id, run["run_id"])  # the shared thread left idle
    return run


async def join_run_stream(w: World) -> list[StreamPart]:
    thread_id = await new_thread(w)
    # Joining without Last-Event-ID follows live: start the run a second later, so
    # that the join is there before its first event.
    run = await w.client.runs.create(
        thread_id,
        "memory",
        input=NOTE,
        stream_mode=["values", "updates"],
        stream_resumable=True,
        after_seconds=1,
    )
    return await collected(
        w.client.runs.join_stream(thread_id, run["run_id"], stream_mode="values")
    )


async def cancel_run(w: World) -> None:
    thread_id, run_id = await long_run(w)
    await w.client.runs.cancel(thread_id, run_id, wait=True)


async def cancel_many_runs(w: World) -> None:
    thread_id, run_id = await long_run(w)
    await w.client.runs.cancel_many(thread_id=thread_id, run_ids=[run_id])
    await w.client.runs.join(thread_id, run_id)  # nothing left running behind the test


async def delete_run(w: World) -> None:
    await w.client.runs.delete(*await thread_with_a_run(w))


# ---- crons -----------------------------------------------------------------------------


async def create_cron(w: World) -> Cron:
    cron = await w.client.crons.create("memory", schedule=YEARLY, input=NOTE, metadata=w.mark)
    return cron  # type: ignore[return-value]  # the SDK annotates it Run; it is a Cron


async def create_cron_for_thread(w: World) -> Cron:
    cron = await w.client.crons.create_for_thread(
        w.thread_id, "memory", schedule=YEARLY, input=NOTE, metadata=w.mark
    )
    return cron  # type: ignore[return-value]  # as above


async def delete_cron(w: World) -> None:
    await w.client.crons.delete((await create_cron(w))["cron_id"])


# ---- store -----------------------------------------------------------------------------


async def get_items(w: World) -> GetItemAnswers:
    store = w.client.store
    return {
        "found": await store.get_item(STORE_NAMESPACE, "kept"),
        "missing": await store.get_item(STORE_NAMESPACE, "never-put"),  # type: ignore[typeddict-item]
    }


async def delete_item(w: World) -> None:
    await w.client.store.put_item(STORE_NAMESPACE, "doomed", {"n": 0})
    await w.client.store.delete_item(STORE_NAMESPACE, "doomed")


# ---- the raw HTTP client every sub-client goes through ---------------------------------


async def http_delete(w: World) -> None:
    await w.client.http.delete(f"/threads/{await new_thread(w)}")


async def http_stream(w: World) -> list[StreamPart]:
    body = {"assistant_id": "memory", "input": NOTE, "stream_mode": ["values"]}
    return await collected(
        w.client.http.stream(f"/threads/{w.thread_id}/runs/stream", "POST", json=body)
    )


# ---- the contract ----------------------------------------------------------------------

Call = Callable[[World], Awaitable[Any]]

CONTRACT: dict[str, tuple[Call, Answers | Streams]] = {
    # assistants
    "assistants.create": (create_assistant, Answers(Assistant)),
    "assistants.get": (lambda w: w.client.assistants.get(w.assistant_id), Answers(Assistant)),
    "assistants.update": (
        lambda w: w.client.assistants.update(w.assistant_id, metadata={"updated": "yes"}),
        Answers(Assistant),
    ),
    "assistants.delete": (delete_assistant, Answers(None)),
    "assistants.search": (
        lambda w: w.client.assistants.search(metadata=w.mark),
        Answers(list[Assistant]),
    ),
    "assistants.count": (lambda w: w.client.assistants.count(metadata=w.mark), Answers(int)),
    "assistants.get_versions": (
        lambda w: w.client.assistants.get_versions(w.assistant_id),
        Answers(list[AssistantVersion]),
    ),
    "assistants.set_latest": (
        lambda w: w.client.assistants.set_latest(w.assistant_id, 1),
        Answers(Assistant),
    ),
    "assistants.get_graph": (
        lambda w: w.client.assistants.get_graph(w.assistant_id),
        Answers(dict[str, list[dict[str, Any]]]),
    ),
    "assistants.get_schemas": (
        lambda w: w.client.assistants.get_schemas(w.assistant_id),
        Answers(GraphSchema),
    ),
    "assistants.get_subgraphs": (
        lambda w: w.client.assistants.get_subgraphs(w.nested_assistant_id),
        Answers(dict[str, SubgraphSchema]),
    ),
    # threads
    "threads.create": (lambda w: w.client.threads.create(metadata=w.mark), Answers(Thread)),
    "threads.get": (lambda w: w.client.threads.get(w.thread_id), Answers(Thread)),
    "threads.update": (
        lambda w: w.client.threads.update(w.thread_id, metadata={"updated": "yes"}),
        Answers(Thread),
    ),
    "threads.delete": (delete_thread, Answers(None)),
    "threads.search": (lambda w: w.client.threads.search(metadata=w.mark), Answers(list[Thread])),
    "threads.count": (lambda w: w.client.threads.count(metadata=w.mark), Answers(int)),
    # The SDK annotates copy as None; LangGraph Platform answers the new thread.
    "threads.copy": (lambda w: w.client.threads.copy(w.thread_id), Answers(Thread)),
    "threads.prune": (prune_threads, Answers(PruneAnswer)),
    "threads.get_state": (get_states, Answers(GetStateAnswers)),
    "threads.update_state": (update_states, Answers(UpdateStateAnswers)),
    "threads.get_history": (
        lambda w: w.client.threads.get_history(w.thread_id, limit=5),
        Answers(list[ThreadState]),
    ),
    "threads.join_stream": (
        join_thread_stream,
        Streams({"metadata": RunMetadataPayload, **MODE_DATA}, frozenset({"values"})),
    ),
    "threads.stream": (thread_stream_session, Answers(ThreadStreamStarted)),
    # runs
    "runs.create": (create_run, Answers(PlatformRun)),
    "runs.create_batch": (
        lambda w: w.client.runs.create_batch([{"assistant_id": "memory", "input": NOTE}]),
        Answers(list[PlatformRun]),
    ),
    "runs.wait": (
        lambda w: w.client.runs.wait(w.thread_id, "memory", input=NOTE),
        Answers(dict[str, Any]),
    ),
    "runs.stream": (
        lambda w: collected(
            w.client.runs.stream(
                w.thread_id, "memory", input=NOTE, stream_mode=["values", "updates"]
            )
        ),
        run_stream("values", "updates"),
    ),
    "runs.list": (lambda w: w.client.runs.list(w.thread_id), Answers(list[PlatformRun])),
    "runs.get": (lambda w: w.client.runs.get(w.thread_id, w.run_id), Answers(PlatformRun)),
    "runs.join": (lambda w: w.client.runs.join(w.thread_id, w.run_id), Answers(dict[str, Any])),
    "runs.join_stream": (
        join_run_stream,
        Streams({"metadata": RunMetadataPayload, "values": dict[str, Any]}, frozenset({"values"})),
    ),
    "runs.cancel": (cancel_run, Answers(None)),
    "runs.cancel_many": (cancel_many_runs, Answers(None)),
    "runs.delete": (delete_run, Answers(None)),
    # crons
    "crons.create": (create_cron, Answers(PlatformCron)),
    "crons.create_for_thread": (create_cron_for_thread, Answers(PlatformCron)),
    "crons.update": (
        lambda w: w.client.crons.update(w.cron_id, schedule="0 10 1 1 *"),
        Answers(PlatformCron),
    ),
    "crons.search": (lambda w: w.client.crons.search(metadata=w.mark), Answers(list[PlatformCron])),
    "crons.count": (lambda w: w.client.crons.count(metadata=w.mark), Answers(int)),
    "crons.delete": (delete_cron, Answers(None)),
    # store
    "store.put_item": (
        lambda w: w.client.store.put_item(STORE_NAMESPACE, "put", {"n": 1}),
        Answers(None),
    ),
    "store.get_item": (get_items, Answers(GetItemAnswers)),
    "store.delete_item": (delete_item, Answers(None)),
    "store.search_items": (
        lambda w: w.client.store.search_items(STORE_NAMESPACE),
        Answers(SearchItemsResponse),
    ),
    "store.list_namespaces": (
        lambda w: w.client.store.list_namespaces(prefix=["contract"]),
        Answers(ListNamespaceResponse),
    ),
    # http: the transport the sub-clients share, public too
    "http.get": (lambda w: w.client.http.get(f"/assistants/{w.assistant_id}"), Answers(Assistant)),
    "http.post": (lambda w: w.client.http.post("/threads", json={}), Answers(Thread)),
    "http.put": (
        lambda w: w.client.http.put(
            "/store/items", json={"namespace": STORE_NAMESPACE, "key": "raw", "value": {"n": 2}}
        ),
        Answers(None),
    ),
    "http.patch": (
        lambda w: w.client.http.patch(f"/threads/{w.thread_id}", json={"metadata": {"raw": "1"}}),
        Answers(Thread),
    ),
    "http.delete": (http_delete, Answers(None)),
    "http.stream": (http_stream, run_stream("values")),
    "http.request_reconnect": (
        lambda w: w.client.http.request_reconnect(
            f"/threads/{w.thread_id}/runs/wait",
            "POST",
            json={"assistant_id": "memory", "input": NOTE},
        ),
        Answers(dict[str, Any]),
    ),
}


# ---- the world, once for the module ----------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One SQLite stack is enough for the contract: the shapes do not depend on storage."""
    with stack_in_mode("sqlite", tmp_path_factory.mktemp("sdk-contract")) as running:
        yield running


@pytest.fixture(scope="module")
async def world(stack: Stack) -> AsyncIterator[World]:
    client = get_client(url=stack.url, timeout=30)
    mark = {"suite": f"contract-{uuid.uuid4().hex[:8]}"}
    assistant = await client.assistants.create("memory", metadata=mark, name="contract")
    thread = await client.threads.create(metadata=mark)
    run = await client.runs.create(thread["thread_id"], "memory", input=NOTE)
    await client.runs.join(thread["thread_id"], run["run_id"])
    cron = await client.crons.create("memory", schedule=YEARLY, input=NOTE, metadata=mark)
    await client.store.put_item(STORE_NAMESPACE, "kept", {"n": 0})
    [nested] = await client.assistants.search(graph_id="nested", metadata={"created_by": "system"})
    try:
        yield World(
            client=client,
            mark=mark,
            assistant_id=assistant["assistant_id"],
            thread_id=thread["thread_id"],
            run_id=run["run_id"],
            cron_id=cron["cron_id"],
            nested_assistant_id=nested["assistant_id"],
        )
    finally:
        await client.aclose()


def public_methods(client: object) -> set[str]:
    """`sub_client.method` for every public method of every sub-client of an SDK client."""
    return {
        f"{name}.{method}"
        for name, sub_client in vars(client).items()
        if not name.startswith("_")
        for method, _ in inspect.getmembers(type(sub_client), inspect.isfunction)
        if not method.startswith("_")
    }


# ---- the tests -------------------------------------------------------------------------


def test_every_public_sdk_method_has_an_entry() -> None:
    methods = public_methods(get_client(url="http://127.0.0.1:1"))
    assert methods - CONTRACT.keys() == set(), "SDK methods the contract does not call"
    assert CONTRACT.keys() - methods == set(), "entries for methods the SDK no longer has"


def test_the_sync_client_has_the_same_methods() -> None:
    sync_client = get_sync_client(url="http://127.0.0.1:1")
    async_client = get_client(url="http://127.0.0.1:1")
    assert public_methods(sync_client) == public_methods(async_client)


@pytest.mark.parametrize("method", sorted(CONTRACT))
async def test_the_method_answers_as_the_sdk_declares(world: World, method: str) -> None:
    call, expected = CONTRACT[method]
    answer = await call(world)
    assert expected.errors(answer) == [], f"{method} answered {answer!r}"
