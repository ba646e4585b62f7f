"""Runs end to end through langgraph-sdk: create + poll, wait, stream, join."""

from __future__ import annotations

import uuid

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import poll_until_done, says
from waybill.common.codec import system_assistant_id


async def test_create_then_poll_ends_success_and_state_holds_conversation(
    client: LangGraphClient,
) -> None:
    thread = await client.threads.create()
    run = await client.runs.create(thread["thread_id"], "lead_agent", input=says("hi there"))
    assert run["status"] in ("pending", "running", "success")
    assert run["assistant_id"] == system_assistant_id("lead_agent")

    finished = await poll_until_done(client, thread["thread_id"], run["run_id"])
    assert finished["status"] == "success"

    state = await client.threads.get_state(thread["thread_id"])
    contents = [(m["type"], m["content"]) for m in state["values"]["messages"]]
    assert contents == [("human", "hi there"), ("ai", "You said: hi there")]
    assert (await client.threads.get(thread["thread_id"]))["status"] == "idle"


async def test_wait_returns_final_values_and_keeps_history(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    first = await client.runs.wait(thread["thread_id"], "lead_agent", input=says("one"))
    assert first["messages"][-1]["content"] == "You said: one"

    second = await client.runs.wait(thread["thread_id"], "lead_agent", input=says("two"))
    assert [m["content"] for m in second["messages"]] == [
        "one",
        "You said: one",
        "two",
        "You said: two",
    ]
    runs = await client.runs.list(thread["thread_id"])
    assert [r["status"] for r in runs] == ["success", "success"]

    history = await client.threads.get_history(thread["thread_id"], limit=3)
    assert len(history) == 3
    assert history[0]["values"]["messages"][-1]["content"] == "You said: two"


async def test_scripted_tool_call_runs_the_tool(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    result = await client.runs.wait(
        thread["thread_id"], "lead_agent", input=says('/tool add {"a": 2, "b": 40}')
    )
    kinds = [m["type"] for m in result["messages"]]
    assert kinds == ["human", "ai", "tool", "ai"]
    assert result["messages"][1]["tool_calls"][0]["name"] == "add"
    assert result["messages"][2]["content"] == "42.0"
    assert result["messages"][3]["content"] == "Tool add returned: 42.0"


async def test_assistant_uuid_and_graph_name_both_accepted(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    by_uuid = await client.runs.wait(
        thread["thread_id"], system_assistant_id("lead_agent"), input=says("uuid")
    )
    assert by_uuid["messages"][-1]["content"] == "You said: uuid"


async def test_graph_failing_on_its_input_ends_the_run_error(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    # wait: the SDK raises on the `__error__` the gateway returns.
    with pytest.raises(Exception, match="ValueError: lead_agent needs input.messages"):
        await client.runs.wait(thread["thread_id"], "lead_agent", input={"messages": []})
    runs = await client.runs.list(thread["thread_id"])
    assert runs[0]["status"] == "error"
    assert (await client.threads.get(thread["thread_id"]))["status"] == "error"

    # stream: an `error` event with LangGraph's shape, then the stream closes.
    parts = [
        p async for p in client.runs.stream(thread["thread_id"], "lead_agent", input={"foo": 1})
    ]
    assert [p.event for p in parts] == ["metadata", "error"]
    assert parts[-1].data["error"] == "ValueError"
    assert "input.messages" in parts[-1].data["message"]

    # join: the error comes back as `__error__`.
    run = await client.runs.create(thread["thread_id"], "lead_agent", input={})
    joined = await client.runs.join(thread["thread_id"], run["run_id"])
    assert joined["__error__"]["error"] == "ValueError"


async def test_enqueued_runs_run_one_after_another(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    runs = [
        await client.runs.create(
            thread["thread_id"], "lead_agent", input=says(f"m{i}"), multitask_strategy="enqueue"
        )
        for i in range(3)
    ]
    for run in runs:
        assert (await poll_until_done(client, thread["thread_id"], run["run_id"]))[
            "status"
        ] == "success"
    state = await client.threads.get_state(thread["thread_id"])
    assert [m["content"] for m in state["values"]["messages"]] == [
        "m0",
        "You said: m0",
        "m1",
        "You said: m1",
        "m2",
        "You said: m2",
    ]


async def test_reject_strategy_refuses_a_second_active_run(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    long_run = await client.runs.create(
        thread["thread_id"], "lead_agent", input=says('/tool wait {"seconds": 30}')
    )
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await client.runs.create(
            thread["thread_id"], "lead_agent", input=says("x"), multitask_strategy="reject"
        )
    assert refused.value.response.status_code == 409
    assert "active run" in refused.value.response.json()["detail"]
    assert len(await client.runs.list(thread["thread_id"])) == 1
    await client.runs.cancel(thread["thread_id"], long_run["run_id"], wait=True)


async def test_get_and_delete_run(client: LangGraphClient, http: httpx.AsyncClient) -> None:
    thread = await client.threads.create()
    run = await client.runs.create(thread["thread_id"], "lead_agent", input=says("bye"))
    await poll_until_done(client, thread["thread_id"], run["run_id"])
    await client.runs.delete(thread["thread_id"], run["run_id"])
    gone = await http.get(f"/threads/{thread['thread_id']}/runs/{run['run_id']}")
    assert gone.status_code == 404
    unknown = await http.get(f"/threads/{thread['thread_id']}/runs/{uuid.uuid4()}/stream")
    assert unknown.status_code == 404


async def test_the_server_sets_the_run_identity_a_client_cannot_forge(
    client: LangGraphClient,
) -> None:
    thread = await client.threads.create()
    forged = {"configurable": {"run_id": "forged", "thread_id": "elsewhere", "graph_id": "x"}}
    run = await client.runs.create(
        thread["thread_id"], "lead_agent", input=says("me"), config=forged
    )
    await poll_until_done(client, thread["thread_id"], run["run_id"])
    state = await client.threads.get_state(thread["thread_id"])
    assert state["metadata"]["run_id"] == run["run_id"]
    assert state["metadata"]["graph_id"] == "lead_agent"
    assert state["checkpoint"]["thread_id"] == thread["thread_id"]
