"""The runner's checkpointer does LangGraph's own thread operations (`adelete_for_runs`,
`acopy_thread`, `aprune`) on real SQLite and Postgres databases, with checkpoints
a real graph wrote: seen only through the saver's public reads."""

from __future__ import annotations

import operator
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels import DeltaChannel
from langgraph.graph import END, START, StateGraph

from tests.support.stacks import fresh_postgres_database
from waybill.common.settings import Settings
from waybill.services.runner.persistence.backends import open_checkpointer
from waybill.services.runner.schema import upgrade


class Items(TypedDict):
    items: Annotated[list[str], operator.add]


def extend(items: list[str], writes: list[list[str]]) -> list[str]:
    return [*items, *(item for write in writes for item in write)]


class DeltaItems(TypedDict):
    # A snapshot of the value every 4th update; the checkpoints between hold none.
    items: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=4)]


def two_steps(saver: Any, state: Any = Items) -> Any:
    graph = StateGraph(state)
    graph.add_node("first", lambda state: {"items": ["first"]})
    graph.add_node("second", lambda state: {"items": ["second"]})
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    graph.add_edge("second", END)
    return graph.compile(checkpointer=saver)


@pytest.fixture(params=["sqlite", "postgres"])
async def saver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """The runner's checkpointer on its migrated database (fence trigger, run index)."""
    if request.param == "postgres":
        with fresh_postgres_database() as url:
            async for opened in _migrated(Settings(data_dir=tmp_path, database_url=url)):
                yield opened
    else:
        async for opened in _migrated(Settings(data_dir=tmp_path)):
            yield opened


async def _migrated(settings: Settings) -> AsyncIterator[Any]:
    await upgrade(settings)
    async with open_checkpointer(settings, setup=False) as opened:
        yield opened


def thread(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


async def run(graph: Any, thread_id: str, item: str) -> str:
    """One run on the thread, its checkpoints stamped with its id (as the runner does)."""
    run_id = str(uuid.uuid4())
    config = {**thread(thread_id), "metadata": {"run_id": run_id}}
    await graph.ainvoke({"items": [item]}, config)
    return run_id


async def checkpoints(saver: Any, thread_id: str) -> list[Any]:
    return [found async for found in saver.alist(thread(thread_id))]


async def test_a_rollback_deletes_the_runs_checkpoints_and_their_writes(saver: Any) -> None:
    graph = two_steps(saver)
    thread_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    kept = await run(graph, thread_id, "kept")
    rolled_back = await run(graph, thread_id, "rolled back")
    elsewhere = await run(graph, other, "elsewhere")
    [gone, *_] = await checkpoints(saver, thread_id)
    assert gone.metadata["run_id"] == rolled_back
    # Pending writes on a checkpoint of each run.
    [*_, first_kept] = await checkpoints(saver, thread_id)
    await saver.aput_writes(first_kept.config, [("items", ["pending"])], "task-kept")
    await saver.aput_writes(gone.config, [("items", ["pending"])], "task-gone")
    written = await saver.aget_tuple(gone.config)
    assert written is not None and ("task-gone", "items", ["pending"]) in written.pending_writes

    await saver.adelete_for_runs([rolled_back])

    left = await checkpoints(saver, thread_id)
    assert {found.metadata["run_id"] for found in left} == {kept}
    assert (await graph.aget_state(thread(thread_id))).values == {
        "items": ["kept", "first", "second"]
    }
    [*_, first] = left
    assert ("task-kept", "items", ["pending"]) in first.pending_writes
    # The run's checkpoint, written again, finds none of its old writes.
    await saver.aput(gone.config, gone.checkpoint, gone.metadata, {})
    again = await saver.aget_tuple(gone.config)
    assert again is not None and again.pending_writes == []
    # Other threads' runs are not touched.
    assert {found.metadata["run_id"] for found in await checkpoints(saver, other)} == {elsewhere}


async def test_a_copy_has_every_checkpoint_with_its_values_and_writes(saver: Any) -> None:
    graph = two_steps(saver)
    source, target = str(uuid.uuid4()), str(uuid.uuid4())
    await run(graph, source, "one")
    await run(graph, source, "two")
    [latest, *_] = await checkpoints(saver, source)
    await saver.aput_writes(latest.config, [("items", ["pending"])], "task")

    await saver.acopy_thread(source, target)

    def shape(found: Any) -> tuple[Any, ...]:
        parent = (found.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        ids = found.config["configurable"]
        return (ids["checkpoint_ns"], ids["checkpoint_id"], parent, found.metadata)

    copied = await checkpoints(saver, target)
    assert [shape(found) for found in copied] == [
        shape(found) for found in await checkpoints(saver, source)
    ]
    assert [found.checkpoint["channel_values"] for found in copied] == [
        found.checkpoint["channel_values"] for found in await checkpoints(saver, source)
    ]
    assert copied[0].pending_writes == latest.pending_writes + [("task", "items", ["pending"])]
    # The copy goes on by itself; the source stays as it was.
    await saver.adelete_for_runs([])  # nothing named: nothing deleted
    await run(graph, target, "three")
    assert (await graph.aget_state(thread(target))).values["items"][-3:] == [
        "three",
        "first",
        "second",
    ]
    assert len(await checkpoints(saver, source)) == len(copied)


async def test_keep_latest_keeps_the_newest_checkpoint_and_its_state(saver: Any) -> None:
    graph = two_steps(saver)
    thread_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    await run(graph, thread_id, "one")
    await run(graph, thread_id, "two")
    await run(graph, other, "untouched")
    before = await graph.aget_state(thread(thread_id))
    count_elsewhere = len(await checkpoints(saver, other))

    await saver.aprune([thread_id], strategy="keep_latest")

    [kept] = await checkpoints(saver, thread_id)
    assert (
        kept.config["configurable"]["checkpoint_id"]
        == (before.config["configurable"]["checkpoint_id"])
    )
    assert kept.parent_config == before.parent_config  # the parent link stays, as the API says
    assert (await graph.aget_state(thread(thread_id))).values == before.values
    assert len(await checkpoints(saver, other)) == count_elsewhere
    await saver.aprune([thread_id], strategy="delete")
    assert await checkpoints(saver, thread_id) == []
    with pytest.raises(ValueError):
        await saver.aprune([other], strategy="everything")


async def test_keep_latest_keeps_the_ancestors_a_delta_channel_is_read_from(saver: Any) -> None:
    graph = two_steps(saver, DeltaItems)
    thread_id = str(uuid.uuid4())
    for item in ("one", "two", "three"):
        await run(graph, thread_id, item)
    before = await graph.aget_state(thread(thread_id))
    every = await checkpoints(saver, thread_id)

    await saver.aprune([thread_id], strategy="keep_latest")

    kept = await checkpoints(saver, thread_id)
    assert (await graph.aget_state(thread(thread_id))).values == before.values
    assert before.values["items"] == [
        step for item in ("one", "two", "three") for step in (item, "first", "second")
    ]
    # The newest, then its parents back to the nearest that holds the value: no more.
    assert 1 < len(kept) < len(every)
    assert kept[0].config == before.config
    for child, parent in zip(kept, kept[1:], strict=False):
        assert (
            child.parent_config["configurable"]["checkpoint_id"]
            == (parent.config["configurable"]["checkpoint_id"])
        )
    assert [found for found in kept if "items" in found.checkpoint["channel_values"]] == kept[-1:]
    await run(graph, thread_id, "four")
    after = await graph.aget_state(thread(thread_id))
    assert after.values["items"] == [*before.values["items"], "four", "first", "second"]
