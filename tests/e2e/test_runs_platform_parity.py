"""Runs answer as LangGraph Platform (langgraph-api 0.16.7) answers, measured on it:
a refused input, join_stream's mode filter, a stateless stream's on_disconnect,
deleting a thread with a run going, and wait's keep-alive. Both stacks."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import after_its_end, says, start_slow_tool, wait_for_status
from waybill.common.launch import Stack

ALIEN = {"messages": [{"role": "alien", "content": "x"}]}
ALIEN_REFUSAL = "Unexpected message type: 'alien'."


def sse_events(text: str) -> list[tuple[str, Any]]:
    """(event, data) of each frame of an SSE body."""
    events: list[tuple[str, Any]] = []
    for frame in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


# ---- 1. an input the graph refuses ----------------------------------------------------


async def test_a_refused_input_fails_the_run_as_a_graph_failure(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    body = {"assistant_id": "lead_agent", "input": ALIEN, "stream_mode": ["values", "custom"]}
    streamed = await http.post(f"/threads/{thread_id}/runs/stream", json=body)
    run_id = streamed.headers["content-location"].rsplit("/", 1)[1]
    events = sse_events(streamed.text)
    assert [name for name, _ in events] == ["metadata", "error"]
    error = events[1][1]
    assert set(error) == {"error", "message"}
    assert error["error"] == "ValueError" and error["message"].startswith(ALIEN_REFUSAL)

    assert await client.runs.join(thread_id, run_id) == {"__error__": error}
    assert (await client.runs.get(thread_id, run_id))["status"] == "error"
    # As on LangGraph Platform: the stored input cannot become state; the read says why.
    state = await http.get(f"/threads/{thread_id}/state")
    assert state.status_code == 400
    assert state.json() == {"detail": error["message"]}
    assert (await client.threads.get(thread_id))["status"] == "error"
    # It ended as a graph failure does: receipt first, then the terminal status.
    receipt = await http.get(f"/threads/{thread_id}/runs/{run_id}/receipt")
    assert receipt.status_code == 200, receipt.text
    assert receipt.json()["outcome"] == "error"


async def test_wait_on_a_refused_input_answers_the_error_body(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    for path in (f"/threads/{thread_id}/runs/wait", "/runs/wait"):
        reply = await http.post(path, json={"assistant_id": "lead_agent", "input": ALIEN})
        assert reply.status_code == 200, (path, reply.text)
        assert reply.json()["__error__"]["message"].startswith(ALIEN_REFUSAL)


# ---- 2. join_stream's stream_mode ---------------------------------------------------------


async def test_join_stream_sends_only_the_modes_asked_for(client: LangGraphClient) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(
        thread_id,
        "lead_agent",
        input=says('/tool add {"a": 1, "b": 2}'),
        stream_mode=["custom", "values", "updates"],
    )
    await client.runs.join(thread_id, run["run_id"])
    everything = [
        p.event async for p in client.runs.join_stream(thread_id, run["run_id"], last_event_id="-1")
    ]
    assert {"metadata", "values", "updates", "custom"} <= set(everything)

    custom = [
        (p.event, p.data)
        async for p in client.runs.join_stream(
            thread_id, run["run_id"], last_event_id="-1", stream_mode="custom"
        )
    ]
    assert custom == [("custom", {"tool": "add", "progress": "adding"})]
    two = [
        p.event
        async for p in client.runs.join_stream(
            thread_id, run["run_id"], last_event_id="-1", stream_mode=["custom", "updates"]
        )
    ]
    assert set(two) == {"custom", "updates"}


async def test_join_stream_filter_takes_subgraph_events_and_a_json_array(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(
        thread_id,
        "nested",
        input={"notes": []},
        stream_mode=["values", "updates"],
        stream_subgraphs=True,
    )
    await client.runs.join(thread_id, run["run_id"])
    path = f"/threads/{thread_id}/runs/{run['run_id']}/stream"
    reply = await http.get(
        path, params={"stream_mode": '["updates"]'}, headers={"Last-Event-ID": "-1"}
    )
    names = [name for name, _ in sse_events(reply.text)]
    assert "updates" in names
    assert any(name.startswith("updates|writer:") for name in names), names
    assert all(name == "updates" or name.startswith("updates|") for name in names), names


# ---- 3. a stateless stream whose client leaves --------------------------------------------


async def test_a_stateless_stream_left_with_on_disconnect_cancel_is_interrupted(
    client: LangGraphClient, stack: Stack
) -> None:
    body = {
        "assistant_id": "lead_agent",
        "input": says('/tool wait {"seconds": 30}'),
        "stream_mode": "updates",
        "on_disconnect": "cancel",
        "on_completion": "keep",  # so that its run can be read once it ended
    }
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=30) as raw,
        raw.stream("POST", "/runs/stream", json=body) as reply,
    ):
        _, thread_id, _, run_id = reply.headers["content-location"].rsplit("/", 3)
        async for line in reply.aiter_lines():
            if line.startswith("event: updates"):
                break  # the tool is running; now walk away
    run = await wait_for_status(client, thread_id, run_id, "interrupted")
    assert run["status"] == "interrupted"


# ---- 4. deleting a thread with a run going ------------------------------------------------


async def test_deleting_a_thread_cancels_its_runs_and_leaves_nothing_behind(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    running = await start_slow_tool(client, thread_id)
    queued = await client.runs.create(
        thread_id, "lead_agent", input=says("later"), multitask_strategy="enqueue"
    )

    deleted = await http.delete(f"/threads/{thread_id}")
    assert deleted.status_code == 204, deleted.text
    assert (await http.get(f"/threads/{thread_id}")).status_code == 404
    for run in (running, queued):
        assert (await http.get(f"/threads/{thread_id}/runs/{run['run_id']}")).status_code == 404
    stream = await http.get(f"/threads/{thread_id}/runs/{running['run_id']}/stream")
    assert stream.status_code == 404  # its events went with it

    # The runner stopped before the delete: a new thread of the same id holds only its own.
    await client.threads.create(thread_id=thread_id)
    await client.runs.wait(thread_id, "lead_agent", input=says("fresh"))
    state = await client.threads.get_state(thread_id)
    assert [m["content"] for m in state["values"]["messages"]] == ["fresh", "You said: fresh"]


# ---- 5. wait and join: keep-alive and Location --------------------------------------------


async def test_wait_keeps_the_connection_alive_and_points_at_join(
    client: LangGraphClient, stack: Stack
) -> None:
    """The test stacks send a newline every 0.5 s (WAYBILL_WAIT_KEEPALIVE_SECONDS)."""
    thread_id = (await client.threads.create())["thread_id"]
    body = {"assistant_id": "lead_agent", "input": says('/tool wait {"seconds": 2}')}
    chunks: list[tuple[float, bytes]] = []
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=30) as raw,
        raw.stream("POST", f"/threads/{thread_id}/runs/wait", json=body) as reply,
    ):
        started = time.monotonic()
        async for chunk in reply.aiter_raw():
            chunks.append((time.monotonic() - started, chunk))
    assert reply.status_code == 200
    run_id = reply.headers["content-location"].rsplit("/", 1)[1]
    assert reply.headers["location"] == f"/threads/{thread_id}/runs/{run_id}/join"
    text = b"".join(chunk for _, chunk in chunks)
    assert text.startswith(b"\n")
    blanks = len(text) - len(text.lstrip(b"\n"))
    assert blanks >= 2, text[:20]
    answer = json.loads(text)["messages"][-1]
    assert (answer["type"], answer["content"]) == ("ai", "Tool wait returned: waited 2 s")
    # The first newline came while the run was still going, not with the result.
    first_blank = next(at for at, chunk in chunks if chunk.strip() == b"")
    assert first_blank < chunks[-1][0] - 0.5


async def test_stateless_wait_points_at_its_join(http: httpx.AsyncClient) -> None:
    reply = await http.post("/runs/wait", json={"assistant_id": "lead_agent", "input": says("hi")})
    assert reply.status_code == 200
    content = reply.headers["content-location"]
    assert reply.headers["location"] == f"{content}/join"
    assert content.startswith("/threads/")


async def test_join_keeps_the_connection_alive(client: LangGraphClient, stack: Stack) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    run = await client.runs.create(
        thread_id, "lead_agent", input=says('/tool wait {"seconds": 1.5}')
    )
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as raw:
        reply = await raw.get(f"/threads/{thread_id}/runs/{run['run_id']}/join")
    assert reply.status_code == 200
    assert reply.content.startswith(b"\n")
    assert reply.headers["location"] == f"/threads/{thread_id}/runs/{run['run_id']}/join"
    answer = reply.json()["messages"][-1]
    assert (answer["type"], answer["content"]) == ("ai", "Tool wait returned: waited 1.5 s")


# ---- 6. reads right after a cancel (wait=false) ------------------------------------------


async def test_a_read_right_after_a_cancel_says_interrupted(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    """wait=false promises the cancel is on record (durable: the runner, or the next
    claim, carries it out); reads say so at once, as LangGraph Platform's do."""
    thread_id = (await client.threads.create())["thread_id"]
    running = await start_slow_tool(client, thread_id)
    path = f"/threads/{thread_id}/runs/{running['run_id']}"
    assert (await http.post(f"{path}/cancel")).status_code == 202
    assert (await http.get(path)).json()["status"] == "interrupted"
    listed = (await http.get(f"/threads/{thread_id}/runs")).json()
    assert [run["status"] for run in listed] == ["interrupted"]
    assert (await after_its_end(client, thread_id, running["run_id"]))["status"] == "interrupted"


async def test_a_read_right_after_a_rollback_finds_no_run(
    client: LangGraphClient, http: httpx.AsyncClient
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    running = await start_slow_tool(client, thread_id)
    path = f"/threads/{thread_id}/runs/{running['run_id']}"
    assert (await http.post(f"{path}/cancel", params={"action": "rollback"})).status_code == 202
    assert (await http.get(path)).status_code == 404
    assert (await http.get(f"/threads/{thread_id}/runs")).json() == []
