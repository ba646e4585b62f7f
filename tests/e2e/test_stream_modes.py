"""Stream modes `tasks`, `checkpoints` and `debug`, `interrupt_after`, and
`durability`, streamed through the SDK as LangGraph Platform streams them (issue 39).

Every expected sequence and payload shape here is what `langgraph dev` 0.16.x
(langgraph-api 0.16.7, langgraph 1.2) sends for the same graphs and requests,
recorded side by side with Waybill; ids, timestamps and the run's metadata
values (which name the server) are left out."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient

from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack

GRAPHS_PY = """
import operator
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    n: int
    log: Annotated[list[str], operator.add]


def first(state: State) -> dict:
    return {"n": state.get("n", 0) + 1, "log": ["first"]}


def second(state: State) -> dict:
    return {"n": state["n"] * 10, "log": ["second"]}


def ask(state: State) -> dict:
    answer = interrupt({"question": "ok?"})
    return {"log": [f"answer:{answer}"]}


def build(last: str, node):
    builder = StateGraph(State)
    builder.add_node("first", first)
    builder.add_node(last, node)
    builder.add_edge(START, "first")
    builder.add_edge("first", last)
    builder.add_edge(last, END)
    return builder.compile()


two_nodes = build("second", second)
asking = build("ask", ask)
"""

TASK_START_KEYS = {"id", "name", "input", "triggers", "metadata"}
TASK_RESULT_KEYS = {"id", "name", "error", "result", "interrupts"}
CHECKPOINT_KEYS = {"config", "parent_config", "values", "metadata", "next", "tasks"}
CHECKPOINT_TASK_KEYS = {"id", "name", "interrupts", "state"}
DEBUG_KEYS = {"step", "timestamp", "type", "payload"}

# The two-node graph's checkpoints, from input {"n": 1}: (source, step, values, next).
TWO_NODE_CHECKPOINTS = [
    ("input", -1, {"log": []}, ["__start__"]),
    ("loop", 0, {"n": 1, "log": []}, ["first"]),
    ("loop", 1, {"n": 2, "log": ["first"]}, ["second"]),
    ("loop", 2, {"n": 20, "log": ["first", "second"]}, []),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("modes-project")
    (root / "graphs.py").write_text(textwrap.dedent(GRAPHS_PY))
    manifest = root / "langgraph.json"
    graphs = {"two_nodes": "./graphs.py:two_nodes", "asking": "./graphs.py:asking"}
    manifest.write_text(json.dumps({"graphs": graphs}))
    with stack_in_mode(
        "sqlite", tmp_path_factory.mktemp("stack-modes"), WAYBILL_GRAPHS=str(manifest)
    ) as running:
        yield running


async def streamed(
    client: LangGraphClient, graph: str, **run: Any
) -> tuple[str, list[tuple[str, Any]]]:
    """One run on a new thread, streamed to its end: the thread, and its events."""
    thread = await client.threads.create()
    events = [
        (part.event, part.data)
        async for part in client.runs.stream(thread["thread_id"], graph, input={"n": 1}, **run)
    ]
    return thread["thread_id"], events


def names(events: list[tuple[str, Any]]) -> list[str]:
    return [name for name, _ in events]


def assert_checkpoint(
    payload: dict[str, Any], expected: tuple[Any, ...], thread_id: str, saved: bool = True
) -> None:
    """A `checkpoints` payload (LangGraph's `CheckpointPayload`), as the reference
    sends it. Not `saved` (durability `exit`), no checkpoint has a parent."""
    source, step, values, next_nodes = expected
    assert set(payload) == CHECKPOINT_KEYS, payload.keys()
    assert payload["metadata"] == {"source": source, "step": step, "parents": {}}
    assert payload["values"] == values
    assert payload["next"] == next_nodes
    assert [task["name"] for task in payload["tasks"]] == next_nodes
    for task in payload["tasks"]:
        assert set(task) == CHECKPOINT_TASK_KEYS
        assert task["interrupts"] == [] and task["state"] is None
    configurable = payload["config"]["configurable"]
    assert configurable["thread_id"] == thread_id
    assert configurable["checkpoint_ns"] == "" and configurable["checkpoint_id"]
    # The run's own configurable is shown, Waybill's private entries are not
    # (the reference drops LangGraph's `__pregel_` ones the same way).
    for config in (payload["config"], payload["parent_config"]):
        if config is not None:
            assert not [key for key in config["configurable"] if key.startswith("__waybill")]
    if step == -1 or not saved:
        assert payload["parent_config"] is None
    else:
        assert payload["parent_config"]["configurable"]["checkpoint_id"]


async def test_tasks_mode_sends_each_tasks_start_then_its_result(client: LangGraphClient) -> None:
    _, events = await streamed(client, "two_nodes", stream_mode="tasks")
    assert names(events) == ["metadata", "tasks", "tasks", "tasks", "tasks"]
    started_first, ended_first, started_second, ended_second = (data for _, data in events[1:])
    for started in (started_first, started_second):
        assert set(started) == TASK_START_KEYS
        assert started["metadata"]["graph_id"] == "two_nodes"
    for ended in (ended_first, ended_second):
        assert set(ended) == TASK_RESULT_KEYS
        assert ended["error"] is None and ended["interrupts"] == []
    assert started_first["id"] == ended_first["id"] != started_second["id"] == ended_second["id"]
    assert (started_first["name"], started_first["input"]) == ("first", {"n": 1, "log": []})
    assert started_first["triggers"] == ["branch:to:first"]
    assert (ended_first["name"], ended_first["result"]) == ("first", {"n": 2, "log": ["first"]})
    assert started_second["name"] == "second"
    assert started_second["input"] == {"n": 2, "log": ["first"]}
    assert started_second["triggers"] == ["branch:to:second"]
    assert ended_second["result"] == {"n": 20, "log": ["second"]}


async def test_checkpoints_mode_sends_every_checkpoint_with_its_configs(
    client: LangGraphClient,
) -> None:
    thread_id, events = await streamed(client, "two_nodes", stream_mode="checkpoints")
    assert names(events) == ["metadata", *["checkpoints"] * 4]
    payloads = [data for _, data in events[1:]]
    for payload, expected in zip(payloads, TWO_NODE_CHECKPOINTS, strict=True):
        assert_checkpoint(payload, expected, thread_id)
    # Each checkpoint's parent is the one before it.
    for parent, child in zip(payloads, payloads[1:], strict=False):
        parent_id = parent["config"]["configurable"]["checkpoint_id"]
        assert child["parent_config"]["configurable"]["checkpoint_id"] == parent_id


async def test_debug_mode_sends_checkpoints_tasks_and_results_by_step(
    client: LangGraphClient,
) -> None:
    thread_id, events = await streamed(client, "two_nodes", stream_mode="debug")
    assert names(events) == ["metadata", *["debug"] * 8]
    chunks = [data for _, data in events[1:]]
    for chunk in chunks:
        assert set(chunk) == DEBUG_KEYS and isinstance(chunk["timestamp"], str)
    assert [(c["type"], c["step"]) for c in chunks] == [
        ("checkpoint", -1),
        ("checkpoint", 0),
        ("task", 1),
        ("task_result", 1),
        ("checkpoint", 1),
        ("task", 2),
        ("task_result", 2),
        ("checkpoint", 2),
    ]
    checkpoints = [c["payload"] for c in chunks if c["type"] == "checkpoint"]
    for payload, expected in zip(checkpoints, TWO_NODE_CHECKPOINTS, strict=True):
        # The reference's debug checkpoint: the `checkpoints` payload, and beside
        # its configs the references `checkpoint` and `parent_checkpoint`.
        assert set(payload) == CHECKPOINT_KEYS | {"checkpoint", "parent_checkpoint"}
        assert_checkpoint({k: payload[k] for k in CHECKPOINT_KEYS}, expected, thread_id)
        configurable = payload["config"]["configurable"]
        assert payload["checkpoint"] == {
            "checkpoint_id": configurable["checkpoint_id"],
            "thread_id": thread_id,
            "checkpoint_ns": "",
        }
        if payload["parent_config"] is None:
            assert payload["parent_checkpoint"] is None
        else:
            parent = payload["parent_config"]["configurable"]["checkpoint_id"]
            assert payload["parent_checkpoint"] == {
                "checkpoint_id": parent,
                "thread_id": thread_id,
                "checkpoint_ns": "",
            }
    tasks = [c["payload"] for c in chunks if c["type"] == "task"]
    results = [c["payload"] for c in chunks if c["type"] == "task_result"]
    assert [set(task) for task in tasks] == [TASK_START_KEYS] * 2
    assert [set(result) for result in results] == [TASK_RESULT_KEYS] * 2
    assert [task["name"] for task in tasks] == ["first", "second"]
    assert [result["result"] for result in results] == [
        {"n": 2, "log": ["first"]},
        {"n": 20, "log": ["second"]},
    ]


async def test_a_list_of_modes_interleaves_them_as_the_graph_runs(
    client: LangGraphClient,
) -> None:
    thread_id, events = await streamed(
        client, "two_nodes", stream_mode=["values", "updates", "tasks", "checkpoints"]
    )
    assert names(events) == [
        "metadata",
        "checkpoints",
        "values",
        "checkpoints",
        "tasks",
        "updates",
        "tasks",
        "values",
        "checkpoints",
        "tasks",
        "updates",
        "tasks",
        "values",
        "checkpoints",
    ]
    checkpoints = [data for name, data in events if name == "checkpoints"]
    for payload, expected in zip(checkpoints, TWO_NODE_CHECKPOINTS, strict=True):
        assert_checkpoint(payload, expected, thread_id)
    assert [data for name, data in events if name == "updates"] == [
        {"first": {"n": 2, "log": ["first"]}},
        {"second": {"n": 20, "log": ["second"]}},
    ]
    assert [set(data) for name, data in events if name == "tasks"] == [
        TASK_START_KEYS,
        TASK_RESULT_KEYS,
    ] * 2


async def test_interrupt_after_stops_after_the_node_with_an_empty_interrupt(
    client: LangGraphClient,
) -> None:
    thread_id, events = await streamed(
        client, "two_nodes", stream_mode=["values", "updates"], interrupt_after=["first"]
    )
    assert events[1:] == [
        ("values", {"n": 1, "log": []}),
        ("updates", {"first": {"n": 2, "log": ["first"]}}),
        ("values", {"n": 2, "log": ["first"]}),
        ("updates", {"__interrupt__": []}),
    ]
    state = await client.threads.get_state(thread_id)
    assert state["next"] == ["second"]
    assert state["values"] == {"n": 2, "log": ["first"]}
    # With `values` alone, the pause itself sends nothing.
    _, events = await streamed(client, "two_nodes", stream_mode="values", interrupt_after=["first"])
    assert events[1:] == [("values", {"n": 1, "log": []}), ("values", {"n": 2, "log": ["first"]})]


async def test_interrupt_after_in_debug_mode_ends_on_the_paused_checkpoint(
    client: LangGraphClient,
) -> None:
    thread_id, events = await streamed(
        client, "two_nodes", stream_mode="debug", interrupt_after=["first"]
    )
    chunks = [data for _, data in events[1:]]
    assert [(c["type"], c["step"]) for c in chunks] == [
        ("checkpoint", -1),
        ("checkpoint", 0),
        ("task", 1),
        ("task_result", 1),
        ("checkpoint", 1),
    ]
    paused = chunks[-1]["payload"]
    assert paused["next"] == ["second"] and paused["values"] == {"n": 2, "log": ["first"]}
    assert paused["checkpoint"]["thread_id"] == thread_id


async def test_an_interrupt_in_a_node_shows_in_its_task_result(client: LangGraphClient) -> None:
    thread_id, events = await streamed(client, "asking", stream_mode=["tasks", "checkpoints"])
    assert names(events) == [
        "metadata",
        "checkpoints",
        "checkpoints",
        "tasks",
        "tasks",
        "checkpoints",
        "tasks",
        "tasks",
    ]
    paused = events[5][1]
    assert paused["next"] == ["ask"] and paused["metadata"]["step"] == 1
    ask_started, ask_ended = events[6][1], events[7][1]
    assert (ask_started["name"], set(ask_started)) == ("ask", TASK_START_KEYS)
    assert ask_ended["name"] == "ask" and ask_ended["error"] is None
    assert ask_ended["result"] == {}
    [interrupt] = ask_ended["interrupts"]
    assert set(interrupt) == {"value", "id", "response_schema"}
    assert interrupt["value"] == {"question": "ok?"} and interrupt["response_schema"] is None
    # In debug mode the same result is the last event, of type task_result.
    _, events = await streamed(client, "asking", stream_mode="debug")
    chunks = [data for _, data in events[1:]]
    assert [c["type"] for c in chunks] == [
        "checkpoint",
        "checkpoint",
        "task",
        "task_result",
        "checkpoint",
        "task",
        "task_result",
    ]
    assert chunks[-1]["payload"]["interrupts"][0]["value"] == {"question": "ok?"}
    # `values` ends with the thread's values and the pause beside them.
    _, events = await streamed(client, "asking", stream_mode="values")
    assert names(events) == ["metadata", "values", "values", "values"]
    last = events[-1][1]
    assert {k: v for k, v in last.items() if k != "__interrupt__"} == {"n": 2, "log": ["first"]}
    assert [i["value"] for i in last["__interrupt__"]] == [{"question": "ok?"}]
    assert (await client.threads.get_state(thread_id))["next"] == ["ask"]


@pytest.mark.parametrize("durability", ["sync", "exit"])
async def test_durability_changes_what_is_kept_not_what_is_streamed(
    client: LangGraphClient, durability: str
) -> None:
    thread_id, events = await streamed(
        client, "two_nodes", stream_mode=["values", "checkpoints"], durability=durability
    )
    assert names(events) == ["metadata", *["checkpoints", "values"] * 3, "checkpoints"]
    checkpoints = [data for name, data in events if name == "checkpoints"]
    for payload, expected in zip(checkpoints, TWO_NODE_CHECKPOINTS, strict=True):
        # Under `exit` the steps between are never written, so none has a parent
        # (the reference streams `parent_config: null` for each).
        assert_checkpoint(payload, expected, thread_id, saved=durability == "sync")
    assert events[-2][1] == {"n": 20, "log": ["first", "second"]}
    history = await client.threads.get_history(thread_id)
    steps = [(h["metadata"]["source"], h["metadata"]["step"]) for h in history]
    if durability == "sync":  # every checkpoint is kept, newest first
        assert steps == [("loop", 2), ("loop", 1), ("loop", 0), ("input", -1)]
    else:  # `exit`: only the last one
        assert steps == [("loop", 2)]
    assert history[0]["values"] == {"n": 20, "log": ["first", "second"]}
