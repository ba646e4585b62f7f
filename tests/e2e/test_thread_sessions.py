"""The v3 thread streaming protocol, driven by `langgraph-sdk`'s `threads.stream(...)`
(and by hand where the SDK hides the wire): `run.start` on a thread it creates,
`output`, `values`, `messages`, an interrupt answered with `run.respond`, replay
with `since`, and the refusals (a bad command, another user's thread, WebSocket)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import websockets
from langgraph_sdk.client import LangGraphClient

from tests.support.auth_stack import AuthStack, as_user, running_auth_stack
from tests.support.helpers import says

TERMINAL = ("completed", "failed", "interrupted")


async def protocol_events(
    http: httpx.AsyncClient, thread_id: str, body: dict[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    """The events of `POST /threads/{tid}/stream/events`, as the SDK parses them."""
    async with http.stream("POST", f"/threads/{thread_id}/stream/events", json=body) as reply:
        assert reply.status_code == 200, await reply.aread()
        async for line in reply.aiter_lines():
            if line.startswith("data: "):
                yield json.loads(line.removeprefix("data: "))


async def until_run_ends(
    http: httpx.AsyncClient, thread_id: str, body: dict[str, Any], runs: int = 1
) -> list[dict[str, Any]]:
    """Events up to the end of the thread's `runs`-th run (its terminal lifecycle)."""
    events = []
    async for event in protocol_events(http, thread_id, body):
        events.append(event)
        data = event["params"]["data"]
        if event["method"] == "lifecycle" and data["event"] in TERMINAL:
            runs -= 1
            if runs == 0:
                return events
    return events


async def command(
    http: httpx.AsyncClient, thread_id: str, method: Any, params: Any = None, **extra: Any
) -> httpx.Response:
    return await http.post(
        f"/threads/{thread_id}/commands",
        json={"id": 7, "method": method, "params": params or {}, **extra},
    )


# ---- through the SDK --------------------------------------------------------------------


async def test_a_session_starts_a_run_on_a_thread_it_creates(client: LangGraphClient) -> None:
    async with client.threads.stream(assistant_id="lead_agent") as session:
        started = await session.run.start(input=says("hello"))
        output = await session.output.with_timeout(30)
    assert output["messages"][-1]["content"] == "You said: hello"
    run = await client.runs.get(session.thread_id, started["run_id"])
    assert run["status"] == "success"
    assert set(run["kwargs"]["stream_mode"]) >= {"values", "updates", "messages-tuple"}


async def test_values_yield_each_state_until_the_run_ends(client: LangGraphClient) -> None:
    thread = await client.threads.create()
    async with client.threads.stream(thread["thread_id"], assistant_id="lead_agent") as session:
        await session.run.start(input=says("one"))
        snapshots = [snapshot async for snapshot in session.values]
    contents = [[m["content"] for m in s.get("messages", [])] for s in snapshots if s]
    assert ["one"] in contents  # the input, then the answer
    assert contents[-1] == ["one", "You said: one"]


async def test_messages_stream_each_ai_message_token_by_token(client: LangGraphClient) -> None:
    async with client.threads.stream(assistant_id="lead_agent") as session:
        await session.run.start(input=says("/tokens 5"))
        # The projection feeds each message as it is iterated: read them after.
        messages = [message async for message in session.messages]
        texts = []
        for message in messages:
            deltas = [delta async for delta in message.text]
            assert len(deltas) > 1, "a streamed message comes in pieces"
            texts.append((await message).text)
            assert "".join(deltas) == texts[-1]
    output = await client.threads.get_state(session.thread_id)
    assert texts == [output["values"]["messages"][-1]["content"]]


async def test_tool_calls_start_and_finish_with_the_tools_output(
    client: LangGraphClient,
) -> None:
    async with client.threads.stream(assistant_id="lead_agent") as session:
        await session.run.start(input=says('/tool add {"a": 2, "b": 40}'))
        # The projection feeds each call as it is iterated: await them after.
        [call] = [call async for call in session.tool_calls]
        output = await asyncio.wait_for(call.output, 5)
    assert (call.name, call.input) == ("add", {"a": 2, "b": 40})
    assert output["type"] == "tool" and output["content"] == "42.0"
    assert output["tool_call_id"] == call.tool_call_id


async def record_takes_the_interrupt(client: LangGraphClient, thread_id: str) -> Any:
    """The thread's record once it holds the interrupt its stream showed."""
    for _ in range(300):
        record = await client.threads.get(thread_id)
        if record["interrupts"]:
            return record
        await asyncio.sleep(0.05)
    raise AssertionError("the thread's record never took the interrupt")


async def test_an_interrupt_is_answered_with_run_respond(client: LangGraphClient) -> None:
    async with client.threads.stream(assistant_id="approval") as session:
        await session.run.start(input={"action": "deploy"})
        for _ in range(300):
            if session.interrupted:
                break
            await asyncio.sleep(0.1)
        assert session.interrupted
        [pending] = session.interrupts
        # The stream shows the interrupt as the graph raises it; the thread's record
        # takes it when the run ends a moment later (so on LangGraph Platform too).
        record = await record_takes_the_interrupt(client, session.thread_id)
        [[on_record]] = record["interrupts"].values()
        assert pending["interrupt_id"] == on_record["id"]
        await session.run.respond("yes")
        output = await session.output.with_timeout(30)
    assert output["decision"] == "deploy: yes"
    assert (await client.threads.get(session.thread_id))["interrupts"] == {}


async def test_run_start_on_a_paused_thread_answers_its_interrupt(
    client: LangGraphClient,
) -> None:
    async with client.threads.stream(assistant_id="approval") as session:
        await session.run.start(input={"action": "ship"})
        for _ in range(300):
            if session.interrupted:
                break
            await asyncio.sleep(0.1)
        assert session.interrupted
        # The input answers the interrupt the thread's record holds, which it takes
        # as the run ends, a moment after the stream showed it (as on the Platform).
        await record_takes_the_interrupt(client, session.thread_id)
        await session.run.start(input="no")
        output = await session.output.with_timeout(30)
    assert output["decision"] == "ship: no"
    [run, _] = await client.runs.list(session.thread_id)
    assert run["kwargs"]["command"] == {"resume": "no"} and run["kwargs"]["input"] is None


async def test_a_command_the_server_does_not_know_is_a_protocol_error(
    client: LangGraphClient,
) -> None:
    async with client.threads.stream(assistant_id="lead_agent") as session:
        with pytest.raises(RuntimeError, match=r"\[unknown_command\].*state\.get"):
            await session._send_command("state.get", {"namespace": []})
        respond = {"interrupt_id": "nope", "namespace": [], "response": 1}
        with pytest.raises(RuntimeError, match=r"\[no_such_run\]"):
            await session._send_command("input.respond", respond)  # no thread yet
        await session.run.start(input=says("hi"))
        await session.output.with_timeout(30)
        with pytest.raises(RuntimeError, match=r"\[no_such_interrupt\]"):
            await session._send_command(
                "input.respond", {"interrupt_id": "nope", "namespace": [], "response": 1}
            )


# ---- the wire ------------------------------------------------------------------------------


async def test_events_carry_seq_lifecycle_and_stable_ids(http: httpx.AsyncClient) -> None:
    thread_id = str(uuid.uuid4())
    reply = await command(
        http, thread_id, "run.start", {"assistant_id": "lead_agent", "input": says("hi")}
    )
    assert reply.status_code == 200
    answer = reply.json()
    assert answer["type"] == "success" and answer["id"] == 7
    run_id = answer["result"]["run_id"]
    body = {"channels": ["lifecycle", "values", "messages"]}
    events = await until_run_ends(http, thread_id, body)
    seqs = [event["seq"] for event in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    lifecycle = [e["params"]["data"]["event"] for e in events if e["method"] == "lifecycle"]
    assert lifecycle == ["running", "completed"]
    kinds = [e["params"]["data"]["event"] for e in events if e["method"] == "messages"]
    assert kinds[0] == "message-start" and kinds[-1] == "message-finish"
    assert events[-2]["method"] == "values"
    assert events[-2]["params"]["data"]["messages"][-1]["content"] == "You said: hi"
    again = await until_run_ends(http, thread_id, body)
    assert [(e["seq"], e["event_id"]) for e in again] == [(e["seq"], e["event_id"]) for e in events]
    assert all(run_id in e["event_id"] for e in events)


async def test_since_replays_only_what_came_after(http: httpx.AsyncClient) -> None:
    thread_id = str(uuid.uuid4())
    start = {"assistant_id": "lead_agent", "input": says("/tokens 5")}
    assert (await command(http, thread_id, "run.start", start)).json()["type"] == "success"
    body = {"channels": ["lifecycle", "messages"]}
    everything = await until_run_ends(http, thread_id, body)
    middle = everything[len(everything) // 2]["seq"]
    rest = await until_run_ends(http, thread_id, {**body, "since": middle})
    after = [(e["seq"], e["event_id"]) for e in everything if e["seq"] > middle]
    assert [(e["seq"], e["event_id"]) for e in rest] == after
    assert after, "the cut leaves something to replay"


async def test_a_second_run_continues_the_numbering(http: httpx.AsyncClient) -> None:
    thread_id = str(uuid.uuid4())
    for text in ("first", "second"):
        start = {"assistant_id": "lead_agent", "input": says(text)}
        assert (await command(http, thread_id, "run.start", start)).json()["type"] == "success"
    events = await until_run_ends(http, thread_id, {"channels": ["lifecycle"]}, runs=2)
    assert [e["params"]["data"]["event"] for e in events] == [
        "running",
        "completed",
        "running",
        "completed",
    ]
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)


async def test_a_failing_run_ends_failed_with_its_error(http: httpx.AsyncClient) -> None:
    thread_id = str(uuid.uuid4())
    start = {"assistant_id": "approval", "input": {"wrong": "shape"}}
    assert (await command(http, thread_id, "run.start", start)).json()["type"] == "success"
    events = await until_run_ends(http, thread_id, {"channels": ["lifecycle"]})
    assert events[-1]["params"]["data"]["event"] == "failed"
    assert "action" in events[-1]["params"]["data"]["error"]


async def test_namespaces_and_depth_choose_a_subgraphs_events(http: httpx.AsyncClient) -> None:
    thread_id = str(uuid.uuid4())
    start = {"assistant_id": "nested", "input": {"notes": []}}
    assert (await command(http, thread_id, "run.start", start)).json()["type"] == "success"
    everything = await until_run_ends(http, thread_id, {"channels": ["values", "lifecycle"]})
    namespaces = {tuple(e["params"]["namespace"]) for e in everything if e["method"] == "values"}
    [inner] = [namespace for namespace in namespaces if namespace]
    assert inner[0].startswith("writer:")  # the subgraph's node, then its task id
    scoped = {"channels": ["values", "lifecycle"], "namespaces": [["writer"]], "depth": 0}
    events = [e async for e in first_events(http, thread_id, scoped, 2)]
    assert [e["params"]["namespace"] for e in events] == [list(inner)] * 2
    root_only = {"channels": ["values"], "namespaces": [[]], "depth": 0}
    events = [e async for e in first_events(http, thread_id, root_only, 3)]
    assert all(e["params"]["namespace"] == [] for e in events)
    assert events[-1]["params"]["data"]["notes"] == ["drafted", "reviewed"]


async def first_events(
    http: httpx.AsyncClient, thread_id: str, body: dict[str, Any], count: int
) -> AsyncIterator[dict[str, Any]]:
    async for event in protocol_events(http, thread_id, body):
        yield event
        count -= 1
        if count == 0:
            return


# ---- refusals --------------------------------------------------------------------------------


async def test_bad_commands_are_clear_errors(http: httpx.AsyncClient) -> None:
    thread_id = str(uuid.uuid4())
    unknown = await command(http, thread_id, "state.get")
    assert unknown.status_code == 200
    assert unknown.json() == {
        "type": "error",
        "id": 7,
        "error": "unknown_command",
        "message": "Unknown protocol command: state.get",
    }
    no_method = await command(http, thread_id, 3)
    assert no_method.status_code == 400
    assert no_method.json()["error"] == "invalid_argument"
    not_json = await http.post(f"/threads/{thread_id}/commands", content=b"{oops")
    assert not_json.status_code == 400
    no_assistant = await command(http, thread_id, "run.start", {"input": {}})
    assert no_assistant.json()["error"] == "invalid_argument"
    unknown_assistant = await command(http, thread_id, "run.start", {"assistant_id": "nope"})
    assert unknown_assistant.status_code == 200
    assert unknown_assistant.json()["type"] == "error"
    bad_params = await http.post(
        f"/threads/{thread_id}/commands", json={"id": 8, "method": "run.start", "params": [1]}
    )
    assert bad_params.json()["error"] == "invalid_argument"
    with_no_run = await command(
        http, thread_id, "input.respond", {"interrupt_id": "x", "response": 1}
    )
    assert with_no_run.status_code == 200 and with_no_run.json()["type"] == "error"


async def test_bad_event_stream_requests_are_400(http: httpx.AsyncClient) -> None:
    thread = (await http.post("/threads", json={})).json()
    url = f"/threads/{thread['thread_id']}/stream/events"
    for body in (
        {},
        {"channels": []},
        {"channels": ["nope"]},
        {"channels": ["values"], "since": -1},
    ):
        reply = await http.post(url, json=body)
        assert reply.status_code == 400, body
        assert reply.json()["detail"]
    assert (await http.post(url, content=b"[")).status_code == 400
    missing = await http.post(
        f"/threads/{uuid.uuid4()}/stream/events", json={"channels": ["values"]}
    )
    assert missing.status_code == 404


async def test_the_websocket_transport_is_refused_with_a_reason(stack: Any) -> None:
    url = stack.url.replace("http://", "ws://") + f"/threads/{uuid.uuid4()}/stream/events"
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(url):
            pass
    assert refused.value.response.status_code == 400
    assert b"SSE only" in refused.value.response.body


@pytest.fixture(scope="module")
def auth_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthStack]:
    with running_auth_stack(tmp_path_factory.mktemp("auth-stack")) as stack:
        yield stack


async def test_another_users_thread_is_refused(auth_stack: AuthStack) -> None:
    thread_id = str(uuid.uuid4())
    async with as_user(auth_stack, "alice") as alice, as_user(auth_stack, "bob") as bob:
        start = {"assistant_id": "whoami", "input": {"question": "who?"}}
        assert (await command(alice, thread_id, "run.start", start)).json()["type"] == "success"
        events = await until_run_ends(alice, thread_id, {"channels": ["lifecycle"]})
        assert events[-1]["params"]["data"]["event"] == "completed"
        refused = (await command(bob, thread_id, "run.start", start)).json()
        assert refused["type"] == "error"
        reply = await bob.post(f"/threads/{thread_id}/stream/events", json={"channels": ["values"]})
        assert reply.status_code == 404
        answered = await command(bob, thread_id, "input.respond", {"interrupt_id": "x"})
        assert answered.json()["type"] == "error"
        runs = (await alice.get(f"/threads/{thread_id}/runs")).json()
        assert len(runs) == 1  # bob's run.start wrote nothing
    async with httpx.AsyncClient(base_url=auth_stack.url, timeout=30) as anonymous:
        assert (await command(anonymous, thread_id, "run.start", start)).status_code == 401
