"""Bring your own graph: a `langgraph.json` project is served next to lead_agent,
as `langgraph dev` would serve it."""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import UnprocessableEntityError

from tests.support.stacks import running_stack, stack_env
from waybill.common.launch import Stack

GRAPH_IDS = {"lead_agent", "echo_graph", "factory_graph"}

HELPERS_PY = """
def shout(text: str) -> str:
    return text.upper()
"""

MY_GRAPH_PY = """
import typing

import typing_extensions
from langgraph.graph import END, START, StateGraph

from helpers import shout  # a neighbouring file of the project


class State(typing_extensions.TypedDict):  # schemas need it on Python < 3.12
    text: str


class PlainState(typing.TypedDict):  # as LangGraph's docs write it
    text: str


def shout_node(state: State) -> dict:
    return {"text": shout(state["text"])}


def reverse_node(state: PlainState) -> dict:
    return {"text": state["text"][::-1]}


def _single_node_graph(state, name, node):
    builder = StateGraph(state)
    builder.add_node(name, node)
    builder.add_edge(START, name)
    builder.add_edge(name, END)
    return builder.compile()


graph = _single_node_graph(State, "shout", shout_node)


def make_graph():
    return _single_node_graph(PlainState, "reverse", reverse_node)
"""


def write_project(root: Path) -> Path:
    """A tiny LangGraph project; returns its `langgraph.json`."""
    (root / "helpers.py").write_text(textwrap.dedent(HELPERS_PY))
    (root / "my_graph.py").write_text(textwrap.dedent(MY_GRAPH_PY))
    manifest = root / "langgraph.json"
    graphs = {"echo_graph": "./my_graph.py:graph", "factory_graph": "./my_graph.py:make_graph"}
    manifest.write_text(json.dumps({"graphs": graphs}))
    return manifest


def platform_assistant_id(graph_id: str) -> str:
    """LangGraph Platform's id for a graph's system assistant."""
    return str(uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), graph_id))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """An embedded stack serving the project from a directory of its own."""
    manifest = write_project(tmp_path_factory.mktemp("project"))
    data_dir = tmp_path_factory.mktemp("stack-byog")
    with running_stack(stack_env(data_dir, WAYBILL_GRAPHS=str(manifest)), data_dir) as running:
        yield running


async def test_every_graph_has_an_assistant_with_the_platform_id(client: LangGraphClient) -> None:
    assistants = await client.assistants.search()
    assert {a["graph_id"] for a in assistants} == GRAPH_IDS
    for assistant in assistants:
        assert assistant["assistant_id"] == platform_assistant_id(assistant["graph_id"])


async def test_runs_by_graph_name_and_by_assistant_id(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    by_name = await client.runs.wait(thread["thread_id"], "echo_graph", input={"text": "hello"})
    assert by_name == {"text": "HELLO"}

    thread = await client.threads.create()
    by_id = await client.runs.wait(
        thread["thread_id"], platform_assistant_id("echo_graph"), input={"text": "again"}
    )
    assert by_id == {"text": "AGAIN"}


async def test_a_factory_is_called_to_build_its_graph(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    result = await client.runs.wait(thread["thread_id"], "factory_graph", input={"text": "abc"})
    assert result == {"text": "cba"}


async def test_graph_and_schemas_describe_the_user_graph(client: LangGraphClient) -> None:
    drawable = await client.assistants.get_graph("echo_graph")
    assert {node["id"] for node in drawable["nodes"]} == {"__start__", "shout", "__end__"}

    schemas = await client.assistants.get_schemas(platform_assistant_id("echo_graph"))
    assert schemas["graph_id"] == "echo_graph"
    assert "text" in schemas["input_schema"]["properties"]
    assert "text" in schemas["output_schema"]["properties"]


async def test_schemas_answer_even_when_pydantic_cannot_build_one(client: LangGraphClient) -> None:
    # factory_graph's state is a typing.TypedDict, which pydantic rejects before Python 3.12:
    # that schema is null, as LangGraph Platform reports it, and the request still succeeds.
    schemas = await client.assistants.get_schemas("factory_graph")
    assert schemas["graph_id"] == "factory_graph"
    if sys.version_info < (3, 12):
        assert schemas["input_schema"] is None
    else:
        assert "text" in schemas["input_schema"]["properties"]


async def test_an_unknown_graph_is_refused(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    with pytest.raises(UnprocessableEntityError) as refusal:
        await client.runs.create(thread["thread_id"], "no_such_graph", input={"text": "x"})
    assert refusal.value.status_code == 422
    assert "no_such_graph" in refusal.value.message
    assert await client.runs.list(thread["thread_id"]) == []
