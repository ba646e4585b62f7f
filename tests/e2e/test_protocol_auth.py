"""/mcp and /a2a under a project's own auth (`auth` in langgraph.json): its
`@auth.authenticate` lets callers in, its `assistants.search` handler decides
which tools a caller sees, and its `threads.create_run` handler sees (and may
refuse) every run a tool call or an A2A message starts, as on the REST routes."""

from __future__ import annotations

import json
import textwrap
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError

from tests.support.helpers import SHOUT_GRAPH_PY
from tests.support.stacks import stack_in_mode
from waybill.common.launch import Stack

AUTH_PY = """
from langgraph_sdk import Auth

auth = Auth()

USERS = {"ann-token": {"identity": "ann"}, "ben-token": {"identity": "ben"}}


@auth.authenticate
async def authenticate(authorization: str | None):
    _, _, token = (authorization or "").partition(" ")
    if token not in USERS:
        raise Auth.exceptions.HTTPException(status_code=401, detail="Invalid token")
    return USERS[token]


@auth.on
async def owner_only(ctx: Auth.types.AuthContext, value: dict):
    value.setdefault("metadata", {})["owner"] = ctx.user.identity
    return {"owner": ctx.user.identity}


@auth.on.threads.create_run
async def no_forbidden_runs(ctx: Auth.types.AuthContext, value: dict):
    if (value["kwargs"].get("input") or {}).get("text") == "forbidden":
        raise Auth.exceptions.HTTPException(status_code=403, detail="Not that run")
    value.setdefault("metadata", {})["owner"] = ctx.user.identity
    return {"owner": ctx.user.identity}
"""

JSON = {"Accept": "application/json"}


def bearer(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {user}-token"}


@pytest.fixture(scope="module")
def project_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("protocol-auth-project")
    (root / "auth.py").write_text(textwrap.dedent(AUTH_PY))
    (root / "shout.py").write_text(SHOUT_GRAPH_PY)
    manifest = {"graphs": {"shout": "./shout.py:graph"}, "auth": {"path": "./auth.py:auth"}}
    (root / "langgraph.json").write_text(json.dumps(manifest))
    data_dir = tmp_path_factory.mktemp("protocol-auth")
    with stack_in_mode("sqlite", data_dir, WAYBILL_GRAPHS=str(root / "langgraph.json")) as stack:
        yield stack


@pytest.fixture(scope="module")
async def helpers(project_stack: Stack) -> dict[str, str]:
    """An assistant of ann's and one of ben's (the handler stamps their owner)."""
    made = {}
    for user in ("ann", "ben"):
        sdk = get_client(url=project_stack.url, headers=bearer(user))
        try:
            assistant = await sdk.assistants.create("shout", name=f"{user} helper")
        finally:
            await sdk.aclose()
        made[user] = str(assistant["assistant_id"])
    return made


@pytest.fixture
async def ann(project_stack: Stack) -> AsyncIterator[LangGraphClient]:
    sdk = get_client(url=project_stack.url, headers=bearer("ann"))
    try:
        yield sdk
    finally:
        await sdk.aclose()


async def post(
    stack: Stack, path: str, message: dict[str, Any], user: str | None
) -> httpx.Response:
    headers = {**JSON, **(bearer(user) if user else {})}
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as raw:
        return await raw.post(path, json={"jsonrpc": "2.0", "id": 1, **message}, headers=headers)


async def test_without_the_projects_token_both_are_refused(
    project_stack: Stack, helpers: dict[str, str]
) -> None:
    listed = await post(project_stack, "/mcp", {"method": "tools/list"}, None)
    assert listed.status_code == 401
    send = {"method": "message/send", "params": {"message": {}}}
    assert (await post(project_stack, f"/a2a/{helpers['ann']}", send, None)).status_code == 401


async def test_tools_are_the_assistants_the_handler_lets_the_caller_see(
    project_stack: Stack, helpers: dict[str, str]
) -> None:
    for user, other in (("ann", "ben"), ("ben", "ann")):
        listed = await post(project_stack, "/mcp", {"method": "tools/list"}, user)
        names = {tool["name"] for tool in listed.json()["result"]["tools"]}
        assert f"{user}_helper" in names
        assert f"{other}_helper" not in names


async def test_a_tool_call_passes_the_create_run_handler(
    project_stack: Stack, helpers: dict[str, str]
) -> None:
    call = {"method": "tools/call", "params": {"name": "ann_helper", "arguments": {"text": "hi"}}}
    reply = await post(project_stack, "/mcp", call, "ann")
    assert reply.json()["result"]["content"][0]["text"] == "{'text': 'HI'}"
    refused = {**call, "params": {**call["params"], "arguments": {"text": "forbidden"}}}
    denied = await post(project_stack, "/mcp", refused, "ann")
    assert denied.status_code == 403
    assert denied.json()["detail"] == "Not that run"
    # ben cannot see ann's assistant, so it is no tool of his.
    unseen = await post(project_stack, "/mcp", call, "ben")
    assert unseen.json()["error"] == {"code": -32602, "message": "Unknown tool: ann_helper"}


async def test_an_a2a_context_is_a_thread_the_handler_stamped(
    project_stack: Stack, helpers: dict[str, str], ann: LangGraphClient
) -> None:
    message = {"role": "user", "parts": [{"data": {"text": "hey"}}], "messageId": "p1"}
    send = {"method": "message/send", "params": {"message": message}}
    reply = await post(project_stack, f"/a2a/{helpers['ann']}", send, "ann")
    task = reply.json()["result"]
    assert task["status"]["state"] == "completed"
    assert task["artifacts"][0]["parts"][0]["text"] == "{'text': 'HEY', 'messages': []}"
    thread = await ann.threads.get(task["contextId"])
    assert thread["metadata"]["owner"] == "ann"
    ben = get_client(url=project_stack.url, headers=bearer("ben"))
    try:
        with pytest.raises(NotFoundError):
            await ben.threads.get(task["contextId"])
    finally:
        await ben.aclose()
    # The handler's refusal, as the Platform words it for A2A.
    forbidden = {**message, "parts": [{"data": {"text": "forbidden"}}]}
    send = {"method": "message/send", "params": {"message": forbidden}}
    denied = await post(project_stack, f"/a2a/{helpers['ann']}", send, "ann")
    assert denied.json()["error"] == {
        "code": -32602,
        "message": "Access denied to assistant or thread",
    }
