"""/a2a/{assistant_id}, LangGraph Platform's Agent2Agent server: the `a2a-sdk`
client reads an assistant's agent card, sends it messages (a completed task
with the agent's reply) and streams them (submitted, working, the reply as an
artifact, completed); a context is a thread and a task one run on it; bad input
is a JSON-RPC error or a 4xx; with auth on, A2A refuses whom the REST routes
refuse."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskIdParams,
    TaskQueryParams,
    TaskState,
    TaskStatusUpdateEvent,
    TextPart,
)
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError

from tests.support.keyed_stack import key_headers, keyed_stack
from waybill.common.launch import Stack

JSON = {"Accept": "application/json"}


async def assistant_id_of(client: LangGraphClient, graph_id: str) -> str:
    found = await client.assistants.search(graph_id=graph_id)
    return str(found[0]["assistant_id"])


async def card_of(url: str, assistant_id: str, headers: dict[str, str] | None = None) -> AgentCard:
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        path = f".well-known/agent-card.json?assistant_id={assistant_id}"
        return await A2ACardResolver(http, url, agent_card_path=path).get_agent_card()


@asynccontextmanager
async def a2a_client(
    url: str, assistant_id: str, streaming: bool, headers: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    card = await card_of(url, assistant_id, headers)
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        config = ClientConfig(httpx_client=http, streaming=streaming)
        yield ClientFactory(config).create(card)


def user_message(text: str, context_id: str | None = None) -> Message:
    return Message(
        role=Role.user,
        parts=[Part(root=TextPart(text=text))],
        message_id=str(uuid.uuid4()),
        context_id=context_id,
    )


async def sent(client: Client, message: Message) -> list[Any]:
    """Everything the client hands back for one message (a task and its updates)."""
    return [event async for event in client.send_message(message)]


def texts(parts: list[Part]) -> str:
    return "".join(part.root.text for part in parts if isinstance(part.root, TextPart))


async def rpc(
    http: httpx.AsyncClient, path: str, method: str, params: Any, **headers: str
) -> httpx.Response:
    message = {"jsonrpc": "2.0", "id": "r1", "method": method, "params": params}
    return await http.post(path, json=message, headers={**JSON, **headers})


# ---- the agent card -----------------------------------------------------------------


async def test_the_agent_card_lists_the_assistant(stack: Stack, client: LangGraphClient) -> None:
    assistant_id = await assistant_id_of(client, "lead_agent")
    card = await card_of(stack.url, assistant_id)
    assert card.name == "lead_agent"
    assert card.url == f"{stack.url}/a2a/{assistant_id}"
    assert card.capabilities.streaming is True
    assert [skill.id for skill in card.skills] == [f"{assistant_id}-main"]
    assert card.skills[0].name == "lead_agent Capabilities"
    assert card.default_input_modes == ["application/json", "text/plain"]


async def test_the_card_is_served_where_the_platform_serves_it(
    http: httpx.AsyncClient, client: LangGraphClient
) -> None:
    conversational = (await http.get(f"/a2a/{await assistant_id_of(client, 'lead_agent')}")).json()
    assert conversational["skills"][0]["metadata"] == {
        "inputSchema": {"required": ["messages"], "properties": ["messages"], "supportsA2A": True}
    }
    assistant_id = await assistant_id_of(client, "whoami")
    cards = [
        (await http.get(path)).json()
        for path in (
            f"/.well-known/agent-card.json?assistant_id={assistant_id}",
            f"/a2a/{assistant_id}",
            f"/a2a/{assistant_id}/.well-known/agent-card.json",
            f"/a2a/{assistant_id}/.well-known/agent.json",
        )
    ]
    assert all(card["skills"] == cards[0]["skills"] for card in cards)
    # A graph without `messages` takes data parts only.
    assert cards[0]["skills"][0]["metadata"]["inputSchema"]["supportsA2A"] is False


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "Missing required query parameter: assistant_id"),
        ("?assistant_id=nope", "Failed to get assistant 'nope': Invalid assistant ID"),
        (
            "?assistant_id=00000000-0000-0000-0000-000000000000",
            "Assistant '00000000-0000-0000-0000-000000000000' not found",
        ),
    ],
)
async def test_a_card_for_no_assistant_is_a_400(
    http: httpx.AsyncClient, query: str, message: str
) -> None:
    reply = await http.get(f"/.well-known/agent-card.json{query}")
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == -32602
    assert reply.json()["error"]["message"].startswith(message)


# ---- message/send -------------------------------------------------------------------


async def test_send_returns_the_completed_task_with_the_reply(
    stack: Stack, client: LangGraphClient
) -> None:
    assistant_id = await assistant_id_of(client, "lead_agent")
    async with a2a_client(stack.url, assistant_id, streaming=False) as a2a:
        [(task, update)] = await sent(a2a, user_message("hello over a2a"))
    assert update is None
    assert task.status.state == TaskState.completed
    assert texts(task.artifacts[0].parts) == "You said: hello over a2a"
    assert task.artifacts[0].name == "Assistant Response"
    assert [(m.role, texts(m.parts)) for m in task.history or []] == [
        (Role.user, "hello over a2a"),
        (Role.agent, "You said: hello over a2a"),
    ]
    # The context is a thread, the task one run on it, finished.
    thread_id, run_id = task.id.split(":")
    assert thread_id == task.context_id
    run = await client.runs.get(thread_id, run_id)
    assert run["status"] == "success"
    assert run["assistant_id"] == assistant_id


async def test_a_context_goes_on_in_the_same_thread(stack: Stack, client: LangGraphClient) -> None:
    assistant_id = await assistant_id_of(client, "lead_agent")
    async with a2a_client(stack.url, assistant_id, streaming=False) as a2a:
        [(first, _)] = await sent(a2a, user_message("first"))
        [(second, _)] = await sent(a2a, user_message("second", first.context_id))
    assert second.context_id == first.context_id
    assert second.id != first.id
    assert texts(second.artifacts[0].parts) == "You said: second"
    # The history is the context's, each message named by its task.
    assert [(texts(m.parts), m.task_id) for m in second.history or []] == [
        ("first", first.id),
        ("You said: first", first.id),
        ("second", second.id),
        ("You said: second", second.id),
    ]
    runs = await client.runs.list(first.context_id)
    assert {run["run_id"] for run in runs} == {first.id.split(":")[1], second.id.split(":")[1]}


async def test_history_length_and_scope(http: httpx.AsyncClient, client: LangGraphClient) -> None:
    assistant_id = await assistant_id_of(client, "lead_agent")
    path = f"/a2a/{assistant_id}"
    message = {"role": "user", "parts": [{"kind": "text", "text": "one"}], "messageId": "m1"}
    first = (await rpc(http, path, "message/send", {"message": message})).json()["result"]
    again = {**message, "messageId": "m2", "contextId": first["contextId"]}
    task_only = {"historyScope": "task", "historyLength": 1}
    params = {"message": again, "configuration": task_only}
    second = (await rpc(http, path, "message/send", params)).json()["result"]
    assert [m["parts"][0]["text"] for m in second["history"]] == ["You said: one"]
    assert {m["taskId"] for m in second["history"]} == {second["id"]}
    none = {"message": {**again, "messageId": "m3"}, "configuration": {"historyLength": 0}}
    assert "history" not in (await rpc(http, path, "message/send", none)).json()["result"]


async def test_data_parts_are_the_input_of_a_graph_without_messages(
    http: httpx.AsyncClient, client: LangGraphClient
) -> None:
    assistant_id = await assistant_id_of(client, "whoami")
    message = {
        "role": "user",
        "parts": [{"kind": "data", "data": {"question": "why?"}}],
        "messageId": "d1",
    }
    reply = await rpc(http, f"/a2a/{assistant_id}", "message/send", {"message": message})
    task = reply.json()["result"]
    assert task["status"]["state"] == "completed"
    text = task["artifacts"][0]["parts"][0]["text"]
    assert text.startswith("{'question': 'why?', 'identity': {'user_id': 'local'")
    assert text.endswith("'messages': []}")  # as the Platform shows a graph without messages
    assert task["history"] == []


async def test_v1_method_names_answer_in_v1_shapes(
    http: httpx.AsyncClient, client: LangGraphClient
) -> None:
    assistant_id = await assistant_id_of(client, "lead_agent")
    message = {"role": "ROLE_USER", "parts": [{"text": "v1"}], "messageId": "v1"}
    reply = await rpc(http, f"/a2a/{assistant_id}", "SendMessage", {"message": message})
    task = reply.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m["role"] for m in task["history"]] == ["ROLE_USER", "ROLE_AGENT"]


async def test_an_interrupt_is_input_required_with_the_question(
    http: httpx.AsyncClient, client: LangGraphClient
) -> None:
    assistant_id = await assistant_id_of(client, "approval")
    message = {"role": "user", "parts": [{"data": {"action": "deploy"}}], "messageId": "i1"}
    reply = await rpc(http, f"/a2a/{assistant_id}", "message/send", {"message": message})
    task = reply.json()["result"]
    assert task["status"]["state"] == "input-required"
    [artifact] = task["artifacts"]
    assert artifact["name"] == "Interrupt"
    assert artifact["parts"][0]["data"]["value"] == {"question": "approve deploy?"}
    got = await rpc(http, f"/a2a/{assistant_id}", "tasks/get", {"id": task["id"]})
    assert got.json()["result"]["status"]["state"] == "input-required"


async def test_a_run_that_fails_is_a_failed_task(
    http: httpx.AsyncClient, client: LangGraphClient
) -> None:
    path = f"/a2a/{await assistant_id_of(client, 'lead_agent')}"
    # A data part the graph cannot take as its messages: the run raises.
    message = {"role": "user", "parts": [{"data": {"messages": 5}}], "messageId": "f1"}
    sent_task = (await rpc(http, path, "message/send", {"message": message})).json()["result"]
    assert sent_task["status"]["state"] == "failed"
    failure = sent_task["status"]["message"]["parts"][0]["text"]
    assert failure == "Error executing assistant: NotImplementedError"
    body = {"jsonrpc": "2.0", "id": 9, "method": "message/stream", "params": {"message": message}}
    streamed = await http.post(path, json=body, headers={"Accept": "text/event-stream"})
    events = [
        json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data:")
    ]
    final = events[-1]["result"]
    assert final["final"] is True and final["status"]["state"] == "failed"
    assert "Unsupported message type" in final["status"]["message"]["parts"][0]["text"]


# ---- tasks/get, tasks/cancel, a message to an existing task -------------------------


async def test_get_shows_a_task_as_it_ended(stack: Stack, client: LangGraphClient) -> None:
    assistant_id = await assistant_id_of(client, "lead_agent")
    async with a2a_client(stack.url, assistant_id, streaming=False) as a2a:
        [(first, _)] = await sent(a2a, user_message("first"))
        await sent(a2a, user_message("second", first.context_id))
        got = await a2a.get_task(TaskQueryParams(id=first.id))
        last = await a2a.get_task(TaskQueryParams(id=first.id, history_length=1))
    assert got.status.state == TaskState.completed
    assert texts(got.status.message.parts) == "Task completed successfully"
    # The context as this task left it: nothing of the later task.
    assert [texts(m.parts) for m in got.history or []] == ["first", "You said: first"]
    assert [texts(m.parts) for m in last.history or []] == ["You said: first"]


async def test_a_task_of_another_assistant_is_not_found(
    http: httpx.AsyncClient, client: LangGraphClient
) -> None:
    lead, whoami = (
        await assistant_id_of(client, "lead_agent"),
        await assistant_id_of(client, "whoami"),
    )
    message = {"role": "user", "parts": [{"kind": "text", "text": "mine"}], "messageId": "o1"}
    task = (await rpc(http, f"/a2a/{lead}", "message/send", {"message": message})).json()
    reply = await rpc(http, f"/a2a/{whoami}", "tasks/get", {"id": task["result"]["id"]})
    assert reply.json()["error"]["code"] == -32001


async def test_an_ended_task_takes_no_message_and_no_cancel(
    http: httpx.AsyncClient, client: LangGraphClient
) -> None:
    path = f"/a2a/{await assistant_id_of(client, 'lead_agent')}"
    first = (await rpc(http, path, "message/send", {"message": TEXT})).json()["result"]
    again = {**TEXT, "messageId": "m2", "taskId": first["id"]}
    reply = await rpc(http, path, "message/send", {"message": again})
    assert reply.json()["error"] == {
        "code": -32004,
        "message": "A terminal task cannot accept another message",
    }
    cancelled = await rpc(http, path, "tasks/cancel", {"id": first["id"]})
    assert cancelled.json()["error"] == {
        "code": -32002,
        "message": "Task is not cancelable in its current state",
    }


async def test_cancel_stops_a_working_task_and_its_stream_says_so(
    stack: Stack, client: LangGraphClient
) -> None:
    assistant_id = await assistant_id_of(client, "lead_agent")
    slow = user_message('/tool wait {"seconds": 30}')
    async with a2a_client(stack.url, assistant_id, streaming=True) as a2a:
        events = a2a.send_message(slow)
        task, _ = await anext(events)  # submitted: the run exists
        cancelled = await a2a.cancel_task(TaskIdParams(id=task.id))
        rest = [update async for _, update in events]
    assert cancelled.status.state == TaskState.canceled
    assert isinstance(rest[-1], TaskStatusUpdateEvent) and rest[-1].final
    assert rest[-1].status.state == TaskState.canceled
    thread_id, run_id = task.id.split(":")
    assert (await client.runs.get(thread_id, run_id))["status"] == "interrupted"


# ---- message/stream -----------------------------------------------------------------


async def test_stream_yields_status_and_artifact_updates(
    stack: Stack, client: LangGraphClient
) -> None:
    assistant_id = await assistant_id_of(client, "lead_agent")
    async with a2a_client(stack.url, assistant_id, streaming=True) as a2a:
        events = await sent(a2a, user_message("stream it"))
    updates = [update for _, update in events]
    assert updates[0] is None  # first the task itself, then its updates
    working = [u for u in updates[1:-2] if isinstance(u, TaskStatusUpdateEvent)]
    assert working and all(u.status.state == TaskState.working for u in working)
    assert texts(working[-1].status.message.parts) == "You said: stream it"
    artifact, final = updates[-2], updates[-1]
    assert isinstance(artifact, TaskArtifactUpdateEvent)
    assert texts(artifact.artifact.parts) == "You said: stream it"
    assert isinstance(final, TaskStatusUpdateEvent) and final.final
    assert final.status.state == TaskState.completed
    task: Task = events[-1][0]
    run = await client.runs.get(task.context_id, task.id.split(":")[1])
    assert run["status"] == "success"


async def test_the_stream_opens_with_the_task_submitted(
    http: httpx.AsyncClient, client: LangGraphClient
) -> None:
    assistant_id = await assistant_id_of(client, "lead_agent")
    message = {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "s0"}
    body = {"jsonrpc": "2.0", "id": 4, "method": "message/stream", "params": {"message": message}}
    reply = await http.post(
        f"/a2a/{assistant_id}", json=body, headers={"Accept": "text/event-stream"}
    )
    events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: ")]
    first = events[0]["result"]
    assert first["kind"] == "task" and first["status"]["state"] == "submitted"
    assert first["history"][0]["messageId"] == "s0"
    assert [e["result"]["kind"] for e in events[-2:]] == ["artifact-update", "status-update"]
    assert events[-1]["result"]["status"]["state"] == "completed"
    assert all(e["id"] == 4 for e in events)


async def test_a_stream_refused_before_its_run_is_one_error_event(
    http: httpx.AsyncClient,
) -> None:
    message = {"role": "user", "parts": [{"kind": "text", "text": "x"}], "messageId": "s"}
    body = {"jsonrpc": "2.0", "id": 5, "method": "message/stream", "params": {"message": message}}
    unknown = "/a2a/00000000-0000-0000-0000-000000000000"
    reply = await http.post(unknown, json=body, headers={"Accept": "text/event-stream"})
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    data = [line for line in reply.text.splitlines() if line.startswith("data: ")]
    assert len(data) == 1
    assert '"code":-32602' in data[0] and "not found" in data[0]


# ---- bad input: JSON-RPC errors and 4xx, never a 5xx --------------------------------

TEXT = {"role": "user", "parts": [{"kind": "text", "text": "x"}], "messageId": "m"}


@pytest.mark.parametrize(
    ("params", "code", "message"),
    [
        ({}, -32602, "Missing or invalid 'message' in params"),
        ({"message": {**TEXT, "messageId": None}}, -32602, "Missing required 'messageId'"),
        ({"message": {**TEXT, "role": None}}, -32602, "Missing required 'role'"),
        ({"message": {**TEXT, "role": {"a": 1}}}, -32602, "Invalid params: 'role' must be"),
        ({"message": {**TEXT, "parts": []}}, -32602, "Message must contain at least one part"),
        ({"message": {**TEXT, "parts": "x"}}, -32602, "Invalid params: 'parts' must be an array"),
        ({"message": {**TEXT, "parts": [{"kind": "image"}]}}, -32005, "Unsupported part type"),
        ({"message": {**TEXT, "parts": [{"data": [1]}]}}, -32005, "DataPart must contain"),
        ({"message": {**TEXT, "contextId": 5}}, -32602, "contextId must be a string"),
        ({"message": {**TEXT, "contextId": "not-a-uuid"}}, -32602, "Failed to create run"),
        ({"message": TEXT, "configuration": {"historyLength": 11}}, -32602, "historyLength"),
        ({"message": TEXT, "configuration": {"historyScope": "all"}}, -32602, "historyScope"),
        ({"message": {**TEXT, "taskId": "t"}}, -32001, "Task not found: t"),
    ],
)
async def test_bad_messages_are_json_rpc_errors(
    http: httpx.AsyncClient, client: LangGraphClient, params: Any, code: int, message: str
) -> None:
    assistant_id = await assistant_id_of(client, "lead_agent")
    reply = await rpc(http, f"/a2a/{assistant_id}", "message/send", params)
    assert reply.status_code == 200
    assert reply.json()["id"] == "r1"
    assert reply.json()["error"]["code"] == code
    assert reply.json()["error"]["message"].startswith(message)


async def test_text_to_a_graph_without_messages_is_invalid_params(
    http: httpx.AsyncClient, client: LangGraphClient
) -> None:
    assistant_id = await assistant_id_of(client, "whoami")
    reply = await rpc(http, f"/a2a/{assistant_id}", "message/send", {"message": TEXT})
    assert reply.json()["error"]["code"] == -32602
    assert "does not support A2A conversational messages" in reply.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "code", "rpc_id"),
    [
        (b"not json", -32700, None),
        (b"[1]", -32600, None),
        (b'{"id": 1, "method": "message/send"}', -32600, 1),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "bogus"}', -32601, 1),
        (b'{"jsonrpc": "2.0", "id": {}, "method": "message/send"}', -32600, None),
        (
            b'{"jsonrpc": "2.0", "method": "message/send", "params": {"message": {"a": 1}}}',
            -32600,
            None,
        ),
        (b'{"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}}', -32004, 2),
        (b'{"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"id": "x"}}', -32001, 3),
        (b'{"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {"id": 5}}', -32602, 4),
        (b'{"jsonrpc": "2.0", "id": 5, "method": "tasks/cancel", "params": {}}', -32602, 5),
    ],
)
async def test_what_is_not_a_request_we_serve_is_a_json_rpc_error(
    http: httpx.AsyncClient, client: LangGraphClient, body: bytes, code: int, rpc_id: Any
) -> None:
    assistant_id = await assistant_id_of(client, "lead_agent")
    reply = await http.post(f"/a2a/{assistant_id}", content=body, headers=JSON)
    assert reply.status_code == 200
    assert reply.json()["error"]["code"] == code
    assert reply.json()["id"] == rpc_id


@pytest.mark.parametrize(
    ("assistant_id", "message"),
    [
        ("nope", "Invalid assistant ID: must be a UUID"),
        (
            "00000000-0000-0000-0000-000000000000",
            "Assistant '00000000-0000-0000-0000-000000000000' not found",
        ),
    ],
)
async def test_no_such_assistant_is_invalid_params(
    http: httpx.AsyncClient, assistant_id: str, message: str
) -> None:
    reply = await rpc(http, f"/a2a/{assistant_id}", "message/send", {"message": TEXT})
    assert reply.json()["error"] == {"code": -32602, "message": message}


async def test_the_accept_header_must_fit_the_method(
    http: httpx.AsyncClient, client: LangGraphClient
) -> None:
    path = f"/a2a/{await assistant_id_of(client, 'lead_agent')}"
    send = await rpc(http, path, "message/send", {"message": TEXT}, Accept="text/html")
    assert send.status_code == 400
    assert send.json() == {"error": "Accept header must include application/json"}
    stream = await rpc(http, path, "message/stream", {"message": TEXT})
    assert stream.status_code == 400
    assert stream.json() == {"error": "Accept header must include text/event-stream for streaming"}
    assert (await http.delete(path)).status_code == 405


# ---- auth -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with keyed_stack(tmp_path_factory.mktemp("a2a-keyed")) as stack:
        yield stack


@pytest.fixture
async def alice(keyed: Stack) -> AsyncIterator[LangGraphClient]:
    sdk = get_client(url=keyed.url, api_key=key_headers("alice")["x-api-key"])
    try:
        yield sdk
    finally:
        await sdk.aclose()


async def test_without_a_key_a2a_is_refused(keyed: Stack, alice: LangGraphClient) -> None:
    assistant_id = await assistant_id_of(alice, "lead_agent")
    async with httpx.AsyncClient(base_url=keyed.url) as raw:
        card = await raw.get(f"/.well-known/agent-card.json?assistant_id={assistant_id}")
        assert card.status_code == 401
        sent = await rpc(raw, f"/a2a/{assistant_id}", "message/send", {"message": TEXT})
        assert sent.status_code == 401
        wrong = await rpc(
            raw, f"/a2a/{assistant_id}", "message/send", {"message": TEXT}, **{"x-api-key": "no"}
        )
        assert wrong.status_code == 401


async def test_a_reader_reads_the_card_but_cannot_send(
    keyed: Stack, alice: LangGraphClient
) -> None:
    assistant_id = await assistant_id_of(alice, "lead_agent")
    card = await card_of(keyed.url, assistant_id, key_headers("reader"))
    assert card.name == "lead_agent"
    async with httpx.AsyncClient(base_url=keyed.url) as raw:
        sent = await rpc(
            raw, f"/a2a/{assistant_id}", "message/send", {"message": TEXT}, **key_headers("reader")
        )
    assert sent.status_code == 403
    assert "runs:create" in sent.json()["detail"]


async def test_a_context_is_the_callers_thread(keyed: Stack, alice: LangGraphClient) -> None:
    assistant_id = await assistant_id_of(alice, "lead_agent")
    async with a2a_client(keyed.url, assistant_id, False, key_headers("alice")) as a2a:
        [(task, _)] = await sent(a2a, user_message("mine"))
    assert task.status.state == TaskState.completed
    thread = await alice.threads.get(task.context_id)  # alice's: she may read it
    assert thread["thread_id"] == task.context_id
    reader = get_client(url=keyed.url, api_key=key_headers("reader")["x-api-key"])
    try:
        with pytest.raises(NotFoundError):  # and nobody else
            await reader.threads.get(task.context_id)
    finally:
        await reader.aclose()
    # A reader may ask for tasks, but alice's is none of hers.
    async with httpx.AsyncClient(base_url=keyed.url) as raw:
        path, query = f"/a2a/{assistant_id}", {"id": task.id}
        theirs = await rpc(raw, path, "tasks/get", query, **key_headers("reader"))
        own = await rpc(raw, path, "tasks/get", query, **key_headers("alice"))
    assert theirs.json()["error"]["code"] == -32001
    assert own.json()["result"]["status"]["state"] == "completed"
