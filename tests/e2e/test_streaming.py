"""Streaming speaks LangGraph Platform's SSE exactly, and every stream is resumable."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
from langgraph_sdk.client import LangGraphClient

from tests.support.helpers import parse_sse, poll_until_done, says


async def stream_parts(client: LangGraphClient, thread_id: str, graph: str, **kwargs: Any) -> list:
    return [part async for part in client.runs.stream(thread_id, graph, **kwargs)]


async def test_values_mode_is_the_default(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    parts = await stream_parts(client, thread["thread_id"], "lead_agent", input=says("hey"))
    assert parts[0].event == "metadata"
    assert set(parts[0].data) == {"run_id", "attempt"}
    assert parts[0].data["attempt"] == 1
    assert {p.event for p in parts[1:]} == {"values"}
    assert parts[-1].data["messages"][-1]["content"] == "You said: hey"


async def test_updates_mode_names_the_node(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    parts = await stream_parts(
        client, thread["thread_id"], "lead_agent", input=says("hey"), stream_mode="updates"
    )
    updates = [p.data for p in parts if p.event == "updates"]
    assert list(updates[0]) == ["agent"]
    assert updates[0]["agent"]["messages"][0]["content"] == "You said: hey"


async def test_messages_tuple_streams_tokens_as_messages_events(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    parts = await stream_parts(
        client,
        thread["thread_id"],
        "lead_agent",
        input=says("/tokens 10"),
        stream_mode="messages-tuple",
    )
    messages = [p for p in parts if p.event == "messages"]
    assert len(messages) >= 10
    chunk, metadata = messages[0].data
    assert chunk["type"] == "AIMessageChunk"
    assert metadata["langgraph_node"] == "agent"
    text = "".join(p.data[0]["content"] for p in messages)
    assert text == "".join(f"t{i} " for i in range(10))


async def test_custom_mode_carries_what_tools_write(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    parts = await stream_parts(
        client,
        thread["thread_id"],
        "lead_agent",
        input=says('/tool add {"a": 1, "b": 1}'),
        stream_mode=["custom", "values"],
    )
    custom = [p.data for p in parts if p.event == "custom"]
    assert custom == [{"tool": "add", "progress": "adding"}]
    assert parts[-1].event == "values"


async def test_subgraph_frames_are_named_mode_and_namespace(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    parts = await stream_parts(
        client,
        thread["thread_id"],
        "nested",
        input={"notes": []},
        stream_mode="updates",
        stream_subgraphs=True,
    )
    names = [p.event for p in parts]
    sub = [n for n in names if n.startswith("updates|")]
    assert sub and sub[0].startswith("updates|writer:")
    assert "updates" in names
    final = await client.threads.get_state(thread["thread_id"])
    assert final["values"]["notes"] == ["drafted", "reviewed"]


async def test_wire_format_ids_headers_and_no_terminator(http: httpx.AsyncClient) -> None:
    thread = (await http.post("/threads", json={})).json()
    response = await http.post(
        f"/threads/{thread['thread_id']}/runs/stream",
        json={"assistant_id": "lead_agent", "input": says("/tokens 5"), "stream_mode": ["values"]},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    location = response.headers["content-location"]
    assert location.startswith(f"/threads/{thread['thread_id']}/runs/")

    frames = parse_sse(response.text)
    assert frames[0]["event"] == "metadata"
    assert json.loads(frames[0]["data"])["run_id"] == location.rsplit("/", 1)[1]
    assert [int(f["id"]) for f in frames] == list(range(len(frames)))
    assert frames[-1]["event"] == "values"  # no `end` frame: the response just closes


async def test_join_honours_last_event_id(client: LangGraphClient, http: httpx.AsyncClient) -> None:
    thread = await client.threads.create()
    run = await client.runs.create(
        thread["thread_id"], "lead_agent", input=says("/tokens 8"), stream_mode="messages-tuple"
    )
    await poll_until_done(client, thread["thread_id"], run["run_id"])
    path = f"/threads/{thread['thread_id']}/runs/{run['run_id']}/stream"

    everything = parse_sse((await http.get(path, headers={"Last-Event-ID": "-1"})).text)
    assert [int(f["id"]) for f in everything] == list(range(len(everything)))
    assert everything[0]["event"] == "metadata"

    after_two = parse_sse((await http.get(path, headers={"Last-Event-ID": "2"})).text)
    assert after_two == everything[3:]

    # Without Last-Event-ID a finished run's stream closes with no frames.
    assert parse_sse((await http.get(path)).text) == []

    # The SDK's join_stream sends the header for us.
    joined = [
        p
        async for p in client.runs.join_stream(
            thread["thread_id"], run["run_id"], last_event_id="4"
        )
    ]
    assert len(joined) == len(everything) - 5


async def test_join_a_live_run_from_the_start(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    run = await client.runs.create(
        thread["thread_id"], "lead_agent", input=says("/tokens 3000"), stream_mode="messages-tuple"
    )
    parts = [
        p
        async for p in client.runs.join_stream(
            thread["thread_id"], run["run_id"], last_event_id="-1"
        )
    ]
    assert parts[0].event == "metadata"
    tokens = "".join(p.data[0]["content"] for p in parts if p.event == "messages")
    assert tokens == "".join(f"t{i} " for i in range(3000))
    assert (await client.runs.get(thread["thread_id"], run["run_id"]))["status"] == "success"


async def test_unknown_run_stream_is_404(http: httpx.AsyncClient) -> None:
    thread = (await http.post("/threads", json={})).json()
    missing = await http.get(f"/threads/{thread['thread_id']}/runs/{uuid.uuid4()}/stream")
    assert missing.status_code == 404
    assert "not found" in missing.json()["detail"]


async def test_messages_mode_sends_metadata_partial_and_complete(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    parts = await stream_parts(
        client,
        thread["thread_id"],
        "lead_agent",
        input=says('/tool add {"a": 2, "b": 2}'),
        stream_mode="messages",
    )
    names = [p.event for p in parts]
    assert names[1] == "messages/metadata"
    partials = [p.data[0] for p in parts if p.event == "messages/partial"]
    completes = [p.data[0] for p in parts if p.event == "messages/complete"]
    # Partials are cumulative: the last one of the answer holds all of it.
    answer = [m for m in partials if m["content"]]
    assert answer[-1]["content"] == "Tool add returned: 4.0"
    assert all(
        len(a["content"]) <= len(b["content"]) for a, b in zip(answer, answer[1:], strict=False)
    )
    # The tool call, the tool's answer and the final answer each complete once.
    assert [m["type"] for m in completes] == ["AIMessageChunk", "tool", "AIMessageChunk"]
    assert completes[0]["tool_calls"][0]["name"] == "add"
    assert completes[-1]["content"] == "Tool add returned: 4.0"


async def test_events_mode_sends_astream_events_beside_other_modes(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    parts = await stream_parts(
        client,
        thread["thread_id"],
        "lead_agent",
        input=says("/tokens 3"),
        stream_mode=["events", "values"],
    )
    events = [p.data for p in parts if p.event == "events"]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "on_chain_start"
    assert "on_chat_model_stream" in kinds
    assert kinds[-1] == "on_chain_end"
    streamed = [
        e["data"]["chunk"]["content"] for e in events if e["event"] == "on_chat_model_stream"
    ]
    assert "".join(streamed) == "t0 t1 t2 "
    values = [p.data for p in parts if p.event == "values"]
    assert values[-1]["messages"][-1]["content"] == "t0 t1 t2 "
