"""/mcp, LangGraph Platform's MCP server: the official `mcp` client lists the
assistants as tools and calls them; a call is a real run of the assistant (it
answers, it writes the caller's store); bad input is a JSON-RPC error or a 4xx;
with auth on, /mcp refuses whom the REST routes refuse."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from mcp import ClientSession
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import McpError

from tests.support.keyed_stack import key_headers, keyed_stack
from waybill.common.launch import Stack

JSON = {"Accept": "application/json, text/event-stream"}


@asynccontextmanager
async def mcp_session(
    url: str, headers: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    async with (
        create_mcp_http_client(headers=headers) as http_client,
        streamable_http_client(f"{url}/mcp", http_client=http_client) as streams,
        ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


async def rpc(http: httpx.AsyncClient, method: str, params: Any = None, **headers: str) -> Any:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
    if params is not None:
        message["params"] = params
    reply = await http.post("/mcp", json=message, headers={**JSON, **headers})
    assert reply.status_code == 200, reply.text
    return reply.json()


def text_of(result: Any) -> str:
    return "".join(part.text for part in result.content)


# ---- tools --------------------------------------------------------------------------


async def test_initialize_answers_as_the_platform(http: httpx.AsyncClient) -> None:
    reply = await rpc(http, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
    assert reply["result"]["protocolVersion"] == "2025-06-18"
    assert reply["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert reply["result"]["serverInfo"]["name"] == "LangGraph"
    # A version it does not speak: its latest, for the client to decide.
    unknown = await rpc(http, "initialize", {"protocolVersion": "1999-01-01"})
    assert unknown["result"]["protocolVersion"] == "2025-11-25"


async def test_every_assistant_is_a_tool_with_its_input_schema(
    stack: Stack, client: LangGraphClient
) -> None:
    named = await client.assistants.create(
        "whoami", name=f"Front desk {uuid.uuid4().hex[:6]}", description="Says who you are."
    )
    try:
        async with mcp_session(stack.url) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    finally:
        await client.assistants.delete(named["assistant_id"])
    # A list of LangChain messages becomes one string, the user's message.
    assert tools["lead_agent"].inputSchema["properties"] == {
        "messages": {
            "type": "string",
            "title": "Messages",
            "description": "The user message to send to the agent.",
        }
    }
    assert "$defs" not in tools["lead_agent"].inputSchema
    whoami = tools["whoami"]
    assert whoami.description == "Tool based on the whoami assistant"
    assert whoami.inputSchema["type"] == "object"
    assert set(whoami.inputSchema["properties"]) == {
        "question",
        "identity",
        "context_keys",
        "secret_digests",
    }
    assert whoami.annotations is not None and whoami.annotations.openWorldHint is True
    # The assistant's name, made a tool name (spaces to `_`); its own description.
    desk = tools[named["name"].replace(" ", "_")]
    assert desk.title == named["name"]
    assert desk.description == "Says who you are."


async def test_calling_a_tool_runs_its_assistant(stack: Stack) -> None:
    async with mcp_session(stack.url) as session:
        result = await session.call_tool("lead_agent", {"messages": "hello over mcp"})
    assert not result.isError
    # The run's final values, as Python's repr (as the Platform answers).
    assert text_of(result).startswith("{'messages': [")
    assert "'content': 'You said: hello over mcp'" in text_of(result)


async def test_a_tool_call_runs_with_its_context_and_writes_the_store(
    http: httpx.AsyncClient, client: LangGraphClient
) -> None:
    note = f"left by mcp {uuid.uuid4()}"
    params = {"name": "whoami", "arguments": {"question": "who"}, "context": {"note": note}}
    reply = await rpc(http, "tools/call", params)
    text = reply["result"]["content"][0]["text"]
    assert "'question': 'who'" in text and "'note'" in text
    # The runner ran the graph: it kept the note in the caller's store.
    item = await client.store.get_item(["notes"], "last")
    assert item["value"] == {"text": note}


async def test_a_run_that_fails_is_a_tool_error(stack: Stack) -> None:
    async with mcp_session(stack.url) as session:
        # A message the graph cannot take: the run ends in an error.
        result = await session.call_tool("lead_agent", {"messages": 5})
    assert result.isError
    assert text_of(result) == "NotImplementedError"  # the error's type, as the Platform answers


async def test_an_unknown_tool_is_a_json_rpc_error(stack: Stack) -> None:
    async with mcp_session(stack.url) as session:
        with pytest.raises(McpError, match="Unknown tool: no_such_tool") as raised:
            await session.call_tool("no_such_tool", {})
    assert raised.value.error.code == -32602


# ---- bad input: JSON-RPC errors and 4xx, never a 5xx --------------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({}, "Unknown tool: None"),
        ("not an object", "Invalid params: must be an object"),
        ({"name": "whoami", "arguments": {}, "context": "x"}, "Invalid run: context"),
    ],
)
async def test_bad_tool_calls_are_invalid_params(
    http: httpx.AsyncClient, params: Any, message: str
) -> None:
    reply = await rpc(http, "tools/call", params)
    assert reply["error"]["code"] == -32602
    assert reply["error"]["message"].startswith(message)


async def test_an_unknown_method_is_method_not_found(http: httpx.AsyncClient) -> None:
    reply = await rpc(http, "resources/list")
    assert reply["error"] == {"code": -32601, "message": "Method not found: resources/list"}
    assert (await rpc(http, "ping"))["result"] == {}


@pytest.mark.parametrize(
    ("body", "headers", "status", "error"),
    [
        (b"not json", JSON, 400, "Invalid JSON"),
        (b"[1, 2]", JSON, 400, "Invalid message format."),
        (b'{"id": 1, "method": "ping"}', JSON, 400, "Invalid JSON-RPC message."),
        (b'{"jsonrpc": "2.0"}', JSON, 400, "Invalid message format. A message is"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}', {"Accept": "text/html"}, 400, "Accept"),
    ],
)
async def test_what_is_not_json_rpc_is_a_400(
    http: httpx.AsyncClient, body: bytes, headers: dict[str, str], status: int, error: str
) -> None:
    reply = await http.post("/mcp", content=body, headers=headers)
    assert reply.status_code == status
    assert reply.json()["error"].startswith(error)


async def test_notifications_get_202_and_get_delete_answer_as_the_platform(
    http: httpx.AsyncClient,
) -> None:
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post("/mcp", json=notification, headers=JSON)).status_code == 202
    assert (await http.get("/mcp")).status_code == 405  # no server-initiated stream
    assert (await http.delete("/mcp")).status_code == 404  # stateless: no session


# ---- auth -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with keyed_stack(tmp_path_factory.mktemp("mcp-keyed")) as stack:
        yield stack


async def test_without_a_key_mcp_is_refused(keyed: Stack) -> None:
    async with httpx.AsyncClient(base_url=keyed.url) as raw:
        listed = await raw.post(
            "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=JSON
        )
        assert listed.status_code == 401
        assert (await raw.get("/mcp")).status_code == 401
        wrong = {**JSON, "x-api-key": "not-a-key"}
        called = await raw.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami"}},
            headers=wrong,
        )
        assert called.status_code == 401


async def test_a_tool_call_acts_as_the_caller(keyed: Stack) -> None:
    async with httpx.AsyncClient(base_url=keyed.url, timeout=30) as raw:
        params = {"name": "whoami", "arguments": {"question": "me?"}}
        reply = await rpc(raw, "tools/call", params, **key_headers("alice"))
    text = reply["result"]["content"][0]["text"]
    assert "'identity': {'user_id': 'alice', 'role': 'user', 'channel': None}" in text


async def test_a_reader_lists_tools_but_cannot_call_one(keyed: Stack) -> None:
    async with httpx.AsyncClient(base_url=keyed.url, timeout=30) as raw:
        listed = await rpc(raw, "tools/list", **key_headers("reader"))
        assert "whoami" in {tool["name"] for tool in listed["result"]["tools"]}
        called = await raw.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami"}},
            headers={**JSON, **key_headers("reader")},
        )
    assert called.status_code == 403
    assert "runs:create" in called.json()["detail"]


async def test_the_mcp_client_sends_the_key_it_is_given(keyed: Stack) -> None:
    async with mcp_session(keyed.url, key_headers("alice")) as session:
        result = await session.call_tool("lead_agent", {"messages": "keyed hello"})
    assert "You said: keyed hello" in text_of(result)
