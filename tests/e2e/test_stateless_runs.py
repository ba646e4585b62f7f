"""Stateless runs (/runs/...) get a temporary thread, dropped when they end."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import says, start_slow_tool


def thread_of(response: httpx.Response) -> str:
    return response.headers["content-location"].split("/")[2]


async def gone(http: httpx.AsyncClient, thread_id: str) -> bool:
    for _ in range(100):
        if (await http.get(f"/threads/{thread_id}")).status_code == 404:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_wait_without_a_thread(client: LangGraphClient, http: httpx.AsyncClient) -> None:
    result = await client.runs.wait(None, "lead_agent", input=says("no thread"))
    assert result["messages"][-1]["content"] == "You said: no thread"

    reply = await http.post("/runs/wait", json={"assistant_id": "lead_agent", "input": says("x")})
    assert reply.status_code == 200
    assert await gone(http, thread_of(reply))


async def test_stream_without_a_thread(client: LangGraphClient) -> None:
    parts = [
        p
        async for p in client.runs.stream(
            None, "lead_agent", input=says("/tokens 4"), stream_mode="messages-tuple"
        )
    ]
    assert parts[0].event == "metadata"
    text = "".join(p.data[0]["content"] for p in parts if p.event == "messages")
    assert text == "t0 t1 t2 t3 "


async def test_keep_the_thread_when_asked(http: httpx.AsyncClient) -> None:
    reply = await http.post(
        "/runs/wait",
        json={"assistant_id": "lead_agent", "input": says("keep"), "on_completion": "keep"},
    )
    thread_id = thread_of(reply)
    state = (await http.get(f"/threads/{thread_id}/state")).json()
    assert state["values"]["messages"][-1]["content"] == "You said: keep"


async def test_deleting_a_thread_deletes_its_state(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = str(uuid.uuid4())
    await client.threads.create(thread_id=thread_id)
    await client.runs.wait(thread_id, "lead_agent", input=says("forget me"))
    await client.threads.delete(thread_id)

    await client.threads.create(thread_id=thread_id)  # the same id, new thread
    await client.runs.wait(thread_id, "lead_agent", input=says("fresh"))
    state = await client.threads.get_state(thread_id)
    assert [m["content"] for m in state["values"]["messages"]] == ["fresh", "You said: fresh"]


async def test_a_thread_with_an_active_run_is_deleted_once_its_run_is_stopped(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    """As on LangGraph Platform (it answered 409 here before): the delete cancels the
    thread's run, and the run's runner has stopped before anything is deleted."""
    thread_id = str(uuid.uuid4())
    await client.threads.create(thread_id=thread_id)
    run = await start_slow_tool(client, thread_id)
    assert (await http.delete(f"/threads/{thread_id}")).status_code == 204
    assert (await http.get(f"/threads/{thread_id}/runs/{run['run_id']}")).status_code == 404

    await client.threads.create(thread_id=thread_id)  # the same id, new thread
    await client.runs.wait(thread_id, "lead_agent", input=says("fresh"))
    state = await client.threads.get_state(thread_id)
    assert [m["content"] for m in state["values"]["messages"]] == ["fresh", "You said: fresh"]
