"""A graph whose state has a `DeltaChannel` (LangGraph 1.2) through the thread
operations that delete or copy checkpoints: `keep_latest` prune, rollback, copy,
a fork from an earlier checkpoint, and history, on SQLite and Postgres (issue 39).

Such a channel's value is stored only every `snapshot_frequency` updates; a
checkpoint in between holds none, and reading it replays its ancestors' writes
back to the nearest that holds the value. Every expected value here is what
`langgraph dev` 0.16.7 (langgraph 1.2.24) answers for the same requests, but
`keep_latest`, which its in-memory runtime refuses (422): there, the state after
the prune is the state before it."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient

from tests.support.stacks import eventually, stack_in_mode
from waybill.common.launch import Stack

GRAPHS_PY = """
import asyncio
from typing import Annotated

from langgraph.channels import DeltaChannel
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


def extend(items: list[str], writes: list[list[str]]) -> list[str]:
    return [*items, *(item for write in writes for item in write)]


class State(TypedDict, total=False):
    items: Annotated[list[str], DeltaChannel(extend)]
    pause: float


async def first(state: State) -> dict:
    await asyncio.sleep(state.get("pause", 0))
    return {"items": [f"first:{len(state['items'])}"]}


def second(state: State) -> dict:
    return {"items": [f"second:{len(state['items'])}"]}


builder = StateGraph(State)
builder.add_node("first", first)
builder.add_node("second", second)
builder.add_edge(START, "first")
builder.add_edge("first", "second")
builder.add_edge("second", END)
deltas = builder.compile()
"""

ONE = ["one", "first:1", "second:2"]
TWO = [*ONE, "two", "first:4", "second:5"]
# The thread's history after the runs "one" and "two", newest first: (source, step, items).
HISTORY = [
    ("loop", 6, TWO),
    ("loop", 5, TWO[:-1]),
    ("loop", 4, TWO[:-2]),
    ("input", 3, ONE),
    ("loop", 2, ONE),
    ("loop", 1, ONE[:-1]),
    ("loop", 0, ONE[:-2]),
    ("input", -1, []),
]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("delta-project")
    (root / "graphs.py").write_text(textwrap.dedent(GRAPHS_PY))
    manifest = root / "langgraph.json"
    manifest.write_text(json.dumps({"graphs": {"deltas": "./graphs.py:deltas"}}))
    data_dir = tmp_path_factory.mktemp(f"stack-delta-{request.param}")
    with stack_in_mode(request.param, data_dir, WAYBILL_GRAPHS=str(manifest)) as running:
        yield running


async def two_runs(client: LangGraphClient) -> str:
    """A thread after the runs "one" and "two"."""
    thread_id = (await client.threads.create())["thread_id"]
    for word in ("one", "two"):
        await client.runs.wait(thread_id, "deltas", input={"items": [word]})
    return thread_id


async def items(client: LangGraphClient, thread_id: str) -> list[str]:
    return (await client.threads.get_state(thread_id))["values"]["items"]


async def history(client: LangGraphClient, thread_id: str) -> list[tuple[str, int, list[str]]]:
    found = await client.threads.get_history(thread_id, limit=50)
    return [
        (state["metadata"]["source"], state["metadata"]["step"], state["values"].get("items"))
        for state in found
    ]


async def add(client: LangGraphClient, thread_id: str, word: str, **run: Any) -> list[str]:
    await client.runs.wait(thread_id, "deltas", input={"items": [word]}, **run)
    return await items(client, thread_id)


async def test_history_shows_each_checkpoints_whole_value(client: LangGraphClient) -> None:
    thread_id = await two_runs(client)
    assert await items(client, thread_id) == TWO
    assert await history(client, thread_id) == HISTORY


async def test_keep_latest_keeps_what_the_latest_state_is_read_from(
    client: LangGraphClient,
) -> None:
    thread_id = await two_runs(client)
    await client.threads.prune([thread_id], strategy="keep_latest")

    assert await items(client, thread_id) == TWO
    # The newest checkpoint first, whole; the ancestors its deltas replay stay too.
    assert (await history(client, thread_id))[0] == HISTORY[0]
    assert await add(client, thread_id, "three") == [*TWO, "three", "first:7", "second:8"]


async def test_a_copy_reads_and_runs_as_its_source(client: LangGraphClient) -> None:
    source = await two_runs(client)
    copy = (await client.threads.copy(source))["thread_id"]

    assert await items(client, copy) == TWO
    assert await history(client, copy) == HISTORY
    assert await add(client, copy, "on-copy") == [*TWO, "on-copy", "first:7", "second:8"]
    assert await items(client, source) == TWO


async def test_a_run_from_an_earlier_checkpoint_forks_from_its_value(
    client: LangGraphClient,
) -> None:
    thread_id = await two_runs(client)
    [after_one] = [
        state
        for state in await client.threads.get_history(thread_id, limit=50)
        if state["metadata"]["step"] == 2
    ]
    checkpoint_id = after_one["checkpoint"]["checkpoint_id"]

    forked = await add(client, thread_id, "fork", checkpoint_id=checkpoint_id)

    assert forked == [*ONE, "fork", "first:4", "second:5"]
    assert [values for _, _, values in await history(client, thread_id)] == [
        forked,
        forked[:-1],
        forked[:-2],
        ONE,
        *[values for _, _, values in HISTORY],
    ]


async def test_an_update_at_an_earlier_checkpoint_forks_from_its_value(
    client: LangGraphClient,
) -> None:
    thread_id = await two_runs(client)
    [after_one] = [
        state
        for state in await client.threads.get_history(thread_id, limit=50)
        if state["metadata"]["step"] == 2
    ]
    await client.threads.update_state(
        thread_id, {"items": ["updated"]}, checkpoint_id=after_one["checkpoint"]["checkpoint_id"]
    )

    assert await items(client, thread_id) == [*ONE, "updated"]
    after = await add(client, thread_id, "after")
    assert after == [*ONE, "updated", "after", "first:5", "second:6"]


async def started_slowly(client: LangGraphClient, thread_id: str) -> str:
    """A run "slow" on the thread, its input checkpointed, its first node asleep."""
    slow = await client.runs.create(thread_id, "deltas", input={"items": ["slow"], "pause": 30})

    async def checkpointed() -> bool:
        return (await items(client, thread_id))[-1:] == ["slow"]

    await eventually(checkpointed, "the slow run's first checkpoint")
    return slow["run_id"]


async def test_a_rollback_leaves_the_state_the_run_found(client: LangGraphClient) -> None:
    thread_id = await two_runs(client)
    await started_slowly(client, thread_id)

    after = await add(client, thread_id, "three", multitask_strategy="rollback")

    assert after == [*TWO, "three", "first:7", "second:8"]
    assert [values for _, _, values in await history(client, thread_id)] == [
        after,
        after[:-1],
        after[:-2],
        TWO,
        *[values for _, _, values in HISTORY],
    ]


async def test_a_cancel_with_rollback_leaves_the_state_the_run_found(
    client: LangGraphClient,
) -> None:
    thread_id = await two_runs(client)
    run_id = await started_slowly(client, thread_id)

    await client.runs.cancel(thread_id, run_id, wait=True, action="rollback")

    assert await items(client, thread_id) == TWO
    assert await history(client, thread_id) == HISTORY
    assert await add(client, thread_id, "four") == [*TWO, "four", "first:7", "second:8"]
