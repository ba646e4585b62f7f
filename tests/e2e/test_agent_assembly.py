"""The lead agent's assembly: workspace tools that stay inside, tool gates,
middleware order, and clarification as a human-in-the-loop pause."""

from __future__ import annotations

import json
import os
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import says
from waybill.common.launch import Stack
from waybill.services.runner.agent.middleware import (
    AnswerDanglingToolCalls,
    Clarification,
    ModelRequest,
    SystemPrompt,
    default_chain,
)
from waybill.services.runner.agent.tools import CATALOG, TOOL_SEARCH, assemble, authorized


def call(tool: str, **args: Any) -> dict[str, Any]:
    return says(f"/tool {tool} {json.dumps(args)}")


async def tool_answer(client: LangGraphClient, thread_id: str, tool: str, **args: Any) -> dict:
    """Run one scripted tool call; return the tool's message. A run that writes a
    file without presenting it ends `error` (delivery incomplete), so the answer
    is read from the thread's state, whatever the run's verdict."""
    await client.runs.wait(thread_id, "lead_agent", input=call(tool, **args), raise_error=False)
    state = await client.threads.get_state(thread_id)
    return [m for m in state["values"]["messages"] if m["type"] == "tool"][-1]


async def test_workspace_file_tools(client: LangGraphClient, stack: Stack) -> None:
    thread = (await client.threads.create())["thread_id"]
    wrote = await tool_answer(client, thread, "write_file", path="notes/a.txt", content="alpha")
    assert wrote["content"] == "wrote 5 characters to notes/a.txt"
    edited = await tool_answer(
        client, thread, "edit_file", path="notes/a.txt", old="alp", new="ALP"
    )
    assert edited["content"] == "edited notes/a.txt"
    read = await tool_answer(client, thread, "read_file", path="notes/a.txt")
    assert read["content"] == "ALPha"
    listed = await tool_answer(client, thread, "list_files")
    assert json.loads(listed["content"]) == ["notes/a.txt"]
    on_disk = stack.settings.workspaces_path() / thread / "notes" / "a.txt"
    assert on_disk.read_text() == "ALPha"
    presented = await tool_answer(client, thread, "present_files", paths=["notes/a.txt"])
    assert presented["content"] == "presented 1 file(s): notes/a.txt"


async def test_workspace_tools_cannot_leave_the_workspace(
    client: LangGraphClient, stack: Stack
) -> None:
    thread = (await client.threads.create())["thread_id"]
    root = stack.settings.workspaces_path() / thread
    root.mkdir(parents=True, exist_ok=True)
    os.symlink("/etc", root / "outside")

    refusals = {
        "traversal": (
            "write_file",
            {"path": "../escape.txt", "content": "x"},
            "leaves the workspace",
        ),
        "absolute": ("read_file", {"path": "/etc/hostname"}, "must be relative"),
        "symlink": ("read_file", {"path": "outside/hostname"}, "leaves the workspace"),
        "missing": ("present_files", {"paths": ["nope.txt"]}, "do not exist"),
    }
    for case, (tool, args, reason) in refusals.items():
        answer = await tool_answer(client, thread, tool, **args)
        assert answer["status"] == "error", case
        assert reason in answer["content"], case
    assert not (root.parent / "escape.txt").exists()


async def test_a_tool_the_assistant_does_not_allow_is_refused(client: LangGraphClient) -> None:
    thread = (await client.threads.create())["thread_id"]
    result = await client.runs.wait(
        thread,
        "lead_agent",
        input=call("add", a=1, b=2),
        config={"configurable": {"allowed_tools": ["echo"]}},
    )
    answer = [m for m in result["messages"] if m["type"] == "tool"][-1]
    assert answer["status"] == "error"
    assert "add" in answer["content"]


async def test_clarification_pauses_for_the_user(client: LangGraphClient) -> None:
    thread = (await client.threads.create())["thread_id"]
    paused = await client.runs.wait(
        thread, "lead_agent", input=call("ask_clarification", question="Which color?")
    )
    assert paused["__interrupt__"][0]["value"] == {"question": "Which color?"}
    assert (await client.threads.get(thread))["status"] == "interrupted"

    done = await client.runs.wait(thread, "lead_agent", command={"resume": "blue"})
    assert done["messages"][-1]["content"] == "Tool ask_clarification returned: blue"
    assert (await client.threads.get(thread))["status"] == "idle"


def test_many_tools_are_found_through_tool_search() -> None:
    tools = authorized({})
    shown, runnable = assemble(tools, [], threshold=3)
    names = [t.name for t in shown]
    assert names == ["ask_clarification", "present_files", TOOL_SEARCH]
    assert {t.name for t in runnable} == {*CATALOG, TOOL_SEARCH}

    search = next(t for t in runnable if t.name == TOOL_SEARCH)
    found = json.loads(search.invoke({"query": "file"}))
    assert {"write_file", "read_file", "list_files", "edit_file"} <= {f["name"] for f in found}

    history = [ToolMessage(content=json.dumps(found), tool_call_id="1", name=TOOL_SEARCH)]
    shown_after, _ = assemble(tools, history, threshold=3)
    assert "write_file" in {t.name for t in shown_after}  # found once, shown from then on


def test_gates_allow_and_deny() -> None:
    assert [t.name for t in authorized({"allowed_tools": ["echo", "add"]})] == ["add", "echo"]
    assert "wait" not in {t.name for t in authorized({"denied_tools": ["wait"]})}


def test_middleware_order_and_effects() -> None:
    chain = default_chain(history_limit=50)
    assert isinstance(chain[0], SystemPrompt)
    assert isinstance(chain[-1], Clarification)

    dangling = AIMessage(content="", tool_calls=[{"name": "wait", "args": {}, "id": "c1"}])
    request = ModelRequest(messages=[HumanMessage("hi"), dangling, HumanMessage("again")], tools=[])
    for middleware in chain:
        request = middleware.before(request)
    assert isinstance(request.messages[0], SystemMessage)
    repaired = request.messages[3]
    assert isinstance(repaired, ToolMessage) and repaired.tool_call_id == "c1"

    both = AIMessage(
        content="",
        tool_calls=[
            {"name": "add", "args": {"a": 1, "b": 1}, "id": "a"},
            {"name": "ask_clarification", "args": {"question": "?"}, "id": "q"},
        ],
    )
    assert [c["id"] for c in Clarification().after(both).tool_calls] == ["q"]
    assert AnswerDanglingToolCalls().after(both) is both
