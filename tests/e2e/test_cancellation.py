"""Cancellation: before start, mid-run, mid-tool, rollback, and on disconnect."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import poll_until_done, says, start_slow_tool, wait_for_status
from tests.support.stacks import runner_stats
from waybill.common.launch import Stack
from waybill.services.runner.run.conversation import CANCELLED_TOOL_REPLY


async def test_cancel_before_start_builds_nothing(client: LangGraphClient, stack: Stack) -> None:
    thread = await client.threads.create()
    first = await start_slow_tool(client, thread["thread_id"])
    before = runner_stats(stack.address_of("runner"))

    queued = await client.runs.create(
        thread["thread_id"], "lead_agent", input=says("later"), multitask_strategy="enqueue"
    )
    assert queued["status"] == "pending"
    await client.runs.cancel(thread["thread_id"], queued["run_id"])
    cancelled = await wait_for_status(client, thread["thread_id"], queued["run_id"], "interrupted")
    assert cancelled["status"] == "interrupted"

    after = runner_stats(stack.address_of("runner"))
    assert after["runs_cancelled_before_start"] == before["runs_cancelled_before_start"] + 1
    assert after["models_built"] == before["models_built"]
    assert after["runs_started"] == before["runs_started"]
    # Its stream closes at once, with nothing in it.
    joined = [
        p
        async for p in client.runs.join_stream(
            thread["thread_id"], queued["run_id"], last_event_id="-1"
        )
    ]
    assert joined == []
    await client.runs.cancel(thread["thread_id"], first["run_id"], wait=True)


async def test_interrupt_mid_tool_leaves_a_usable_thread(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    run = await start_slow_tool(client, thread["thread_id"])
    await client.runs.cancel(thread["thread_id"], run["run_id"], wait=True)

    ended = await client.runs.get(thread["thread_id"], run["run_id"])
    assert ended["status"] == "interrupted"
    record = await client.threads.get(thread["thread_id"])
    assert record["status"] == "interrupted"

    state = await client.threads.get_state(thread["thread_id"])
    messages = state["values"]["messages"]
    call_id = messages[1]["tool_calls"][0]["id"]
    answer = messages[2]
    assert answer["type"] == "tool" and answer["tool_call_id"] == call_id
    assert answer["content"] == CANCELLED_TOOL_REPLY

    after = await client.runs.wait(thread["thread_id"], "lead_agent", input=says("still there?"))
    assert after["messages"][-1]["content"] == "You said: still there?"


async def test_rollback_restores_the_thread_and_deletes_the_run(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread = await client.threads.create()
    kept = await client.runs.wait(thread["thread_id"], "lead_agent", input=says("keep me"))
    before = await client.threads.get_state(thread["thread_id"])

    run = await start_slow_tool(client, thread["thread_id"])
    await client.runs.cancel(thread["thread_id"], run["run_id"], wait=True, action="rollback")

    gone = await http.get(f"/threads/{thread['thread_id']}/runs/{run['run_id']}")
    assert gone.status_code == 404
    after = await client.threads.get_state(thread["thread_id"])
    assert after["values"] == before["values"] == kept
    assert after["checkpoint"] == before["checkpoint"]
    assert (await client.threads.get(thread["thread_id"]))["status"] == "idle"
    assert len(await client.runs.list(thread["thread_id"])) == 1

    again = await client.runs.wait(thread["thread_id"], "lead_agent", input=says("next"))
    assert [m["content"] for m in again["messages"]][-2:] == ["next", "You said: next"]


async def test_cancel_answers(client: LangGraphClient, http: httpx.AsyncClient) -> None:
    thread = await client.threads.create()
    run = await start_slow_tool(client, thread["thread_id"])
    path = f"/threads/{thread['thread_id']}/runs/{run['run_id']}/cancel"
    assert (await http.post(path)).status_code == 202
    assert (await http.post(path, params={"action": "rollback"})).status_code in (202, 404)
    await poll_until_done(client, thread["thread_id"], run["run_id"])
    # The first action won: the run was interrupted, not rolled back.
    assert (await client.runs.get(thread["thread_id"], run["run_id"]))["status"] == "interrupted"

    assert (await http.post(path)).status_code == 404  # finished
    unknown = f"/threads/{thread['thread_id']}/runs/{uuid.uuid4()}/cancel"
    assert (await http.post(unknown)).status_code == 404
    bad_action = await http.post(path, params={"action": "explode"})
    assert bad_action.status_code == 422


async def test_on_disconnect_cancel_interrupts_when_the_creator_leaves(
    client: LangGraphClient, stack: Stack
) -> None:
    thread = await client.threads.create()
    body = {
        "assistant_id": "lead_agent",
        "input": says('/tool wait {"seconds": 30}'),
        "stream_mode": "updates",
        "on_disconnect": "cancel",
    }
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=30) as raw,
        raw.stream("POST", f"/threads/{thread['thread_id']}/runs/stream", json=body) as r,
    ):
        run_id = r.headers["content-location"].rsplit("/", 1)[1]
        async for line in r.aiter_lines():
            if line.startswith("event: updates"):
                break  # the tool is running; now walk away
    run = await wait_for_status(client, thread["thread_id"], run_id, "interrupted")
    assert run["status"] == "interrupted"


@pytest.mark.parametrize("on_disconnect", [None, "continue"])
async def test_leaving_without_cancel_lets_the_run_finish(
    client: LangGraphClient, stack: Stack, on_disconnect: str | None
) -> None:
    thread = await client.threads.create()
    body: dict[str, Any] = {
        "assistant_id": "lead_agent",
        "input": says('/tool wait {"seconds": 0.5}'),
    }
    if on_disconnect:
        body["on_disconnect"] = on_disconnect
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=30) as raw,
        raw.stream("POST", f"/threads/{thread['thread_id']}/runs/stream", json=body) as r,
    ):
        run_id = r.headers["content-location"].rsplit("/", 1)[1]
    run = await poll_until_done(client, thread["thread_id"], run_id)
    assert run["status"] == "success"
