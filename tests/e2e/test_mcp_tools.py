"""MCP tools in the lead agent: real MCP servers (tests/support/mcp_tool_server.py) over
stdio and over streamable HTTP on loopback, configured in `mcp_servers`, called by
runs through the gateway and the langgraph-sdk. A connection serves every run; a
lost one is opened again; a server that is down, a tool that fails or a server
that dies mid-call is a tool error the model reads, never a failed run; MCP tools
pass the assistant's and the role's authorization and, being many, wait behind
`tool_search`. Embedded and on Postgres."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from langgraph_sdk.client import LangGraphClient

from tests.support.auth_stack import sdk_with_key
from tests.support.helpers import says
from tests.support.openai_stub import OpenAIStub, running_openai_stub
from tests.support.paths import SUPPORT
from tests.support.stacks import eventually, free_port, stack_in_mode, wait_until
from waybill.common.config_file import ConfigError, read_config_file
from waybill.common.launch import Stack

SERVER = str(SUPPORT / "mcp_tool_server.py")
KEYS = {"alice": "alice-mcp-key", "bob": "bob-mcp-key"}
CORE = {"ask_clarification", "present_files", "tool_search"}


class HttpToolServer:
    """The MCP server over streamable HTTP, as a process the test stops and starts."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
        except OSError:
            return False
        return True

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, SERVER, "http", str(self.port)])
        wait_until(self.listening, "the MCP server over HTTP")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


def write_config(path: Path, remote: HttpToolServer, stub: OpenAIStub, marker: Path) -> Path:
    principals = [
        {"user_id": "alice", "role": "admin",  # creates assistants
         "key_sha256": hashlib.sha256(KEYS["alice"].encode()).hexdigest()},
        {"user_id": "bob", "role": "intern", "scopes": ["threads:read", "threads:write",
         "runs:create", "runs:read"],
         "key_sha256": hashlib.sha256(KEYS["bob"].encode()).hexdigest()},
    ]  # fmt: skip
    config = {
        "models": [
            {"name": "scripted", "provider": "scripted"},
            {"name": "stub-gpt", "model": "openai:gpt-stub", "base_url": stub.base_url},
        ],
        "auth": {"principals": principals, "role_tools": {"intern": ["echo", "lookup"]}},
        "mcp_servers": {
            "notes": {
                "transport": "stdio",
                "command": sys.executable,
                "args": [SERVER, "stdio"],
                "env": {"MCP_FLAKY_MARKER": str(marker)},
                "idempotent_tools": ["flaky"],
            },
            "remote": {"transport": "streamable_http", "url": remote.url, "tool_name_prefix": True},
            # Nothing ever listens there: its tools are simply not there.
            "gone": {"transport": "streamable_http", "url": f"http://127.0.0.1:{free_port()}/mcp"},
        },
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def stub() -> Iterator[OpenAIStub]:
    with running_openai_stub() as served:
        yield served


@pytest.fixture(scope="module")
def remote() -> Iterator[HttpToolServer]:
    server = HttpToolServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def stack(
    request: pytest.FixtureRequest,
    remote: HttpToolServer,
    stub: OpenAIStub,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    data_dir = tmp_path_factory.mktemp(f"stack-mcp-{request.param}")
    config = write_config(data_dir / "waybill.yaml", remote, stub, data_dir / "flaky-marker")
    env = {
        "WAYBILL_CONFIG": str(config),
        "WAYBILL_MCP_RETRY_SECONDS": "0.3",
        "WAYBILL_MCP_CONNECT_TIMEOUT_SECONDS": "30",
    }
    with stack_in_mode(request.param, data_dir, **env) as running:
        yield running


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[LangGraphClient]:
    async with sdk_with_key(stack, KEYS["alice"], sdk_timeout=60) as sdk:
        yield sdk


@pytest.fixture
async def bob(stack: Stack) -> AsyncIterator[LangGraphClient]:
    async with sdk_with_key(stack, KEYS["bob"], sdk_timeout=60) as sdk:
        yield sdk


async def call_tool(
    client: LangGraphClient, tool: str, args: dict[str, Any], **run: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the tool's message, the run) of a run whose scripted model calls `tool`."""
    thread_id = (await client.threads.create())["thread_id"]
    assistant = run.pop("assistant", "lead_agent")
    text = f"/tool {tool} {json.dumps(args)}"
    values = await client.runs.wait(thread_id, assistant, input=says(text), **run)
    [answered] = [m for m in values["messages"] if m["type"] == "tool"]  # type: ignore[index]
    [finished] = await client.runs.list(thread_id)
    return answered, dict(finished)


def text_of(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content)


async def test_a_run_calls_mcp_tools_over_stdio_and_over_http(client: LangGraphClient) -> None:
    answered, run = await call_tool(client, "shout", {"text": "hello mcp"})
    assert (answered["name"], text_of(answered), answered["status"]) == (
        "shout",
        "HELLO MCP",
        "success",
    )
    assert run["status"] == "success"

    answered, run = await call_tool(client, "remote_lookup", {"word": "Waybill"})
    assert answered["name"] == "remote_lookup"  # the server's name before its tools'
    assert text_of(answered) == "a document that travels with a shipment"
    assert run["status"] == "success"


async def test_one_connection_serves_every_run(client: LangGraphClient) -> None:
    first, _ = await call_tool(client, "served", {})
    second, _ = await call_tool(client, "served", {})
    pid, calls = text_of(first).split(" call ")
    again, more = text_of(second).split(" call ")
    assert again == pid  # the same stdio process
    assert int(more) == int(calls) + 1


async def test_a_failing_tool_and_a_dying_server_are_tool_errors(client: LangGraphClient) -> None:
    answered, run = await call_tool(client, "refuse", {"reason": "not today"})
    assert answered["status"] == "error"
    assert "refused: not today" in text_of(answered)
    assert run["status"] == "success"

    before, _ = await call_tool(client, "served", {})
    answered, run = await call_tool(client, "crash", {})
    assert answered["status"] == "error"
    assert "MCP server 'notes': the connection was lost during the call" in text_of(answered)
    assert "not repeated" in text_of(answered)
    assert run["status"] == "success"
    after, _ = await call_tool(client, "served", {})  # a new connection, a new process
    assert text_of(after).split(" call ")[0] != text_of(before).split(" call ")[0]

    # An idempotent tool whose connection is lost is called again, on a new one.
    answered, run = await call_tool(client, "flaky", {})
    assert answered["status"] == "success", text_of(answered)
    assert text_of(answered).startswith("flaky answered by pid")


async def test_a_server_that_is_down_is_a_tool_error_until_it_is_back(
    client: LangGraphClient, remote: HttpToolServer
) -> None:
    remote.stop()
    try:
        answered, run = await call_tool(client, "remote_shout", {"text": "anyone?"})
        assert answered["status"] == "error"
        assert "MCP server 'remote'" in text_of(answered)
        assert run["status"] == "success"
        again, _ = await call_tool(client, "remote_shout", {"text": "anyone?"})
        assert "MCP server 'remote' is unavailable" in text_of(again)
    finally:
        remote.start()

    async def answered_again() -> bool:
        answered, _ = await call_tool(client, "remote_shout", {"text": "back"})
        return answered["status"] == "success" and text_of(answered) == "BACK"

    await eventually(answered_again, "the MCP server's tools again")


async def test_mcp_tools_pass_the_assistants_and_the_roles_authorization(
    client: LangGraphClient, bob: LangGraphClient
) -> None:
    denying = await client.assistants.create(
        "lead_agent", config={"configurable": {"denied_tools": ["shout"]}}
    )
    answered, run = await call_tool(
        client, "shout", {"text": "no"}, assistant=denying["assistant_id"]
    )
    assert answered["status"] == "error"
    assert "shout is not a valid tool" in text_of(answered)
    assert run["status"] == "success"
    allowed, _ = await call_tool(
        client, "lookup", {"word": "waybill"}, assistant=denying["assistant_id"]
    )
    assert allowed["status"] == "success"

    # bob's role may use `echo` and `lookup` only.
    answered, _ = await call_tool(bob, "shout", {"text": "no"})
    assert "shout is not a valid tool" in text_of(answered)
    answered, _ = await call_tool(bob, "lookup", {"word": "waybill"})
    assert text_of(answered) == "a document that travels with a shipment"


async def test_many_mcp_tools_wait_behind_tool_search(
    client: LangGraphClient, stub: OpenAIStub
) -> None:
    thread_id = (await client.threads.create())["thread_id"]
    context = {"model_name": "stub-gpt"}

    async def shown(text: str) -> set[str]:
        seen = len(stub.requests)
        await client.runs.wait(thread_id, "lead_agent", input=says(text), context=context)
        return {tool["function"]["name"] for tool in stub.requests[seen]["tools"]}

    # 9 built-in tools and 12 MCP tools: only the core ones and tool_search are shown.
    assert await shown("hello") == CORE
    values = await client.runs.wait(
        thread_id,
        "lead_agent",
        input=says('/tool tool_search {"query": "dictionary"}'),
        context=context,
    )
    found = json.loads(text_of(values["messages"][-2]))  # type: ignore[index]
    assert {"lookup", "remote_lookup"} <= {tool["name"] for tool in found}
    # Found once, shown from then on.
    assert await shown("and now") >= CORE | {"lookup", "remote_lookup"}


def test_an_mcp_server_entry_is_checked_strictly(tmp_path: Path) -> None:
    path = tmp_path / "waybill.yaml"
    servers = {"a": {"transport": "stdio", "command": "srv", "idempotent_tool": ["x"]}}
    path.write_text(yaml.safe_dump({"mcp_servers": servers}))
    with pytest.raises(ConfigError, match="did you mean `idempotent_tools`"):
        read_config_file(path)
    path.write_text(yaml.safe_dump({"mcp_servers": {"a": {"transport": "streamable_http"}}}))
    with pytest.raises(ConfigError, match="needs a `url`"):
        read_config_file(path)
    path.write_text(yaml.safe_dump({"mcp_servers": {"a": {"transport": "websocket"}}}))
    with pytest.raises(ConfigError, match="mcp_servers.a.transport"):
        read_config_file(path)
