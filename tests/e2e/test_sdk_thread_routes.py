"""What the SDK's thread, state and store methods get, compared with LangGraph Platform
(langgraph-api 0.16.7, measured with the same requests): missing store items,
unknown assistants, state at a checkpoint (a subgraph's too), history shapes,
prune, and the thread's own stream (`threads.join_stream`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError
from langgraph_sdk.schema import StreamPart

from tests.support.helpers import says

STATE_KEYS = {
    "values",
    "next",
    "tasks",
    "metadata",
    "created_at",
    "checkpoint",
    "parent_checkpoint",
    "interrupts",
    "checkpoint_id",
    "parent_checkpoint_id",
}
TASK_KEYS = {"id", "name", "path", "error", "interrupts", "checkpoint", "state", "result"}


async def nested_thread(client: LangGraphClient) -> tuple[str, list[dict[str, Any]]]:
    """A thread that ran `nested` (a `writer` subgraph, then `review`), and its history."""
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread_id, "nested", input={"notes": []})
    return thread_id, await client.threads.get_history(thread_id, limit=10)


def before_writer(history: list[dict[str, Any]]) -> dict[str, Any]:
    return next(state for state in history if state["next"] == ["writer"])


# ---- the store -------------------------------------------------------------------------


async def test_a_missing_store_item_is_none(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    namespace = ["parity", uuid.uuid4().hex]
    assert await client.store.get_item(namespace, key="nothing") is None
    raw = await http.get("/store/items", params={"namespace": ".".join(namespace), "key": "x"})
    assert (raw.status_code, raw.text) == (200, "null")


# ---- runs name their assistant -----------------------------------------------------------


async def test_a_run_for_a_uuid_naming_no_assistant_is_404(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    nobody = str(uuid.uuid4())
    with pytest.raises(NotFoundError):
        await client.runs.create(thread_id, nobody)
    with pytest.raises(httpx.HTTPStatusError) as waited:  # `wait` raises httpx's own
        await client.runs.wait(None, nobody)
    assert waited.value.response.status_code == 404
    for path in (f"/threads/{thread_id}/runs/wait", "/runs/stream", "/runs"):
        reply = await http.post(path, json={"assistant_id": nobody})
        assert reply.status_code == 404, (path, reply.text)
        assert nobody in reply.json()["detail"]
    # A name that is no graph is malformed, not missing: 422, as on the platform.
    with pytest.raises(UnprocessableEntityError):
        await client.runs.create(thread_id, "no_such_graph")
    assert await client.runs.list(thread_id) == []


# ---- state at a checkpoint -----------------------------------------------------------------


async def test_get_state_with_a_checkpoint_reads_that_checkpoint(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id, history = await nested_thread(client)
    then = before_writer(history)
    at = await client.threads.get_state(thread_id, checkpoint=then["checkpoint"])
    assert at == then
    by_id = await client.threads.get_state(thread_id, checkpoint_id=then["checkpoint_id"])
    assert by_id == then

    missing = {"checkpoint_id": str(uuid.uuid4())}
    with pytest.raises(NotFoundError):
        await client.threads.get_state(thread_id, checkpoint=missing)
    path = f"/threads/{thread_id}/state/checkpoint"
    assert (await http.post(path, json={})).status_code == 422
    bad_map = {"checkpoint": {"checkpoint_map": {"": 1}}}
    assert (await http.post(path, json=bad_map)).status_code == 422


async def test_a_fresh_thread_s_state_and_history(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    empty = {
        "values": {},
        "next": [],
        "tasks": [],
        "metadata": None,
        "created_at": None,
        "checkpoint": None,
        "parent_checkpoint": None,
        "interrupts": [],
        "checkpoint_id": None,
        "parent_checkpoint_id": None,
    }
    assert await client.threads.get_state(thread_id) == empty
    at_root = {"checkpoint": {"checkpoint_ns": ""}}
    assert (await http.post(f"/threads/{thread_id}/state/checkpoint", json=at_root)).json() == empty
    assert await client.threads.get_history(thread_id) == []


async def test_a_subgraph_s_state_and_history_by_its_checkpoint(client: LangGraphClient) -> None:
    """What Studio reads: a task's `checkpoint` names its subgraph, whose own states
    carry their namespace and their parents' checkpoints (`checkpoint_map`)."""
    thread_id, history = await nested_thread(client)
    writer_task = before_writer(history)["tasks"][0]
    assert set(writer_task) == TASK_KEYS
    assert writer_task["state"] is None
    namespace = f"writer:{writer_task['id']}"
    assert writer_task["checkpoint"] == {"thread_id": thread_id, "checkpoint_ns": namespace}

    inner = await client.threads.get_history(thread_id, checkpoint=writer_task["checkpoint"])
    assert [state["next"] for state in inner] == [[], ["draft"], ["__start__"]]
    assert inner[0]["values"] == {"notes": ["drafted"]}
    for state in inner:
        assert state["checkpoint"]["checkpoint_ns"] == namespace
        parents = state["checkpoint"]["checkpoint_map"]
        assert parents[namespace] == state["checkpoint_id"]
        assert set(parents) == {"", namespace}
    assert inner[-1]["parent_checkpoint"] is None

    latest = await client.threads.get_state(thread_id, checkpoint=writer_task["checkpoint"])
    assert latest["checkpoint"] == inner[0]["checkpoint"]
    assert latest["values"] == {"notes": ["drafted"]}

    # With subgraphs, the task's state comes inline and its `checkpoint` is null.
    nested = await client.threads.get_state(
        thread_id, checkpoint=before_writer(history)["checkpoint"], subgraphs=True
    )
    task = nested["tasks"][0]
    assert task["checkpoint"] is None
    assert task["state"]["checkpoint"] == inner[0]["checkpoint"]


async def test_history_shapes_limit_and_before(client: LangGraphClient) -> None:
    thread_id, history = await nested_thread(client)
    assert [state["next"] for state in history] == [[], ["review"], ["writer"], ["__start__"]]
    for state in history:
        assert set(state) == STATE_KEYS
        assert set(state["checkpoint"]) == {"checkpoint_id", "thread_id", "checkpoint_ns"}
        assert state["checkpoint"]["checkpoint_ns"] == ""
        assert state["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    assert history[0]["parent_checkpoint"] == history[1]["checkpoint"]
    assert history[-1]["parent_checkpoint"] is None
    assert history[-1]["parent_checkpoint_id"] is None

    two = await client.threads.get_history(thread_id, limit=2)
    assert two == history[:2]
    older = await client.threads.get_history(
        thread_id, limit=2, before={"configurable": history[0]["checkpoint"]}
    )
    assert older == history[1:3]


async def test_history_by_get_and_its_default_limit(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    """The platform serves history by GET too, and both forms return 1 state unless told."""
    thread_id, history = await nested_thread(client)
    path = f"/threads/{thread_id}/history"
    assert (await http.post(path, json={})).json() == history[:1]
    assert (await http.get(path)).json() == history[:1]
    three = await http.get(path, params={"limit": 3, "before": history[0]["checkpoint_id"]})
    assert three.json() == history[1:4]
    for bad in ({"limit": "x"}, {"limit": 0}):
        assert (await http.get(path, params=bad)).status_code == 422


# ---- update_state --------------------------------------------------------------------------


async def test_update_state_on_a_checkpoint_forks_from_it(client: LangGraphClient) -> None:
    thread_id, history = await nested_thread(client)
    then = before_writer(history)
    written = await client.threads.update_state(
        thread_id, {"notes": ["forked"]}, checkpoint=then["checkpoint"]
    )
    assert set(written) == {"checkpoint", "configurable", "checkpoint_id"}
    assert written["checkpoint"] == written["configurable"]
    assert written["checkpoint"]["checkpoint_ns"] == ""
    assert written["checkpoint"]["thread_id"] == thread_id

    state = await client.threads.get_state(thread_id)
    assert state["checkpoint_id"] == written["checkpoint_id"]
    assert state["parent_checkpoint_id"] == then["checkpoint_id"]  # on top of that one
    assert (state["values"], state["next"]) == ({"notes": ["forked"]}, ["writer"])

    first = history[-1]
    await client.threads.update_state(
        thread_id, {"notes": ["from the start"]}, checkpoint_id=first["checkpoint_id"]
    )
    state = await client.threads.get_state(thread_id)
    assert state["parent_checkpoint_id"] == first["checkpoint_id"]
    assert state["values"] == {"notes": ["from the start"]}


async def test_the_thread_record_follows_update_state(client: LangGraphClient) -> None:
    """As on the platform: a state written outside a run is the thread's values,
    interrupts and status (interrupted while nodes are still to run, else idle)."""
    thread_id = (await client.threads.create())["thread_id"]
    await client.runs.wait(thread_id, "approval", input={"action": "ship"})
    assert (await client.threads.get(thread_id))["status"] == "interrupted"

    await client.threads.update_state(thread_id, {"decision": "by hand"}, as_node="ask")
    thread = await client.threads.get(thread_id)
    assert (thread["status"], thread["values"], thread["interrupts"]) == (
        "idle",
        {"action": "ship", "decision": "by hand"},
        {},
    )
    await client.threads.update_state(thread_id, {"action": "again"}, as_node="__start__")
    thread = await client.threads.get(thread_id)
    assert (thread["status"], thread["values"]) == (
        "interrupted",
        {"action": "again", "decision": "by hand"},
    )
    found = await client.threads.search(values={"action": "again"}, ids=[thread_id])
    assert [found_thread["thread_id"] for found_thread in found] == [thread_id]

    steps = [{"updates": [{"values": {"notes": ["a"]}, "as_node": "writer"}]}]
    created = await client.threads.create(graph_id="nested", supersteps=steps)
    thread = await client.threads.get(created["thread_id"])
    assert (thread["status"], thread["values"]) == ("interrupted", {"notes": ["a"]})


async def test_update_state_of_a_thread_without_a_graph_is_400(client: LangGraphClient) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await client.threads.update_state(thread_id, {"notes": ["x"]})
    assert refused.value.response.status_code == 400
    assert "has no assigned graph ID" in refused.value.response.json()["detail"]


async def test_create_a_thread_from_supersteps(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    """The SDK's copy between servers: the state written step by step, as the
    platform writes it (an input step, then each superstep as one update)."""
    steps = [
        {"updates": [{"values": {"notes": ["a"]}, "as_node": "__input__"}]},
        {"updates": [{"values": {"notes": ["a", "w"]}, "as_node": "writer"}]},
    ]
    thread = await client.threads.create(graph_id="nested", supersteps=steps)
    assert thread["metadata"] == {"graph_id": "nested"}
    history = await client.threads.get_history(thread["thread_id"], limit=10)
    assert [
        (state["values"], state["next"], state["metadata"]["source"], state["metadata"]["step"])
        for state in history
    ] == [({"notes": ["a", "w"]}, ["review"], "update", 0), ({}, ["__start__"], "input", -1)]
    done = await client.runs.wait(thread["thread_id"], "nested", input=None)
    assert done == {"notes": ["a", "w", "reviewed"]}

    by_command = [
        {"updates": [{"values": None, "command": {"goto": "review"}, "as_node": "writer"}]}
    ]
    thread = await client.threads.create(graph_id="nested", supersteps=by_command)
    assert (await client.threads.get_state(thread["thread_id"]))["next"] == ["review"]

    bad_node = [{"updates": [{"values": {"notes": []}, "as_node": "nope"}]}]
    reply = await http.post(
        "/threads", json={"metadata": {"graph_id": "nested"}, "supersteps": bad_node}
    )
    assert (reply.status_code, reply.json()) == (400, {"detail": "Node nope does not exist"})
    no_graph = await http.post("/threads", json={"supersteps": steps})
    assert no_graph.status_code == 400


async def test_search_selects_fields_and_extracts_values(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    tag = {"suite": uuid.uuid4().hex}
    thread = await client.threads.create(metadata=tag)
    await client.runs.wait(thread["thread_id"], "nested", input={"notes": []})
    picked = await client.threads.search(metadata=tag, select=["thread_id", "status"])
    assert picked == [{"thread_id": thread["thread_id"], "status": "idle"}]
    paths = {
        "last": "values.notes[-1]",
        "first": "values.notes[0]",
        "graph": "metadata.graph_id",
        "nothing": "values.x.y",
    }
    found = await client.threads.search(metadata=tag, select=["thread_id"], extract=paths)
    assert found == [
        {
            "thread_id": thread["thread_id"],
            "extracted": {
                "last": "reviewed",
                "first": "drafted",
                "graph": "nested",
                "nothing": None,
            },
        }
    ]
    whole = await client.threads.search(metadata=tag, extract={"last": "values.notes[-1]"})
    assert whole[0]["values"] == {"notes": ["drafted", "reviewed"]}

    for bad in (
        {"select": ["bogus"]},
        {"extract": {"status": "values.x"}},  # a field's name
        {"extract": {"x": "thread_id"}},  # not a JSON column
        {"extract": {"a b": "values.x"}},
        {"extract": {f"k{i}": "values.x" for i in range(11)}},
    ):
        reply = await http.post("/threads/search", json={"metadata": tag, **bad})
        assert reply.status_code == 422, bad


# ---- prune -------------------------------------------------------------------------------


async def test_prune_deletes_the_threads_it_can(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    ran, _ = await nested_thread(client)
    empty = (await client.threads.create())["thread_id"]
    unknown = str(uuid.uuid4())
    assert await client.threads.prune([ran, empty, unknown]) == {"pruned_count": 2}
    for thread_id in (ran, empty):
        with pytest.raises(NotFoundError):
            await client.threads.get(thread_id)
    assert await client.threads.prune([]) == {"pruned_count": 0}

    kept = (await client.threads.create())["thread_id"]
    for body in (
        {"thread_ids": ["not-a-uuid"]},
        {"thread_ids": [kept], "strategy": "everything"},
        {},
    ):
        assert (await http.post("/threads/prune", json=body)).status_code == 422, body
    assert (await client.threads.get(kept))["thread_id"] == kept


async def test_prune_keep_latest_keeps_the_thread_and_its_newest_checkpoints(
    client: LangGraphClient,
) -> None:
    thread_id, _ = await nested_thread(client)
    await client.runs.wait(thread_id, "nested", input={"notes": ["again"]})
    before = await client.threads.get_state(thread_id)
    writer = next(
        state
        for state in await client.threads.get_history(thread_id, limit=20)
        if state["next"] == ["writer"]
    )["tasks"][0]["checkpoint"]

    assert await client.threads.prune([thread_id], strategy="keep_latest") == {"pruned_count": 1}
    assert await client.threads.get_history(thread_id, limit=20) == [before]
    assert await client.threads.get_state(thread_id) == before  # every value still readable
    assert len(await client.threads.get_history(thread_id, checkpoint=writer, limit=20)) == 1
    # and the thread goes on from there
    after = await client.runs.wait(thread_id, "nested", input={"notes": ["more"]})
    assert after == {"notes": ["more", "drafted", "reviewed"]}


# ---- the thread's stream -------------------------------------------------------------------


async def collected(parts: AsyncIterator[StreamPart], into: list[StreamPart]) -> None:
    async for part in parts:
        into.append(part)


async def until(condition: Any, seconds: float = 20.0) -> None:
    for _ in range(int(seconds * 20)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the stream never sent what was awaited")


def is_run_done(part: StreamPart) -> bool:
    return part.event == "metadata" and part.data.get("status") == "run_done"


async def test_join_stream_follows_each_run_of_the_thread(client: LangGraphClient) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    seen: list[StreamPart] = []
    following = asyncio.create_task(collected(await client.threads.join_stream(thread_id), seen))
    try:
        await asyncio.sleep(1.0)  # the stream is open and quiet: no run yet
        assert seen == []
        first = await client.runs.create(thread_id, "nested", input={"notes": []})
        await until(lambda: any(is_run_done(part) for part in seen))
        second = await client.runs.create(thread_id, "nested", input={"notes": []})
        await until(lambda: sum(is_run_done(part) for part in seen) == 2)
    finally:
        following.cancel()

    runs = [first["run_id"], second["run_id"]]
    starts = [part.data["run_id"] for part in seen if "attempt" in part.data]
    assert starts == runs
    assert [part.data["run_id"] for part in seen if is_run_done(part)] == runs
    values = [part.data for part in seen if part.event == "values"]
    assert values[-1] == {"notes": ["drafted", "reviewed"]}
    # Each event has an id to resume from; they grow within a run.
    ids = [part.id for part in seen]
    assert all(ids) and len(set(ids)) == len(ids)

    # Resuming after the first run's end replays the second run whole.
    first_done = next(part for part in seen if is_run_done(part))
    resumed: list[StreamPart] = []
    stream = await client.threads.join_stream(thread_id, last_event_id=first_done.id)
    replaying = asyncio.create_task(collected(stream, resumed))
    try:
        await until(lambda: any(is_run_done(part) for part in resumed))
    finally:
        replaying.cancel()
    second_part = seen[seen.index(first_done) + 1 :]
    assert [(p.event, p.data, p.id) for p in resumed] == [
        (p.event, p.data, p.id) for p in second_part
    ]


async def test_join_stream_during_a_run_sends_it_from_its_start(
    client: LangGraphClient,
) -> None:
    """As on the platform: a run not ended when the client joins comes whole, then the
    stream goes on (one that ended before it joined is not sent). The run waits 2 s
    to start, so that it is surely still to come when the client joins."""
    thread_id, _ = await nested_thread(client)
    run = await client.runs.create(
        thread_id, "lead_agent", input=says("/tokens 50"), after_seconds=2
    )
    seen: list[StreamPart] = []
    following = asyncio.create_task(collected(await client.threads.join_stream(thread_id), seen))
    try:
        joined_while = (await client.runs.get(thread_id, run["run_id"]))["status"]
        await until(lambda: any(is_run_done(part) for part in seen), seconds=30)
    finally:
        following.cancel()
    assert joined_while == "pending"
    assert seen[0].data == {"run_id": run["run_id"], "attempt": 1}
    assert seen[0].id is not None and seen[0].id.endswith("-0")
    assert is_run_done(seen[-1]) and seen[-1].data["run_id"] == run["run_id"]
    assert seen[-2].data["messages"][-1]["content"].startswith("t0 t1")


async def test_join_stream_modes_lifecycle_and_state_update(client: LangGraphClient) -> None:
    thread_id, _ = await nested_thread(client)
    lifecycle: list[StreamPart] = []
    updates: list[StreamPart] = []
    tasks = [
        asyncio.create_task(
            collected(await client.threads.join_stream(thread_id, stream_mode=mode), into)
        )
        for mode, into in (("lifecycle", lifecycle), ("state_update", updates))
    ]
    try:
        await asyncio.sleep(1.0)
        run = await client.runs.create(thread_id, "nested", input={"notes": []})
        await until(lambda: any(is_run_done(part) for part in lifecycle))
        await client.threads.update_state(thread_id, {"notes": ["by hand"]})
        await until(lambda: len(updates) == 1)
    finally:
        for task in tasks:
            task.cancel()
    assert [part.event for part in lifecycle] == ["metadata", "metadata"]
    assert lifecycle[0].data == {"run_id": run["run_id"], "attempt": 1}
    assert lifecycle[1].data == {"status": "run_done", "run_id": run["run_id"]}
    assert updates[0].event == "state_update"
    assert updates[0].data["thread_id"] == thread_id
    assert updates[0].data["state"]["values"] == {"notes": ["by hand"]}
    assert set(updates[0].data["state"]) == STATE_KEYS


async def test_join_stream_refuses_what_it_cannot_follow(http: httpx.AsyncClient) -> None:
    missing = await http.get(f"/threads/{uuid.uuid4()}/stream")
    assert missing.status_code == 404
    thread_id = (await http.post("/threads", json={})).json()["thread_id"]
    bad_mode = await http.get(f"/threads/{thread_id}/stream", params={"stream_mode": "all"})
    assert (bad_mode.status_code, bad_mode.json()) == (
        422,
        {"detail": "Invalid stream mode: all"},
    )
    bad_id = await http.get(f"/threads/{thread_id}/stream", headers={"Last-Event-ID": "x"})
    assert bad_id.status_code == 422
